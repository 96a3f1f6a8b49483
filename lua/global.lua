-- tollgate: one limit across regions (docs/multi-region.md). Every call names its operation
-- in ARGV[1]; the keys of one call share a hash tag ({g|<limit id>}). Times are microseconds
-- on this Redis's clock (TIME), as decimal strings.

local op = ARGV[1]

-- As a decimal string (tostring would write a large number in exponent form).
local function now_us()
  local t = redis.call('TIME')
  return string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end

-- Home: the authority's state, the time it is read at, and 1 when this asker (ARGV[2]) now
-- holds it until its write (KEYS[2], for ARGV[3] ms), 0 when another asker does. An asker
-- that finds it held waits its turn in a queue (KEYS[3], by first arrival): the write that
-- ends a hold hands it to the longest waiting, so a far region's ask, a round trip per try,
-- is not overtaken forever by near regions asking every period.
if op == 'read' then
  local holder = redis.call('GET', KEYS[2])
  if holder and holder ~= ARGV[2] then
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[3], 'NX', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
      ARGV[2])
    redis.call('PEXPIRE', KEYS[3], 4 * tonumber(ARGV[3]))
    return {now_us(), '', 0}
  end
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return {now_us(), redis.call('GET', KEYS[1]) or '', 1}
end

-- Home: ends asker ARGV[5]'s hold (KEYS[2]) and hands it to the longest waiting asker in
-- the queue (KEYS[3]) that asked within the last ARGV[6] ms, for ARGV[7] ms.
local function hand_on()
  if redis.call('GET', KEYS[2]) ~= ARGV[5] then return end
  redis.call('DEL', KEYS[2])
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms - tonumber(ARGV[6]))
  local next = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if next then
    redis.call('ZREM', KEYS[3], next)
    redis.call('SET', KEYS[2], next, 'PX', ARGV[7])
  end
end

-- Home: the authority's new state, only if nobody wrote it since `read` (ARGV[2] the state
-- read, '' for none; ARGV[3] the new one; ARGV[4] its time to live, ms): the time it was
-- written, or '' when another write came first. The asker's hold ends (`hand_on`).
if op == 'cas' then
  hand_on()
  local cur = redis.call('GET', KEYS[1]) or ''
  if cur ~= ARGV[2] then return '' end
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  return now_us()
end

-- A region: an instance adds what it admitted and refused (ARGV[2], ARGV[3]) to the demand
-- the refill task reads.
-- KEYS[2] the pool, which learns the lease counter's key (ARGV[4]) once.
if op == 'flush' then
  redis.call('HINCRBY', KEYS[1], 'a', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'r', ARGV[3])
  -- ARGV[5]: the largest cost of one request among them (absent from 0.2.0's instances).
  if ARGV[5] and tonumber(ARGV[5]) > tonumber(redis.call('HGET', KEYS[1], 'm') or '0') then
    redis.call('HSET', KEYS[1], 'm', ARGV[5])
  end
  redis.call('PEXPIRE', KEYS[1], 60000)
  if ARGV[4] ~= '' then redis.call('HSETNX', KEYS[2], 'k', ARGV[4]) end
  return 1
end

-- A region gives units back: KEYS[1] is its lease counter for the window (the decision script's
-- fixed window: count and end, packed), ARGV[2] the units to give back, ARGV[3] what the
-- region holds for the window, ARGV[4] the counter's end if it has none (µs). The units are
-- counted as spent, so no instance can spend them whatever view of the pool it holds; at
-- most what is unspent. Returns the units given back.
if op == 'burn' then
  local want, held, stop = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local count = 0
  local raw = redis.call('GET', KEYS[1])
  if raw then count, stop = struct.unpack('<dd', raw) end
  local give = math.max(0, math.min(want, held - count))
  if give == 0 then return 0 end
  if raw then
    redis.call('SET', KEYS[1], struct.pack('<dd', count + give, stop), 'KEEPTTL')
  else
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[1], struct.pack('<dd', give, stop), 'PX',
      math.max(1000, math.floor((stop - now) / 1000) + 60000))
  end
  return give
end

-- A region: what its lease counter (KEYS[1]) holds, spent and given back (0: none).
if op == 'count' then
  local raw = redis.call('GET', KEYS[1])
  if not raw then return 0 end
  local count = struct.unpack('<dd', raw)
  return math.floor(count)
end

-- The units a region gave back of window ARGV[2] (ARGV[3]), recorded beside its grants.
if op == 'gave' then
  return redis.call('HINCRBY', KEYS[1], 'b:' .. ARGV[2], ARGV[3])
end

-- A region: the refill task takes the demand added since it last looked (admitted, refused,
-- the largest cost of one request), and the time.
if op == 'take' then
  local v = redis.call('HMGET', KEYS[1], 'a', 'r', 'm')
  redis.call('DEL', KEYS[1])
  return {now_us(), v[1] or '0', v[2] or '0', v[3] or '0'}
end

-- A region: the refill task's lock (ARGV[2] the instance, ARGV[3] its time to live, ms): 1
-- held (taken or kept), 0 another instance holds it.
if op == 'lock' then
  local holder = redis.call('GET', KEYS[1])
  if holder == ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return 1
  end
  if holder then return 0 end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end

-- A region: a grant added to the pool for window ARGV[2]: ARGV[3] units, spendable from
-- ARGV[4] (0: at once) until ARGV[5]. Units add up; a window starts at its earliest start and
-- lapses at its latest lapse (each a bound the authority's window holds). Windows thirty
-- before it are dropped. ARGV[6]: the pool's time to live, ms.
if op == 'grant' then
  local w = tonumber(ARGV[2])
  local field = 'w:' .. ARGV[2]
  local units, from, till = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local cur = redis.call('HGET', KEYS[1], field)
  if cur then
    local u, f, t = string.match(cur, '^(%d+) (%d+) (%d+)$')
    units = units + tonumber(u)
    from = math.min(from, tonumber(f))
    till = math.max(till, tonumber(t))
  end
  redis.call('HSET', KEYS[1], field, string.format('%.0f %.0f %.0f', units, from, till))
  local all = redis.call('HKEYS', KEYS[1])
  for _, f in ipairs(all) do
    local n = tonumber(string.sub(f, 3))
    if n and n + 30 <= w then redis.call('HDEL', KEYS[1], f) end
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return units
end

-- A region cut off from home: its safe share of window ARGV[2] (ARGV[3] units, from ARGV[4]
-- until ARGV[5]), once per window whoever of the region's instances holds the lock.
if op == 'safe' then
  local set = redis.call('HSETNX', KEYS[1], 's:' .. ARGV[2],
    string.format('%.0f %.0f %.0f', tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])))
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return set
end

-- A region: home counted ARGV[3] units of window ARGV[2] spent past the region's grants (a
-- settle's excess, in all so far): they become the region's, beside its grants.
if op == 'owe' then
  local field = 'x:' .. ARGV[2]
  local cur = tonumber(redis.call('HGET', KEYS[1], field) or '0')
  if tonumber(ARGV[3]) > cur then redis.call('HSET', KEYS[1], field, ARGV[3]) end
  return 1
end

-- A region: every instance reads the pool (and the time) each period.
if op == 'pool' then
  return {now_us(), redis.call('HGETALL', KEYS[1])}
end

return redis.error_reply('tollgate global: unknown operation ' .. tostring(op))
