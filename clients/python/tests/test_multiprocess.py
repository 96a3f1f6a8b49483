"""Concurrent acquirers in several processes share one limit and never exceed it."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import Server, unique

PROCESSES = 4
THREADS = 3
LIMIT = 5  # shared2s: 5 per trailing 2 s (sliding_window, exact)
WINDOW = 2.0
RUN = 5.0  # seconds of contention


def test_processes_never_exceed_the_limit(server: Server) -> None:
    value = unique()
    start = time.time() + 1.5  # every process has imported and connected by then
    end = start + RUN
    worker = Path(__file__).with_name("acquirer.py")
    argv = [sys.executable, str(worker), server.addr, "test", "shared2s", value,
            str(THREADS), repr(start), repr(end)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True) for _ in range(PROCESSES)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=RUN + 40)
            assert p.returncode == 0, err.decode()
            results.append(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    admits = sorted((a[0], a[1], n) for n, r in enumerate(results) for a in r["admits"])
    assert len({n for _, _, n in admits}) >= 2, "only one process was ever admitted"

    # The server admitted request j at some instant s_j in [sent_j, received_j] (one host, one
    # wall clock). Requests whose whole [sent, received] lies inside [sent_i, sent_i + W) were
    # admitted within less than W of each other, so they must be at most LIMIT — for every i.
    # (Sound even for a burst of concurrent requests with overlapping intervals.)
    for sent_i, _, _ in admits:
        inside = [a for a in admits if a[0] >= sent_i and a[1] < sent_i + WINDOW]
        assert len(inside) <= LIMIT, f"{len(inside)} admitted within {WINDOW}s: {inside}"

    # Whatever the client clocks say, the total is bounded by the windows that elapsed
    # (server-side truth), and the limit was actually used (all acquirers were contending).
    span = admits[-1][1] - admits[0][0]
    assert len(admits) <= LIMIT * (math.ceil(span / WINDOW) + 1)
    assert len(admits) >= LIMIT * math.floor(RUN / WINDOW)

    # Acquirers sleep the server's wait (whole seconds): no busy loop.
    checks = sum(r["checks"] for r in results)
    print(f"{server.store}: {len(admits)} admitted over {span:.2f}s, {checks} checks, "
          f"per process {[len(r['admits']) for r in results]}")
    acquirers = PROCESSES * THREADS
    assert checks <= len(admits) + acquirers * (RUN + 3), f"{checks} checks: spinning?"
