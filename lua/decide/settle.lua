  ---------------------------------------------------------------- a reservation's steps
  -- What a reservation needs of the general driver, made by the first call that reserves or
  -- settles (`reserving`): { settle = a settle's step, record = a reservation's record }.
  local reserving
  local function reservation_steps()
    -- On every counter the record names, the reservation becomes the actual use
    -- (algorithm::reservation::settle): what the estimate over-charged is refunded where it
    -- landed, what the actual exceeds it by lands now, as overdraft; a charge is allowed when
    -- the record named its counter; the record goes, so a second settle finds nothing.
    local function settle(charges, record)
      rsv = rsv or reservations()
      local entries = rsv.read(record)
      for i = 1, n do
        local ch = charges[i]
        local c = ch.c
        local e
        for j = 1, #entries do
          if entries[j].key == c.key then
            e = table.remove(entries, j)
            break
          end
        end
        if e and c.alg ~= CONCURRENCY then
          ch.allowed = true
          local back = e.added - ch.cost
          if back > 0 then
            refund(c, ch, back, e.mark1, e.mark2)
            if c.alg == TOKEN_BUCKET then c.after = c.s end
          end
          local excess = ch.cost - e.cost
          -- A fair share's tenant whose window has ended is not active in the new one: its
          -- excess lands on the pool only (reservation::settle).
          if excess > 0 and not (ch.fair > 0 and c.stop == 0) then
            ch.landed, ch.mark1, ch.mark2 = land(c, ch, excess)
            -- At the usage cap nothing lands, and nothing is written.
            if ch.landed > 0 then write(c) else ch.mark1, ch.mark2 = 0, 0 end
          end
        end
      end
      redis.call('DEL', record)
    end

    -- A reservation's record of what landed (none when nothing did), for record_ms.
    local function record_write(charges, record)
      local parts = {}
      for i = 1, n do
        local ch = charges[i]
        if ch.landed > 0 and ch.alg ~= CONCURRENCY then
          parts[#parts + 1] = struct.pack('<ddddd', ch.cost, ch.landed, ch.mark1, ch.mark2,
            #ch.c.key) .. ch.c.key
        end
      end
      if #parts > 0 then
        redis.call('SET', record, struct.pack('<d', now + record_ms * 1000) ..
          table.concat(parts), 'PX', record_ms + 1000)
      end
    end

    return { settle = settle, record = record_write }
  end
