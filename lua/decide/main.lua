
---------------------------------------------------------------- a call, a batch
-- Decides the call whose keys start after KEYS[ko], from its packed numbers p.
local function one(ko, p)
  KO, P = ko, p
  local t
  t, nkeys, mode, quota_total, n, slot_hi, slot_lo, record_ms = struct.unpack('<dddddddd', P)
  if t < 0 then
    if clock == nil then
      local time = redis.call('TIME')
      clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = clock
  else
    now = t
  end
  local r = direct()
  if r then return r end
  built = built or build()
  return built()
end

if #ARGV == 1 then return one(0, ARGV[1]) end

local replies, ko = {}, 0
for i = 1, #ARGV do
  local p = ARGV[i]
  local ok, r = pcall(one, ko, p)
  if not ok then
    -- redis.call raises a table { err = message }; a Lua error raises a string.
    if type(r) == 'table' then r = r.err end
    r = tostring(r)
  end
  replies[i] = r
  ko = ko + struct.unpack('<d', p, 9)
end
return replies
