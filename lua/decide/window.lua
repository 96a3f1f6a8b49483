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
