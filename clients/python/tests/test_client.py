"""Client and AsyncClient against a real `tollgate serve` (memory store and Redis)."""

from __future__ import annotations

import math
from typing import Any
import subprocess
import sys
import time

import grpc
import pytest
from conftest import Server, free_port, unique
from fakes import fake_server, hang, over_limit

from tollgate_client import (
    MIN_SLEEP,
    AcquireTimeout,
    AsyncClient,
    Client,
    Code,
    CostNeverFits,
    Descriptor,
    TollgateRequestError,
    TollgateUnavailable,
)


# ------------------------------------------------------------------ decisions
def test_counts_go_down(server: Server) -> None:
    key = {"per_minute": unique()}
    with Client(server.addr) as tg:
        seen = []
        for _ in range(5):
            d = tg.check("test", key)
            assert d.allowed and d.code == Code.OK and d.wait is None and not d.failed_open
            (st,) = d.statuses
            assert st.limit is not None
            assert (st.limit.name, st.limit.requests_per_unit, st.limit.unit) == (
                "per-minute", 5, "MINUTE")
            seen.append(d.remaining)
        assert seen == [4, 3, 2, 1, 0]
        d = tg.check("test", key)
        assert d.code == Code.OVER_LIMIT and not d.allowed
        assert d.wait is not None and 1 <= d.wait <= 60 and d.wait == int(d.wait)
        assert d.statuses[0].reset == d.wait


def test_check_only_charges_nothing(server: Server) -> None:
    key = {"per_minute": unique()}
    with Client(server.addr) as tg:
        for _ in range(3):
            assert tg.check("test", key, hits=0).remaining == 5
        assert tg.check("test", key, hits=2).remaining == 3
        assert tg.check("test", Descriptor(key, hits=0)).remaining == 3


def test_statuses_aligned_with_descriptors(server: Server) -> None:
    v = unique()
    with Client(server.addr) as tg:
        d = tg.check("test", [{"no_such_key": v}, {"per_minute": v}, {"per_second": v}])
        assert d.allowed and len(d.statuses) == 3
        assert d.statuses[0].limit is None and d.statuses[0].remaining is None
        assert d.statuses[1].remaining == 4 and d.statuses[2].remaining == 2
        assert d.remaining == 2  # the least remaining


def test_all_or_nothing_longest_wait(server: Server) -> None:
    v = unique()
    with Client(server.addr) as tg:
        for _ in range(2):
            assert tg.check("test", {"sliding3s": v}).allowed
        # sliding3s is over; per_minute is fine: nothing charged on per_minute. The wait is
        # at most the 3 s window plus one 3 ms granule, rounded up to whole seconds: <= 4.
        d = tg.check("test", [{"per_minute": v}, {"sliding3s": v}])
        assert d.code == Code.OVER_LIMIT
        assert [s.code for s in d.statuses] == [Code.OK, Code.OVER_LIMIT]
        assert d.wait == d.statuses[1].reset and d.wait is not None and 1 <= d.wait <= 4
        assert tg.check("test", {"per_minute": v}, hits=0).remaining == 5


def test_cost_never_fits(server: Server) -> None:
    key = {"per_minute": unique()}
    with Client(server.addr) as tg:
        with pytest.raises(CostNeverFits) as e:
            tg.check("test", key, hits=6)
        assert e.value.descriptors == (0,)
        assert "per-minute" in str(e.value)
        assert e.value.decision.code == Code.OVER_LIMIT
        assert tg.check("test", key, hits=0).remaining == 5  # nothing was charged
        with pytest.raises(CostNeverFits):
            tg.acquire("test", key, hits=6, max_wait=5)


def test_invalid_request_raises_even_when_failing_open(server: Server) -> None:
    with Client(server.addr, fail_open=True) as tg:
        with pytest.raises(TollgateRequestError) as e:
            tg.check("", {"per_minute": "x"})
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


