  ---------------------------------------------------------------- class shares (shares:)
  -- A class is charged beside its pool: its charge's limit its guarantee, `pool` the pool's
  -- key index and `borrow` the pool's borrow_until (batch::borrows). Made by the first call
  -- that needs it (`shares`): { borrows = may a class past its guarantee borrow, wait = when a
  -- refused class fits again }.
  local shares
  local function class_shares()
    -- Whether a class past its guarantee may borrow: its pool, with every charge of the
    -- call, stays within borrow_until.
    local function borrows(ch, counters)
      local pool = counters[ch.pool]
      return pool ~= nil and pool.used + pool.total <= ch.borrow
    end

    -- When a refused class fits again: by borrowing, when the window ends at the latest;
    -- never (-1) when k is past both its guarantee and what it may borrow.
    local function wait(c, p, k)
      if k > math.max(p.limit, p.borrow) then return -1 end
      return fixed_wait(p.limit, c.fresh, c.used, c.stop, true, k)
    end

    return { borrows = borrows, wait = wait }
  end
