"""Concurrency slots (`algorithm: concurrency`, tollgate.slots.v1.Slots) against a real
`tollgate serve` (memory store and Redis): acquire_slot / release_slot / renew_slot, the
`slot(...)` context manager, and the async twin.

Config (conftest.TEST_CONFIG): cap2 = 2 at once (5 s lease), solo = 1 at once (5 min lease:
only a release frees it within a test), brief = 1 at once (1 s lease)."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import grpc
import pytest
from conftest import Server, free_port, unique

from tollgate_client import (
    AcquireTimeout,
    AsyncClient,
    Client,
    CostNeverFits,
    Slot,
    TollgateRequestError,
    TollgateUnavailable,
)


class Gauge:
    """Counts who is inside at once, and the most ever seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.done = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1
            self.done += 1


def refused(tg: Client, descriptors: dict[str, str]) -> bool:
    """One try (max_wait=0): is the cap full?"""
    try:
        slot = tg.acquire_slot("test", descriptors, max_wait=0)
    except AcquireTimeout:
        return True
    tg.release_slot(slot)
    return False


# ------------------------------------------------------------------ plain calls
def test_acquire_and_release(server: Server) -> None:
    key = {"cap2": unique()}
    with Client(server.addr) as tg:
        t0 = time.time()
        a = tg.acquire_slot("test", key)
        b = tg.acquire_slot("test", key)
        assert re.fullmatch(r"[0-9a-f]{26}", a.id) and a.id != b.id
        assert a.lease == 5.0 and a.expires_at is not None
        assert t0 + 4.5 <= a.expires_at <= time.time() + 5.5
        assert a.decision is not None and a.decision.allowed and not a.failed_open
        (st,) = a.decision.statuses
        assert st.limit is not None and st.limit.in_flight and st.limit.name == "cap-2"
        # full: one try refuses with the honest wait (when the first lease ends)
        with pytest.raises(AcquireTimeout) as e:
            tg.acquire_slot("test", key, max_wait=0)
        assert e.value.decision.wait is not None and 1 <= e.value.decision.wait <= 5
        r = tg.release_slot(a)
        assert r.held and r.limits == 1 and a.expires_at is None
        assert not tg.release_slot(a).held  # already released: frees nothing
        c = tg.acquire_slot("test", key, max_wait=0)  # the freed slot
        for s in (b, c):
            assert tg.release_slot(s).limits == 1


def test_cost_never_fits(server: Server) -> None:
    with Client(server.addr) as tg, pytest.raises(CostNeverFits):
        tg.acquire_slot("test", {"cap2": unique()}, hits=3, max_wait=5)


def test_hits_takes_that_many_slots(server: Server) -> None:
    key = {"cap2": unique()}
    with Client(server.addr) as tg:
        both = tg.acquire_slot("test", key, hits=2)
        assert refused(tg, key)
        assert tg.release_slot(both).limits == 1  # one limit, both slots freed
        assert not refused(tg, key)


def test_release_of_an_unknown_id_frees_nothing(server: Server) -> None:
    key = {"solo": unique()}
    with Client(server.addr, fail_open=True) as tg:
        held = tg.acquire_slot("test", key)
        r = tg.release_slot(Slot("test", key, "0" * 25 + "1"))
        assert r.limits == 0 and not r.held and not r.failed_open
        assert refused(tg, key)  # still held by `held`
        # a malformed id is a bug, not an outage: raised even when failing open
        with pytest.raises(TollgateRequestError) as e:
            tg.release_slot(Slot("test", key, "not-an-id"))
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert tg.release_slot(held).limits == 1
        assert not refused(tg, key)


def test_a_slot_never_released_frees_itself_after_its_lease(server: Server) -> None:
    key = {"brief": unique()}  # lease_ttl: 1s
    with Client(server.addr) as tg:
        forgotten = tg.acquire_slot("test", key)
        assert forgotten.lease == 1.0
        assert refused(tg, key)
        t0 = time.monotonic()
        later = tg.acquire_slot("test", key, max_wait=5)  # waits for the lease to end
        took = time.monotonic() - t0
        assert 0.5 <= took < 2.5, took
        assert tg.release_slot(forgotten).limits == 0  # its lease had ended
        assert tg.release_slot(later).limits == 1


def test_renew(server: Server) -> None:
    key = {"brief": unique()}  # lease_ttl: 1s
    with Client(server.addr) as tg:
        slot = tg.acquire_slot("test", key)
        first = slot.expires_at
        assert first is not None
        for _ in range(3):  # held 1.8 s in all, past its 1 s lease
            time.sleep(0.6)
            r = tg.renew_slot(slot)
            assert r.held and r.expires_at is not None and r.expires_at == slot.expires_at
        assert slot.expires_at > first + 1.5
        assert refused(tg, key)
        assert tg.release_slot(slot).held
        assert not tg.renew_slot(slot).held  # released: nothing to renew


