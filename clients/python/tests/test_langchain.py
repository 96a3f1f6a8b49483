"""TollgateRateLimiter throttles a (fake) LangChain chat model."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import Server, unique
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.rate_limiters import BaseRateLimiter
from pydantic import Field

from tollgate_client import AcquireTimeout, AsyncClient, Client, Descriptor
from tollgate_client.langchain import TollgateRateLimiter


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
