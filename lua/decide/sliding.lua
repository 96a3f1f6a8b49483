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

