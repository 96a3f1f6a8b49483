#!/usr/bin/env python3
"""The script-level differential test against planted faults: each mutant is a copy of
lua/tollgate.lua with one off-by-one (in every algorithm, path and mode), and the test
(tests/behaviour/script.rs) must fail on every one of them.

  python3 scripts/script-mutants.py [--cases 2000]

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
    ("fixed window, one charge: fit", "settle(key, limit, window, cost, count, stop, not dry and count + k <= limit)",
     "settle(key, limit, window, cost, count, stop, not dry and count + k < limit)"),
    ("fixed window, one charge: denial test", "  if count + k <= limit then\n    return struct.pack('<dddddd', 1, limit - count, wait, 0, 0, 0)",
     "  if count + k < limit then\n    return struct.pack('<dddddd', 1, limit - count, wait, 0, 0, 0)"),
    ("fixed window: reset of an untouched window", "if stop > 0 then wait = stop - now else wait = window - (now % window) end",
     "if stop > 0 then wait = stop - now else wait = window - (now % window) + 1 end"),
    ("sliding window, one charge: fit", "  if total + k > limit then\n    -- Denied",
     "  if total + k >= limit then\n    -- Denied"),
    ("sliding window, one charge: retry wait", "          wait = math.max(t + window - now, 0)\n          if freed >= need then break end\n        end\n        pos = pos + #chunk",
     "          wait = math.max(t + window - now + 1, 0)\n          if freed >= need then break end\n        end\n        pos = pos + #chunk"),
    ("sliding window, one charge: granule", "  local g = math.max(math.floor(window / 1000), 1000)\n  total = total + cost",
     "  local g = math.max(math.floor(window / 1000), 1001)\n  total = total + cost"),
    ("one charge per key: fit", "fits = v[b + 6] + math.max(v[b + 5], 1) <= v[b + 3]",
     "fits = v[b + 6] + math.max(v[b + 5], 1) < v[b + 3]"),
    ("general: window fit", "    return used(s) + k <= c.limit",
     "    return used(s) + k < c.limit"),
    ("general: usage cap", "    return c.burst * (DEBT_CAP_FACTOR + 1)",
     "    return c.burst * DEBT_CAP_FACTOR"),
    ("general: count-rejected check cost", "    if c.cost == 0 and count_rejected then return 0 end",
     "    if c.cost == 0 and count_rejected then return 1 end"),
    ("general: dry run writes", "        local commit = lands and not dry and dirty[key]",
     "        local commit = lands and dirty[key]"),
    ("general: quota verdict", "  if quota_total > 0 and quota_count == quota_total then",
     "  if quota_total > 0 and quota_count + 1 >= quota_total then"),
    ("general: a retry's need", "if added[i] == 0 and not c.overdraft then need[c.key] = (need[c.key] or 0) + c.cost end",
     "if added[i] == 0 and not c.overdraft then need[c.key] = (need[c.key] or 0) + c.cost + 1 end"),
    ("token bucket: fit", "    return pcmp(nu, nf, bu, bf) <= 0",
     "    return pcmp(nu, nf, bu, bf) < 0"),
    ("token bucket: remaining", "      return math.max(c.burst - tunits(c, du, df), 0)",
     "      return math.max(c.burst - tunits(c, du, df) + 1, 0)"),
    ("token bucket: history kept", "      if #h > HISTORY * HIST then",
     "      if #h > (HISTORY - 1) * HIST then"),
    ("refund, fixed window", "      s.count = s.count - math.min(amount, s.count)",
     "      s.count = s.count - math.min(amount - 1, s.count)"),
    ("refund, sliding window", "        local take = math.min(amount, cost)",
     "        local take = math.min(amount + 1, cost)"),
    ("refund, token bucket", "        if hs > mark2 then\n          if pcmp(hu, hf, gu, gf) < 0 then gu, gf = hu, hf end",
     "        if hs >= mark2 then\n          if pcmp(hu, hf, gu, gf) < 0 then gu, gf = hu, hf end"),
    ("refund: what stays landed", "        if added[i] == 0 then mark1[i], mark2[i] = 0, 0 end",
     "        if added[i] == 0 then mark1[i], mark2[i] = 0, 0 end\n        added[i] = added[i] + undo"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="2000")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lua = open(os.path.join(root, "lua", "tollgate.lua")).read()
    subprocess.run(["cargo", "test", "--release", "--test", "behaviour", "--no-run"], cwd=root,
                   check=True, capture_output=True)
    missed = 0
    for name, old, new in MUTANTS:
        if lua.count(old) != 1:
            sys.exit("script-mutants.py: %r is not in lua/tollgate.lua exactly once" % name)
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
