#!/usr/bin/env python3
"""Redis CPU per call of the decision script (INFO commandstats), script against script.

Starts its own redis-server on a free port, then for each scenario and round runs every
script given on the same calls (alternating, so drift hits all alike): 40,000 EVALSHAs
pipelined 100 deep over 10,000 tenants, Redis TIME as the clock, and prints the µs per call
Redis reports: the median of the rounds (their range). Scenarios: one fixed-window charge, one
calendar-window charge (a UTC month), one sliding-window charge, one token-bucket charge, a
concurrency acquire and its release (alternating calls on each tenant's key, the release naming
the acquire's slot id), and scenario (c) of scripts/bench.sh on one node (five fixed-window
charges, one per key: tenant, the shared global, tenant+model, key, d0).

A script's layout is read from its `local CALL_NUMBERS, ...` line, so a script from before the
slot id joined the call's numbers (5 of them) runs the scenarios it knows; the others are n/a.

  python3 scripts/script-cpu.py target/release/tollgate.lua [OTHER.lua ...] [--rounds 3] [--calls 40000]
      [--only 'token bucket']   (only the scenarios whose name holds the text)

(target/release/tollgate.lua is lua/decide/ as build.rs joins it: `cargo build --release`.)

The argument layout is the script's header (src/store/redis/scripts/script.rs writes it).
"""

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

FIXED, SLIDING, BUCKET, CONCURRENCY = 0, 1, 2, 3
DECIDE, RELEASE, RESERVE, SETTLE = 0, 4, 6, 7
MINUTE, SECOND = 60_000_000, 1_000_000


def month_ends():
    """The start and end of this UTC month and the next one's end, in µs: what tollgate sends
    for a `calendar: month` window (src/limit/calendar.rs `choices`)."""
    t = time.gmtime()

    def start(y, m):
        return int(calendar_timegm((y, m, 1, 0, 0, 0))) * 1_000_000

    y, m = t.tm_year, t.tm_mon
    ny, nm = (y + 1, 1) if m == 12 else (y, m + 1)
    nny, nnm = (ny + 1, 1) if nm == 12 else (ny, nm + 1)
    a, b, c = start(y, m), start(ny, nm), start(nny, nnm)
    now = int(time.time() * 1_000_000)
    return (a, b) if now - a < (b - a) // 2 else (b, c)


def calendar_timegm(tup):
    import calendar
    return calendar.timegm(tup + (0, 0, 0))


def pack(charges, layout, mode=DECIDE, slot=(0, 0), record=False, cost=1, overdraft=0):
    """One call's packed numbers: now (-1: Redis TIME), keys (and the record key: `record`),
    mode, no quota, charges (and, in the layouts with 7 call numbers or more, the slot id; with
    8, a record's time to live: two minutes). `layout` is the script's (call numbers, charge
    numbers): a charge's numbers past the first 8 (max_wait, a class's pool and borrow_until, a
    fair share) are 0."""
    call_numbers, charge_numbers = layout
    nums = [-1, len(charges) + int(record), mode, 0, len(charges)]
    if call_numbers >= 7:
        nums += list(slot)
    if call_numbers >= 8:
        nums += [120_000]
    for i, (alg, limit, window, burst) in enumerate(charges):
        nums += [i + 1, alg, limit, window, burst, overdraft, cost, 0]
        nums += [0] * (charge_numbers - 8)
    return struct.pack("<%dd" % len(nums), *nums)


A, B = month_ends()

# name -> (charges, the layout it needs (call numbers), and for calls that alternate on one
# slot id: (mode, cost, overdraft) of the even calls and of the odd ones (acquire/release,
# reserve/settle with a record key, a usage domain's check and charge))
RESERVED = ((RESERVE, 100, 0), (SETTLE, 60, 0))
USAGE = ((DECIDE, 0, 1), (DECIDE, 60, 1))
SCENARIOS = {
    "fixed window, 1 charge": ([(FIXED, 4_000_000_000, SECOND, 4_000_000_000)], 5, None),
    "calendar window (a UTC month), 1 charge": ([(FIXED, 4_000_000_000, -A, B)], 7, None),
    "sliding window, 1 charge": ([(SLIDING, 4_000_000_000, MINUTE, 4_000_000_000)], 5, None),
    "token bucket, 1 charge": ([(BUCKET, 1_000_000, SECOND, 4_000_000)], 5, None),
    "concurrency: acquire, then release (per call)": ([(CONCURRENCY, 64, 300 * SECOND, 64)], 7, ((DECIDE, 1, 0), (RELEASE, 1, 0))),
    "fixed window (a minute), 1 charge": ([(FIXED, 4_000_000_000, MINUTE, 4_000_000_000)], 5, None),
    "fixed window (a minute): reserve alone (per call)": ([(FIXED, 4_000_000_000, MINUTE, 4_000_000_000)], 8, ((RESERVE, 100, 0), (RESERVE, 100, 0))),
    "fixed window (a minute): reserve, then settle (per call)": ([(FIXED, 4_000_000_000, MINUTE, 4_000_000_000)], 8, RESERVED),
    "fixed window (a minute), usage domain: check (cost 0), then charge (per call)": ([(FIXED, 4_000_000_000, MINUTE, 4_000_000_000)], 5, USAGE),
    "sliding window (a minute): reserve, then settle (per call)": ([(SLIDING, 4_000_000_000, MINUTE, 4_000_000_000)], 8, RESERVED),
    "token bucket: reserve, then settle (per call)": ([(BUCKET, 1_000_000, SECOND, 4_000_000)], 8, RESERVED),
    "token bucket, usage domain: check (cost 0), then charge (per call)": ([(BUCKET, 1_000_000, SECOND, 4_000_000)], 5, USAGE),
    "(c) 5 fixed-window charges": ([(FIXED, 4_000_000_000, MINUTE, 4_000_000_000)] * 3
    + [(FIXED, 4_000_000_000, SECOND, 4_000_000_000)] * 2, 5, None),
}


