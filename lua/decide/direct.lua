-- Enforced window charges (no overdraft), each on its own key, deciding, reserving or (dry)
-- only evaluating: one charge, the group of a hierarchical limit (per tenant, per tenant and
-- model), or on one Redis node a whole request. What general() answers for them, without its
-- per-key tables and verdict: read every counter, then every charge lands or (one does not
-- fit) none does. A reservation then records what landed, as general() does. nil for any
-- other call. Every key of a call has a charge, so as many keys as charges (and the record's
-- key) means one charge per key.
local function direct()
  if mode == SETTLE then
    rsv = rsv or reservations()
    return rsv.settle()
  end
  if mode == RESERVE then
    if nkeys ~= n + 1 then return nil end
  elseif nkeys ~= n or not (mode == DECIDE or mode == DRY_RUN) then
    return nil
  end
  if n == 1 then
    -- The commonest call of all, with no table.
    local ki, alg, limit, window, b, overdraft, cost, role, _, pool, _, fair =
      struct.unpack('<dddddddddddd', P, FIRST)
    if overdraft ~= 0 or role ~= ENFORCED or alg >= TOKEN_BUCKET or pool ~= 0 or fair ~= 0 then
      return nil
    end
    if alg == FIXED_WINDOW then window = fixed_fresh(window, b) end
    local key = KEYS[KO + ki]
    local used, stop, from, len, lt, lc = window_read(key, alg, window)
    local lands = mode ~= DRY_RUN and used + math.max(cost, 1) <= limit
    local a = settle(key, alg, limit, window, cost, used, stop, from, len, lt, lc, lands)
    if mode == RESERVE and lands and cost > 0 then
      redis.call('SET', KEYS[KO + 2], struct.pack('<dddddd', now + record_ms * 1000, cost, cost,
        struct.unpack('<d', a, 33), 0, #key) .. key, 'PX', record_ms + 1000)
    end
    return '=' .. struct.pack('<d', now) .. a
  end
  local charges = {}
  local all = mode ~= DRY_RUN
  for i = 1, n do
    local ki, alg, limit, window, b, overdraft, cost, role, _, pool, _, fair =
      struct.unpack('<dddddddddddd', P, FIRST + (i - 1) * CHARGE)
    if overdraft ~= 0 or role ~= ENFORCED or alg >= TOKEN_BUCKET or pool ~= 0 or fair ~= 0 then
      return nil
    end
    if alg == FIXED_WINDOW then window = fixed_fresh(window, b) end
    local ch = { key = KEYS[KO + ki], alg = alg, limit = limit, window = window, cost = cost,
      used = 0, stop = 0, head = 0, len = 0, lt = false, lc = 0 }
    ch.used, ch.stop, ch.head, ch.len, ch.lt, ch.lc = window_read(ch.key, alg, window)
    if ch.used + math.max(cost, 1) > limit then all = false end
    charges[i] = ch
  end
  local out = { '=' .. struct.pack('<d', now) }
  for i = 1, n do
    local ch = charges[i]
    out[i + 1] = settle(ch.key, ch.alg, ch.limit, ch.window, ch.cost, ch.used, ch.stop, ch.head,
      ch.len, ch.lt, ch.lc, all)
  end
  if mode == RESERVE and all then
    -- The record of what landed (none when nothing did), for record_ms.
    local parts = {}
    for i = 1, n do
      local added, mark = struct.unpack('<dd', out[i + 1], 25)
      if added > 0 then
        local key = charges[i].key
        parts[#parts + 1] = struct.pack('<ddddd', charges[i].cost, added, mark, 0, #key) .. key
      end
    end
    if #parts > 0 then
      redis.call('SET', KEYS[KO + nkeys], struct.pack('<d', now + record_ms * 1000) ..
        table.concat(parts), 'PX', record_ms + 1000)
    end
  end
  return table.concat(out)
end