# ------------------------------------------------------------------ fail_open and timeouts
def test_fail_open_against_closed_port() -> None:
    addr = f"127.0.0.1:{free_port()}"  # nothing listens there
    with Client(addr, fail_open=True, timeout=0.5) as tg:
        t0 = time.monotonic()
        d = tg.check("test", [{"a": "1"}, {"b": "2"}])
        assert time.monotonic() - t0 < 1.5
        assert d.allowed and d.failed_open and d.error and "UNAVAILABLE" in d.error
        assert len(d.statuses) == 2 and all(s.allowed and s.limit is None for s in d.statuses)
        assert tg.acquire("test", {"a": "1"}).failed_open  # acquire does not wait either
    with Client(addr, fail_open=False, timeout=0.5) as tg:
        with pytest.raises(TollgateUnavailable) as e:
            tg.check("test", {"a": "1"})
        assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_timeout_is_a_deadline_and_fails_open() -> None:
    with fake_server(hang(1.0)) as (addr, _):
        with Client(addr, fail_open=True, timeout=0.2) as tg:
            assert tg.check("test", {"a": "1"}, timeout=5).allowed  # connect (answered at once)
            t0 = time.monotonic()
            d = tg.check("test", {"a": "1"})
            took = time.monotonic() - t0
            assert d.failed_open and d.error and "DEADLINE_EXCEEDED" in d.error
            assert 0.15 <= took < 1.0
        with Client(addr, fail_open=False, timeout=0.2) as tg:
            with pytest.raises(TollgateUnavailable) as e:
                tg.check("test", {"a": "1"})
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_over_limit_without_wait_is_cost_never_fits() -> None:
    with fake_server(over_limit(None)) as (addr, _), Client(addr) as tg:
        with pytest.raises(CostNeverFits) as e:
            tg.check("test", {"a": "1"})
        assert "fake" in str(e.value)


# ------------------------------------------------------------------ acquire
def test_acquire_never_spins_on_a_zero_wait() -> None:
    with fake_server(over_limit(0)) as (addr, fake), Client(addr) as tg:
        t0 = time.monotonic()
        with pytest.raises(AcquireTimeout) as e:
            tg.acquire("test", {"a": "1"}, max_wait=1.0)
        took = time.monotonic() - t0
        assert e.value.decision.wait == 0
        assert 0.9 <= took < 1.5
        # one check per MIN_SLEEP at most (plus the first): no busy loop
        assert 5 <= fake.calls <= 1.0 / MIN_SLEEP + 2


def test_acquire_raises_at_once_when_the_wait_passes_the_deadline(server: Server) -> None:
    key = {"sliding3s": unique()}
    with Client(server.addr) as tg:
        tg.check("test", key, hits=2)
        t0 = time.monotonic()
        with pytest.raises(AcquireTimeout) as e:
            tg.acquire("test", key, max_wait=0.5)
        assert time.monotonic() - t0 < 0.3  # no useless sleep
        assert e.value.decision.wait is not None and e.value.decision.wait > 0.5


def test_acquire_sliding_window(server: Server) -> None:
    """2 per trailing 3 s: the third acquire is allowed no earlier than 3 s after the first
    admission, and within the reported wait + 0.5 s."""
    key = {"sliding3s": unique()}
    with Client(server.addr) as tg:
        first_sent = time.monotonic()
        assert tg.check("test", key).allowed
        assert tg.check("test", key).allowed
        over = tg.check("test", key)
        t_over = time.monotonic()
        # window + one granule, in whole seconds rounded up
        assert not over.allowed and over.wait is not None and 1 <= over.wait <= 4
        d = tg.acquire("test", key, max_wait=10)
        done = time.monotonic()
        assert d.allowed
        assert done >= first_sent + 3.0, "acquire returned before the window allowed it"
        assert done - t_over <= over.wait + 0.5


def test_acquire_fixed_window(server: Server) -> None:
    """3 per wall-clock second (fixed windows aligned to the epoch): once a second is full, the
    next acquire returns in the next second, within the reported wait + 0.5 s."""
    with Client(server.addr) as tg:
        for _ in range(5):
            key = {"per_second": unique()}
            sent = time.time()
            tg.check("test", key, hits=3)
            over = tg.check("test", key)
            received = time.time()
            if math.floor(sent) != math.floor(received) or over.allowed:
                continue  # crossed a second boundary: the window is ambiguous, try again
            assert over.wait == 1
            d = tg.acquire("test", key, max_wait=5)
            done = time.time()
            assert d.allowed
            assert done >= math.floor(sent) + 1, "acquire returned inside the full window"
            assert done - received <= over.wait + 0.5
            return
        pytest.fail("every attempt straddled a second boundary")


# ------------------------------------------------------------------ LLM token helpers
def test_llm_tokens_two_calls(server: Server) -> None:
    tenant = unique("tenant")
    with Client(server.addr) as tg:
        d = tg.check_tokens(tenant)
        assert d.allowed and d.remaining == 100_000
        assert tg.check_tokens(tenant).remaining == 100_000  # a check charges nothing
        d = tg.record_tokens(tenant, 1_500)
        assert d.allowed and d.statuses[0].limit is not None
        assert d.statuses[0].limit.name == "tenant-tpm"
        assert d.remaining is not None and 98_500 <= d.remaining < 100_000
        # overdraft: a charge past the limit lands, and the budget is spent
        d = tg.record_tokens(tenant, 150_000)
        over = tg.check_tokens(tenant)
        assert not over.allowed and over.wait is not None and over.wait >= 1
        with pytest.raises(AcquireTimeout):
            tg.acquire_tokens(tenant, max_wait=0.5)


