-- tollgate's operator script: read the counters of one placement group without writing, or
-- reset them (GET /counters, POST /counters/reset). Never on a decision's path.
--
-- KEYS: the group's counter keys (on a cluster they share one hash tag, so one slot).
-- ARGV[1]: 'read' or 'reset'. ARGV[2]: now in µs, or '' to use Redis TIME (as the decision
--   script does under --clock redis). For 'reset', ARGV[2 + i] is KEYS[i]'s algorithm code and
--   window in µs, 'code:window' (src/store/redis/scripts/script.rs `layout`).
-- Returns now, then per key its stored bytes (nil when there is no key): as they are
--   ('read'), or as they were just before the reset ('reset').
--
-- A reset is src/algorithm/inspect.rs `reset` over the state formats of the decision script (lua/decide/; its
-- header): a fixed window is kept empty, ending 1 µs earlier; a sliding window becomes one
-- empty entry in the granule after its newest; anything else (expired state included) is
-- deleted. So no refund of a charge made before the reset (a mark: a window end, a granule, a
-- bucket's birth, a slot id) finds the state counted after it.

local FIXED_WINDOW, SLIDING_WINDOW = 0, 1
local HEADER = 16

local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- As the decision script (lua/decide/call.lua): keys outlive their state by 1 s.
local function ttl_ms(expires)
  return math.max(math.ceil((expires - now) / 1000), 0) + 1000
end

local out = { now }
if ARGV[1] == 'read' then
  for i = 1, #KEYS do
    out[i + 1] = redis.call('GET', KEYS[i])
  end
  return out
end
if ARGV[1] ~= 'reset' then
  return redis.error_reply('tollgate admin: unknown operation ' .. tostring(ARGV[1]))
end

for i = 1, #KEYS do
  local key = KEYS[i]
  local alg, window = string.match(ARGV[2 + i] or '', '^(%d+):(%d+)$')
  alg, window = tonumber(alg), tonumber(window)
  local raw = redis.call('GET', key)
  if raw and alg == FIXED_WINDOW and #raw == 16 then
    local _, stop = struct.unpack('<dd', raw)
    if stop - 1 > now then
      redis.call('SET', key, struct.pack('<dd', 0, stop - 1), 'PX', ttl_ms(stop - 1))
    else
      -- Over (or in its last µs): nothing to keep, and a clock a little behind must not
      -- find it live again.
      redis.call('DEL', key)
    end
  elseif raw and alg == SLIDING_WINDOW and #raw >= HEADER then
    local _, head = struct.unpack('<dd', raw)
    -- The newest entry (stamps only grow: the last), and whether it is still in the window.
    local newest
    if head + 16 <= #raw then newest = struct.unpack('<d', raw, #raw - 15) end
    if newest and newest + window > now then
      local g = math.max(math.floor(window / 1000), 1000)
      local fence = (math.floor(math.max(newest, now) / g) + 1) * g + g - 1
      redis.call('SET', key, struct.pack('<dddd', 0, HEADER, fence, 0), 'PX',
        ttl_ms(fence + window))
    else
      redis.call('DEL', key)
    end
  elseif raw then
    -- A token bucket or a concurrency limit: its next state is born afresh.
    redis.call('DEL', key)
  end
  -- What it held: Rust reads the usage a reset cleared from these bytes.
  out[i + 1] = raw
end
return out