def test_waits_for_a_release_not_for_the_lease(server: Server) -> None:
    """solo's lease is 5 minutes; a release frees it at once and the waiter gets it soon."""
    key = {"solo": unique()}
    with Client(server.addr) as tg:
        holder = tg.acquire_slot("test", key)
        threading.Timer(0.5, tg.release_slot, args=(holder,)).start()
        t0 = time.monotonic()
        slot = tg.acquire_slot("test", key, max_wait=10)
        took = time.monotonic() - t0
        assert 0.45 <= took < 1.5, took
        tg.release_slot(slot)


def test_deadline_of_a_full_cap(server: Server) -> None:
    """Full for longer than max_wait: it tries until the deadline, then AcquireTimeout."""
    key = {"solo": unique()}
    with Client(server.addr) as tg:
        holder = tg.acquire_slot("test", key)
        t0 = time.monotonic()
        with pytest.raises(AcquireTimeout):
            tg.acquire_slot("test", key, max_wait=1.0)
        assert 0.95 <= time.monotonic() - t0 < 1.8
        tg.release_slot(holder)


def test_over_rate_limit_fails_at_once_and_takes_nothing(server: Server) -> None:
    v = unique()
    with Client(server.addr) as tg:
        # sliding3s (2 per trailing 3 s, no window edge to cross): full for about 3 s
        assert tg.check("test", {"sliding3s": v}, hits=2).allowed
        t0 = time.monotonic()
        with pytest.raises(AcquireTimeout) as e:  # its wait (exact) is past max_wait
            tg.acquire_slot("test", [{"solo": v}, {"sliding3s": v}], max_wait=0.5)
        assert time.monotonic() - t0 < 0.3  # no useless sleep
        assert e.value.decision.wait is not None and e.value.decision.wait > 0.5
        assert not refused(tg, {"solo": v})  # all or nothing: no slot was taken


def test_no_concurrency_limit_takes_no_slot(server: Server) -> None:
    with Client(server.addr) as tg:
        slot = tg.acquire_slot("test", {"per_minute": unique()})
        assert slot.id == "" and slot.expires_at is None and not slot.failed_open
        r = tg.release_slot(slot)  # nothing sent
        assert r.limits == 0 and not r.failed_open


def test_check_reports_the_slot_it_took(server: Server) -> None:
    """ShouldRateLimit takes slots too; Decision.slot_id (tollgate.slot) names them."""
    key = {"solo": unique()}
    with Client(server.addr) as tg:
        d = tg.check("test", key)
        assert d.allowed and d.slot_id and re.fullmatch(r"[0-9a-f]{26}", d.slot_id)
        assert refused(tg, key)
        assert tg.release_slot(Slot("test", key, d.slot_id)).limits == 1
        assert not refused(tg, key)
        assert tg.check("test", {"per_minute": unique()}).slot_id is None


