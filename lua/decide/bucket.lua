  ---------------------------------------------------------------- token bucket (GCRA)
  -- A bucket's state: <us, frac, born, seq, dropped> then <seq, debt_us, debt_frac>* (see the
  -- top): its theoretical arrival time tat = us + frac / limit, which charge started it and
  -- how many it has seen, and the debts its last HISTORY charges found, for exact refunds
  -- (algorithm::token_bucket). Times are pairs (whole µs, a fraction in 1/limit µs), so a unit
  -- of time, window / limit, is exact (q + r / limit).

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

  local function bucket_read(c)
    local raw = redis.call('GET', c.key)
    if not raw then return nil end
    local tu, tf, born, seq, dropped, pos = struct.unpack('<ddddd', raw)
    -- A tat at or before now is a full bucket.
    if tu < now or (tu == now and tf == 0) then return nil end
    return { tu = tu, tf = tf, born = born, seq = seq, dropped = dropped,
      hist = string.sub(raw, pos) }
  end

  -- Whether k fits wait µs from now (0: now; token_bucket::fits_within).
  local function bucket_fits(s, p, k, wait)
    if k > p.burst then return false end
    local du, df = debt(s, p)
    local ku, kf = ptimes(p, k)
    local nu, nf = padd(p, du, df, ku, kf)
    local bu, bf = ptimes(p, p.burst)
    return pcmp(nu, nf, bu + wait, bf) <= 0
  end

  local function bucket_land(c, p, cost)
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
  local function bucket_store(c, s)
    c.s = s
    if s == nil then
      redis.call('DEL', c.key)
    else
      redis.call('SET', c.key, struct.pack('<ddddd', s.tu, s.tf, s.born, s.seq, s.dropped) ..
        s.hist, 'PX', ttl_ms(pceil(s.tu, s.tf)))
    end
  end

  local function bucket_refund(c, p, amount, born, seq)
    local s = c.s
    if s == nil then return bucket_store(c, nil) end
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
    if pcmp(s.tu, s.tf, now, 0) <= 0 then return bucket_store(c, nil) end
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
    bucket_store(c, s)
  end

  local function bucket_remaining(s, p)
    local du, df = debt(s, p)
    return math.max(p.burst - units(p, du, df), 0)
  end

  local function bucket_reset_after(s, p)
    return pceil(debt(s, p))
  end

  local function bucket_retry_after(s, p, k)
    if bucket_fits(s, p, k, 0) then return 0 end
    local du, df = debt(s, p)
    local ku, kf = ptimes(p, k)
    local nu, nf = padd(p, du, df, ku, kf)
    local bu, bf = ptimes(p, p.burst)
    return pceil(psub(p, nu, nf, bu, bf))
  end

