#!/usr/bin/env python3
"""The script-level differential test against planted faults: each mutant is a copy of the
decision script (lua/decide/ as build.rs joins it, target/release/tollgate.lua) with one
off-by-one (in every algorithm, path and mode, reservations and
settles included), and the test
(tests/behaviour/script.rs) must fail on every one of them.

  python3 scripts/script-mutants.py [--cases 10000]

Prints one line per mutant: caught (and in which case) or MISSED; exits 1 if any is missed.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

# (name, text in the script, its replacement): each text must occur exactly once.
MUTANTS = [
    ("fixed window: fit, one charge", "    local lands = mode ~= DRY_RUN and used + math.max(cost, 1) <= limit",
     "    local lands = mode ~= DRY_RUN and used + math.max(cost, 1) < limit"),
    ("fixed window: new window's end", "  if window > 0 then return now - (now % window) + window end",
     "  if window > 0 then return now - (now % window) + window + 1 end"),
    ("fixed window: reset of an untouched window", "    return fresh - now\n  end\n  if k > limit then return -1 end",
     "    return fresh - now + 1\n  end\n  if k > limit then return -1 end"),
    ("fixed window: retry", "  if count + k <= limit or stop == 0 then return 0 end",
     "  if count + k < limit or stop == 0 then return 0 end"),
    ("fixed window: refund", "      c.used = c.used - math.min(amount, c.used)",
     "      c.used = c.used - math.min(amount - 1, c.used)"),
    ("sliding window: what is forgotten", "        if t + window > now then live = true; break end",
     "        if t + window >= now then live = true; break end"),
    ("sliding window: granule", "  local g = math.max(math.floor(window / 1000), 1000)",
     "  local g = math.max(math.floor(window / 1000), 1001)"),
    ("sliding window: retry wait", "      wait = math.max(t + window - now, 0)\n      if freed >= need then break end",
     "      wait = math.max(t + window - now + 1, 0)\n      if freed >= need then break end"),
    ("sliding window: refund", "        local take = math.min(amount, cost)",
     "        local take = math.min(amount + 1, cost)"),
    ("one charge per key: fit", "    if ch.used + math.max(cost, 1) > limit then all = false end",
     "    if ch.used + math.max(cost, 1) >= limit then all = false end"),
    ("general: window fit", "    return c.used + c.added + k <= p.limit",
     "    return c.used + c.added + k < p.limit"),
    ("usage cap", "  -- Usage stops adding at this many times a limit's capacity (limit::DEBT_CAP_FACTOR + 1).\n  local CAP = 101", "  -- Usage stops adding at this many times a limit's capacity (limit::DEBT_CAP_FACTOR + 1).\n  local CAP = 100"),
    ("general: count-rejected check cost", "    if ch.cost == 0 and mode == COUNT_REJECTED then return 0 end",
     "    if ch.cost == 0 and mode == COUNT_REJECTED then return 1 end"),
    ("general: dry run writes", "      c.commit = stays and mode ~= DRY_RUN and c.added > 0",
     "      c.commit = stays and c.added > 0"),
    ("general: quota verdict", "    if quota_total > 0 and quota_count == quota_total then",
     "    if quota_total > 0 and quota_count + 1 >= quota_total then"),
    ("general: a retry's need", "then ch.c.need = ch.c.need + ch.cost end",
     "then ch.c.need = ch.c.need + ch.cost + 1 end"),
    ("general: overdraft counters stay", "      local stays = mode == COUNT_REJECTED or v == 0 or (v == 1 and c.overdraft)",
     "      local stays = mode == COUNT_REJECTED or v == 0 or v == 1"),
    ("token bucket: fit", "    return pcmp(nu, nf, bu + wait, bf) <= 0",
     "    return pcmp(nu, nf, bu + wait, bf) < 0"),
    ("token bucket: remaining", "    return math.max(p.burst - units(p, du, df), 0)",
     "    return math.max(p.burst - units(p, du, df) + 1, 0)"),
    ("token bucket: history kept", "    if #h > HISTORY * HIST then",
     "    if #h > (HISTORY - 1) * HIST then"),
    ("token bucket: refund", "      if hs > seq then\n        if pcmp(hu, hf, gu, gf) < 0 then gu, gf = hu, hf end",
     "      if hs >= seq then\n        if pcmp(hu, hf, gu, gf) < 0 then gu, gf = hu, hf end"),
    ("refund: what stays landed", "      if kept > 0 then ch.mark1, ch.mark2 = mark1, mark2 end",
     "      if kept > 0 then ch.mark1, ch.mark2 = mark1, mark2 end\n      ch.landed = ch.landed + amount"),
    ("reserve: what the record keeps", "        parts[#parts + 1] = struct.pack('<ddddd', ch.cost, ch.landed, ch.mark1, ch.mark2,",
     "        parts[#parts + 1] = struct.pack('<ddddd', ch.cost + 1, ch.landed, ch.mark1, ch.mark2,"),
    ("reserve: how long the record lives", "      redis.call('SET', record, struct.pack('<d', now + record_ms * 1000) ..",
     "      redis.call('SET', record, struct.pack('<d', now + record_ms * 500) .."),
    ("settle: what comes back", "        local back = e.added - ch.cost",
     "        local back = e.added - ch.cost + 1"),
    ("settle: the excess", "        local excess = ch.cost - e.cost",
     "        local excess = ch.cost - e.cost - 1"),
    ("settle: a second settle", "      end\n      redis.call('DEL', record)\n    end\n\n    -- A reservation's record of what landed",
     "      end\n    end\n\n    -- A reservation's record of what landed"),
    ("direct reserve: the record, one charge",
     "      redis.call('SET', KEYS[KO + 2], struct.pack('<dddddd', now + record_ms * 1000, cost, cost,",
     "      redis.call('SET', KEYS[KO + 2], struct.pack('<dddddd', now + record_ms * 1000, cost, cost - 1,"),
    ("direct reserve: the record, a charge per key",
     "        parts[#parts + 1] = struct.pack('<ddddd', charges[i].cost, added, mark, 0, #key) .. key",
     "        parts[#parts + 1] = struct.pack('<ddddd', charges[i].cost + 1, added, mark, 0, #key) .. key"),
    ("direct settle: what comes back", "      local back = e.added - cost\n",
     "      local back = e.added - cost + 1\n"),
    ("direct settle: a window that has ended", "      if back > 0 and (stop == 0 or stop == e.mark1) then",
     "      if back > 0 then"),
    ("direct settle: the excess",
     "      local excess = math.min(cost - e.cost, math.max(limit * CAP - used, 0))",
     "      local excess = math.min(cost - e.cost - 1, math.max(limit * CAP - used, 0))"),
    ("direct settle: usage cap",
     "  -- As build()'s CAP: usage stops adding at this many times a limit's capacity.\n  local CAP = 101",
     "  -- As build()'s CAP: usage stops adding at this many times a limit's capacity.\n  local CAP = 100"),
    ("direct settle: a second settle", "    redis.call('DEL', record)\n    return table.concat(out)",
     "    return table.concat(out)"),
    ("unreserve: the record stays", "    if mode == UNRESERVE then redis.call('DEL', record) end",
     "    if mode == UNRESERVE then end"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="10000")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(["cargo", "test", "--release", "--test", "behaviour", "--no-run"], cwd=root,
                   check=True, capture_output=True)
    lua = open(os.path.join(root, "target", "release", "tollgate.lua")).read()
    missed = 0
    for name, old, new in MUTANTS:
        if lua.count(old) != 1:
            sys.exit("script-mutants.py: %r is not in the decision script exactly once" % name)
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(lua.replace(old, new))
        env = dict(os.environ, TOLLGATE_SCRIPT_LUA=f.name, TOLLGATE_SCRIPT_CASES=a.cases)
        run = subprocess.run(
            ["cargo", "test", "--release", "--test", "behaviour", "--",
             "script::the_script_answers"],
            cwd=root, env=env, capture_output=True, text=True)
        os.unlink(f.name)
        out = run.stdout + run.stderr
        if "1 passed" not in out and "1 failed" not in out:
            sys.exit("script-mutants.py: the test did not run:\n" + out[-2000:])
        if run.returncode == 0:
            missed += 1
            print("MISSED  %s" % name, flush=True)
        else:
            case = re.search(r"case (\d+) of seed", out)
            print("caught  %s (case %s)" % (name, case.group(1) if case else "?"), flush=True)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
