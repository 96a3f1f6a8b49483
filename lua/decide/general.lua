  ---------------------------------------------------------------- the general driver
  -- Decides (or refunds) the call: batch::evaluate then batch::report, step by step.

  -- RELEASE and RENEW: the call's slot id frees its slots, or moves their holds' end.
  local function slots_call(charges)
    for i = 1, n do
      local ch = charges[i]
      local c = ch.c
      ch.allowed = true
      if c.alg == CONCURRENCY then
        local _, h = slots_find(c.held)
        ch.allowed = h ~= nil
        if mode == RELEASE then
          if h then
            ch.landed, ch.mark1, ch.mark2 = h[3], slot_hi, slot_lo
            refund(c, ch, h[3], slot_hi, slot_lo)
          end
        elseif h then
          h[4] = now + c.window
          slots_write(c.key, c.held)
        end
      end
    end
  end

  -- REFUND and UNRESERVE: each charge gives back what the call says, where its marks say.
  local function refund_call(charges, record)
    local b = FIRST + n * CHARGE
    for i = 1, n do
      local ch = charges[i]
      local allowed, kept, amount, mark1, mark2 =
        struct.unpack('<ddddd', P, b + (i - 1) * REFUNDED)
      ch.allowed, ch.landed = allowed == 1, kept
      if amount > 0 then refund(ch.c, ch, amount, mark1, mark2) end
      if kept > 0 then ch.mark1, ch.mark2 = mark1, mark2 end
    end
    if mode == UNRESERVE then redis.call('DEL', record) end
  end

  -- Whether each charge fits (its tenant's share, its class's borrowing), landing it in the
  -- call's running state when it fits, is overdraft, or counts anyway.
  local function fit_charges(charges, counters)
    local count_rejected = mode == COUNT_REJECTED
    for i = 1, n do
      local ch = charges[i]
      if ch.fair > 0 then
        ch.allowed = fair.fits(charges, i, check_cost(ch))
      else
        ch.allowed = fits(ch.c, ch, check_cost(ch))
      end
      if not ch.allowed and ch.borrow > 0 then
        shares = shares or class_shares()
        ch.allowed = shares.borrows(ch, counters)
      end
      if ch.allowed or ch.overdraft or (count_rejected and ch.alg ~= CONCURRENCY) then
        ch.landed, ch.mark1, ch.mark2 = land(ch.c, ch, ch.cost)
      end
    end
  end

  -- DECIDE, COUNT_REJECTED, DRY_RUN and RESERVE: every charge decided, and what landed kept
  -- where the verdict lets it stay (algorithm::batch::evaluate).
  local function decide_call(charges, counters, nc, record, tenants)
    -- What every charge of the call would bring each counter to (batch::evaluate's totals).
    for i = 1, n do
      local c = charges[i].c
      c.total = (c.total or 0) + charges[i].cost
    end
    if tenants then
      fair = fair or fair_share()
      fair.touch(charges)
    end
    fit_charges(charges, counters)
    -- A counter keeps what landed on it when the verdict lets its charges stay.
    local v = verdict(charges)
    for ki = 1, nc do
      local c = counters[ki]
      local stays = mode == COUNT_REJECTED or v == 0 or (v == 1 and c.overdraft)
      c.commit = stays and mode ~= DRY_RUN and c.added > 0
      if c.commit then
        write(c)
      else
        c.added = 0
        c.after = c.s
        -- A tenant's first sight, and the active count it joined, stay whatever the verdict.
        if c.touched and mode ~= DRY_RUN then write(c) end
      end
    end
    for i = 1, n do
      local ch = charges[i]
      if not ch.c.commit then ch.landed, ch.mark1, ch.mark2 = 0, 0, 0 end
    end
    if mode == RESERVE then
      reserving = reserving or reservation_steps()
      reserving.record(charges, record)
    end
  end

  local function general()
    -- The record key, in the modes that have one: the call's last key, after its counters.
    local nc, record = nkeys, nil
    if mode == RESERVE or mode == SETTLE or mode == UNRESERVE then
      nc, record = nkeys - 1, KEYS[KO + nkeys]
    end
    -- Per charge: its limit, cost and role, its counter c (one per key, opened once), and
    -- then whether it fit and what it landed.
    local charges, counters, tenants = {}, {}, false
    for i = 1, n do
      local ki, alg, limit, window, burst, overdraft, cost, role, wait, pool, borrow, fair_ =
        struct.unpack('<dddddddddddd', P, FIRST + (i - 1) * CHARGE)
      local c = counters[ki]
      if c == nil then
        c = open(ki, alg, window, burst, overdraft == 1)
        counters[ki] = c
      end
      if alg ~= TOKEN_BUCKET then burst = limit end
      -- A token bucket's unit of time: window / limit = q + r / limit.
      local q = math.floor(window / limit)
      charges[i] = { c = c, alg = alg, limit = limit, window = window, burst = burst,
        overdraft = overdraft == 1, cap = burst * CAP, q = q, r = window - q * limit,
        cost = cost, role = role, wait = wait, pool = pool, borrow = borrow, fair = fair_,
        allowed = false,
        landed = 0, mark1 = 0, mark2 = 0 }
      tenants = tenants or fair_ > 0
    end

    if mode == RELEASE or mode == RENEW then
      slots_call(charges)
    elseif mode == REFUND or mode == UNRESERVE then
      refund_call(charges, record)
    elseif mode == SETTLE then
      reserving = reserving or reservation_steps()
      reserving.settle(charges, record)
    else
      decide_call(charges, counters, nc, record, tenants)
    end

    -- The answers (batch::report): what a retry of the request needs on each key is the cost
    -- of its charges that did not land.
    for i = 1, n do
      local ch = charges[i]
      if ch.landed == 0 and not ch.overdraft then ch.c.need = ch.c.need + ch.cost end
    end
    local out = { '=', struct.pack('<d', now) }
    for i = 1, n do
      local ch = charges[i]
      local k = check_cost(ch)
      if not ch.allowed and ch.landed == 0 and not ch.overdraft then
        k = math.max(k, ch.c.need)
      end
      out[i + 2] = answer(ch.c, ch, ch.allowed, k, ch.landed, ch.mark1, ch.mark2)
    end
    return table.concat(out)
  end

  return general
end
