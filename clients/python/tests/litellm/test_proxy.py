"""tollgate_client.litellm against LiteLLM's real proxy: two replicas (`litellm --num_workers
1`), each with the callback, one `tollgate serve` (memory store), and a local OpenAI-compatible
upstream of the test's own (upstream.py: 100 tokens a call, 20 prompt + 80 completion; a
streamed call's usage in its final chunk).

Run by scripts/check-litellm.sh in a virtual environment of its own (LiteLLM pins differ from
the CI venv's); skipped where LiteLLM's proxy is not installed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import
pytest.importorskip("litellm.proxy", reason="LiteLLM's proxy is not installed")
import httpx  # noqa: E402  (a LiteLLM dependency)
from conftest import _spawn, _wait, free_port  # noqa: E402

HERE = Path(__file__).resolve().parent
USED = 100  # tokens a call uses (upstream.py)
MAX_TOKENS = 100  # each call's max_tokens: its estimate is the prompt's tokens + 100, above USED

# Every group has limits of its own, so the tests do not see each other's counters. Windows of
# ten years: a test never straddles a window's end.
TOLLGATE_CONFIG = """\
domain: litellm
prices:
  currency: USD
  per_million_tokens:
    budget: {input: 2.50, output: 10.00, cached_input: 1.25}
  default: {input: 1, output: 1}
descriptors:
  - key: model_tokens
    value: tpm
    rate_limit: {name: tpm-1000, unit: day, window: 3650d, requests_per_unit: 1000}
  - key: model_tokens
    value: tpm-stream
    rate_limit: {name: tpm-stream-1000, unit: day, window: 3650d, requests_per_unit: 1000}
  - key: model_requests
    value: rpm
    rate_limit: {name: rpm-10, unit: day, window: 3650d, requests_per_unit: 10}
  - key: model_tokens
    value: shares
    hierarchical: true
    rate_limit:
      name: shares-1000
      unit: day
      window: 3650d
      requests_per_unit: 1000
      shared: true
      shares: {by: priority, classes: {interactive: 0.6, batch: 0.2}, default: batch, borrow_until: 0.4}
  - key: model_tokens
    value: fail-model
    rate_limit: {name: fail-tpm, unit: day, window: 3650d, requests_per_unit: 100000}
  - key: model_requests
    value: fail-model
    rate_limit: {name: fail-rpm, unit: day, window: 3650d, requests_per_unit: 100000}
  - key: model_tokens
    value: fail-fb
    rate_limit: {name: fail-fb-tpm, unit: day, window: 3650d, requests_per_unit: 100000}
  - key: model_tokens
    value: fb-target
    rate_limit: {name: fb-target-tpm, unit: day, window: 3650d, requests_per_unit: 100000}
  - key: model_tokens
    value: slow
    rate_limit: {name: slow-tpm, unit: day, window: 3650d, requests_per_unit: 100000}
  - key: key_tokens
    value: klimited
    rate_limit: {name: key-500, unit: day, window: 3650d, requests_per_unit: 500}
  - key: team_spend
    value: tbudget
    hierarchical: true
    rate_limit: {name: team-budget, calendar: month, spend: 0.005}
