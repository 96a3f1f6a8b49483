"""One process of the multi-process test: THREADS acquirers, each with its own Client, call
`acquire` in a loop from START until END (wall clock; an acquire whose wait goes past END
ends the loop), and the process prints, as JSON, the
send/receive wall times of every admitting check and how many checks it made in total.

    python acquirer.py ADDR DOMAIN KEY VALUE THREADS START END
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from tollgate_client import AcquireTimeout, Client, Decision


class TimedClient(Client):
    """Remembers the wall-clock send/receive times of its last check."""

    checks = 0
    last: tuple[float, float] = (0.0, 0.0)

    def check(self, *args: Any, **kwargs: Any) -> Decision:
        sent = time.time()
        d = super().check(*args, **kwargs)
        self.last = (sent, time.time())
        self.checks += 1
        return d


def main() -> None:
    addr, domain, key, value = sys.argv[1:5]
    threads, start, end = int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
    admits: list[tuple[float, float]] = []
    checks = [0]
    lock = threading.Lock()

    def run() -> None:
        with TimedClient(addr, timeout=2.0) as tg:
            tg.check(domain, {key: value}, hits=0)  # connect before the start
            tg.checks = 0
            time.sleep(max(0.0, start - time.time()))
            while time.time() < end:
                try:
                    tg.acquire(domain, {key: value}, max_wait=max(0.1, end - time.time()))
                except AcquireTimeout:
                    break  # the run is over before this acquirer's turn
                with lock:
                    admits.append(tg.last)
            with lock:
                checks[0] += tg.checks

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    json.dump({"admits": admits, "checks": checks[0]}, sys.stdout)


if __name__ == "__main__":
    main()
