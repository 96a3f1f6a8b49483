"""Reservations (tollgate.reservations.v1.Reservations) against a real `tollgate serve` (memory
store and Redis): `reserve` charges an estimate up front, `settle` turns it into the actual use;
20 generations started together against a 1,000-token budget never spend past it; the async
twin.

Config (conftest.TEST_CONFIG): budget = 1,000 an hour."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from conftest import Server, unique

from tollgate_client import (
    AcquireTimeout,
    AsyncClient,
    Client,
    Descriptor,
    Reservation,
    TollgateRequestError,
)


def left(tg: Client, tenant: str) -> int:
    """What the tenant's budget has left (a check of cost 0)."""
    (st,) = tg.check("test", Descriptor({"budget": tenant}, hits=0)).statuses
    assert st.remaining is not None
    return st.remaining


def test_reserve_then_settle(server: Server) -> None:
    tenant = unique()
    with Client(server.addr) as tg:
        with tg.reserve("test", {"budget": tenant}, 300) as r:
            assert len(r.id) == 26 and r.decision is not None and r.decision.allowed
            assert left(tg, tenant) == 700
            result = r.settle(120)
        assert result.settled and result.limits == 1 and r.result == result
        assert left(tg, tenant) == 880
        assert not r.settle(0).settled  # a second settle changes nothing
        assert left(tg, tenant) == 880
        # above the estimate: the excess lands
        tg.reserve("test", {"budget": tenant}, 100).settle(250)
        assert left(tg, tenant) == 630


def test_an_exception_in_the_block_keeps_the_estimate(server: Server) -> None:
    tenant = unique()
    with Client(server.addr) as tg:
        with pytest.raises(RuntimeError), tg.reserve("test", {"budget": tenant}, 400):
            raise RuntimeError("the model call failed")
        assert left(tg, tenant) == 600


def test_an_estimate_that_does_not_fit_waits_then_times_out(server: Server) -> None:
    tenant = unique()
    with Client(server.addr) as tg:
        tg.reserve("test", {"budget": tenant}, 900)
        with pytest.raises(AcquireTimeout):
            tg.reserve("test", {"budget": tenant}, 200, max_wait=0)
        assert left(tg, tenant) == 100


def test_twenty_generations_together_never_spend_past_the_budget(server: Server) -> None:
    tenant = unique()
    admitted: list[Reservation] = []
    refused = 0
    lock = threading.Lock()
    go = threading.Barrier(20)

    def generation(tg: Client) -> None:
        nonlocal refused
        go.wait()
        try:
            r = tg.reserve("test", {"budget": tenant}, 100, max_wait=0)
        except AcquireTimeout:
            with lock:
                refused += 1
            return
        with lock:
            admitted.append(r)

    with Client(server.addr) as tg:
        threads = [threading.Thread(target=generation, args=(tg,)) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (len(admitted), refused) == (10, 10)
        for r in admitted:
            assert r.settle(100).settled
        assert left(tg, tenant) == 0, "spent exactly the budget"
        with pytest.raises(AcquireTimeout):
            tg.reserve("test", {"budget": tenant}, 1, max_wait=0)


def test_a_bad_id_is_a_request_error(server: Server) -> None:
    with Client(server.addr, fail_open=True) as tg:
        r = Reservation("test", {"budget": unique()}, "not-an-id", 1, None, tg._settle_one)
        with pytest.raises(TollgateRequestError) as e:
            r.settle(1)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_async_reserve_and_settle(server: Server) -> None:
    tenant = unique()

    async def run() -> None:
        async with AsyncClient(server.addr) as tg:
            async with await tg.reserve("test", {"budget": tenant}, 500) as r:
                assert r.id
                done = await r.settle(50)
            assert done.settled
            reserved = await asyncio.gather(
                *(tg.reserve("test", {"budget": tenant}, 100, max_wait=0) for _ in range(9)),
                return_exceptions=True,
            )
            ok = [x for x in reserved if not isinstance(x, BaseException)]
            assert len(ok) == 9  # 950 left: nine of 100
            with pytest.raises(AcquireTimeout):
                await tg.reserve("test", {"budget": tenant}, 100, max_wait=0)

    asyncio.run(run())


def test_settle_one_use_per_descriptor(server: Server) -> None:
    a, b, c = unique(), unique(), unique()
    with Client(server.addr) as tg:
        # tokens on a, one request on b: each descriptor its own cost
        r = tg.reserve("test", [{"budget": a}, Descriptor({"budget": b}, hits=1)], 300)
        assert (left(tg, a), left(tg, b)) == (700, 999)
        with pytest.raises(ValueError, match="1 uses for 2"):
            r.settle([5])
        with pytest.raises(ValueError, match="not both"):
            r.settle(5, descriptors=[Descriptor({"budget": a}, hits=5)])
        assert r.settle([120, 1]).limits == 2
        assert (left(tg, a), left(tg, b)) == (880, 999)

        # another process settles by id, with the descriptors it knows (each with its use)
        r = tg.reserve("test", {"budget": c}, 400)
        with pytest.raises(ValueError, match="needs its hits"):
            tg.settle_id("test", r.id, [{"budget": c}])
        assert tg.settle_id("test", r.id, [Descriptor({"budget": c}, hits=50)]).limits == 1
        assert left(tg, c) == 950
        assert tg.settle_id("test", r.id, [Descriptor({"budget": c}, hits=0)]).limits == 0


def test_async_settle_id(server: Server) -> None:
    tenant = unique()

    async def run() -> None:
        async with AsyncClient(server.addr) as tg:
            r = await tg.reserve("test", {"budget": tenant}, 500)
            done = await tg.settle_id("test", r.id, [Descriptor({"budget": tenant}, hits=70)])
            assert done.limits == 1

    asyncio.run(run())
    with Client(server.addr) as tg:
        assert left(tg, tenant) == 930
