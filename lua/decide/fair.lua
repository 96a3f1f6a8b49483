  ---------------------------------------------------------------- fair share (fair_share:)
  -- A pool's tenant is charged beside the pool, its charge's `fair` its floor (> 0), and the
  -- pool's count of active tenants right after it (`fair` -1): batch::touch_tenants and
  -- batch::share. Made by the first call with a tenant charge (`fair`, main.lua's note on
  -- functions made per call): { touch = make tenants active, fits = a tenant's share }.
  local fair
  local function fair_share()
    -- A tenant not yet active in its window becomes active, whatever the verdict: its counter
    -- starts empty, and the pool's count of active tenants (the next charge's counter) adds
    -- one while under its limit.
    local function touch(charges)
      for i = 1, n - 1 do
        local ch, a = charges[i], charges[i + 1]
        local c = ch.c
        if ch.fair > 0 and ch.cost > 0 and a.fair < 0 and ch.alg == FIXED_WINDOW
            and a.alg == FIXED_WINDOW and c.stop == 0 and c.added == 0 and a.c.used < a.limit then
          -- A window started by a touch has its end now, and its key is new (write()).
          c.touched, c.stop, c.born = true, c.fresh, true
          a.c.used = a.c.used + 1
          a.c.touched = true
          if a.c.stop == 0 then a.c.stop, a.c.born = a.c.fresh, true end
        end
      end
    end

    -- Whether tenant charge i fits k more within its share: the pool ÷ the active tenants,
    -- at least the floor.
    local function fits_share(charges, i, k)
      local ch = charges[i]
      local active = 1
      if i < n and charges[i + 1].fair < 0 then
        active = math.max(charges[i + 1].c.used, 1)
      end
      local share = math.max(math.floor(ch.limit / active), ch.fair)
      return ch.c.used + ch.c.added + k <= share
    end

    return { touch = touch, fits = fits_share }
  end
