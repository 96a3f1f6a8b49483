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

