-- tollgate: decide, or refund, the charges of one placement group of a request, atomically
-- (or of a batch of them, each on its own; see the end of this comment).
--
-- This is src/algorithm (batch::evaluate and the three algorithms) written in Lua: each
-- algorithm's read, fit, landing, refund and answers written once, and two drivers over them
-- (direct() for the common call, general() for every call). The script-level differential
-- test (tests/behaviour/script.rs) runs generated calls through this script and through the
-- Rust functions and compares every answer and, decoded field by field, the state left behind.
-- Times are microseconds. Every number stays an integer below 2^53 (config validation and
-- --max-hits bound the inputs; see docs/semantics.md).
--
-- KEYS: the group's distinct counter keys, each charged at least once (on a cluster they share
-- one hash tag, so one slot; on one node a group is the whole request).
-- ARGV[1]: every number of the call, packed as little-endian doubles (struct '<d'; each an
--   integer below 2^53, so exact), which spares Redis an argument string per number and the
--   script a tonumber each. The counts and codes are src/store/redis/script.rs's `layout`; a
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
-- general driver and the token bucket only for a call that needs them.
--
-- A batch (many requests' calls in one EVALSHA, each decided on its own as above): two or
-- more arguments, one per call, each laid out as ARGV[1] above; KEYS holds every call's keys,
-- call by call. Returns one reply per call: the string above, or one saying why that call
-- failed (a failed call does not stop the others; what it wrote before failing stays, as for
-- a single call).

-- The layout (src/store/redis/script.rs `layout`).
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

---------------------------------------------------------------- fixed window: <count, end>

-- The end of a window starting now (a new window's): epoch-aligned, or for a calendar window
-- (window -a, burst b: see the top) the first of a, b after now.
local function fixed_fresh(window, b)
  if window > 0 then return now - (now % window) + window end
  if now < -window then return -window end
  if now < b then return b end
  error('tollgate: a calendar window was sent period ends before Redis TIME ' .. now ..
    ': clocks more than half a period apart')
end

-- Its count and end, or 0, 0 when it has none (or it has ended).
local function fixed_read(key)
  local raw = redis.call('GET', key)
  if raw then
    local count, stop = struct.unpack('<dd', raw)
    if stop > now then return count, stop end
  end
  return 0, 0
end

-- Writes `added` (> 0) onto a window holding count until stop (0: none, so the window that
-- would end at `fresh` starts); returns its count and end, which is the landing's mark.
local function fixed_land(key, fresh, count, stop, added)
  count = count + added
  if stop == 0 then
    stop = fresh
    redis.call('SET', key, struct.pack('<dd', count, stop), 'PX', ttl_ms(stop))
  else
    -- The window's key already expires at its end plus the slack: keep that expiry
    -- (KEEPTTL spares Redis a new one, ~20% of this call's cost).
    redis.call('SET', key, struct.pack('<dd', count, stop), 'KEEPTTL')
  end
  return count, stop
end

-- What a charge waits for: allowed, until the limit is whole (the window's end; an untouched
-- window still reports its end); denied, until k fits (never over the limit; otherwise now, or
-- when the window ends).
local function fixed_wait(limit, fresh, count, stop, allowed, k)
  if allowed then
    if stop > 0 then return math.max(stop - now, 0) end
    return fresh - now
  end
  if k > limit then return -1 end
  if count + k <= limit or stop == 0 then return 0 end
  return math.max(stop - now, 0)
end

---------------------------------------------------------------- sliding window: a log

-- Its log as it stands, reading only the bytes it needs: the total of its live entries, where
-- they start, the log's length, and its newest entry (nil when none is live). Forgets nothing
-- in Redis: a landing writes what was forgotten.
local function sliding_read(key, window)
  local total, head, len = 0, HEADER, HEADER
  -- The last chunk of entries read, and where it starts.
  local chunk, from
  local header = redis.call('GETRANGE', key, 0, HEADER - 1)
  if #header == HEADER then
    total, head = struct.unpack('<dd', header)
    len = redis.call('STRLEN', key)
    local live = false
    while head < len and not live do
      from = head
      chunk = redis.call('GETRANGE', key, head, head + CHUNK - 1)
      for pos = 1, #chunk, 16 do
        local t, c = struct.unpack('<dd', chunk, pos)
        if t + window > now then live = true; break end
        total = total - c
        head = head + 16
      end
    end
  end
  local lt, lc
  if head < len then
    -- The newest entry: the end of the chunk just read when it reached the end (a short log).
    if from + #chunk == len then
      lt, lc = struct.unpack('<dd', chunk, #chunk - 15)
    else
      lt, lc = struct.unpack('<dd', redis.call('GETRANGE', key, len - 16, len - 1))
    end
  end
  return total, head, len, lt, lc
end

-- Where a landing goes: the granule (window / 1000, at least 1 ms) of max(now, the newest
-- stamp), so stamps only grow; and that granule's length.
local function sliding_mark(window, lt)
  local g = math.max(math.floor(window / 1000), 1000)
  local at = now
  if lt then at = math.max(now, lt) end
  return math.floor(at / g), g
end

-- Writes `added` (> 0) into the log sliding_read() read; returns its total, head, len and
-- newest entry as they are then, and the granule it landed in (the landing's mark).
local function sliding_land(key, window, total, head, len, lt, lc, added)
  local granule, g = sliding_mark(window, lt)
  local stamp = granule * g + g - 1
  total = total + added
  if not lt then
    -- A new key, or everything in it has left the window: start afresh.
    redis.call('SET', key, struct.pack('<dddd', total, HEADER, stamp, added), 'PX',
      ttl_ms(stamp + window))
    return total, HEADER, HEADER + 16, stamp, added, granule
  end
  if math.floor(lt / g) == granule then
    -- Into the newest entry: the log's expiry stays.
    lc = lc + added
    redis.call('SETRANGE', key, len - 16, struct.pack('<dd', lt, lc))
  else
    redis.call('APPEND', key, struct.pack('<dd', stamp, added))
    len, lt, lc = len + 16, stamp, added
    redis.call('PEXPIRE', key, ttl_ms(stamp + window))
  end
  if head - HEADER >= COMPACT and head - HEADER >= len - head then
    local entries = redis.call('GETRANGE', key, head, len - 1)
    redis.call('SET', key, struct.pack('<dd', total, HEADER) .. entries, 'KEEPTTL')
    return total, HEADER, HEADER + #entries, lt, lc, granule
  end
  redis.call('SETRANGE', key, 0, struct.pack('<dd', total, head))
  return total, head, len, lt, lc, granule
end

-- What a charge waits for: allowed, until the newest charge leaves the window; denied, until
-- k fits (never over the limit; otherwise now, or once enough of the oldest usage has left).
local function sliding_wait(key, limit, window, total, head, len, lt, allowed, k)
  if allowed then
    if lt then return math.max(lt + window - now, 0) end
    return 0
  end
  if k > limit then return -1 end
  local need, freed, wait, pos = total + k - limit, 0, 0, head
  while pos < len and freed < need do
    local chunk = redis.call('GETRANGE', key, pos, pos + CHUNK - 1)
    for i = 1, #chunk, 16 do
      local t, c = struct.unpack('<dd', chunk, i)
      freed = freed + c
      wait = math.max(t + window - now, 0)
      if freed >= need then break end
    end
    pos = pos + #chunk
  end
  return wait
end

---------------------------------------------------------------- the common call

-- A window counter as its read function reads it: used, then a fixed window's stop, or a
-- sliding window's head, len and newest entry.
local function window_read(key, alg, window)
  if alg == FIXED_WINDOW then
    local count, stop = fixed_read(key)
    return count, stop
  end
  local total, head, len, lt, lc = sliding_read(key, window)
  return total, 0, head, len, lt, lc
end

-- The answer to an enforced window charge (no overdraft) on its own key, from what
-- window_read() read; it lands when `lands` (it fits, and so does the rest of its call). A
-- fixed window's `window` is its fresh end (fixed_fresh).
local function settle(key, alg, limit, window, cost, used, stop, head, len, lt, lc, lands)
  local k = math.max(cost, 1)
  local allowed, added, mark, wait = lands or used + k <= limit, 0, 0, 0
  if alg == FIXED_WINDOW then
    if lands and cost > 0 then
      used, stop = fixed_land(key, window, used, stop, cost)
      added, mark = cost, stop
    end
    wait = fixed_wait(limit, window, used, stop, allowed, k)
  else
    if lands and cost > 0 then
      used, head, len, lt, lc, mark = sliding_land(key, window, used, head, len, lt, lc, cost)
      added = cost
    end
    wait = sliding_wait(key, limit, window, used, head, len, lt, allowed, k)
  end
  return struct.pack('<dddddd', allowed and 1 or 0, math.max(limit - used, 0), wait, added,
    mark, 0)
end

-- What a settle needs, made by reservations() for the first call that settles (functions made
-- on every call cost every call: see the top): { read = the record's entries, settle = the
-- settle of enforced fixed windows }.
local rsv
local function reservations()
  -- As build()'s CAP: usage stops adding at this many times a limit's capacity.
  local CAP = 101
  -- A reservation's record: <expires> then per counter it charged, { key, cost, added, mark1,
  -- mark2 }. One that has expired at the call's now holds nothing.
  local function record_read(key)
    local raw = redis.call('GET', key)
    local entries = {}
    if raw and struct.unpack('<d', raw) > now then
      local pos = 9
      while pos <= #raw do
        local cost, added, mark1, mark2, len, at = struct.unpack('<ddddd', raw, pos)
        entries[#entries + 1] = { key = string.sub(raw, at, at + len - 1), cost = cost,
          added = added, mark1 = mark1, mark2 = mark2 }
        pos = at + len
      end
    end
    return entries
  end

  -- A reservation's settle on enforced fixed windows (calendar ones too), each on its own key:
  -- what general() does for them (algorithm::reservation::settle), without its tables. nil for
  -- any other settle.
  local function direct_settle()
    if nkeys ~= n + 1 then return nil end
    for i = 1, n do
      local _, alg, _, _, _, _, _, role, _, pool, _, fair =
        struct.unpack('<dddddddddddd', P, FIRST + (i - 1) * CHARGE)
      if alg ~= FIXED_WINDOW or role ~= ENFORCED or pool ~= 0 or fair ~= 0 then return nil end
    end
    local record = KEYS[KO + nkeys]
    local entries = record_read(record)
    local out = { '=' .. struct.pack('<d', now) }
    for i = 1, n do
      local ki, _, limit, window, b, overdraft, cost = struct.unpack('<ddddddd', P,
        FIRST + (i - 1) * CHARGE)
      local key = KEYS[KO + ki]
      local fresh = fixed_fresh(window, b)
      local used, stop = fixed_read(key)
      local e
      for j = 1, #entries do
        if entries[j].key == key then e = entries[j]; break end
      end
      local landed, mark = 0, 0
      if e then
        -- The unused part back, where it landed (a window that has ended since gives nothing).
        local back = e.added - cost
        if back > 0 and (stop == 0 or stop == e.mark1) then
          used = used - math.min(back, used)
          if used == 0 then
            stop = 0
            redis.call('DEL', key)
          else
            redis.call('SET', key, struct.pack('<dd', used, stop), 'KEEPTTL')
          end
        end
        -- The excess lands now, past the limit if need be, up to the usage cap.
        local excess = math.min(cost - e.cost, math.max(limit * CAP - used, 0))
        if excess > 0 then
          used, stop = fixed_land(key, fresh, used, stop, excess)
          landed, mark = excess, stop
        end
      end
      local k = math.max(cost, 1)
      if overdraft ~= 0 then k = 1 end
      out[i + 1] = struct.pack('<dddddd', e and 1 or 0, math.max(limit - used, 0),
        fixed_wait(limit, fresh, used, stop, e ~= nil, k), landed, mark, 0)
    end
    redis.call('DEL', record)
    return table.concat(out)
  end

  return { read = record_read, settle = direct_settle }
end

-- Enforced window charges (no overdraft), each on its own key, deciding, reserving or (dry)
-- only evaluating: one charge, the group of a hierarchical limit (per tenant, per tenant and
-- model), or on one Redis node a whole request. What general() answers for them, without its
-- per-key tables and verdict: read every counter, then every charge lands or (one does not
-- fit) none does. A reservation then records what landed, as general() does. nil for any
-- other call. Every key of a call has a charge, so as many keys as charges (and the record's
-- key) means one charge per key.
local function direct()
  if mode == SETTLE then
    rsv = rsv or reservations()
    return rsv.settle()
  end
  if mode == RESERVE then
    if nkeys ~= n + 1 then return nil end
  elseif nkeys ~= n or not (mode == DECIDE or mode == DRY_RUN) then
    return nil
  end
  if n == 1 then
    -- The commonest call of all, with no table.
    local ki, alg, limit, window, b, overdraft, cost, role, _, pool, _, fair =
      struct.unpack('<dddddddddddd', P, FIRST)
    if overdraft ~= 0 or role ~= ENFORCED or alg >= TOKEN_BUCKET or pool ~= 0 or fair ~= 0 then
      return nil
    end
    if alg == FIXED_WINDOW then window = fixed_fresh(window, b) end
    local key = KEYS[KO + ki]
    local used, stop, from, len, lt, lc = window_read(key, alg, window)
    local lands = mode ~= DRY_RUN and used + math.max(cost, 1) <= limit
    local a = settle(key, alg, limit, window, cost, used, stop, from, len, lt, lc, lands)
    if mode == RESERVE and lands and cost > 0 then
      redis.call('SET', KEYS[KO + 2], struct.pack('<dddddd', now + record_ms * 1000, cost, cost,
        struct.unpack('<d', a, 33), 0, #key) .. key, 'PX', record_ms + 1000)
    end
    return '=' .. struct.pack('<d', now) .. a
  end
  local charges = {}
  local all = mode ~= DRY_RUN
  for i = 1, n do
    local ki, alg, limit, window, b, overdraft, cost, role, _, pool, _, fair =
      struct.unpack('<dddddddddddd', P, FIRST + (i - 1) * CHARGE)
    if overdraft ~= 0 or role ~= ENFORCED or alg >= TOKEN_BUCKET or pool ~= 0 or fair ~= 0 then
      return nil
    end
    if alg == FIXED_WINDOW then window = fixed_fresh(window, b) end
    local ch = { key = KEYS[KO + ki], alg = alg, limit = limit, window = window, cost = cost,
      used = 0, stop = 0, head = 0, len = 0, lt = false, lc = 0 }
    ch.used, ch.stop, ch.head, ch.len, ch.lt, ch.lc = window_read(ch.key, alg, window)
    if ch.used + math.max(cost, 1) > limit then all = false end
    charges[i] = ch
  end
  local out = { '=' .. struct.pack('<d', now) }
  for i = 1, n do
    local ch = charges[i]
    out[i + 1] = settle(ch.key, ch.alg, ch.limit, ch.window, ch.cost, ch.used, ch.stop, ch.head,
      ch.len, ch.lt, ch.lc, all)
  end
  if mode == RESERVE and all then
    -- The record of what landed (none when nothing did), for record_ms.
    local parts = {}
    for i = 1, n do
      local added, mark = struct.unpack('<dd', out[i + 1], 25)
      if added > 0 then
        local key = charges[i].key
        parts[#parts + 1] = struct.pack('<ddddd', charges[i].cost, added, mark, 0, #key) .. key
      end
    end
    if #parts > 0 then
      redis.call('SET', KEYS[KO + nkeys], struct.pack('<d', now + record_ms * 1000) ..
        table.concat(parts), 'PX', record_ms + 1000)
    end
  end
  return table.concat(out)
end

---------------------------------------------------------------- every call

build = function()
  -- Usage stops adding at this many times a limit's capacity (limit::DEBT_CAP_FACTOR + 1).
  local CAP = 101
  -- A token bucket's history: entries kept, and each one's size <seq, debt_us, debt_frac>.
  local HISTORY, HIST = 8, 24

  -- Where a fixed-window landing goes: the window's end (a new window's when there is none).
  local function fixed_mark(fresh, stop)
    if stop > 0 then return stop end
    return fresh
  end

  -- Concurrency: the slots held, as entries { hi, lo, units, expires } in the order taken.
  -- Reads the live ones and what they hold.
  local function slots_read(key)
    local raw = redis.call('GET', key)
    local held, used = {}, 0
    if raw then
      for pos = 1, #raw, 32 do
        local hi, lo, units, expires = struct.unpack('<dddd', raw, pos)
        if expires > now then
          held[#held + 1] = { hi, lo, units, expires }
          used = used + units
        end
      end
    end
    return held, used
  end

  -- The entry of the call's slot id, or nil.
  local function slots_find(held)
    for i = 1, #held do
      local h = held[i]
      if h[1] == slot_hi and h[2] == slot_lo then return i, h end
    end
    return nil
  end

  -- Writes the entries held (none: the key goes); its expiry is the last hold's end.
  local function slots_write(key, held)
    if #held == 0 then
      redis.call('DEL', key)
      return
    end
    local parts, last = {}, 0
    for i = 1, #held do
      local h = held[i]
      parts[i] = struct.pack('<dddd', h[1], h[2], h[3], h[4])
      last = math.max(last, h[4])
    end
    redis.call('SET', key, table.concat(parts), 'PX', ttl_ms(last))
  end

  -- Until enough holds end for k more to fit.
  local function slots_wait(held, limit, used, k)
    local need = used + k - limit
    if need <= 0 then return 0 end
    local ends = {}
    for i = 1, #held do ends[i] = held[i] end
    table.sort(ends, function(x, y)
      if x[4] ~= y[4] then return x[4] < y[4] end
      return x[3] < y[3]
    end)
    local freed = 0
    for i = 1, #ends do
      freed = freed + ends[i][3]
      if freed >= need then return math.max(ends[i][4] - now, 0) end
    end
    return 0
  end

  local function buckets()
    -- Integer division of non-negative integers held in doubles, exact below 2^53.
    local function idiv(a, b)
      local q = math.floor(a / b)
      local r = a - q * b
      if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
      return q, r
    end

    local function padd(p, au, af, bu, bf)
      local q, r = idiv(af + bf, p.limit)
      return au + bu + q, r
    end

    local function psub(p, au, af, bu, bf)
      local us, frac = au - bu, af - bf
      if frac < 0 then frac = frac + p.limit; us = us - 1 end
      return us, frac
    end

    local function pcmp(au, af, bu, bf)
      if au ~= bu then return au < bu and -1 or 1 end
      if af ~= bf then return af < bf and -1 or 1 end
      return 0
    end

    -- k units of time: k * window / limit.
    local function ptimes(p, k)
      local q, r = idiv(k * p.r, p.limit)
      return k * p.q + q, r
    end

    local function pceil(du, df)
      if df > 0 then return du + 1 end
      return du
    end

    -- The debt a bucket holds now (how far its tat is ahead of now), never below zero.
    local function debt(s, p)
      if s == nil then return 0, 0 end
      local du, df = psub(p, s.tu, s.tf, now, 0)
      if du < 0 then return 0, 0 end
      return du, df
    end

    -- Whole units a debt stands for, rounded up: the smallest u with u * T >= d.
    local function units(p, du, df)
      local u = math.max(math.floor((du + df / p.limit) * p.limit / p.window), 0)
      while true do
        local pu, pf = ptimes(p, u)
        if pcmp(pu, pf, du, df) >= 0 then break end
        u = u + 1
      end
      while u > 0 do
        local pu, pf = ptimes(p, u - 1)
        if pcmp(pu, pf, du, df) < 0 then break end
        u = u - 1
      end
      return u
    end

    local t = {}

    function t.read(c)
      local raw = redis.call('GET', c.key)
      if not raw then return nil end
      local tu, tf, born, seq, dropped, pos = struct.unpack('<ddddd', raw)
      -- A tat at or before now is a full bucket.
      if tu < now or (tu == now and tf == 0) then return nil end
      return { tu = tu, tf = tf, born = born, seq = seq, dropped = dropped,
        hist = string.sub(raw, pos) }
    end

    -- Whether k fits wait µs from now (0: now; token_bucket::fits_within).
    function t.fits(s, p, k, wait)
      if k > p.burst then return false end
      local du, df = debt(s, p)
      local ku, kf = ptimes(p, k)
      local nu, nf = padd(p, du, df, ku, kf)
      local bu, bf = ptimes(p, p.burst)
      return pcmp(nu, nf, bu + wait, bf) <= 0
    end

    function t.land(c, p, cost)
      local s = c.after
      local fu, ff = debt(s, p)
      local added = math.min(cost, math.max(p.cap - units(p, fu, ff), 0))
      if added == 0 then
        if s == nil then return 0, now, 0 end
        return 0, s.born, s.seq
      end
      c.added = c.added + added
      if s == nil then
        s = { tu = now, tf = 0, born = now, seq = 0, dropped = 0, hist = '' }
        c.after = s
      elseif s == c.s then
        -- The first landing of the call: the state as read stays for the answers if the call
        -- does not land.
        s = { tu = s.tu, tf = s.tf, born = s.born, seq = s.seq, dropped = s.dropped,
          hist = s.hist }
        c.after = s
      end
      local au, af = ptimes(p, added)
      local xu, xf = padd(p, fu, ff, au, af)
      s.tu, s.tf = padd(p, now, 0, xu, xf)
      s.seq = s.seq + 1
      -- Entries whose debt is no smaller than the one found go: the new one supersedes them.
      local h = s.hist
      while #h > 0 do
        local _, hu, hf = struct.unpack('<ddd', h, #h - HIST + 1)
        if pcmp(hu, hf, fu, ff) < 0 then break end
        h = string.sub(h, 1, -HIST - 1)
      end
      h = h .. struct.pack('<ddd', s.seq, fu, ff)
      if #h > HISTORY * HIST then
        s.dropped = struct.unpack('<d', h)
        h = string.sub(h, HIST + 1)
      end
      s.hist = h
      return added, s.born, s.seq
    end

    -- Writes a bucket's state (nil: full), and takes it as the counter's.
    function t.store(c, s)
      c.s = s
      if s == nil then
        redis.call('DEL', c.key)
      else
        redis.call('SET', c.key, struct.pack('<ddddd', s.tu, s.tf, s.born, s.seq, s.dropped) ..
          s.hist, 'PX', ttl_ms(pceil(s.tu, s.tf)))
      end
    end

    function t.refund(c, p, amount, born, seq)
      local s = c.s
      if s == nil then return t.store(c, nil) end
      if s.born ~= born or s.dropped > seq then return end
      -- What the charge added (cu, cf), but no more than the debt the next charge found
      -- (gu, gf: give), nor than tat itself.
      local cu, cf = ptimes(p, amount)
      local gu, gf = cu, cf
      local h = s.hist
      for pos = 1, #h, HIST do
        local hs, hu, hf = struct.unpack('<ddd', h, pos)
        if hs > seq then
          if pcmp(hu, hf, gu, gf) < 0 then gu, gf = hu, hf end
          break
        end
      end
      if pcmp(s.tu, s.tf, gu, gf) < 0 then gu, gf = s.tu, s.tf end
      s.tu, s.tf = psub(p, s.tu, s.tf, gu, gf)
      if pcmp(s.tu, s.tf, now, 0) <= 0 then return t.store(c, nil) end
      -- Later charges found at most the charge less debt without it; recording them as finding
      -- that much less can only make later refunds smaller.
      local parts = {}
      for pos = 1, #h, HIST do
        local hs, hu, hf = struct.unpack('<ddd', h, pos)
        if hs > seq then
          if pcmp(hu, hf, cu, cf) <= 0 then
            hu, hf = 0, 0
          else
            hu, hf = psub(p, hu, hf, cu, cf)
          end
        end
        parts[#parts + 1] = struct.pack('<ddd', hs, hu, hf)
      end
      s.hist = table.concat(parts)
      t.store(c, s)
    end

    function t.remaining(s, p)
      local du, df = debt(s, p)
      return math.max(p.burst - units(p, du, df), 0)
    end

    function t.reset_after(s, p)
      return pceil(debt(s, p))
    end

    function t.retry_after(s, p, k)
      if t.fits(s, p, k, 0) then return 0 end
      local du, df = debt(s, p)
      local ku, kf = ptimes(p, k)
      local nu, nf = padd(p, du, df, ku, kf)
      local bu, bf = ptimes(p, p.burst)
      return pceil(psub(p, nu, nf, bu, bf))
    end

    return t
  end

  local tb = buckets()

  -- A counter (one per key of the call, shared by the charges on it): its state as read
  -- (fixed window used and stop; sliding window used (total), head, len, newest entry lt, lc;
  -- token bucket s, nil when full) and `added`, what the call has landed on it so far (a token
  -- bucket's running state is `after`). Charges on one key share its algorithm and window;
  -- their limits may differ (a request's override of a configured limit counts in the same
  -- key), so each charge carries its own, and the counter commits by its first charge's
  -- overdraft, as algorithm::batch does.
  local function open(ki, alg, window, b, overdraft)
    local c = { key = KEYS[KO + ki], alg = alg, window = window, overdraft = overdraft,
      added = 0, used = 0, stop = 0, head = 0, len = 0, lt = false, lc = 0, s = false,
      after = false, need = 0, commit = false, fresh = 0, held = false,
      touched = false, born = false }
    if alg == TOKEN_BUCKET then
      c.s = tb.read(c)
      c.after = c.s
    elseif alg == CONCURRENCY then
      c.held, c.used = slots_read(c.key)
    else
      if alg == FIXED_WINDOW then c.fresh = fixed_fresh(window, b) end
      c.used, c.stop, c.head, c.len, c.lt, c.lc = window_read(c.key, alg, window)
    end
    return c
  end

  -- Whether k more fits under charge p's limit, after what the call has landed so far.
  local function fits(c, p, k)
    if p.alg == TOKEN_BUCKET then return tb.fits(c.after, p, k, p.wait) end
    return c.used + c.added + k <= p.limit
  end

  -- Lands up to cost (stopping at p's usage cap) in the call's running state; written only by
  -- write(). Returns added, mark1, mark2.
  local function land(c, p, cost)
    if cost == 0 then return 0, 0, 0 end
    if p.alg == TOKEN_BUCKET then return tb.land(c, p, cost) end
    if p.alg == CONCURRENCY then
      c.added = c.added + cost
      return cost, slot_hi, slot_lo
    end
    local added = math.min(cost, math.max(p.cap - c.used - c.added, 0))
    c.added = c.added + added
    if c.alg == FIXED_WINDOW then return added, fixed_mark(c.fresh, c.stop), 0 end
    return added, sliding_mark(c.window, c.lt), 0
  end

  -- Writes what the call landed on the counter, and takes it as the counter's state.
  local function write(c)
    local added = c.added
    c.added = 0
    if c.alg == FIXED_WINDOW then
      -- A window a fair share's touch started is new to Redis: it takes its expiry.
      local stop = c.stop
      if c.born then stop, c.born = 0, false end
      c.used, c.stop = fixed_land(c.key, c.fresh, c.used, stop, added)
    elseif c.alg == CONCURRENCY then
      local _, h = slots_find(c.held)
      if h then
        h[3], h[4] = h[3] + added, now + c.window
      else
        c.held[#c.held + 1] = { slot_hi, slot_lo, added, now + c.window }
      end
      c.used = c.used + added
      slots_write(c.key, c.held)
    elseif c.alg == SLIDING_WINDOW then
      c.used, c.head, c.len, c.lt, c.lc =
        sliding_land(c.key, c.window, c.used, c.head, c.len, c.lt, c.lc, added)
    else
      tb.store(c, c.after)
    end
  end

  -- Refunds `amount` units a charge landed where its marks say (algorithm::refund), in Redis
  -- and in the counter. As the memory store, a refund writes the counter back as it stands
  -- now: a key whose state has ended goes, a log loses what it forgot.
  local function refund(c, p, amount, mark1, mark2)
    if c.alg == TOKEN_BUCKET then return tb.refund(c, p, amount, mark1, mark2) end
    if c.alg == CONCURRENCY then
      for i = 1, #c.held do
        local h = c.held[i]
        if h[1] == mark1 and h[2] == mark2 then
          local take = math.min(amount, h[3])
          h[3] = h[3] - take
          c.used = c.used - take
          if h[3] == 0 then table.remove(c.held, i) end
          break
        end
      end
      slots_write(c.key, c.held)
      return
    end
    if c.alg == FIXED_WINDOW then
      -- A live window the charge did not land in is left alone (an operator's reset keeps
      -- an empty window under another end, which no earlier mark finds: lua/admin.lua).
      if c.stop ~= 0 and c.stop ~= mark1 then return end
      c.used = c.used - math.min(amount, c.used)
      -- A tenant of a fair share stays active to its window's end, refunded or not (a
      -- window that has ended goes: no key is left without an expiry).
      if c.used == 0 and (p.fair <= 0 or c.stop == 0) then
        c.stop = 0
        redis.call('DEL', c.key)
      else
        redis.call('SET', c.key, struct.pack('<dd', c.used, c.stop), 'KEEPTTL')
      end
      return
    end
    -- Stamps only grow, so the charge's entry is the one of its granule, and a recent one:
    -- look from the newest.
    local _, g = sliding_mark(c.window, nil)
    local log, total = '', c.used
    if c.head < c.len then log = redis.call('GETRANGE', c.key, c.head, c.len - 1) end
    for pos = #log - 15, 1, -16 do
      local t, cost = struct.unpack('<dd', log, pos)
      if math.floor(t / g) == mark1 then
        local take = math.min(amount, cost)
        local keep = ''
        if cost > take then keep = struct.pack('<dd', t, cost - take) end
        log = string.sub(log, 1, pos - 1) .. keep .. string.sub(log, pos + 16)
        total = total - take
        break
      end
    end
    if #log == 0 then
      redis.call('DEL', c.key)
    else
      local newest = struct.unpack('<d', log, #log - 15)
      redis.call('SET', c.key, struct.pack('<dd', total, HEADER) .. log, 'PX',
        ttl_ms(newest + c.window))
    end
    c.used, c.head, c.len, c.lt, c.lc = sliding_read(c.key, c.window)
  end

  -- The answer to charge p, from its counter's state as the call leaves it.
  local function answer(c, p, allowed, k, added, mark1, mark2)
    local remaining, wait
    if c.alg == TOKEN_BUCKET then
      remaining = tb.remaining(c.s, p)
      if allowed then
        wait = tb.reset_after(c.s, p)
      elseif k > p.burst then
        wait = -1
      else
        wait = tb.retry_after(c.s, p, k)
      end
    elseif c.alg == CONCURRENCY then
      remaining = math.max(p.limit - c.used, 0)
      if allowed then
        wait = 0
        for i = 1, #c.held do wait = math.max(wait, c.held[i][4] - now) end
      elseif k > p.limit then
        wait = -1
      else
        wait = slots_wait(c.held, p.limit, c.used, k)
      end
    else
      remaining = math.max(p.limit - c.used, 0)
      if c.alg == FIXED_WINDOW and not allowed and p.borrow > 0 and p.pool > 0 then
        -- A class past its guarantee fits again by borrowing, when the window ends at the
        -- latest; never only past what it may borrow.
        wait = -1
        if k <= math.max(p.limit, p.borrow) then
          wait = fixed_wait(p.limit, c.fresh, c.used, c.stop, true, k)
        end
      elseif c.alg == FIXED_WINDOW then
        wait = fixed_wait(p.limit, c.fresh, c.used, c.stop, allowed, k)
      elseif not allowed and c.used + k <= p.limit then
        wait = 0
      else
        wait = sliding_wait(c.key, p.limit, c.window, c.used, c.head, c.len, c.lt, allowed, k)
      end
    end
    return struct.pack('<dddddd', allowed and 1 or 0, remaining, wait, added, mark1, mark2)
  end

  -- The one denial rule (decision::verdict) over the call's charges: 0 admit, 1 overdraft
  -- only, 2 deny.
  local function verdict(charges)
    local over, hard = false, false
    local quota, quota_count = {}, 0
    for i = 1, n do
      local ch = charges[i]
      if not ch.allowed then
        if ch.role == ENFORCED then
          over = true
          if not ch.overdraft then hard = true end
        elseif ch.role >= QUOTA then
          if quota[ch.role] == nil then
            quota[ch.role] = false
            quota_count = quota_count + 1
          end
          if not ch.overdraft then quota[ch.role] = true end
        end
      end
    end
    if quota_total > 0 and quota_count == quota_total then
      over = true
      local all_hard = true
      for _, h in pairs(quota) do if not h then all_hard = false end end
      if all_hard then hard = true end
    end
    if not over then return 0 end
    if hard then return 2 end
    return 1
  end

  -- The cost a charge must fit (algorithm::check_cost): overdraft asks "anything left?";
  -- check-only asks the same, except under count rejected, where it fits while usage has not
  -- gone past the limit.
  local function check_cost(ch)
    if ch.overdraft then return 1 end
    if ch.cost == 0 and mode == COUNT_REJECTED then return 0 end
    return math.max(ch.cost, 1)
  end

  -- Decides (or refunds) the call: batch::evaluate then batch::report, step by step.
  local function general()
    local count_rejected = mode == COUNT_REJECTED
    -- The record key, in the modes that have one: the call's last key, after its counters.
    local nc, record = nkeys, nil
    if mode == RESERVE or mode == SETTLE or mode == UNRESERVE then
      nc, record = nkeys - 1, KEYS[KO + nkeys]
    end
    -- Per charge: its limit, cost and role, its counter c, and then whether it fit and what
    -- it landed.
    local charges, counters = {}, {}
    for i = 1, n do
      local ki, alg, limit, window, burst, overdraft, cost, role, wait, pool, borrow, fair =
        struct.unpack('<dddddddddddd', P, FIRST + (i - 1) * CHARGE)
      local c = counters[ki]
      if c == nil then
        c = open(ki, alg, window, burst, overdraft == 1)
        counters[ki] = c
      end
      if alg ~= TOKEN_BUCKET then burst = limit end
      -- A token bucket's unit of time: window / limit = q + r / limit.
      local q = math.floor(window / limit)
      charges[i] = { c = c, alg = alg, limit = limit, window = window, burst = burst,
        overdraft = overdraft == 1, cap = burst * CAP, q = q, r = window - q * limit,
        cost = cost, role = role, wait = wait, pool = pool, borrow = borrow, fair = fair,
        allowed = false,
        landed = 0, mark1 = 0, mark2 = 0 }
    end

    if mode == RELEASE or mode == RENEW then
      for i = 1, n do
        local ch = charges[i]
        local c = ch.c
        ch.allowed = true
        if c.alg == CONCURRENCY then
          local _, h = slots_find(c.held)
          ch.allowed = h ~= nil
          if mode == RELEASE then
            if h then
              ch.landed, ch.mark1, ch.mark2 = h[3], slot_hi, slot_lo
              refund(c, ch, h[3], slot_hi, slot_lo)
            end
          elseif h then
            h[4] = now + c.window
            slots_write(c.key, c.held)
          end
        end
      end
    elseif mode == REFUND or mode == UNRESERVE then
      local b = FIRST + n * CHARGE
      for i = 1, n do
        local ch = charges[i]
        local allowed, kept, amount, mark1, mark2 =
          struct.unpack('<ddddd', P, b + (i - 1) * REFUNDED)
        ch.allowed, ch.landed = allowed == 1, kept
        if amount > 0 then refund(ch.c, ch, amount, mark1, mark2) end
        if kept > 0 then ch.mark1, ch.mark2 = mark1, mark2 end
      end
      if mode == UNRESERVE then redis.call('DEL', record) end
    elseif mode == SETTLE then
      rsv = rsv or reservations()
      local entries = rsv.read(record)
      for i = 1, n do
        local ch = charges[i]
        local c = ch.c
        local e
        for j = 1, #entries do
          if entries[j].key == c.key then
            e = table.remove(entries, j)
            break
          end
        end
        if e and c.alg ~= CONCURRENCY then
          ch.allowed = true
          local back = e.added - ch.cost
          if back > 0 then
            refund(c, ch, back, e.mark1, e.mark2)
            if c.alg == TOKEN_BUCKET then c.after = c.s end
          end
          local excess = ch.cost - e.cost
          -- A fair share's tenant whose window has ended is not active in the new one: its
          -- excess lands on the pool only (reservation::settle).
          if excess > 0 and not (ch.fair > 0 and c.stop == 0) then
            ch.landed, ch.mark1, ch.mark2 = land(c, ch, excess)
            -- At the usage cap nothing lands, and nothing is written.
            if ch.landed > 0 then write(c) else ch.mark1, ch.mark2 = 0, 0 end
          end
        end
      end
      redis.call('DEL', record)
    else
      -- What every charge of the call would bring each counter to (batch::evaluate's totals).
      for i = 1, n do
        local c = charges[i].c
        c.total = (c.total or 0) + charges[i].cost
      end
      -- A fair share's tenant not yet active in its window becomes active, whatever the
      -- verdict (batch::touch_tenants): its counter starts empty, and the pool's count of
      -- active tenants (the next charge's counter) adds one while under its limit.
      for i = 1, n - 1 do
        local ch, a = charges[i], charges[i + 1]
        local c = ch.c
        if ch.fair > 0 and ch.cost > 0 and a.fair < 0 and ch.alg == FIXED_WINDOW
            and a.alg == FIXED_WINDOW and c.stop == 0 and c.added == 0 and a.c.used < a.limit then
          -- A window started by a touch has its end now, and its key is new (write()).
          c.touched, c.stop, c.born = true, c.fresh, true
          a.c.used = a.c.used + 1
          a.c.touched = true
          if a.c.stop == 0 then a.c.stop, a.c.born = a.c.fresh, true end
        end
      end
      for i = 1, n do
        local ch = charges[i]
        if ch.fair > 0 then
          -- Its share (batch::share): the pool ÷ the active tenants, at least the floor.
          local active = 1
          if i < n and charges[i + 1].fair < 0 then
            active = math.max(charges[i + 1].c.used, 1)
          end
          local share = math.max(math.floor(ch.limit / active), ch.fair)
          ch.allowed = ch.c.used + ch.c.added + check_cost(ch) <= share
        else
          ch.allowed = fits(ch.c, ch, check_cost(ch))
        end
        if not ch.allowed and ch.borrow > 0 and counters[ch.pool] then
          -- A class past its guarantee borrows while its pool, with the whole call, stays
          -- within borrow_until.
          local pool = counters[ch.pool]
          ch.allowed = pool.used + pool.total <= ch.borrow
        end
        local counts = count_rejected and ch.alg ~= CONCURRENCY
        if ch.allowed or ch.overdraft or counts then
          ch.landed, ch.mark1, ch.mark2 = land(ch.c, ch, ch.cost)
        end
      end
      -- A counter keeps what landed on it when the verdict lets its charges stay.
      local v = verdict(charges)
      for ki = 1, nc do
        local c = counters[ki]
        local stays = count_rejected or v == 0 or (v == 1 and c.overdraft)
        c.commit = stays and mode ~= DRY_RUN and c.added > 0
        if c.commit then
          write(c)
        else
          c.added = 0
          c.after = c.s
          -- A tenant's first sight, and the active count it joined, stay whatever the verdict.
          if c.touched and mode ~= DRY_RUN then write(c) end
        end
      end
      for i = 1, n do
        local ch = charges[i]
        if not ch.c.commit then ch.landed, ch.mark1, ch.mark2 = 0, 0, 0 end
      end
      if mode == RESERVE then
        -- The record of what landed (none when nothing did), for record_ms.
        local parts = {}
        for i = 1, n do
          local ch = charges[i]
          if ch.landed > 0 and ch.alg ~= CONCURRENCY then
            parts[#parts + 1] = struct.pack('<ddddd', ch.cost, ch.landed, ch.mark1, ch.mark2,
              #ch.c.key) .. ch.c.key
          end
        end
        if #parts > 0 then
          redis.call('SET', record, struct.pack('<d', now + record_ms * 1000) ..
            table.concat(parts), 'PX', record_ms + 1000)
        end
      end
    end

    -- What a retry of the request needs on each key: the cost of its charges that did not land.
    for i = 1, n do
      local ch = charges[i]
      if ch.landed == 0 and not ch.overdraft then ch.c.need = ch.c.need + ch.cost end
    end
    local out = { '=', struct.pack('<d', now) }
    for i = 1, n do
      local ch = charges[i]
      local k = check_cost(ch)
      if not ch.allowed and ch.landed == 0 and not ch.overdraft then
        k = math.max(k, ch.c.need)
      end
      out[i + 2] = answer(ch.c, ch, ch.allowed, k, ch.landed, ch.mark1, ch.mark2)
    end
    return table.concat(out)
  end

  return general
end

-- Decides the call whose keys start after KEYS[ko], from its packed numbers p.
local function one(ko, p)
  KO, P = ko, p
  local t
  t, nkeys, mode, quota_total, n, slot_hi, slot_lo, record_ms = struct.unpack('<dddddddd', P)
  if t < 0 then
    if clock == nil then
      local time = redis.call('TIME')
      clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = clock
  else
    now = t
  end
  local r = direct()
  if r then return r end
  built = built or build()
  return built()
end

if #ARGV == 1 then return one(0, ARGV[1]) end

local replies, ko = {}, 0
for i = 1, #ARGV do
  local p = ARGV[i]
  local ok, r = pcall(one, ko, p)
  if not ok then
    -- redis.call raises a table { err = message }; a Lua error raises a string.
    if type(r) == 'table' then r = r.err end
    r = tostring(r)
  end
  replies[i] = r
  ko = ko + struct.unpack('<d', p, 9)
end
return replies
