-- tollgate: decide and charge one placement group of a request, atomically.
--
-- The same rules as src/algorithm.rs (decide_batch), which the conformance tests hold both
-- implementations to. Times are microseconds.
--
-- KEYS: the group's distinct counter keys (one hash tag, so one slot).
-- ARGV[1]  now in µs, or "" to use Redis TIME (so replicas with skewed clocks agree)
-- ARGV[2]  "0" = decide; "1" = count rejected (envoyproxy/ratelimit behaviour: every charge
--          lands); "2" = dry run: evaluate and answer, write nothing
-- ARGV[3]  number of quota descriptors in the whole request
-- ARGV[4]  number of charges n; then 8 values per charge:
--          slot (1-based index into KEYS), algorithm (f|s|t), limit, window_us, burst,
--          overdraft (0|1), cost, role (e = enforced, s = shadow, q<descriptor> = quota)
--
-- State per key (struct-packed doubles, integers): fixed window <count, end>; token bucket
-- <us, frac> for tat = us + frac / limit; sliding window <time, cost>* (oldest first).
--
-- Returns { now, then 4 integers per charge: allowed (0|1), remaining, wait_us (-1 = never),
-- landed (0|1: the charge was written) }.

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local count_rejected = ARGV[2] == '1'
local dry = ARGV[2] == '2'
local quota_total = tonumber(ARGV[3])
local n = tonumber(ARGV[4])

local charges = {}
for i = 1, n do
  local b = 4 + (i - 1) * 8
  local role = ARGV[b + 8]
  charges[i] = {
    slot = tonumber(ARGV[b + 1]),
    alg = ARGV[b + 2],
    limit = tonumber(ARGV[b + 3]),
    window = tonumber(ARGV[b + 4]),
    burst = tonumber(ARGV[b + 5]),
    overdraft = ARGV[b + 6] == '1',
    cost = tonumber(ARGV[b + 7]),
    role = string.sub(role, 1, 1),
    descriptor = string.sub(role, 2),
  }
end

-- Integer division of non-negative integers held in doubles, exact below 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
  return q, r
end

local function capacity(c)
  if c.alg == 't' then return c.burst end
  return c.limit
end

local function granule(window)
  return math.max(math.floor(window / 1000), 1000)
end

