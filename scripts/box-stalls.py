#!/usr/bin/env python3
"""How often this machine takes a CPU away from a running thread, with nothing else to run.

    scripts/box-stalls.py [SECONDS]      # default 10

One busy process per CPU, pinned to it, reads the monotonic clock in a loop; a gap between two
readings longer than 0.5 ms is time the thread did not run. On an idle box those gaps are what
the kernel and, on a VM, the host took (a VM's steal time is not always reported). Every
closed-loop tail in BENCHMARKS.md sits on top of them: a stall of a serving thread holds every
request in flight on it, so p99.9 cannot stay below the box's stalls however fast the server is.
Prints one line per CPU: gaps over 0.5 / 1 / 2 / 5 ms, the longest, and the time lost.
"""

import multiprocessing
import os
import sys
import time


def probe(cpu: int, seconds: float, out: "multiprocessing.Queue[tuple[int, list[int]]]") -> None:
    os.sched_setaffinity(0, {cpu})
    clock = time.monotonic_ns
    gaps: list[int] = []
    prev = clock()
    end = prev + int(seconds * 1e9)
    while True:
        now = clock()
        if now - prev > 500_000:
            gaps.append(now - prev)
        prev = now
        if now > end:
            break
    out.put((cpu, gaps))


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    cpus = sorted(os.sched_getaffinity(0))
    out: "multiprocessing.Queue[tuple[int, list[int]]]" = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=probe, args=(c, seconds, out)) for c in cpus]
    for p in procs:
        p.start()
    results = sorted(out.get() for _ in procs)
    for p in procs:
        p.join()
    print(f"{seconds:g} s per CPU, one busy thread each; gaps between clock readings:")
    print("| CPU | > 0.5 ms | > 1 ms | > 2 ms | > 5 ms | longest ms | lost ms |")
    print("|---|---|---|---|---|---|---|")
    for cpu, gaps in results:
        over = [sum(g > ms * 1e6 for g in gaps) for ms in (0.5, 1, 2, 5)]
        print(f"| {cpu} | {' | '.join(map(str, over))} | "
              f"{max(gaps, default=0) / 1e6:.2f} | {sum(gaps) / 1e6:.1f} |")


if __name__ == "__main__":
    main()