# ------------------------------------------------------------------ the context manager
def test_cap_across_threads(server: Server) -> None:
    """10 threads, cap 2: never more than 2 inside at once, and all of them get in."""
    key = {"cap2": unique()}
    gauge = Gauge()
    errors: list[BaseException] = []

    with Client(server.addr) as tg:

        def work() -> None:
            try:
                with tg.slot("test", key, max_wait=30):
                    gauge.enter()
                    time.sleep(0.2)
                    gauge.leave()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        t0 = time.monotonic()
        ts = [threading.Thread(target=work) for _ in range(10)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        took = time.monotonic() - t0
        assert not errors, errors
        assert gauge.done == 10 and gauge.most == 2, vars(gauge)
        assert took >= 5 * 0.2 - 0.05
        assert not refused(tg, key) and not refused(tg, key)  # every slot given back


def test_released_when_the_block_raises(server: Server) -> None:
    key = {"solo": unique()}  # 5 min lease: only the release can free it
    with Client(server.addr) as tg:
        with pytest.raises(RuntimeError, match="boom"):
            with tg.slot("test", key) as slot:
                assert slot.id and refused(tg, key)
                raise RuntimeError("boom")
        assert slot.expires_at is None
        assert not refused(tg, key)


def test_slot_waits_then_raises_acquire_timeout(server: Server) -> None:
    key = {"solo": unique()}
    with Client(server.addr) as tg:
        with tg.slot("test", key):
            with pytest.raises(AcquireTimeout):
                with tg.slot("test", key, max_wait=0.3):
                    pytest.fail("entered a full cap")
        assert not refused(tg, key)


def test_background_renewal(server: Server) -> None:
    key = {"brief": unique()}  # lease_ttl: 1s, renewed every 0.5 s
    with Client(server.addr) as tg:
        with tg.slot("test", key, renew=True) as slot:
            first = slot.expires_at
            time.sleep(2.0)  # twice the lease
            assert refused(tg, key), "the slot expired: it was not renewed"
            assert not slot.lost and slot.renew_error is None
            assert slot.expires_at is not None and first is not None
            assert slot.expires_at > first + 1.0
        assert not refused(tg, key)
        with pytest.raises(ValueError):
            with tg.slot("test", key, renew=-1):
                pass
        assert not refused(tg, key)  # nothing taken by the refused call


def test_lost_slot_is_reported(server: Server) -> None:
    """A renewal that comes after the lease ended finds nothing held: slot.lost."""
    key = {"brief": unique()}
    with Client(server.addr) as tg:
        with tg.slot("test", key, renew=1.5) as slot:
            time.sleep(1.8)
            assert slot.lost


# ------------------------------------------------------------------ fail_open
def test_fail_open() -> None:
    addr = f"127.0.0.1:{free_port()}"  # nothing listens there
    with Client(addr, fail_open=True, timeout=0.5) as tg:
        with tg.slot("test", {"solo": "x"}, renew=True) as slot:
            assert slot.failed_open and slot.id == "" and slot.decision is not None
            assert slot.decision.error and "UNAVAILABLE" in slot.decision.error
        r = tg.release_slot(slot)
        assert r.failed_open and r.limits == 0
        r = tg.release_slot(Slot("test", {"solo": "x"}, "0" * 25 + "1"))
        assert r.failed_open and r.error and "UNAVAILABLE" in r.error
    with Client(addr, fail_open=False, timeout=0.5) as tg:
        with pytest.raises(TollgateUnavailable):
            with tg.slot("test", {"solo": "x"}):
                pass
        with pytest.raises(TollgateUnavailable):
            tg.release_slot(Slot("test", {"solo": "x"}, "0" * 25 + "1"))


def test_failed_release_does_not_hide_the_block_error(server: Server) -> None:
    key = {"solo": unique()}
    with Client(server.addr) as tg:
        with pytest.raises(RuntimeError, match="boom") as e:
            with tg.slot("test", key) as slot:
                slot.id = "bad"  # the release will be refused (INVALID_ARGUMENT)
                raise RuntimeError("boom")
        assert any("releasing slot bad failed" in n for n in e.value.__notes__)


# ------------------------------------------------------------------ asyncio
async def test_async_slots(server: Server) -> None:
    key = {"cap2": unique()}
    async with AsyncClient(server.addr) as tg:
        a = await tg.acquire_slot("test", key)
        b = await tg.acquire_slot("test", key)
        with pytest.raises(AcquireTimeout):
            await tg.acquire_slot("test", key, max_wait=0)
        assert (await tg.renew_slot(a)).held
        assert (await tg.release_slot(a)).limits == 1
        assert (await tg.release_slot(a)).limits == 0
        c = await tg.acquire_slot("test", key, max_wait=0)
        for s in (b, c):
            assert (await tg.release_slot(s)).held


async def test_async_cap(server: Server) -> None:
    key = {"cap2": unique()}
    gauge = Gauge()
    async with AsyncClient(server.addr) as tg:

        async def work() -> None:
            async with tg.slot("test", key, max_wait=30):
                gauge.enter()
                await asyncio.sleep(0.2)
                gauge.leave()

        await asyncio.gather(*(work() for _ in range(8)))
        assert gauge.done == 8 and gauge.most == 2, vars(gauge)
        # released on an exception, and on a cancellation
        with pytest.raises(RuntimeError):
            async with tg.slot("test", key):
                raise RuntimeError("boom")
        inside = asyncio.Event()

        async def hold() -> None:
            async with tg.slot("test", key, max_wait=0), tg.slot("test", key, max_wait=0):
                inside.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(hold())
        await inside.wait()
        with pytest.raises(AcquireTimeout):
            await tg.acquire_slot("test", key, max_wait=0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        x = await tg.acquire_slot("test", key, max_wait=0)
        y = await tg.acquire_slot("test", key, max_wait=0)
        await tg.release_slot(x)
        await tg.release_slot(y)


async def test_async_renewal_and_fail_open(server: Server) -> None:
    key = {"brief": unique()}
    async with AsyncClient(server.addr) as tg:
        async with tg.slot("test", key, renew=True) as slot:
            await asyncio.sleep(2.0)
            with pytest.raises(AcquireTimeout):
                await tg.acquire_slot("test", key, max_wait=0)
            assert not slot.lost and slot.renew_error is None
        (await tg.release_slot(await tg.acquire_slot("test", key, max_wait=0)))
    async with AsyncClient(f"127.0.0.1:{free_port()}", fail_open=True) as tg:
        async with tg.slot("test", key) as slot:
            assert slot.failed_open and slot.id == ""
