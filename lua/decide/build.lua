---------------------------------------------------------------- every call
-- The scope of the general driver and of what only it needs, made by the first call direct()
-- leaves (`built`, main.lua): the parts from concurrency.lua to general.lua are its body.

build = function()
  -- Usage stops adding at this many times a limit's capacity (limit::DEBT_CAP_FACTOR + 1).
  local CAP = 101
  -- A token bucket's history: entries kept, and each one's size <seq, debt_us, debt_frac>.
  local HISTORY, HIST = 8, 24

  -- Where a fixed-window landing goes: the window's end (a new window's when there is none).
  local function fixed_mark(fresh, stop)
    if stop > 0 then return stop end
    return fresh
  end