-- Loads a key's live state (expired state reads as nil).
local function load(key, c)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  if c.alg == 'f' then
    local count, stop = struct.unpack('<dd', raw)
    if stop <= now then return nil end
    return { count = count, stop = stop }
  elseif c.alg == 't' then
    -- tat = us + frac / limit
    local us, frac = struct.unpack('<dd', raw)
    if us < now or (us == now and frac == 0) then return nil end
    return { us = us, frac = frac }
  end
  local ts, cs, total = {}, {}, 0
  local pos = 1
  while pos < #raw do
    local t, cost
    t, cost, pos = struct.unpack('<dd', raw, pos)
    if t + c.window > now then
      ts[#ts + 1] = t
      cs[#cs + 1] = cost
      total = total + cost
    end
  end
  if #ts == 0 then return nil end
  return { ts = ts, cs = cs, total = total }
end

local function copy(s)
  if s == nil then return nil end
  if s.ts then
    local ts, cs = {}, {}
    for i = 1, #s.ts do ts[i] = s.ts[i]; cs[i] = s.cs[i] end
    return { ts = ts, cs = cs, total = s.total }
  end
  return { count = s.count, stop = s.stop, us = s.us, frac = s.frac }
end

-- Token bucket debt, (tat - now) * limit (0 when full).
local function debt(s, c)
  if s == nil or s.us < now then return 0 end
  return (s.us - now) * c.limit + s.frac
end

local function used(s)
  if s == nil then return 0 end
  if s.count then return s.count end
  return s.total
end

local function check_cost(c)
  if c.overdraft then return 1 end
  return math.max(c.cost, 1)
end

local function fits(s, c, k)
  if c.alg == 't' then
    return debt(s, c) + k * c.window <= c.burst * c.window
  end
  return used(s) + k <= c.limit
end

local function charge(s, c)
  if c.cost == 0 then return s end
  if c.alg == 'f' then
    if s == nil then
      return { count = c.cost, stop = now - (now % c.window) + c.window }
    end
    s.count = s.count + c.cost
    return s
  elseif c.alg == 't' then
    local us, frac = now, 0
    if s ~= nil and s.us >= now then us, frac = s.us, s.frac end
    local q, r = idiv(frac + c.cost * c.window, c.limit)
    return { us = us + q, frac = r }
  end
  if s == nil then
    return { ts = { now }, cs = { c.cost }, total = c.cost }
  end
  s.total = s.total + c.cost
  local last = #s.ts
  local g = granule(c.window)
  if math.floor(now / g) == math.floor(s.ts[last] / g) then
    s.ts[last] = math.max(s.ts[last], now)
    s.cs[last] = s.cs[last] + c.cost
  else
    s.ts[last + 1] = now
    s.cs[last + 1] = c.cost
  end
  return s
end

local function remaining(s, c)
  if c.alg == 't' then
    local left = c.burst * c.window - debt(s, c)
    if left <= 0 then return 0 end
    local q = idiv(left, c.window)
    return q
  end
  return math.max(c.limit - used(s), 0)
end

local function ceil_div(a, b)
  local q, r = idiv(a, b)
  if r > 0 then q = q + 1 end
  return q
end

local function reset_after(s, c)
  if s == nil then
    if c.alg == 'f' then return c.window - (now % c.window) end
    return 0
  end
  if c.alg == 'f' then return math.max(s.stop - now, 0) end
  if c.alg == 's' then return math.max(s.ts[#s.ts] + c.window - now, 0) end
  return ceil_div(debt(s, c), c.limit)
end

local function retry_after(s, c, k)
  if k > capacity(c) then return -1 end
  if fits(s, c, k) or s == nil then return 0 end
  if c.alg == 'f' then return math.max(s.stop - now, 0) end
  if c.alg == 's' then
    local need = s.total + k - c.limit
    local freed, wait = 0, 0
    for i = 1, #s.ts do
      freed = freed + s.cs[i]
      wait = math.max(s.ts[i] + c.window - now, 0)
      if freed >= need then break end
    end
    return wait
  end
  local over = debt(s, c) + k * c.window - c.burst * c.window
  if over <= 0 then return 0 end
  return ceil_div(over, c.limit)
end

local function expires_at(s, c)
  if c.alg == 'f' then return s.stop end
  if c.alg == 's' then return s.ts[#s.ts] + c.window end
  if s.frac > 0 then return s.us + 1 end
  return s.us
end

local function encode(s, c)
  if c.alg == 'f' then return struct.pack('<dd', s.count, s.stop) end
  if c.alg == 't' then return struct.pack('<dd', s.us, s.frac) end
  local parts = {}
  for i = 1, #s.ts do parts[i] = struct.pack('<dd', s.ts[i], s.cs[i]) end
  return table.concat(parts)
end

-- Slots: loaded state, running state, whether a charge changed it.
local loaded, after, dirty, slot_params = {}, {}, {}, {}
for i = 1, n do
  local c = charges[i]
  if slot_params[c.slot] == nil then
    slot_params[c.slot] = c
    loaded[c.slot] = load(KEYS[c.slot], c)
    after[c.slot] = copy(loaded[c.slot])
    dirty[c.slot] = false
  end
end

local allowed, applied = {}, {}
for i = 1, n do
  local c = charges[i]
  local ok = fits(after[c.slot], c, check_cost(c))
  allowed[i] = ok
  applied[i] = false
  if ok or c.overdraft or count_rejected then
    if c.cost > 0 then
      after[c.slot] = charge(after[c.slot], c)
      dirty[c.slot] = true
      applied[i] = true
    end
  end
end

-- The group's verdict (src/algorithm.rs batch_verdict). Quota descriptors deny only when all
-- of the request's quota descriptors are over, which this group can judge only if it holds
-- them all; otherwise the caller judges and refunds.
local hard, overdraft_over = false, false
local quota_seen, quota_count = {}, 0
for i = 1, n do
  local c = charges[i]
  if c.role == 'e' and not allowed[i] then
    if c.overdraft then overdraft_over = true else hard = true end
  elseif c.role == 'q' then
    if quota_seen[c.descriptor] == nil then
      quota_seen[c.descriptor] = true
      quota_count = quota_count + 1
    end
    if allowed[i] then quota_seen[c.descriptor] = false end
  end
end
if quota_count > 0 and quota_count == quota_total then
  local all_over = true
  for _, over in pairs(quota_seen) do
    if not over then all_over = false end
  end
  if all_over then hard = true end
end

local commit = {}
for slot, c in pairs(slot_params) do
  local yes
  if dry then
    yes = false
  elseif count_rejected then
    yes = true
  elseif hard then
    yes = false
  elseif overdraft_over then
    yes = c.overdraft
  else
    yes = true
  end
  commit[slot] = yes and dirty[slot]
  if commit[slot] then
    local s = after[slot]
    if s == nil then
      redis.call('DEL', KEYS[slot])
    else
      local ttl_ms = math.max(math.ceil((expires_at(s, c) - now) / 1000), 1)
      redis.call('SET', KEYS[slot], encode(s, c), 'PX', ttl_ms)
    end
  end
end

local out = { now }
for i = 1, n do
  local c = charges[i]
  local s = loaded[c.slot]
  if commit[c.slot] then s = after[c.slot] end
  local wait
  if allowed[i] then wait = reset_after(s, c) else wait = retry_after(s, c, check_cost(c)) end
  out[#out + 1] = allowed[i] and 1 or 0
  out[#out + 1] = remaining(s, c)
  out[#out + 1] = wait
  out[#out + 1] = (applied[i] and commit[c.slot]) and 1 or 0
end
return out