"""

GROUPS = ["tpm", "tpm-stream", "rpm", "shares", "fail-model", "slow", "budget", "other",
          "fail-fb", "fb-target"]

AUTH = '''\
from fastapi import Request
from litellm.proxy._types import UserAPIKeyAuth


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    """Keys without a database: "sk-<alias>[-team-<t>][-user-<u>][-prio-<class>]"."""
    parts = api_key.removeprefix("Bearer ").removeprefix("sk-").split("-")
    fields = dict(zip(parts[1::2], parts[2::2]))
    meta = {"priority": fields["prio"]} if "prio" in fields else {}
    return UserAPIKeyAuth(api_key=api_key, key_alias=parts[0], team_id=fields.get("team"),
                          user_id=fields.get("user"), metadata=meta)
'''


def proxy_config(upstream: int, callback: bool, redis: str | None = None) -> str:
    """The proxies' config: every group on the upstream, with the callback; or (`redis`, no
    callback) LiteLLM's own limits, TPM 1,000 and RPM 10 on each deployment, shared through
    Redis with usage-based routing, as its docs set up several instances."""
    own = ", tpm: 1000, rpm: 10" if redis else ""
    models = "".join(
        f"  - model_name: {g}\n"
        f"    litellm_params: {{model: openai/{g}, api_base: 'http://127.0.0.1:{upstream}/v1', "
        f"api_key: anything{own}}}\n"
        for g in GROUPS
    )
    callbacks = '  callbacks: ["tollgate_client.litellm.callback"]\n' if callback else ""
    router = ""
    if redis:
        host, port = redis.removeprefix("redis://").rsplit(":", 1)
        router = (
            "router_settings:\n  routing_strategy: usage-based-routing-v2\n"
            f"  redis_host: {host}\n  redis_port: {port}\n  enable_pre_call_checks: true\n"
        )
    return (
        f"model_list:\n{models}{router}"
        f"litellm_settings:\n  num_retries: 0\n{callbacks}"
        '  fallbacks: [{"fail-fb": ["fb-target"]}]\n'
        "general_settings:\n  custom_auth: auth.user_api_key_auth\n"
    )


@dataclass
class Env:
    tollgate_http: str
    upstream: str
    proxies: list[str]
    workdir: Path
    procs: list[subprocess.Popen[bytes]]
    tollgate_addr: str
    before: list[str] = field(default_factory=list)

    def used(self, descriptor: str, limit: str | None = None) -> int:
        """`used` of the first limit (or the one named) `descriptor` reaches, from /counters."""
        q = urllib.parse.urlencode({"domain": "litellm", "descriptor": descriptor})
        with urllib.request.urlopen(f"{self.tollgate_http}/counters?{q}", timeout=5) as r:
            body = json.load(r)
        limits = body["counters"]
        for lim in limits:
            if limit is None or lim["name"] == limit:
                return int(lim["used"])
        raise AssertionError(f"{descriptor}: no limit {limit!r} in {body}")

    def upstream_calls(self) -> int:
        with urllib.request.urlopen(f"{self.upstream}/calls", timeout=5) as r:
            return int(json.load(r)["calls"])


def litellm_cmd() -> list[str]:
    """LiteLLM's `litellm` command, run by this interpreter (the venv's `bin/litellm` names the
    path the venv was made at in its first line, and CI's venv outlives its checkout)."""
    return [sys.executable, "-c",
            "import sys; from litellm.proxy.proxy_cli import run_server; "
            "sys.argv[0] = 'litellm'; run_server()"]


def start_proxy(env: Env, name: str, callback: bool = True, redis: str | None = None) -> str:
    port = free_port()
    cfg = env.workdir / f"{name}.yaml"
    cfg.write_text(proxy_config(int(env.upstream.rsplit(":", 1)[1]), callback, redis))
    proc_env = dict(
        os.environ,
        TOLLGATE_ADDR=env.tollgate_addr,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_MASTER_KEY="sk-" + os.urandom(24).hex(),
        PYTHONPATH=str(env.workdir),
    )
    log = env.workdir / f"{name}.log"
    with open(log, "wb") as out:
        p = subprocess.Popen(
            [*litellm_cmd(), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port),
             "--num_workers", "1", "--telemetry", "False"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=proc_env,
            cwd=env.workdir, start_new_session=True,
        )
    env.procs.append(p)
    return f"http://127.0.0.1:{port}"


def wait_proxy(env: Env, url: str, name: str) -> None:
    """Until the proxy `name` (the last started of that name) answers its liveness probe."""
    p = next(p for p in reversed(env.procs) if f"{name}.yaml" in " ".join(map(str, p.args)))  # type: ignore[arg-type]
    _wait(name, lambda: _http_ok(f"{url}/health/liveliness"), p, env.workdir / f"{name}.log", 90)