def test_llm_tokens_in_a_usage_domain_need_no_overdraft_key(server: Server) -> None:
    """tollgate --usage-domains: a plain limit (100 a minute) records every usage charge, as
    Envoy's stream-done call needs; the budget is spent once the charges pass it."""
    tenant = unique("tenant")
    with Client(server.addr, tokens_domain="usage-tokens") as tg:
        assert tg.check_tokens(tenant).remaining == 100
        tg.record_tokens(tenant, 60)
        assert tg.check_tokens(tenant).remaining == 40
        tg.record_tokens(tenant, 60)  # 60 against 40 left: lands anyway
        over = tg.check_tokens(tenant)
        assert not over.allowed and over.wait is not None and over.wait >= 1


def test_llm_tokens_domain_and_key_are_configurable(server: Server) -> None:
    with Client(server.addr, tokens_domain="test", tokens_key="per_minute") as tg:
        tenant = unique()
        tg.record_tokens(tenant, 4)
        d = tg.check_tokens(tenant)
        assert d.statuses[0].limit is not None and d.statuses[0].limit.name == "per-minute"
        assert d.remaining == 1


# ------------------------------------------------------------------ AsyncClient
async def test_async_client(server: Server) -> None:
    key = {"per_minute": unique()}
    async with AsyncClient(server.addr) as tg:
        assert [(await tg.check("test", key)).remaining for _ in range(5)] == [4, 3, 2, 1, 0]
        assert (await tg.check("test", key)).code == Code.OVER_LIMIT
        with pytest.raises(CostNeverFits):
            await tg.check("test", {"per_minute": unique()}, hits=6)
        tenant = unique("tenant")
        assert (await tg.check_tokens(tenant)).remaining == 100_000
        await tg.record_tokens(tenant, 200_000)
        assert not (await tg.check_tokens(tenant)).allowed


async def test_async_acquire(server: Server) -> None:
    key = {"sliding3s": unique()}
    async with AsyncClient(server.addr) as tg:
        first_sent = time.monotonic()
        assert (await tg.check("test", key, hits=2)).allowed
        over = await tg.check("test", key)
        t_over = time.monotonic()
        assert over.wait is not None
        with pytest.raises(AcquireTimeout):
            await tg.acquire("test", key, max_wait=0.5)
        assert (await tg.acquire("test", key)).allowed
        done = time.monotonic()
        assert done >= first_sent + 3.0
        assert done - t_over <= over.wait + 0.5


async def test_async_fail_open() -> None:
    addr = f"127.0.0.1:{free_port()}"
    async with AsyncClient(addr, fail_open=True) as tg:
        d = await tg.check("test", {"a": "1"})
        assert d.allowed and d.failed_open
    async with AsyncClient(addr) as tg:
        with pytest.raises(TollgateUnavailable):
            await tg.check("test", {"a": "1"})
    with fake_server(hang(1.0)) as (addr2, _):
        async with AsyncClient(addr2, fail_open=True, timeout=0.2) as tg:
            assert (await tg.check("test", {"a": "1"}, timeout=5)).allowed
            d = await tg.check("test", {"a": "1"})
            assert d.failed_open and d.error and "DEADLINE_EXCEEDED" in d.error


async def test_async_acquire_never_spins() -> None:
    with fake_server(over_limit(0)) as (addr, fake):
        async with AsyncClient(addr) as tg:
            with pytest.raises(AcquireTimeout):
                await tg.acquire("test", {"a": "1"}, max_wait=0.5)
        assert fake.calls <= 0.5 / MIN_SLEEP + 2


