-- tollgate: decide, or undo, the charges of one placement group of a request, atomically (or
-- of a batch of them, each on its own; see the end of this comment).
--
-- This is src/algorithm (batch::evaluate and the three algorithms) written in Lua, step by
-- step; the differential test runs random requests through both and compares every answer and
-- the state left behind. Times are microseconds. Every number stays an integer below 2^53
-- (config validation and --max-hits bound the inputs; see docs/semantics.md).
--
-- KEYS: the group's distinct counter keys, each charged at least once (on a cluster they share
-- one hash tag, so one slot; on one node a group is the whole request).
-- ARGV[1]: every number of the call, packed as little-endian doubles (struct '<d'; each an
--   integer below 2^53, so exact), which spares Redis an argument string per number and the
--   script a tonumber each:
--   now in µs, or -1 to use Redis TIME (so replicas with skewed clocks agree); the number of
--   KEYS; mode: 0 decide; 1 count rejected (every charge lands, as envoyproxy/ratelimit);
--   2 dry run (answer, write nothing); 3 refund (undo landed charges, then answer); quota
--   descriptors in the whole request; n, the number of charges; then 8 per charge: key index
--   (1-based into KEYS), algorithm (0 fixed window, 1 sliding window, 2 token bucket), limit,
--   window_us, burst, overdraft (0|1), cost, role (0 enforced, 1 shadow, 2 + d quota of
--   request descriptor d).
--   In refund mode 5 more per charge, after all of those: allowed (0|1, as decided), kept
--   (units that stay landed), undo (units to take back), mark1, mark2.
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
-- debts later charges found).
--
-- A sliding window holds up to 1,000 granules (16 KB). Its common case (peek() then slid(),
-- for enforced charges each on its own key) reads and writes only the bytes it needs with
-- GETRANGE, SETRANGE and APPEND: the header, the entries it forgets, the newest. It never has
-- Redis copy the whole log, nor Lua build a string of its size: many near-identical long
-- strings make Lua's string interning compare each new one with the others byte by byte,
-- which made a hot key's cost grow with its log.
--
-- A batch (many requests' calls in one EVALSHA, each decided on its own as above): two or
-- more arguments, one per call, each laid out as ARGV[1] above; KEYS holds every call's keys,
-- call by call. Returns one reply per call: the string above, or one saying why that call
-- failed (a failed call does not stop the others; what it wrote before failing stays, as for
-- a single call).

-- The call being decided: its offset into KEYS, its packed numbers, and its arguments.
local KO, P = 0, ''
local now, nkeys, mode, deciding, count_rejected, dry, refunding, quota_total, n, charges
-- The layout's counts and codes: src/store/redis/script.rs `layout` holds them, and a test
-- there reads these lines and fails when the two drift. Numbers per call before its charges
-- (now, the number of keys, mode, quota descriptors, n), per charge, per refunded charge.
local CALL_NUMBERS, CHARGE_NUMBERS, REFUND_NUMBERS = 5, 8, 5
local DECIDE, COUNT_REJECTED, DRY_RUN, REFUND = 0, 1, 2, 3
-- Where the first charge starts in P (1-based), and the size of a charge and of a refund.
local FIRST, CHARGE, UNDO = 8 * CALL_NUMBERS + 1, 8 * CHARGE_NUMBERS, 8 * REFUND_NUMBERS
-- Redis TIME, read once per script run.
local clock
-- The general code's functions: build() (defined below) makes them on the first call that
-- needs them.
local build, built

local DEBT_CAP_FACTOR = 100
local HISTORY = 8
-- A sliding window's header <total, head>; how many bytes of entries peek() reads at a time;
-- forgotten bytes slid() lets pile up before it rewrites the log (and only once they outnumber
-- the live ones).
local HEADER, CHUNK, COMPACT = 16, 256, 4096
-- Keys outlive their state by this much, so a key never disappears while a clock a little
-- behind (another instance's, with --clock local) still counts its state live.
local TTL_SLACK_MS = 1000

local function ttl_ms(expires)
  return math.max(math.ceil((expires - now) / 1000), 0) + TTL_SLACK_MS
end

-- A sliding window's log as it stands (see the top), reading only the bytes it needs: the
-- total of its live entries, where they start, the log's length, and its newest entry (nil
-- when none is live). Forgets nothing in Redis: slid() writes what it forgot when it lands.
local function peek(key, window)
  local total, head, len = 0, HEADER, HEADER
  -- The last chunk of entries read, and where it starts.
  local chunk, from
  local header = redis.call('GETRANGE', key, 0, HEADER - 1)
  if #header == HEADER then
    total, head = struct.unpack('<dd', header)
    len = redis.call('STRLEN', key)
    -- Forget what has left the window, a chunk of entries at a time.
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

-- The answer (6 numbers, packed) to one enforced charge (no overdraft) on the sliding window
-- that peek() read; the charge lands when land is true (it fits, and so does the rest of its
-- group). What the general code below answers for it, reading and writing only the bytes it
-- needs.
local function slid(key, limit, window, cost, total, head, len, lt, lc, land)
  local k = math.max(cost, 1)
  if total + k > limit then
    -- Denied: nothing lands. A cost over the limit never fits; otherwise (then the window
    -- holds charges) it fits once enough of the oldest usage has left.
    local wait = -1
    if k <= limit then
      local need, freed, pos = total + k - limit, 0, head
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
    end
    return struct.pack('<dddddd', 0, math.max(limit - total, 0), wait, 0, 0, 0)
  end
  if cost == 0 or not land then
    local wait = 0
    if lt then wait = math.max(lt + window - now, 0) end
    return struct.pack('<dddddd', 1, limit - total, wait, 0, 0, 0)
  end
  local g = math.max(math.floor(window / 1000), 1000)
  total = total + cost
  local at = now
  if lt then at = math.max(now, lt) end
  local granule = math.floor(at / g)
  local stamp = granule * g + g - 1
  if not lt then
    -- A new key, or everything in it has left the window: start afresh.
    redis.call('SET', key, struct.pack('<dddd', total, HEADER, stamp, cost), 'PX',
      ttl_ms(stamp + window))
  else
    if math.floor(lt / g) == granule then
      -- Into the newest entry: the log's expiry stays.
      stamp = lt
      redis.call('SETRANGE', key, len - 16, struct.pack('<dd', lt, lc + cost))
    else
      redis.call('APPEND', key, struct.pack('<dd', stamp, cost))
      len = len + 16
      redis.call('PEXPIRE', key, ttl_ms(stamp + window))
    end
    if head - HEADER >= COMPACT and head - HEADER >= len - head then
      local entries = redis.call('GETRANGE', key, head, len - 1)
      redis.call('SET', key, struct.pack('<dd', total, HEADER) .. entries, 'KEEPTTL')
    else
      redis.call('SETRANGE', key, 0, struct.pack('<dd', total, head))
    end
  end
  return struct.pack('<dddddd', 1, limit - total, math.max(stamp + window - now, 0), cost,
    granule, 0)
end

-- A fixed window's counter: its count and end, or 0, 0 when it has none (or it has ended).
local function counter(key)
  local raw = redis.call('GET', key)
  if raw then
    local count, stop = struct.unpack('<dd', raw)
    if stop > now then return count, stop end
  end
  return 0, 0
end

-- The answer (6 numbers, packed) to one enforced charge (no overdraft) on a fixed window that
-- holds count until stop (0: no window yet); the charge lands when land is true (it fits, and
-- so does the rest of its group).
local function settle(key, limit, window, cost, count, stop, land)
  local k = math.max(cost, 1)
  local wait
  if stop > 0 then wait = stop - now else wait = window - (now % window) end
  if land and cost > 0 then
    count = count + cost
    if stop == 0 then
      stop = now - (now % window) + window
      wait = stop - now
      redis.call('SET', key, struct.pack('<dd', count, stop), 'PX', ttl_ms(stop))
    else
      -- The window's key already expires at its end plus the slack: keep that expiry
      -- (KEEPTTL spares Redis a new one, ~20% of this call's cost).
      redis.call('SET', key, struct.pack('<dd', count, stop), 'KEEPTTL')
    end
    return struct.pack('<dddddd', 1, limit - count, wait, cost, stop, 0)
  end
  if count + k <= limit then
    return struct.pack('<dddddd', 1, limit - count, wait, 0, 0, 0)
  end
  -- Denied: nothing lands. A cost over the limit can never fit; otherwise (then the window
  -- holds charges) it fits once the window ends.
  if k > limit then wait = -1 end
  return struct.pack('<dddddd', 0, math.max(limit - count, 0), wait, 0, 0, 0)
end

-- The common case first: one enforced charge (no overdraft) on a fixed or sliding window,
-- deciding or (dry) only evaluating. A dry run is the common call on a hot shared limit once
-- a request is sure to be denied. This is what the general code below answers for it, without
-- its tables; the differential test holds the two (and Rust) to the same answers and state.
local function fast()
  if n ~= 1 or not (deciding or dry) then return nil end
  local ki, alg, limit, window, _, overdraft, cost, role = struct.unpack('<dddddddd', P, FIRST)
  if overdraft ~= 0 or role ~= 0 or alg > 1 then return nil end
  local key, k = KEYS[KO + ki], math.max(cost, 1)
  if alg == 1 then
    local total, head, len, lt, lc = peek(key, window)
    return '=' .. struct.pack('<d', now) ..
      slid(key, limit, window, cost, total, head, len, lt, lc, not dry and total + k <= limit)
  end
  local count, stop = counter(key)
  return '=' .. struct.pack('<d', now) ..
    settle(key, limit, window, cost, count, stop, not dry and count + k <= limit)
end

-- Enforced charges (no overdraft), each on its own key, deciding or (dry) only evaluating:
-- the group of a hierarchical limit (per tenant, per tenant and model), or on one Redis node a
-- whole request. What the general code below answers for them, without its per-key maps,
-- copies and verdict: read every counter, then every charge lands or (one does not fit) none
-- does. Fixed and sliding windows take counter() and peek() (no table per charge); a token
-- bucket, the general code's functions. Per charge, in one flat table of STRIDE slots: key
-- index, algorithm, limit, window, cost, then what counter() or peek() read (the count or
-- total first), or a token bucket's parameters and state. Every key of a call has a charge, so
-- as many keys as charges means one charge per key.
local STRIDE = 10
local function several()
  if not (deciding or dry) or nkeys ~= n then return nil end
  local v = {}
  for i = 1, n do
    local ki, alg, limit, window, _, overdraft, cost, role =
      struct.unpack('<dddddddd', P, FIRST + (i - 1) * CHARGE)
    if overdraft ~= 0 or role ~= 0 then return nil end
    local b = STRIDE * (i - 1)
    v[b + 1], v[b + 2], v[b + 3], v[b + 4], v[b + 5] = ki, alg, limit, window, cost
  end
  local all = not dry
  for i = 1, n do
    local b = STRIDE * (i - 1)
    local key, alg = KEYS[KO + v[b + 1]], v[b + 2]
    local fits
    if alg == 2 then
      if built == nil then built = build() end
      v[b + 6], v[b + 7], fits = built.bucket(i, key)
    else
      if alg == 0 then
        v[b + 6], v[b + 7] = counter(key)
      else
        v[b + 6], v[b + 7], v[b + 8], v[b + 9], v[b + 10] = peek(key, v[b + 4])
      end
      fits = v[b + 6] + math.max(v[b + 5], 1) <= v[b + 3]
    end
    if not fits then all = false end
  end
  local out = { '=', struct.pack('<d', now) }
  for i = 1, n do
    local b = STRIDE * (i - 1)
    local key, alg = KEYS[KO + v[b + 1]], v[b + 2]
    if alg == 0 then
      out[i + 2] = settle(key, v[b + 3], v[b + 4], v[b + 5], v[b + 6], v[b + 7], all)
    elseif alg == 1 then
      out[i + 2] = slid(key, v[b + 3], v[b + 4], v[b + 5], v[b + 6], v[b + 7], v[b + 8],
        v[b + 9], v[b + 10], all)
    else
      out[i + 2] = built.bucket_answer(key, v[b + 6], v[b + 7], all)
    end
  end
  return table.concat(out)
end

-- Everything else: closures over the call state, made on the first call that needs them.
build = function()
  -- Integer division of non-negative integers held in doubles, exact below 2^53.
  local function idiv(a, b)
    local q = math.floor(a / b)
    local r = a - q * b
    if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
    return q, r
  end

  local function usage_cap(c)
    return c.burst * (DEBT_CAP_FACTOR + 1)
  end

  -- check_cost: overdraft asks "anything left?"; check-only asks the same, except under count
  -- rejected, where it fits while usage has not gone past the limit.
  local function check_cost(c)
    if c.overdraft then return 1 end
    if c.cost == 0 and count_rejected then return 0 end
    return math.max(c.cost, 1)
  end

  ---------------------------------------------------------------- token bucket: time pairs
  -- A time is a pair us, frac meaning us + frac / limit, 0 <= frac < limit. The functions
  -- below take and return a pair as two numbers (no table per step of the arithmetic).

  local function pnorm(c, us, frac)
    local q, r = idiv(frac, c.limit)
    return us + q, r
  end

  local function padd(c, au, af, bu, bf) return pnorm(c, au + bu, af + bf) end

  local function psub(c, au, af, bu, bf)
    local us, frac = au - bu, af - bf
    if frac < 0 then frac = frac + c.limit; us = us - 1 end
    return us, frac
  end

  local function pcmp(au, af, bu, bf)
    if au ~= bu then return au < bu and -1 or 1 end
    if af ~= bf then return af < bf and -1 or 1 end
    return 0
  end

  -- k units of time: k * window / limit.
  local function ptimes(c, k)
    local q, r = idiv(k * c.r, c.limit)
    return k * c.q + q, r
  end

  -- The debt a bucket holds now (how far its tat is ahead of now), never below zero.
  local function tdebt(s, c)
    if s == nil then return 0, 0 end
    local du, df = psub(c, s.tu, s.tf, now, 0)
    if du < 0 then return 0, 0 end
    return du, df
  end

  -- Whole units a debt stands for, rounded up: the smallest u with u * T >= d.
  local function tunits(c, du, df)
    local u = math.floor((du + df / c.limit) * c.limit / c.window)
    if u < 0 then u = 0 end
    while true do
      local pu, pf = ptimes(c, u)
      if pcmp(pu, pf, du, df) >= 0 then break end
      u = u + 1
    end
    while u > 0 do
      local pu, pf = ptimes(c, u - 1)
      if pcmp(pu, pf, du, df) < 0 then break end
      u = u - 1
    end
    return u
  end

  local function pceil(du, df)
    if df > 0 then return du + 1 end
    return du
  end

  -- A token bucket's history (the debts recent charges found, oldest first) stays packed:
  -- <seq, debt_us, debt_frac> per entry.
  local HIST = 24

  ---------------------------------------------------------------- state: load, encode

  local function decode(raw, c)
    if c.alg == 'f' then
      local count, stop = struct.unpack('<dd', raw)
      return { count = count, stop = stop }
    elseif c.alg == 't' then
      local tu, tf, born, seq, dropped, pos = struct.unpack('<ddddd', raw)
      return { tu = tu, tf = tf, born = born, seq = seq, dropped = dropped,
        hist = string.sub(raw, pos) }
    end
    -- The live entries are log's bytes from off on.
    local total, head = struct.unpack('<dd', raw)
    return { log = raw, off = head + 1, total = total }
  end

  local function encode(s, c)
    if c.alg == 'f' then return struct.pack('<dd', s.count, s.stop) end
    if c.alg == 't' then
      return struct.pack('<ddddd', s.tu, s.tf, s.born, s.seq, s.dropped) .. s.hist
    end
    return struct.pack('<dd', s.total, HEADER) .. string.sub(s.log, s.off)
  end

  -- A sliding window's newest entry: time, cost.
  local function newest(s)
    return struct.unpack('<dd', s.log, #s.log - 15)
  end

  -- Drops what has expired (algorithm::refresh); nil when nothing is live.
  local function refresh(s, c)
    if s == nil then return nil end
    if c.alg == 'f' then
      if s.stop <= now then return nil end
      return s
    elseif c.alg == 't' then
      if s.tu < now or (s.tu == now and s.tf == 0) then return nil end
      return s
    end
    local log, off = s.log, s.off
    while off <= #log do
      local t, cost = struct.unpack('<dd', log, off)
      if t + c.window > now then break end
      s.total = s.total - cost
      off = off + 16
    end
    if off > #log then return nil end
    s.off = off
    return s
  end

  local function load(key, c)
    local raw = redis.call('GET', key)
    if not raw then return nil end
    return refresh(decode(raw, c), c)
  end

  local function copy(s)
    if s == nil then return nil end
    if s.log then
      return { log = s.log, off = s.off, total = s.total }
    elseif s.tu then
      return { tu = s.tu, tf = s.tf, born = s.born, seq = s.seq, dropped = s.dropped,
        hist = s.hist }
    end
    return { count = s.count, stop = s.stop }
  end

  ---------------------------------------------------------------- the algorithms

  local function used(s)
    if s == nil then return 0 end
    if s.count then return s.count end
    return s.total
  end

  local function fits(s, c, k)
    if c.alg == 't' then
      if k > c.burst then return false end
      local du, df = tdebt(s, c)
      local ku, kf = ptimes(c, k)
      local nu, nf = padd(c, du, df, ku, kf)
      local bu, bf = ptimes(c, c.burst)
      return pcmp(nu, nf, bu, bf) <= 0
    end
    return used(s) + k <= c.limit
  end

  -- Adds up to cost, stopping at the usage cap. Returns the new state, added, mark1, mark2.
  local function charge(s, c)
    if c.cost == 0 then return s, 0, 0, 0 end
    if c.alg == 'f' then
      if s == nil then s = { count = 0, stop = now - (now % c.window) + c.window } end
      local added = math.min(c.cost, math.max(usage_cap(c) - s.count, 0))
      if added == 0 and s.count == 0 then return nil, 0, s.stop, 0 end
      s.count = s.count + added
      return s, added, s.stop, 0
    elseif c.alg == 't' then
      local fu, ff = tdebt(s, c)
      local added = math.min(c.cost, math.max(usage_cap(c) - tunits(c, fu, ff), 0))
      if added == 0 then
        if s == nil then return nil, 0, now, 0 end
        return s, 0, s.born, s.seq
      end
      if s == nil then s = { tu = now, tf = 0, born = now, seq = 0, dropped = 0, hist = '' } end
      local au, af = ptimes(c, added)
      local xu, xf = padd(c, fu, ff, au, af)
      s.tu, s.tf = padd(c, now, 0, xu, xf)
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
      return s, added, s.born, s.seq
    end
    if s == nil then s = { log = '', off = 1, total = 0 } end
    local added = math.min(c.cost, math.max(usage_cap(c) - s.total, 0))
    local g = math.max(math.floor(c.window / 1000), 1000)
    local at, lt, lc = now, nil, nil
    if s.off <= #s.log then
      lt, lc = newest(s)
      at = math.max(now, lt)
    end
    local granule = math.floor(at / g)
    if added > 0 then
      s.total = s.total + added
      if lt and math.floor(lt / g) == granule then
        s.log = string.sub(s.log, s.off, -17) .. struct.pack('<dd', lt, lc + added)
      else
        s.log = string.sub(s.log, s.off) .. struct.pack('<dd', granule * g + g - 1, added)
      end
      s.off = 1
    end
    if s.off > #s.log then s = nil end
    return s, added, granule, 0
  end

  -- Takes back `amount` units a charge added where marks say (algorithm::refund).
  local function refund(s, c, amount, mark1, mark2)
    if s == nil or amount == 0 then return s end
    if c.alg == 'f' then
      if s.stop ~= mark1 then return s end
      s.count = s.count - math.min(amount, s.count)
      if s.count == 0 then return nil end
      return s
    elseif c.alg == 't' then
      if s.born ~= mark1 or s.dropped > mark2 then return s end
      -- What the charge added (cu, cf), but no more than the debt the next charge found
      -- (gu, gf: give), nor than tat itself.
      local cu, cf = ptimes(c, amount)
      local gu, gf = cu, cf
      local h = s.hist
      for pos = 1, #h, HIST do
        local hs, hu, hf = struct.unpack('<ddd', h, pos)
        if hs > mark2 then
          if pcmp(hu, hf, gu, gf) < 0 then gu, gf = hu, hf end
          break
        end
      end
      if pcmp(s.tu, s.tf, gu, gf) < 0 then gu, gf = s.tu, s.tf end
      s.tu, s.tf = psub(c, s.tu, s.tf, gu, gf)
      if pcmp(s.tu, s.tf, now, 0) <= 0 then return nil end
      local parts = {}
      for pos = 1, #h, HIST do
        local hs, hu, hf = struct.unpack('<ddd', h, pos)
        if hs > mark2 then
          if pcmp(hu, hf, cu, cf) <= 0 then
            hu, hf = 0, 0
          else
            hu, hf = psub(c, hu, hf, cu, cf)
          end
        end
        parts[#parts + 1] = struct.pack('<ddd', hs, hu, hf)
      end
      s.hist = table.concat(parts)
      return s
    end
    -- Stamps only grow, so the charge's entry is the one of its granule, and a recent one:
    -- look from the newest.
    local g = math.max(math.floor(c.window / 1000), 1000)
    local log = s.log
    local pos = #log - 15
    while pos >= s.off do
      local t, cost = struct.unpack('<dd', log, pos)
      if math.floor(t / g) == mark1 then
        local take = math.min(amount, cost)
        s.total = s.total - take
        local keep = ''
        if cost > take then keep = struct.pack('<dd', t, cost - take) end
        s.log = string.sub(log, s.off, pos - 1) .. keep .. string.sub(log, pos + 16)
        s.off = 1
        break
      end
      pos = pos - 16
    end
    if s.off > #s.log then return nil end
    return s
  end

  local function remaining(s, c)
    if c.alg == 't' then
      local du, df = tdebt(s, c)
      return math.max(c.burst - tunits(c, du, df), 0)
    end
    return math.max(c.limit - used(s), 0)
  end

  local function reset_after(s, c)
    if c.alg == 'f' then
      if s == nil then return c.window - (now % c.window) end
      return math.max(s.stop - now, 0)
    end
    if s == nil then return 0 end
    if c.alg == 's' then return math.max(newest(s) + c.window - now, 0) end
    local du, df = tdebt(s, c)
    return pceil(du, df)
  end

  local function retry_after(s, c, k)
    if k > c.burst then return -1 end
    if fits(s, c, k) or s == nil then return 0 end
    if c.alg == 'f' then return math.max(s.stop - now, 0) end
    if c.alg == 's' then
      local need = s.total + k - c.limit
      local freed, wait, pos = 0, 0, s.off
      while pos <= #s.log do
        local t, cost = struct.unpack('<dd', s.log, pos)
        freed = freed + cost
        wait = math.max(t + c.window - now, 0)
        if freed >= need then break end
        pos = pos + 16
      end
      return wait
    end
    local du, df = tdebt(s, c)
    local ku, kf = ptimes(c, k)
    local nu, nf = padd(c, du, df, ku, kf)
    local bu, bf = ptimes(c, c.burst)
    return pceil(psub(c, nu, nf, bu, bf))
  end

  local function expires_at(s, c)
    if c.alg == 'f' then return s.stop end
    if c.alg == 's' then return newest(s) + c.window end
    return pceil(s.tu, s.tf)
  end

  ---------------------------------------------------------------- the batch

  -- The one denial rule (decision::verdict): 0 admit, 1 overdraft only, 2 deny.
  local function verdict(allowed)
    local over, hard = false, false
    local quota, quota_count = {}, 0
    for i = 1, n do
      local c = charges[i]
      if not allowed[i] then
        if c.role == 'e' then
          over = true
          if not c.overdraft then hard = true end
        elseif c.role == 'q' then
          if quota[c.descriptor] == nil then
            quota[c.descriptor] = false
            quota_count = quota_count + 1
          end
          if not c.overdraft then quota[c.descriptor] = true end
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
  local ALGORITHMS = { [0] = 'f', [1] = 's', [2] = 't' }
  local ROLES = { [0] = 'e', [1] = 's' }

  -- Charge i of the call.
  local function unpack_charge(i)
    local key, alg, limit, window, burst, overdraft, cost, role =
      struct.unpack('<dddddddd', P, FIRST + (i - 1) * CHARGE)
    local c = {
      key = key,
      alg = ALGORITHMS[alg],
      limit = limit,
      window = window,
      burst = burst,
      overdraft = overdraft == 1,
      cost = cost,
      role = ROLES[role] or 'q',
      descriptor = role - 2,
    }
    if c.alg ~= 't' then c.burst = c.limit end
    if c.alg == 't' then
      c.q = math.floor(c.window / c.limit)
      c.r = c.window - c.q * c.limit
    end
    return c
  end

  local function store(key, s, c)
    if s == nil then
      redis.call('DEL', key)
    else
      redis.call('SET', key, encode(s, c), 'PX', ttl_ms(expires_at(s, c)))
    end
  end

  local function reply(c, s, allowed, wait, added, mark1, mark2)
    return struct.pack('<dddddd', allowed and 1 or 0, remaining(s, c), wait, added, mark1, mark2)
  end

  -- A token bucket's charge i of several() (see there): its parameters and state, whether it
  -- fits, and the answer to it (land: the group lands).
  local function bucket(i, key)
    local c = unpack_charge(i)
    local s = load(key, c)
    return c, s, fits(s, c, math.max(c.cost, 1))
  end

  local function bucket_answer(key, c, s, land)
    local k = math.max(c.cost, 1)
    local allowed, added, mark1, mark2 = land or fits(s, c, k), 0, 0, 0
    if land and c.cost > 0 then
      local after, a, m1, m2 = charge(s, c)
      if a > 0 then
        store(key, after, c)
        s, added, mark1, mark2 = after, a, m1, m2
      end
    end
    local wait
    if allowed then wait = reset_after(s, c) else wait = retry_after(s, c, k) end
    return reply(c, s, allowed, wait, added, mark1, mark2)
  end

  local function general()
    charges = {}
    for i = 1, n do charges[i] = unpack_charge(i) end

    -- Per key: its limit (every charge on one key has the same shape), loaded and running state.
    local key_params, loaded, after = {}, {}, {}
    for i = 1, n do
      local c = charges[i]
      if key_params[c.key] == nil then
        key_params[c.key] = c
        loaded[c.key] = load(KEYS[KO + c.key], c)
      end
    end

    local allowed, added, mark1, mark2 = {}, {}, {}, {}
    local final = {}

    if refunding then
      local b = FIRST + n * CHARGE
      for i = 1, n do
        local c = charges[i]
        local was_allowed, undo
        was_allowed, added[i], undo, mark1[i], mark2[i] =
          struct.unpack('<ddddd', P, b + (i - 1) * UNDO)
        allowed[i] = was_allowed == 1
        if undo > 0 then
          local s = refund(loaded[c.key], c, undo, mark1[i], mark2[i])
          loaded[c.key] = s
          store(KEYS[KO + c.key], s, c)
        end
        if added[i] == 0 then mark1[i], mark2[i] = 0, 0 end
      end
      for key, _ in pairs(key_params) do final[key] = loaded[key] end
    else
      for key, _ in pairs(key_params) do after[key] = copy(loaded[key]) end
      local dirty = {}
      for i = 1, n do
        local c = charges[i]
        allowed[i] = fits(after[c.key], c, check_cost(c))
        added[i], mark1[i], mark2[i] = 0, 0, 0
        if allowed[i] or c.overdraft or count_rejected then
          local s, a, m1, m2 = charge(after[c.key], c)
          after[c.key] = s
          added[i], mark1[i], mark2[i] = a, m1, m2
          if a > 0 then dirty[c.key] = true end
        end
      end
      local v = verdict(allowed)
      for key, c in pairs(key_params) do
        local lands = count_rejected or v == 0 or (v == 1 and c.overdraft)
        local commit = lands and not dry and dirty[key]
        if commit then
          final[key] = after[key]
          store(KEYS[KO + key], after[key], c)
        else
          final[key] = loaded[key]
          for i = 1, n do
            if charges[i].key == key then added[i], mark1[i], mark2[i] = 0, 0, 0 end
          end
        end
      end
    end

    -- What a retry of the request needs on each key: the cost of its charges that did not land.
    local need = {}
    for i = 1, n do
      local c = charges[i]
      if added[i] == 0 and not c.overdraft then need[c.key] = (need[c.key] or 0) + c.cost end
    end

    local out = { '=', struct.pack('<d', now) }
    for i = 1, n do
      local c = charges[i]
      local s = final[c.key]
      local wait
      if allowed[i] then
        wait = reset_after(s, c)
      else
        local k = check_cost(c)
        if added[i] == 0 and not c.overdraft then k = math.max(k, need[c.key] or 0) end
        wait = retry_after(s, c, k)
      end
      out[#out + 1] = reply(c, s, allowed[i], wait, added[i], mark1[i], mark2[i])
    end
    return table.concat(out)
  end

  return { general = general, bucket = bucket, bucket_answer = bucket_answer }
end

-- Decides the call whose keys start after KEYS[ko], from its packed numbers p.
local function one(ko, p)
  KO, P = ko, p
  local t, _
  t, nkeys, mode, quota_total, n = struct.unpack('<ddddd', P)
  if t < 0 then
    if clock == nil then
      local time = redis.call('TIME')
      clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = clock
  else
    now = t
  end
  deciding, count_rejected, dry, refunding =
    mode == DECIDE, mode == COUNT_REJECTED, mode == DRY_RUN, mode == REFUND
  local r = fast() or several()
  if r then return r end
  if built == nil then built = build() end
  return built.general()
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