@pytest.fixture(scope="module")
def env(processes: list[subprocess.Popen[bytes]], tollgate_bin: str,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    work = tmp_path_factory.mktemp("litellm")
    (work / "auth.py").write_text(AUTH)
    conf = work / "config"
    conf.mkdir()
    (conf / "litellm.yaml").write_text(TOLLGATE_CONFIG)
    up_port = free_port()
    up = _spawn(processes, [sys.executable, str(HERE / "upstream.py"), str(up_port)], work / "upstream.log")
    grpc_addr = f"127.0.0.1:{free_port()}"
    http = f"127.0.0.1:{free_port()}"
    tg = _spawn(processes, [tollgate_bin, "serve", "--config", str(conf), "--grpc-addr", grpc_addr,
                            "--http-addr", http, "--config-reload-interval", "off"],
                work / "tollgate.log")
    e = Env(f"http://{http}", f"http://127.0.0.1:{up_port}", [], work, processes, grpc_addr)
    _wait("upstream", lambda: _http_ok(f"{e.upstream}/calls"), up, work / "upstream.log")
    _wait("tollgate", lambda: _http_ok(f"{e.tollgate_http}/healthz"), tg, work / "tollgate.log")
    names = ["proxy-a", "proxy-b"]
    urls = [start_proxy(e, n) for n in names]  # started together: each takes ~15 s
    for n, u in zip(names, urls):
        wait_proxy(e, u, n)
    e.proxies = urls
    yield e


async def chat(url: str, key: str, model: str, stream: bool = False,
               max_tokens: int | None = MAX_TOKENS) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    async with httpx.AsyncClient(timeout=60) as c:
        if not stream:
            return await c.post(f"{url}/v1/chat/completions", json=body,
                                headers={"authorization": f"Bearer {key}"})
        async with c.stream("POST", f"{url}/v1/chat/completions", json=body,
                            headers={"authorization": f"Bearer {key}"}) as r:
            await r.aread()
            return r


async def burst(
    env: Env, key: str, model: str, stream: bool = False, proxies: list[str] | None = None
) -> list[httpx.Response]:
    """20 calls at once, spread over both replicas, then 20 in turn."""
    urls = proxies or env.proxies
    at_once = await asyncio.gather(
        *(chat(urls[i % 2], key, model, stream) for i in range(20))
    )
    in_turn = [await chat(urls[i % 2], key, model, stream) for i in range(20)]
    return [*at_once, *in_turn]


def admitted(rs: list[httpx.Response]) -> int:
    bad = [r for r in rs if r.status_code not in (200, 429)]
    assert not bad, [(r.status_code, r.text[:300]) for r in bad]
    for r in rs:
        if r.status_code == 429:
            assert "tollgate" in r.text, r.text[:300]
    return sum(r.status_code == 200 for r in rs)


async def settled(env: Env, descriptor: str, want: int) -> int:
    """The success hook runs after the answer: wait (briefly) for the counter to settle."""
    deadline = time.monotonic() + 10
    while True:
        used = env.used(descriptor)
        if used == want or time.monotonic() > deadline:
            return used
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_model_token_limit_holds_across_replicas(env: Env, stream: bool) -> None:
    model = "tpm-stream" if stream else "tpm"
    calls_before = env.upstream_calls()
    rs = await burst(env, "sk-k1", model, stream)
    n = admitted(rs)
    used = await settled(env, f"model_tokens={model}", n * USED)
    print(f"\n{model}: {n} of 40 calls admitted, {used} of 1000 tokens spent")
    assert used == n * USED <= 1000
    assert n >= 8  # the estimates (prompt + 100) of 9 fit 1000; settles give back the rest
    assert env.upstream_calls() - calls_before == n
    refused = [r for r in rs if r.status_code == 429]
    assert refused and all(int(r.headers["retry-after"]) >= 1 for r in refused)


async def test_a_model_request_limit_holds_across_replicas(env: Env) -> None:
    rs = await burst(env, "sk-k2", "rpm")
    assert admitted(rs) == 10
    assert env.used("model_requests=rpm") == 10


async def test_a_key_token_limit(env: Env) -> None:
    rs = await burst(env, "sk-klimited", "other")
    n = admitted(rs)
    used = await settled(env, "key_tokens=klimited", n * USED)
    assert used == n * USED <= 500 and n >= 4


async def test_a_team_money_budget(env: Env) -> None:
    # A call: 20 input tokens at USD 2.50/M + 80 output at 10/M = 850 µUSD; its estimate
    # (~110 tokens at the output price) ~1,100 µUSD. The budget: USD 0.005 = 5,000 µUSD.
    rs = await burst(env, "sk-k3-team-tbudget", "budget")
    n = admitted(rs)
    used = await settled(env, "team_spend=tbudget,model=budget", n * 850)
    assert used == n * 850 <= 5000 and n >= 4


async def test_guaranteed_shares_by_priority(env: Env) -> None:
    batch = await asyncio.gather(
        *(chat(env.proxies[i % 2], "sk-kb-prio-batch", "shares") for i in range(20)))
    nb = admitted(list(batch))
    inter = await asyncio.gather(
        *(chat(env.proxies[i % 2], "sk-ki-prio-interactive", "shares") for i in range(20)))
    ni = admitted(list(inter))
    print(f"\nshares: batch {nb * USED}, interactive {ni * USED} of 1000 tokens")
    # batch borrows up to borrow_until (0.4 of the pool); interactive then has its 600.
    assert nb * USED <= 400 and ni * USED >= 500, (nb, ni)
    assert await settled(env, "model_tokens=shares", (nb + ni) * USED) == (nb + ni) * USED <= 1000


async def test_a_failed_call_gives_its_tokens_back(env: Env) -> None:
    rs = await asyncio.gather(*(chat(env.proxies[i % 2], "sk-k4", "fail-model") for i in range(4)))
    assert all(r.status_code >= 500 for r in rs), [r.status_code for r in rs]
    assert await settled(env, "model_tokens=fail-model", 0) == 0
    assert env.used("model_requests=fail-model") == 4  # a failed call keeps its request


async def test_a_refusal_is_a_429_with_retry_after_at_once(env: Env) -> None:
    t = time.monotonic()
    r = await chat(env.proxies[0], "sk-k5", "rpm")  # rpm's 10 are spent (above)
    assert r.status_code == 429, r.text
    assert time.monotonic() - t < 2
    assert int(r.headers["retry-after"]) >= 1
    assert "rpm-10" in r.text


async def test_a_proxy_killed_mid_stream_leaves_the_estimate_charged(env: Env) -> None:
    url = start_proxy(env, "proxy-killed")
    wait_proxy(env, url, "proxy-killed")
    proc = env.procs[-1]
    task = asyncio.create_task(chat(url, "sk-k6", "slow", stream=True))
    deadline = time.monotonic() + 10
    while env.used("model_tokens=slow") == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    estimate = env.used("model_tokens=slow")
    assert estimate > USED
    await asyncio.sleep(0.5)  # streaming now
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    try:
        await task
    except httpx.HTTPError:
        pass
    await asyncio.sleep(1)
    assert env.used("model_tokens=slow") == estimate  # never given back, never lost


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_before_litellm_alone(env: Env, redis_url: str, stream: bool) -> None:
    """The same load on two replicas with LiteLLM's own TPM 1,000 / RPM 10 and no callback:
    prints what it let through (the figures tollgate's are compared with; not asserted)."""
    if not env.before:
        names = ["before-a", "before-b"]
        urls = [start_proxy(env, n, callback=False, redis=redis_url) for n in names]
        for n, u in zip(names, urls):
            wait_proxy(env, u, n)
        env.before = urls
    group = "budget" if stream else "other"  # groups no earlier test sent to these proxies
    calls_before = env.upstream_calls()
    rs = await burst(env, "sk-k7", group, stream, env.before)
    statuses = sorted({r.status_code for r in rs})
    assert set(statuses) <= {200, 429}, [(r.status_code, r.text[:200]) for r in rs]
    n = sum(r.status_code == 200 for r in rs)
    calls = env.upstream_calls() - calls_before
    kind = "streamed" if stream else "plain"
    print(f"\nLiteLLM alone, {kind}: {n} of 40 calls admitted against RPM 10, "
          f"{calls * USED} of 1000 tokens spent against TPM 1000")


async def test_a_client_gone_mid_stream_is_settled_or_keeps_its_estimate(env: Env) -> None:
    """A caller that goes away mid-stream: whatever LiteLLM reports for it, the counter holds
    either the estimate (no hook ran) or the usage LiteLLM reported (the success or failure
    hook ran), never less than what the upstream billed before the disconnect."""
    before = env.used("model_tokens=slow")
    body = {"model": "slow", "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": MAX_TOKENS, "stream": True, "stream_options": {"include_usage": True}}
    async with httpx.AsyncClient(timeout=60) as c:
        async with c.stream("POST", f"{env.proxies[0]}/v1/chat/completions", json=body,
                            headers={"authorization": "Bearer sk-k8"}) as r:
            assert r.status_code == 200
            got = 0
            async for _ in r.aiter_lines():
                got += 1
                if got >= 6:
                    break  # leave mid-stream: the connection closes
    await asyncio.sleep(3)
    charged = env.used("model_tokens=slow") - before
    print(f"\nclient gone mid-stream: {charged} tokens charged")
    assert charged > 0


async def test_a_fallback_is_charged_to_the_group_the_request_named(env: Env) -> None:
    r = await chat(env.proxies[0], "sk-k9", "fail-fb")
    assert r.status_code == 200, r.text[:300]
    await asyncio.sleep(2)
    print(f"\nfallback: fail-fb {env.used('model_tokens=fail-fb')}, "
          f"fb-target {env.used('model_tokens=fb-target')}")
    assert await settled(env, "model_tokens=fail-fb", USED) == USED
    assert env.used("model_tokens=fb-target") == 0


async def test_the_example_runs_as_its_readme_says(
    env: Env, processes: list[subprocess.Popen[bytes]], tollgate_bin: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """examples/litellm: tollgate with its tollgate.yaml, a proxy with its litellm-config.yaml
    and auth.py (from that directory), the stand-in upstream, README step 5's call."""
    example = HERE.parents[3] / "examples" / "litellm"
    work = tmp_path_factory.mktemp("example")
    grpc_addr, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    tg = _spawn(processes, [tollgate_bin, "serve", "--config", str(example / "tollgate.yaml"),
                            "--grpc-addr", grpc_addr, "--http-addr", http], work / "tollgate.log")
    _wait("tollgate", lambda: _http_ok(f"http://{http}/healthz"), tg, work / "tollgate.log")
    port = free_port()
    proc_env = dict(
        os.environ,
        TOLLGATE_ADDR=grpc_addr,
        LITELLM_MASTER_KEY="sk-" + os.urandom(24).hex(),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        OPENAI_API_BASE=f"{env.upstream}/v1",
        OPENAI_API_KEY="anything",
    )
    log = work / "proxy.log"
    with open(log, "wb") as out:
        p = subprocess.Popen(
            [*litellm_cmd(), "--config", "litellm-config.yaml", "--host", "127.0.0.1",
             "--port", str(port), "--num_workers", "1", "--telemetry", "False"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=proc_env,
            cwd=example, start_new_session=True,
        )
    processes.append(p)
    url = f"http://127.0.0.1:{port}"
    _wait("the example's proxy", lambda: _http_ok(f"{url}/health/liveliness"), p, log, 90)
    r = await chat(url, "sk-alice-team-research-prio-interactive", "gpt-4o")
    assert r.status_code == 200, r.text[:300]
    counters = Env(f"http://{http}", env.upstream, [], work, processes, grpc_addr)
    assert await settled(counters, "model_tokens=gpt-4o,priority=interactive", USED) == USED
    # 20 input tokens at USD 2.50/M + 80 output at 10/M = 850 µUSD
    assert await settled(counters, "team_spend=research,model=gpt-4o", 850) == 850


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False