# ------------------------------------------------------------------ packaging
def test_no_top_level_envoy_package_and_no_descriptor_pool_clash() -> None:
    """Another copy of Envoy's rls.proto (e.g. xds-protos) already in protobuf's default pool
    must not break tollgate_client, and tollgate_client must not import a top-level `envoy` (or
    `tollgate`, the slots proto's package)."""
    code = r"""
import sys
from google.protobuf import descriptor_pb2, descriptor_pool
f = descriptor_pb2.FileDescriptorProto(
    name="envoy/service/ratelimit/v3/rls.proto", package="envoy.service.ratelimit.v3",
    syntax="proto3")
f.message_type.add(name="RateLimitRequest").field.add(name="other", number=9, type=9, label=1)
descriptor_pool.Default().AddSerializedFile(f.SerializeToString())
import tollgate_client
from tollgate_client._model import build_request
req, _ = build_request("d", {"k": "v"}, 0)
assert req.descriptors[0].HasField("hits_addend")
for top in ("envoy", "tollgate"):
    assert top not in sys.modules, sorted(m for m in sys.modules if m.startswith(top))
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_readme_llm_walkthrough_runs(server: Server) -> None:
    """The repository README's Python lines, run as written against examples/llm-gateway.yaml."""
    from conftest import REPO

    text = (REPO / "README.md").read_text()
    start = text.index("```python\nwith tg.slot(") + len("```python\n")
    snippet = text[start : text.index("```", start)]
    calls: list[str] = []
    with Client(server.addr) as tg:
        scope: dict[str, Any] = {
            "tg": tg,
            "used": 1_200,
            "call_the_model": lambda: calls.append("model") or "ok",
        }
        exec(snippet, scope)  # noqa: S102 - the README's own lines
        assert calls == ["model"] and scope["reply"] == "ok"
        # The slot was given back: all 8 of gpt-4o's are free.
        taken = [
            tg.acquire_slot("llm-gateway", [{"model_in_flight": "gpt-4o"}], max_wait=0.1)
            for _ in range(8)
        ]
        for slot in taken:
            assert tg.release_slot(slot).held


def test_the_readme_reservation_lines_run(server: Server) -> None:
    """The repository README's reservation lines, run as written against
    examples/llm-gateway.yaml: 1,024 reserved, 300 used, 300 spent."""
    from conftest import REPO

    text = (REPO / "README.md").read_text()
    start = text.index("```python\nwith tg.reserve(") + len("```python\n")
    snippet = text[start : text.index("```", start)]
    tenant = unique("acme")
    snippet = snippet.replace('"acme"', repr(tenant))
    with Client(server.addr) as tg:
        scope: dict[str, Any] = {"tg": tg, "used": 300, "call_the_model": lambda: "ok"}
        exec(snippet, scope)  # noqa: S102 - the README's own lines
        assert scope["r"].result.settled and scope["reply"] == "ok"
        (st,) = tg.check(
            "llm-gateway", Descriptor({"tenant_reserved_tokens": tenant}, hits=0)
        ).statuses
        assert st.remaining == 100_000 - 300


# ------------------------------------------------------------------ money budgets
def test_record_usage_charges_each_kind_at_its_price(server: Server) -> None:
    """examples/llm-gateway.yaml's monthly spend (USD 500): 1,000 gpt-4o input tokens (USD 2.50
    a million: 2,500 µUSD) and 500 output (USD 10: 5,000 µUSD) in one decision."""
    tenant = unique("tenant")
    with Client(server.addr) as tg:
        assert tg.check_spend(tenant).remaining == 500_000_000
        d = tg.record_usage(tenant, "gpt-4o", input=1_000, output=500)
        assert d.allowed
        assert tg.check_spend(tenant, "gpt-4o").remaining == 500_000_000 - 7_500
        # gpt-4o-mini cached input: USD 0.075 a million, 10 tokens → 0.75 µUSD, rounded up to 1.
        tg.record_usage(tenant, "gpt-4o-mini", cached_input=10)
        assert tg.check_spend(tenant).remaining == 500_000_000 - 7_501
        # A model the prices do not know: refused, nothing charged; no wait would ever help.
        with pytest.raises(CostNeverFits):
            tg.check_spend(tenant, "mystery")
        with pytest.raises(CostNeverFits):
            tg.record_usage(tenant, "mystery", output=10)
        assert tg.check_spend(tenant).remaining == 500_000_000 - 7_501
        with pytest.raises(ValueError):
            tg.record_usage(tenant, "gpt-4o", output=-1)


async def test_async_record_usage(server: Server) -> None:
    tenant = unique("tenant")
    async with AsyncClient(server.addr) as tg:
        await tg.record_usage(tenant, "gpt-4o", output=1_000_000)
        assert (await tg.check_spend(tenant)).remaining == 500_000_000 - 10_000_000


def test_the_readme_money_line_runs(server: Server) -> None:
    """The repository README's money-budget line, run as written against
    examples/llm-gateway.yaml: USD 0.0065 of the tenant's month."""
    from conftest import REPO

    text = (REPO / "README.md").read_text()
    start = text.index("```python\ntg.record_usage(") + len("```python\n")
    snippet = text[start : text.index("```", start)]
    tenant = unique("acme")
    snippet = snippet.replace('"acme"', repr(tenant))
    with Client(server.addr) as tg:
        exec(snippet, {"tg": tg})  # noqa: S102 - the README's own lines
        assert tg.check_spend(tenant).remaining == 500_000_000 - 6_500
