"""Fixtures: a real `tollgate serve` (memory store and Redis) on free loopback ports, and a
redis-server of the tests' own. Every process is started in its own process group and killed
(the whole group) when the session ends, whatever happened.

TOLLGATE_BIN: the tollgate binary (default: <repo>/target/release/tollgate).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_LLM = REPO / "examples" / "llm-gateway.yaml"

# The test domain. Each test uses fresh descriptor values (`unique()`), so one server per store
# serves the whole session without tests seeing each other's counters.
TEST_CONFIG = """\
domain: test
descriptors:
  - key: per_minute          # counts go down; waits too long for acquire's deadline
    rate_limit: {name: per-minute, unit: minute, requests_per_unit: 5}
  - key: per_second          # fixed window aligned to whole seconds
    rate_limit: {name: per-second, unit: second, requests_per_unit: 3}
  - key: sliding3s           # 2 per trailing 3 s (exact)
    rate_limit: {name: sliding-3s, unit: second, requests_per_unit: 2, window: 3s, algorithm: sliding_window}
  - key: shared2s            # the multi-process test: 5 per trailing 2 s
    rate_limit: {name: shared-2s, unit: second, requests_per_unit: 5, window: 2s, algorithm: sliding_window}
  - key: chat                # the LangChain test: 2 per trailing second
    rate_limit: {name: chat-rps, unit: second, requests_per_unit: 2, algorithm: sliding_window}
  # concurrency: slots in flight
  - key: cap2                # 2 at once; a 5 s lease, longer than any test holds a slot
    rate_limit: {name: cap-2, algorithm: concurrency, requests_per_unit: 2, lease_ttl: 5s}
  - key: solo                # 1 at once, the default 5 min lease: only a release frees it
    rate_limit: {name: solo, algorithm: concurrency, requests_per_unit: 1}
  - key: brief               # 1 at once, a 1 s lease: expiry and renewal
    rate_limit: {name: brief, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1s}
  # reservations: an estimate charged up front, settled to the actual use
  - key: budget              # 1,000 tokens an hour
    rate_limit: {name: budget, unit: hour, requests_per_unit: 1000}
"""


# A usage domain (`--usage-domains 'usage-*'`): a plain envoyproxy/ratelimit limit, no
# `overdraft` key, whose usage charges still always land.
USAGE_CONFIG = """\
domain: usage-tokens
descriptors:
  - key: tenant_tokens
    rate_limit: {unit: minute, requests_per_unit: 100}
"""


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI timeout, `kill`) becomes KeyboardInterrupt, so pytest still runs the
    session finalizers that kill the servers it started."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)


def _wait(
    what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path,
    limit: float = 20,
) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} not ready after {limit:g} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every long-lived process the session starts; their groups are killed at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in reversed(procs):
            _kill_group(p)


def _spawn(
    procs: list[subprocess.Popen[bytes]], argv: list[str], log: Path
) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        p = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, killed as a whole
        )
    procs.append(p)
    return p


@pytest.fixture(scope="session")
def tollgate_bin() -> str:
    path = os.environ.get("TOLLGATE_BIN") or str(REPO / "target" / "release" / "tollgate")
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"tollgate binary not found at {path}: build it (cargo build --release) or set "
            "TOLLGATE_BIN", pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def redis_url(processes: list[subprocess.Popen[bytes]], tmp_path_factory: pytest.TempPathFactory) -> str:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not on the PATH (Debian: apt-get install redis-server)",
                    pytrace=False)
    d = tmp_path_factory.mktemp("redis")
    port = free_port()
    p = _spawn(processes, [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--dir", str(d)], d / "redis.log")

    def pong() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    _wait("redis-server", pong, p, d / "redis.log")
    return f"redis://127.0.0.1:{port}"


@dataclass(frozen=True)
class Server:
    store: str
    addr: str  # host:port of gRPC


def _serving(addr: str) -> bool:
    """grpc.health.v1 Check for service "" (raw bytes: no grpcio-health-checking needed)."""
    with grpc.insecure_channel(addr) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        try:
            resp = check(b"", timeout=0.5)
        except grpc.RpcError:
            return False
        return bool(resp == b"\x08\x01")  # HealthCheckResponse{status: SERVING}


def start_tollgate(
    procs: list[subprocess.Popen[bytes]], binary: str, workdir: Path, redis: str | None
) -> Server:
    conf = workdir / "config"
    conf.mkdir()
    (conf / "test.yaml").write_text(TEST_CONFIG)
    (conf / "usage.yaml").write_text(USAGE_CONFIG)
    shutil.copy(EXAMPLE_LLM, conf / "llm-gateway.yaml")
    grpc_addr = f"127.0.0.1:{free_port()}"
    argv = [binary, "serve", "--config", str(conf), "--grpc-addr", grpc_addr,
            "--http-addr", f"127.0.0.1:{free_port()}", "--config-reload-interval", "off",
            "--usage-domains", "usage-*"]
    if redis:
        argv += ["--redis-url", redis, "--redis-key-prefix", f"{unique('tg')}:"]
        # loopback Redis on a shared 2-core CI box: leave room above the 10ms default
        argv += ["--redis-timeout", "250ms"]
    log = workdir / "tollgate.log"
    p = _spawn(procs, argv, log)
    _wait("tollgate serve", lambda: _serving(grpc_addr), p, log)
    return Server(store="redis" if redis else "memory", addr=grpc_addr)


@pytest.fixture(scope="session")
def memory_server(processes: list[subprocess.Popen[bytes]], tollgate_bin: str,
                  tmp_path_factory: pytest.TempPathFactory) -> Server:
    return start_tollgate(processes, tollgate_bin, tmp_path_factory.mktemp("tg-memory"), None)


@pytest.fixture(scope="session")
def redis_server(processes: list[subprocess.Popen[bytes]], tollgate_bin: str, redis_url: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Server:
    return start_tollgate(processes, tollgate_bin, tmp_path_factory.mktemp("tg-redis"), redis_url)


@pytest.fixture(params=["memory", "redis"])
def server(request: pytest.FixtureRequest) -> Server:
    """The same test against the memory store and against Redis."""
    return request.getfixturevalue(f"{request.param}_server")  # type: ignore[no-any-return]