def call_numbers(path):
    """The script's (call numbers, charge numbers), from its layout line."""
    for line in open(path):
        if line.startswith("local CALL_NUMBERS, CHARGE_NUMBERS, REFUND_NUMBERS = "):
            numbers = line.split("=")[1].split(",")
            return int(numbers[0]), int(numbers[1])
    raise RuntimeError("%s has no layout line" % path)


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def reply(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)

    def call(self, *args):
        self.s.sendall(resp(*args))
        return self.reply()

    def pipeline(self, commands):
        self.s.sendall(b"".join(resp(*c) for c in commands))
        return [self.reply() for _ in commands]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def usec_per_call(conn):
    for line in conn.call("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_evalsha:"):
            fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
            return float(fields["usec"]) / int(fields["calls"])
    raise RuntimeError("no EVALSHA ran")


def run(conn, sha, scenario, calls, layout, depth=100, tenants=10_000):
    charges, _, alternate = scenario
    conn.call("FLUSHALL")
    conn.call("CONFIG", "RESETSTAT")
    packed = pack(charges, layout)
    n = len(charges)
    for start in range(0, calls, depth):
        batch = []
        for i in range(start, min(start + depth, calls)):
            t = i % tenants
            keys = ["{t%d}:%d" % (t, j) for j in range(n)]
            if alternate:
                # Even calls acquire a slot (or reserve) under id (1, i), odd ones release it
                # (or settle it).
                slot = (1, i - i % 2)
                mode, cost, overdraft = alternate[i % 2]
                record = mode in (RESERVE, SETTLE)
                packed = pack(charges, layout, mode, slot, record, cost, overdraft)
                if record:
                    keys.append("{t%d}|rsv:1.%d" % (t, i - i % 2))
            batch.append(("EVALSHA", sha, str(len(keys)), *keys, packed))
        for r in conn.pipeline(batch):
            if not (isinstance(r, bytes) and r.startswith(b"=")):
                raise RuntimeError("unexpected reply %r" % (r,))
    return usec_per_call(conn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scripts", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=40_000)
    ap.add_argument("--only", default="",
                    help="run only the scenarios whose name holds this text (e.g. 'token bucket')")
    a = ap.parse_args()
    port = free_port()
    work = tempfile.mkdtemp(prefix="script-cpu.")
    try:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", work],
            stdout=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        sys.exit("script-cpu.py: redis-server is not on the PATH (apt-get install redis-server)")
    try:
        for _ in range(100):
            try:
                conn = Conn(port)
                conn.call("PING")
                break
            except OSError:
                time.sleep(0.05)
        shas = [conn.call("SCRIPT", "LOAD", open(p).read()).decode() for p in a.scripts]
        print("| scenario | " + " | ".join(os.path.basename(p) for p in a.scripts) + " |")
        print("|---|" + "---|" * len(a.scripts))
        layouts = [call_numbers(p) for p in a.scripts]
        for name, scenario in SCENARIOS.items():
            if a.only not in name:
                continue
            results = [[] for _ in a.scripts]
            for _ in range(a.rounds):
                for i, sha in enumerate(shas):
                    if layouts[i][0] < scenario[1]:
                        continue
                    results[i].append(run(conn, sha, scenario, a.calls, layouts[i]))
            cells = ["%.2f (%.2f–%.2f)" % (sorted(r)[len(r) // 2], min(r), max(r)) if r else "n/a"
                     for r in results]
            print("| %s | %s |" % (name, " | ".join(cells)), flush=True)
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
