-- tollgate: undo charges that landed in one placement group when another group of the same
-- request denied it (src/store/redis.rs). Only subtracts what this request added, so
-- concurrent requests' charges stay.
--
-- KEYS: the counter keys.
-- ARGV[1]  the `now` the decide script charged at (µs)
-- ARGV[2]  number of refunds n; then 5 values each:
--          slot (1-based index into KEYS), algorithm (f|s|t), limit, window_us, cost

local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
for i = 1, n do
  local b = 2 + (i - 1) * 5
  local key = KEYS[tonumber(ARGV[b + 1])]
  local alg = ARGV[b + 2]
  local limit = tonumber(ARGV[b + 3])
  local window = tonumber(ARGV[b + 4])
  local cost = tonumber(ARGV[b + 5])
  local raw = redis.call('GET', key)
  if raw then
    if alg == 'f' then
      local count, stop = struct.unpack('<dd', raw)
      -- Only the window the charge landed in.
      if stop == now - (now % window) + window then
        count = count - cost
        if count <= 0 then
          redis.call('DEL', key)
        else
          redis.call('SET', key, struct.pack('<dd', count, stop), 'KEEPTTL')
        end
      end
    elseif alg == 't' then
      -- tat = us + frac / limit; subtract cost * window / limit exactly.
      local us, frac = struct.unpack('<dd', raw)
      local scaled = cost * window
      local q = math.floor(scaled / limit)
      local r = scaled - q * limit
      if r < 0 then q = q - 1; r = r + limit elseif r >= limit then q = q + 1; r = r - limit end
      us = us - q
      frac = frac - r
      if frac < 0 then frac = frac + limit; us = us - 1 end
      if us < now or (us == now and frac == 0) then
        redis.call('DEL', key)
      else
        redis.call('SET', key, struct.pack('<dd', us, frac), 'KEEPTTL')
      end
    else
      local parts, pos, left = {}, 1, cost
      while pos < #raw do
        local t, c
        t, c, pos = struct.unpack('<dd', raw, pos)
        if left > 0 and t == now then
          local take = math.min(c, left)
          c = c - take
          left = left - take
        end
        if c > 0 then parts[#parts + 1] = struct.pack('<dd', t, c) end
      end
      if #parts == 0 then
        redis.call('DEL', key)
      else
        redis.call('SET', key, table.concat(parts), 'KEEPTTL')
      end
    end
  end
end
return n
