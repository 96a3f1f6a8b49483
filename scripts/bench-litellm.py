#!/usr/bin/env python3
"""What tollgate's LiteLLM callback adds to a call through LiteLLM's proxy: p50 / p99 latency
with and without it (issue 61, BENCHMARKS.md "LiteLLM's proxy").

Starts `tollgate serve` (memory store, examples/litellm/tollgate.yaml), the tests' stand-in
upstream answering at once (UPSTREAM_DELAY=0), and two LiteLLM proxies (`--num_workers 1`) on
the same config, one with `tollgate_client.litellm.callback` and one without. Then, in turns of
`--calls` calls each (alternating, so both see the same box), a closed loop of `--concurrency`
callers on each proxy, plain and streamed. Prints one row per case: calls, p50, p99 (ms),
calls/s, and what the callback added at p50 and p99.

Run it in the LiteLLM venv (scripts/check-litellm.sh makes target/litellm-venv):

    target/litellm-venv/bin/python scripts/bench-litellm.py [--calls 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "litellm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{what} not ready after {limit:g} s")


async def one(c: httpx.AsyncClient, url: str, stream: bool, i: int) -> float:
    # A fresh key per caller: the key limits (60 a minute) never refuse the benchmark.
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 100}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    headers = {"authorization": f"Bearer sk-bench{i}-team-bench"}
    t = time.perf_counter()
    if stream:
        async with c.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            await r.aread()
    else:
        r = await c.post(f"{url}/v1/chat/completions", json=body, headers=headers)
    if r.status_code != 200:
        sys.exit(f"{url}: {r.status_code} {r.text[:300]}")
    return time.perf_counter() - t


async def loop(url: str, calls: int, concurrency: int, stream: bool) -> tuple[list[float], float]:
    times: list[float] = []
    left = calls
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as c:
        async def caller(k: int) -> None:
            nonlocal left
            n = 0
            while left > 0:
                left -= 1
                times.append(await one(c, url, stream, k * 100_000 + n))
                n += 1
        t = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(concurrency)))
        return times, time.perf_counter() - t


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--tollgate", default=str(ROOT / "target" / "release" / "tollgate"))
    a = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-litellm-"))
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(argv: list[str], log: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        with open(work / log, "wb") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)
        return p

    try:
        up = free_port()
        p = spawn([sys.executable, str(ROOT / "clients/python/tests/litellm/upstream.py"), str(up)],
                  "upstream.log", dict(os.environ, UPSTREAM_DELAY="0"))
        wait_http(f"http://127.0.0.1:{up}/calls", p, "upstream")
        grpc, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        p = spawn([a.tollgate, "serve", "--config", str(EXAMPLE / "tollgate.yaml"),
                   "--grpc-addr", grpc, "--http-addr", http], "tollgate.log")
        wait_http(f"http://{http}/healthz", p, "tollgate")
        plain_cfg = work / "no-callback.yaml"
        plain_cfg.write_text((EXAMPLE / "litellm-config.yaml").read_text().replace(
            '  callbacks: ["tollgate_client.litellm.callback"]\n', '  callbacks: []\n'))
        (work / "auth.py").write_text((EXAMPLE / "auth.py").read_text())
        urls = {}
        for name, cfg, cwd in [("callback", "litellm-config.yaml", EXAMPLE),
                               ("no callback", str(plain_cfg), work)]:
            port = free_port()
            env = dict(os.environ, TOLLGATE_ADDR=grpc, LITELLM_LOCAL_MODEL_COST_MAP="True",
                       LITELLM_MASTER_KEY="sk-" + os.urandom(24).hex(),
                       OPENAI_API_BASE=f"http://127.0.0.1:{up}/v1", OPENAI_API_KEY="x")
            # LiteLLM's `litellm` command, run by this interpreter (bin/litellm's first line
            # names the path the venv was made at)
            litellm = [sys.executable, "-c", "import sys; from litellm.proxy.proxy_cli import "
                       "run_server; sys.argv[0] = 'litellm'; run_server()"]
            p = spawn([*litellm, "--config", cfg,
                       "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1",
                       "--telemetry", "False"], f"proxy-{name.replace(' ', '-')}.log", env, cwd)
            urls[name] = f"http://127.0.0.1:{port}"
            wait_http(f"{urls[name]}/health/liveliness", p, f"proxy ({name})")

        print(f"{a.rounds} rounds of {a.calls} calls per case, {a.concurrency} in flight, "
              f"upstream answering at once; {os.cpu_count()} cores")
        print(f"{'case':<22} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>8}")
        for stream in (False, True):
            got: dict[str, list[float]] = {"callback": [], "no callback": []}
            secs = {"callback": 0.0, "no callback": 0.0}
            asyncio.run(loop(urls["callback"], 20, 4, stream))  # warm both up
            asyncio.run(loop(urls["no callback"], 20, 4, stream))
            for _ in range(a.rounds):
                for name in ("no callback", "callback"):
                    t, s = asyncio.run(loop(urls[name], a.calls, a.concurrency, stream))
                    got[name] += t
                    secs[name] += s
            kind = "streamed" if stream else "plain"
            for name in ("no callback", "callback"):
                xs = got[name]
                print(f"{kind + ', ' + name:<22} {len(xs):>6} {pct(xs, 0.5):>8.1f} "
                      f"{pct(xs, 0.99):>8.1f} {len(xs) / secs[name]:>8.1f}")
            print(f"{kind + ', added':<22} {'':>6} "
                  f"{pct(got['callback'], 0.5) - pct(got['no callback'], 0.5):>+8.1f} "
                  f"{pct(got['callback'], 0.99) - pct(got['no callback'], 0.99):>+8.1f}")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
