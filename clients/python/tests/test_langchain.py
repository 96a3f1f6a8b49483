"""TollgateRateLimiter throttles a (fake) LangChain chat model; TollgateSlotHandler caps its
generations in flight."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from conftest import Server, unique
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.rate_limiters import BaseRateLimiter
from pydantic import Field

from tollgate_client import AcquireTimeout, AsyncClient, Client, Descriptor
from tollgate_client.langchain import (
    TollgateRateLimiter,
    TollgateReservationHandler,
    TollgateSlotHandler,
)


class TimedModel(FakeListChatModel):
    """Records the wall time at which each generation started (after the limiter let it in)."""

    started: list[float] = Field(default_factory=list)

    def _call(self, *args: Any, **kwargs: Any) -> str:  # also used by ainvoke (in a thread)
        self.started.append(time.monotonic())
        return super()._call(*args, **kwargs)


def assert_two_per_second(started: list[float]) -> None:
    """chat: 2 per trailing second: any 3 consecutive generations span at least a second."""
    s = sorted(started)
    for a, c in zip(s, s[2:]):
        assert c - a >= 0.95, f"3 generations within {c - a:.3f}s: {s}"


def test_limiter_throttles_a_chat_model(server: Server) -> None:
    descriptors = {"chat": unique()}
    with Client(server.addr) as tg:
        limiter = TollgateRateLimiter(tg, "test", descriptors)
        assert isinstance(limiter, BaseRateLimiter)
        model = TimedModel(responses=["hi"], rate_limiter=limiter)
        t0 = time.monotonic()
        for _ in range(5):
            assert model.invoke("hello").content == "hi"
        assert len(model.started) == 5
        assert_two_per_second(model.started)
        assert time.monotonic() - t0 >= 2.0
        # non-blocking: True while the trailing second has room (at most 2), then False
        answers = [limiter.acquire(blocking=False) for _ in range(3)]
        assert answers[-1] is False and answers.count(True) <= 2


def test_limiter_is_shared_across_clients(server: Server) -> None:
    """Two chat models with their own clients (as on two hosts) share one request limit."""
    descriptors = {"chat": unique()}
    started: list[float] = []

    def run() -> None:
        with Client(server.addr) as tg:
            model = TimedModel(responses=["hi"],
                               rate_limiter=TollgateRateLimiter(tg, "test", descriptors))
            for _ in range(3):
                model.invoke("hello")
            started.extend(model.started)

    ts = [threading.Thread(target=run) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(started) == 6
    assert_two_per_second(started)


async def test_limiter_async(server: Server) -> None:
    descriptors = {"chat": unique()}
    with Client(server.addr) as tg:
        async with AsyncClient(server.addr) as atg:
            limiter = TollgateRateLimiter(tg, "test", descriptors, async_client=atg)
            model = TimedModel(responses=["hi"], rate_limiter=limiter)
            for _ in range(4):
                assert (await model.ainvoke("hello")).content == "hi"
            assert_two_per_second(model.started)
            assert not await limiter.aacquire(blocking=False)
            # without an AsyncClient, aacquire runs the blocking acquire in a thread
            plain = TollgateRateLimiter(tg, "test", {"chat": unique()})
            assert await plain.aacquire() and await plain.aacquire()
            assert not await plain.aacquire(blocking=False)


def test_limiter_with_token_budget(server: Server) -> None:
    """LLM pattern: the limiter also checks (cost 0) the tenant's token budget; tokens used are
    recorded after the call. Once the budget is spent, the next call does not reach the model."""
    tenant = unique("tenant")
    with Client(server.addr) as tg:
        limiter = TollgateRateLimiter(
            tg, "llm-gateway",
            [{"tier": "free", "tenant": tenant}, Descriptor({"tenant_tokens": tenant}, hits=0)],
            max_wait=0.5,
        )
        model = TimedModel(responses=["hi"], rate_limiter=limiter)
        model.invoke("hello")
        tg.record_tokens(tenant, 120_000)  # the (pretend) usage of that call: over budget
        with pytest.raises(AcquireTimeout):
            model.invoke("hello again")
        assert len(model.started) == 1


# ------------------------------------------------------------------ generations in flight
class SpanModel(FakeListChatModel):
    """Each generation takes `hold` seconds and records its (start, end); `fail` raises."""

    hold: float = 0.3
    fail: bool = False
    spans: list[tuple[float, float]] = Field(default_factory=list)

    def _call(self, *args: Any, **kwargs: Any) -> str:
        start = time.monotonic()
        time.sleep(self.hold)
        self.spans.append((start, time.monotonic()))
        if self.fail:
            raise RuntimeError("model down")
        return super()._call(*args, **kwargs)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = most = 0
    for _, step in events:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most


def cap_is_free(tg: Client, key: dict[str, str], n: int) -> bool:
    """n slots can be taken at once now (and are given back)."""
    try:
        slots = [tg.acquire_slot("test", key, max_wait=0) for _ in range(n)]
    except AcquireTimeout:
        return False
    for s in slots:
        tg.release_slot(s)
    return True


def test_slot_handler_caps_generations_in_flight(server: Server) -> None:
    key = {"cap2": unique()}  # 2 in flight
    with Client(server.addr) as tg:
        handler = TollgateSlotHandler(tg, "test", key, max_wait=30)
        model = SpanModel(responses=["hi"], callbacks=[handler])
        replies: list[Any] = []
        # six generations at once (FakeListChatModel.batch would run them one by one)
        ts = [threading.Thread(target=lambda: replies.append(model.invoke("hello")))
              for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert [r.content for r in replies] == ["hi"] * 6
        assert len(model.spans) == 6 and most_at_once(model.spans) == 2, model.spans
        assert handler.held == 0 and cap_is_free(tg, key, 2)


def test_slot_handler_refuses_beyond_the_cap(server: Server) -> None:
    key = {"cap2": unique()}
    with Client(server.addr) as tg:
        handler = TollgateSlotHandler(tg, "test", key, max_wait=0)  # refuse at once
        model = SpanModel(responses=["hi"], hold=1.0, callbacks=[handler])
        ts = [threading.Thread(target=model.invoke, args=("hello",)) for _ in range(2)]
        for t in ts:
            t.start()
        deadline = time.monotonic() + 5
        while handler.held < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handler.held == 2
        with pytest.raises(AcquireTimeout):
            model.invoke("a third")
        for t in ts:
            t.join()
        assert len(model.spans) == 2  # the third never reached the model
        assert handler.held == 0 and cap_is_free(tg, key, 2)


def test_slot_handler_releases_an_errored_generation(server: Server) -> None:
    key = {"solo": unique()}  # 1 in flight, a 5 min lease: only a release frees it
    with Client(server.addr) as tg:
        handler = TollgateSlotHandler(tg, "test", key, max_wait=0)
        broken = SpanModel(responses=["hi"], hold=0.0, fail=True, callbacks=[handler])
        for _ in range(2):  # the second would be refused had the first kept its slot
            with pytest.raises(RuntimeError, match="model down"):
                broken.invoke("hello")
        assert handler.held == 0 and cap_is_free(tg, key, 1)
        fine = SpanModel(responses=["hi"], hold=0.0, callbacks=[handler])
        assert fine.invoke("hello").content == "hi"
        assert cap_is_free(tg, key, 1)


async def test_slot_handler_async(server: Server) -> None:
    key = {"cap2": unique()}
    with Client(server.addr) as tg:
        handler = TollgateSlotHandler(tg, "test", key, max_wait=30)
        model = SpanModel(responses=["hi"], hold=0.3)
        replies = await asyncio.gather(
            *(model.ainvoke("hello", config={"callbacks": [handler]}) for _ in range(5))
        )
        assert [r.content for r in replies] == ["hi"] * 5
        assert most_at_once(model.spans) == 2, model.spans
        assert handler.held == 0 and cap_is_free(tg, key, 2)


class UsageModel(FakeListChatModel):
    """Reports `used` total tokens for each generation (OpenAI-style `token_usage`)."""

    used: int | None = 0
    fail: bool = False

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            raise RuntimeError("model down")
        result = super()._generate(*args, **kwargs)
        if self.used is not None:
            result.llm_output = {"token_usage": {"total_tokens": self.used}}
        return result


def budget_left(tg: Client, tenant: str) -> int:
    (st,) = tg.check("test", Descriptor({"budget": tenant}, hits=0)).statuses
    assert st.remaining is not None
    return st.remaining


def test_reservation_handler_reserves_max_tokens_and_settles_the_usage(server: Server) -> None:
    tenant = unique()
    with Client(server.addr) as tg:
        handler = TollgateReservationHandler(tg, "test", {"budget": tenant}, max_wait=0)
        model = UsageModel(responses=["hi"], used=120, callbacks=[handler])
        reply = model.invoke("hello", config={"metadata": {}}, max_tokens=300)
        assert reply.content == "hi"
        assert handler.held == 0 and budget_left(tg, tenant) == 880
        # no max_tokens: the default estimate (reserved, then settled the same way)
        handler.default_estimate = 800
        UsageModel(responses=["hi"], used=80, callbacks=[handler]).invoke("hello")
        assert budget_left(tg, tenant) == 800


def test_reservation_handler_refuses_what_does_not_fit_and_keeps_estimates_it_cannot_settle(
    server: Server,
) -> None:
    tenant = unique()
    with Client(server.addr) as tg:
        handler = TollgateReservationHandler(
            tg, "test", {"budget": tenant}, default_estimate=600, max_wait=0
        )
        # an errored generation, and one reporting no usage: their estimates stay charged
        with pytest.raises(RuntimeError, match="model down"):
            UsageModel(responses=["hi"], fail=True, callbacks=[handler]).invoke("hello")
        assert budget_left(tg, tenant) == 400
        with pytest.raises(AcquireTimeout):  # 600 more does not fit: the model is never called
            UsageModel(responses=["hi"], callbacks=[handler]).invoke("hello")
        UsageModel(responses=["hi"], used=None, callbacks=[handler]).invoke(
            "hello", max_tokens=300
        )
        assert handler.held == 0 and budget_left(tg, tenant) == 100
