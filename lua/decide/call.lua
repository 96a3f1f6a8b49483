-- tollgate: decide, or refund, the charges of one placement group of a request, atomically
-- (or of a batch of them, each on its own; see the end of this comment).
--
-- This is src/algorithm (batch::evaluate and the three algorithms) written in Lua: each
-- algorithm's read, fit, landing, refund and answers written once, and two drivers over them
-- (direct() for the common call, general() for every call). It is written in parts, one per
-- algorithm and feature, and build.rs joins lua/decide/*.lua in its order into the one script
-- Redis loads (target/<profile>/tollgate.lua): this part (the call's layout and state),
-- fixed.lua and sliding.lua (the windows), window.lua, reservation.lua and direct.lua (the
-- common call), then build.lua's scope, made only for the calls direct() leaves, with
-- concurrency.lua, bucket.lua, shares.lua, fair.lua, counter.lua, verdict.lua, settle.lua and
-- general.lua (the general driver), and main.lua (a call, a batch). The script-level differential
-- test (tests/behaviour/script.rs) runs generated calls through this script and through the
-- Rust functions and compares every answer and, decoded field by field, the state left behind.
-- Times are microseconds. Every number stays an integer below 2^53 (config validation and
-- --max-hits bound the inputs; see docs/semantics.md).
--
-- KEYS: the group's distinct counter keys, each charged at least once (on a cluster they share
-- one hash tag, so one slot; on one node a group is the whole request).
-- ARGV[1]: every number of the call, packed as little-endian doubles (struct '<d'; each an
--   integer below 2^53, so exact), which spares Redis an argument string per number and the
--   script a tonumber each. The counts and codes are src/store/redis/scripts/script.rs's `layout`; a
--   test reads the `local` lines below that name them and fails when the two drift.
--   CALL_NUMBERS numbers first: now in µs (-1: use Redis TIME, so replicas with skewed clocks
--   agree), the number of KEYS, the mode, the quota descriptors of the whole request, n (the
--   number of charges), the request's id (two numbers: its concurrency slots and its
--   reservation are held under it), and a reservation record's time to live in ms (RESERVE). Then
--   CHARGE_NUMBERS per charge: key index (1-based into KEYS), algorithm, limit, window_us,
--   burst, overdraft (0|1), cost, role (ENFORCED, SHADOW, or QUOTA + d for quota descriptor d
--   of the request), max_wait (µs: a token bucket's charge is decided as fitting when it would
--   fit that much later, algorithm::admits; 0 for the others), pool and borrow_until (a class's
--   charge on a shared pool, `shares:`: pool is the 1-based key index of the pool's counter, a
--   fixed window charged in the call; past the class's guarantee, its limit, the charge still
--   fits while the pool's use with every charge of the call stays within borrow_until,
--   batch::borrows; 0, 0 for the others; a fair share's tenant sends its pool and its pool's
--   `above` in units the same way), fair (a fair share's tenant's floor; 0 for the others: the
--   tenant's limit is the pool's, its share the pool ÷ the active tenants the next charge's
--   counter counts, no less than the floor; see batch::touch_tenants and batch::share; -1
--   marks that next charge, the count of active tenants). A calendar window (a fixed window whose window is a calendar period in a
--   time zone, src/limit/calendar.rs) sends -a as its window and b as its burst: a and b are two
--   consecutive period ends around the caller's clock, and the window holding now ends at the
--   first of them after now. A concurrency limit's window is its hold (how long a slot stays
--   held). In REFUND mode REFUND_NUMBERS more per charge, after all of those: allowed (0|1, as
--   decided), kept (units that stay landed), amount (units to refund), mark1, mark2.
-- Modes: DECIDE (all-or-nothing); COUNT_REJECTED (every charge lands, as
--   envoyproxy/ratelimit, but a concurrency charge only when it fits); DRY_RUN (answer, write
--   nothing); REFUND (refund landed charges, then answer as things stand); RELEASE (free the
--   slots the call's slot id holds on its concurrency charges; added says how many); RENEW
--   (move their holds' end to now + the hold). In both, a concurrency charge is allowed when
--   the id held slots on it; every other charge is allowed and touches nothing.
--   RESERVE (as DECIDE, then the record of what landed, per counter: its key, the charge's
--   cost, what it added and its marks, is written to the record key, after the time it
--   expires at: now + the call's record time to live); SETTLE (the record's counters settle with the
--   charges' costs as the actual use, algorithm::reservation::settle: what the estimate
--   over-charged is refunded where it landed, what the actual exceeds it by lands now, as
--   overdraft; a charge is allowed when the record named its counter; the record goes, so a
--   second settle finds nothing); UNRESERVE (as REFUND, and the record goes). In these three
--   modes the call's last key is its record key (src/store/placement.rs `record_key`): KEYS
--   names nkeys - 1 counters, then it.
--
-- Returns "=" then, packed the same way, now and 6 numbers per charge: allowed (0|1),
-- remaining, wait_us (-1 = never), added (units this request left in the counter), mark1,
-- mark2 (where a refund finds them: fixed window end | sliding granule | token bucket born,
-- seq).
--
-- State per key (struct-packed doubles): fixed window <count, end>; sliding window <total,
-- head> then <time, cost>* (oldest first, from byte head on; the bytes before it, after the
-- 16 of <total, head>, hold forgotten entries; total is the sum of the live ones); token bucket
-- <us, frac, born, seq, dropped> then <seq, debt_us, debt_frac>* (tat = us + frac / limit; the
-- debts later charges found); concurrency <id hi, id lo, units, expires>* (the slots held, in
-- the order taken).
--
-- A sliding window holds up to 1,000 granules (16 KB). Deciding reads and writes only the
-- bytes it needs with GETRANGE, SETRANGE and APPEND: the header, the entries it forgets, the
-- newest. It never has Redis copy the whole log, nor Lua build a string of its size: many
-- near-identical long strings make Lua's string interning compare each new one with the
-- others byte by byte, which made a hot key's cost grow with its log. Only a refund rewrites it.
--
-- Redis runs this body on every call, so every function below is made anew each time, and
-- each looks its upvalues up among the body's: that, not the arithmetic, is most of a short
-- call's cost (BENCHMARKS.md, "Redis CPU per script call"). So the windows' functions take
-- and return plain numbers and the common call (direct()) needs no others; build() makes the
-- general driver, the token bucket and the slots only for a call that needs them. build() is
-- that scope: its body only defines (tests/server/layout.rs holds it to that), each part's
-- functions are short.
--
-- A batch (many requests' calls in one EVALSHA, each decided on its own as above): two or
-- more arguments, one per call, each laid out as ARGV[1] above; KEYS holds every call's keys,
-- call by call. Returns one reply per call: the string above, or one saying why that call
-- failed (a failed call does not stop the others; what it wrote before failing stays, as for
-- a single call).

-- The layout (src/store/redis/scripts/script.rs `layout`).
local CALL_NUMBERS, CHARGE_NUMBERS, REFUND_NUMBERS = 8, 12, 5
local DECIDE, COUNT_REJECTED, DRY_RUN, REFUND, RELEASE, RENEW = 0, 1, 2, 3, 4, 5
local RESERVE, SETTLE, UNRESERVE = 6, 7, 8
local FIXED_WINDOW, SLIDING_WINDOW, TOKEN_BUCKET, CONCURRENCY = 0, 1, 2, 3
local ENFORCED, SHADOW, QUOTA = 0, 1, 2
-- Where the first charge starts in a call's numbers (1-based), and the size of a charge and
-- of a refund.
local FIRST, CHARGE, REFUNDED = 8 * CALL_NUMBERS + 1, 8 * CHARGE_NUMBERS, 8 * REFUND_NUMBERS

-- Redis TIME, read once per script run.
local clock
-- The general driver and the token bucket, made by build() for the first call that needs them.
local build, built

-- A sliding window's header <total, head>; how many bytes of entries are read at a time;
-- forgotten bytes a landing lets pile up before it rewrites the log (and only once they
-- outnumber the live ones).
local HEADER, CHUNK, COMPACT = 16, 256, 4096

-- The call being decided: its offset into KEYS, its packed numbers, its mode and time. Most
-- functions capture these, `now` above all: declared last, they are found first when each
-- function is made.
local KO, P, nkeys, mode, quota_total, n, slot_hi, slot_lo, record_ms
local now

-- Keys outlive their state by 1 s, so a key never disappears while a clock a little behind
-- (another instance's, with --clock local) still counts its state live.
local function ttl_ms(expires)
  return math.max(math.ceil((expires - now) / 1000), 0) + 1000
end

