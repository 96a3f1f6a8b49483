  ---------------------------------------------------------------- a counter, any algorithm
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
      c.s = bucket_read(c)
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
    if p.alg == TOKEN_BUCKET then return bucket_fits(c.after, p, k, p.wait) end
    return c.used + c.added + k <= p.limit
  end

  -- Lands up to cost (stopping at p's usage cap) in the call's running state; written only by
  -- write(). Returns added, mark1, mark2.
  local function land(c, p, cost)
    if cost == 0 then return 0, 0, 0 end
    if p.alg == TOKEN_BUCKET then return bucket_land(c, p, cost) end
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
      bucket_store(c, c.after)
    end
  end

  -- Refunds `amount` units a charge landed where its marks say (algorithm::refund), in Redis
  -- and in the counter. As the memory store, a refund writes the counter back as it stands
  -- now: a key whose state has ended goes, a log loses what it forgot.
  local function refund(c, p, amount, mark1, mark2)
    if c.alg == TOKEN_BUCKET then return bucket_refund(c, p, amount, mark1, mark2) end
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
      remaining = bucket_remaining(c.s, p)
      if allowed then
        wait = bucket_reset_after(c.s, p)
      elseif k > p.burst then
        wait = -1
      else
        wait = bucket_retry_after(c.s, p, k)
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
        shares = shares or class_shares()
        wait = shares.wait(c, p, k)
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

