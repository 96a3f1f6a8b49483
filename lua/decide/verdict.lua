  ---------------------------------------------------------------- the verdict
  -- The one denial rule (decision::verdict) over the call's charges: 0 admit, 1 overdraft
  -- only, 2 deny.
  local function verdict(charges)
    local over, hard = false, false
    local quota, quota_count = {}, 0
    for i = 1, n do
      local ch = charges[i]
      if not ch.allowed then
        if ch.role == ENFORCED then
          over = true
          if not ch.overdraft then hard = true end
        elseif ch.role >= QUOTA then
          if quota[ch.role] == nil then
            quota[ch.role] = false
            quota_count = quota_count + 1
          end
          if not ch.overdraft then quota[ch.role] = true end
        end
      end
    end
    if quota_total > 0 and quota_count == quota_total then
      over = true
      local all_hard = true
      for _, h in pairs(quota) do if not h then all_hard = false end end
      if all_hard then hard = true end
    end
    if not over then return 0 end
    if hard then return 2 end
    return 1
  end

  -- The cost a charge must fit (algorithm::check_cost): overdraft asks "anything left?";
  -- check-only asks the same, except under count rejected, where it fits while usage has not
  -- gone past the limit.
  local function check_cost(ch)
    if ch.overdraft then return 1 end
    if ch.cost == 0 and mode == COUNT_REJECTED then return 0 end
    return math.max(ch.cost, 1)
  end

