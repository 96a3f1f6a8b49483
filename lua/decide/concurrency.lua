  ---------------------------------------------------------------- concurrency: slots held
  -- The slots held, as entries { hi, lo, units, expires } in the order taken
  -- (algorithm::concurrency).

  -- Reads the live ones and what they hold.
  local function slots_read(key)
    local raw = redis.call('GET', key)
    local held, used = {}, 0
    if raw then
      for pos = 1, #raw, 32 do
        local hi, lo, units, expires = struct.unpack('<dddd', raw, pos)
        if expires > now then
          held[#held + 1] = { hi, lo, units, expires }
          used = used + units
        end
      end
    end
    return held, used
  end

  -- The entry of the call's slot id, or nil.
  local function slots_find(held)
    for i = 1, #held do
      local h = held[i]
      if h[1] == slot_hi and h[2] == slot_lo then return i, h end
    end
    return nil
  end

  -- Writes the entries held (none: the key goes); its expiry is the last hold's end.
  local function slots_write(key, held)
    if #held == 0 then
      redis.call('DEL', key)
      return
    end
    local parts, last = {}, 0
    for i = 1, #held do
      local h = held[i]
      parts[i] = struct.pack('<dddd', h[1], h[2], h[3], h[4])
      last = math.max(last, h[4])
    end
    redis.call('SET', key, table.concat(parts), 'PX', ttl_ms(last))
  end

  -- Until enough holds end for k more to fit.
  local function slots_wait(held, limit, used, k)
    local need = used + k - limit
    if need <= 0 then return 0 end
    local ends = {}
    for i = 1, #held do ends[i] = held[i] end
    table.sort(ends, function(x, y)
      if x[4] ~= y[4] then return x[4] < y[4] end
      return x[3] < y[3]
    end)
    local freed = 0
    for i = 1, #ends do
      freed = freed + ends[i][3]
      if freed >= need then return math.max(ends[i][4] - now, 0) end
    end
    return 0
  end

