
---------------------------------------------------------------- a reservation's record
-- What a settle needs, made by reservations() for the first call that settles (functions made
-- on every call cost every call: see the top): { read = the record's entries, settle = the
-- settle of enforced fixed windows }.
local rsv
local function reservations()
  -- As build()'s CAP: usage stops adding at this many times a limit's capacity.
  local CAP = 101
  -- A reservation's record: <expires> then per counter it charged, { key, cost, added, mark1,
  -- mark2 }. One that has expired at the call's now holds nothing.
  local function record_read(key)
    local raw = redis.call('GET', key)
    local entries = {}
    if raw and struct.unpack('<d', raw) > now then
      local pos = 9
      while pos <= #raw do
        local cost, added, mark1, mark2, len, at = struct.unpack('<ddddd', raw, pos)
        entries[#entries + 1] = { key = string.sub(raw, at, at + len - 1), cost = cost,
          added = added, mark1 = mark1, mark2 = mark2 }
        pos = at + len
      end
    end
    return entries
  end

  -- A reservation's settle on enforced fixed windows (calendar ones too), each on its own key:
  -- what general() does for them (algorithm::reservation::settle), without its tables. nil for
  -- any other settle.
  local function direct_settle()
    if nkeys ~= n + 1 then return nil end
    for i = 1, n do
      local _, alg, _, _, _, _, _, role, _, pool, _, fair =
        struct.unpack('<dddddddddddd', P, FIRST + (i - 1) * CHARGE)
      if alg ~= FIXED_WINDOW or role ~= ENFORCED or pool ~= 0 or fair ~= 0 then return nil end
    end
    local record = KEYS[KO + nkeys]
    local entries = record_read(record)
    local out = { '=' .. struct.pack('<d', now) }
    for i = 1, n do
      local ki, _, limit, window, b, overdraft, cost = struct.unpack('<ddddddd', P,
        FIRST + (i - 1) * CHARGE)
      local key = KEYS[KO + ki]
      local fresh = fixed_fresh(window, b)
      local used, stop = fixed_read(key)
      local e
      for j = 1, #entries do
        if entries[j].key == key then e = entries[j]; break end
      end
      local landed, mark = 0, 0
      if e then
        -- The unused part back, where it landed (a window that has ended since gives nothing).
        local back = e.added - cost
        if back > 0 and (stop == 0 or stop == e.mark1) then
          used = used - math.min(back, used)
          if used == 0 then
            stop = 0
            redis.call('DEL', key)
          else
            redis.call('SET', key, struct.pack('<dd', used, stop), 'KEEPTTL')
          end
        end
        -- The excess lands now, past the limit if need be, up to the usage cap.
        local excess = math.min(cost - e.cost, math.max(limit * CAP - used, 0))
        if excess > 0 then
          used, stop = fixed_land(key, fresh, used, stop, excess)
          landed, mark = excess, stop
        end
      end
      local k = math.max(cost, 1)
      if overdraft ~= 0 then k = 1 end
      out[i + 1] = struct.pack('<dddddd', e and 1 or 0, math.max(limit - used, 0),
        fixed_wait(limit, fresh, used, stop, e ~= nil, k), landed, mark, 0)
    end
    redis.call('DEL', record)
    return table.concat(out)
  end

  return { read = record_read, settle = direct_settle }
end

