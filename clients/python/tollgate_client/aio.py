"""The asyncio client (grpc.aio)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Literal

import grpc
import grpc.aio

from ._model import (
    DEFAULT_SPEND_KEY,
    ACQUIRE_DESERIALIZE,
    ACQUIRE_METHOD,
    DESERIALIZE,
    METHOD,
    RELEASE_METHOD,
    RENEW_METHOD,
    SERIALIZE,
    SLOT_DESERIALIZE,
    SLOT_SERIALIZE,
    UNSET,
    Decision,
    Descriptor,
    Descriptors,
    Slot,
    SlotResult,
    TollgateError,
    _Unset,
    build_request,
    build_slot_request,
    check_renew,
    check_timeout,
    failed_open,
    failed_open_slot,
    next_sleep,
    next_slot_sleep,
    on_rpc_error,
    parse_acquire,
    parse_response,
    parse_slot_response,
    pick_timeout,
    release_failed,
    renew_interval,
    target,
    usage_descriptors,
)
from ._reservation import (
    RESERVE_DESERIALIZE,
    RESERVE_METHOD,
    SETTLE_DESERIALIZE,
    SETTLE_METHOD,
    SETTLE_SERIALIZE,
    AsyncReservation,
    SettleResult,
    build_reserve_request,
    parse_reserve,
)
from ._pb.tollgate.reservations.v1 import reservations_pb2
from ._pb.tollgate.slots.v1 import slots_pb2
from .client import DEFAULT_MAX_WAIT, DEFAULT_TIMEOUT, DEFAULT_TOKENS_DOMAIN, DEFAULT_TOKENS_KEY


class AsyncClient:
    """The asyncio twin of `Client` (same arguments and semantics; methods are coroutines).

    Create it inside the event loop that uses it (a grpc.aio channel belongs to one loop), and
    `await client.close()` (or use `async with`).
    """

    def __init__(
        self,
        addr: str = "127.0.0.1:8081",
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        fail_open: bool = False,
        tokens_domain: str = DEFAULT_TOKENS_DOMAIN,
        tokens_key: str = DEFAULT_TOKENS_KEY,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, object]] = (),
        metadata: Sequence[tuple[str, str]] | None = None,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        self.timeout = check_timeout(timeout)
        self.fail_open = fail_open
        self.tokens_domain = tokens_domain
        self.tokens_key = tokens_key
        self._metadata = tuple(metadata) if metadata else None
        self._own_channel = channel is None
        if channel is None:
            tgt, tls = target(addr)
            if credentials is None and tls:
                credentials = grpc.ssl_channel_credentials()
            channel = (
                grpc.aio.secure_channel(tgt, credentials, options=list(options))
                if credentials is not None
                else grpc.aio.insecure_channel(tgt, options=list(options))
            )
        self._channel = channel
        self._call = channel.unary_unary(
            METHOD, request_serializer=SERIALIZE, response_deserializer=DESERIALIZE
        )
        self._acquire_slot = channel.unary_unary(
            ACQUIRE_METHOD, request_serializer=SERIALIZE, response_deserializer=ACQUIRE_DESERIALIZE
        )
        self._release_slot = channel.unary_unary(
            RELEASE_METHOD,
            request_serializer=SLOT_SERIALIZE,
            response_deserializer=SLOT_DESERIALIZE,
        )
        self._renew_slot = channel.unary_unary(
            RENEW_METHOD, request_serializer=SLOT_SERIALIZE, response_deserializer=SLOT_DESERIALIZE
        )
        self._reserve = channel.unary_unary(
            RESERVE_METHOD, request_serializer=SERIALIZE, response_deserializer=RESERVE_DESERIALIZE
        )
        self._settle = channel.unary_unary(
            SETTLE_METHOD,
            request_serializer=SETTLE_SERIALIZE,
            response_deserializer=SETTLE_DESERIALIZE,
        )

    async def check(
        self,
        domain: str,
        descriptors: Descriptors,
        hits: int | None = None,
        *,
        timeout: float | None | Literal[_Unset.UNSET] = UNSET,
    ) -> Decision:
        """See `Client.check`."""
        req, n = build_request(domain, descriptors, hits)
        try:
            resp = await self._call(
                req, timeout=pick_timeout(self.timeout, timeout), metadata=self._metadata
            )
        except grpc.RpcError as err:
            return on_rpc_error(err, self.fail_open, n)
        return parse_response(resp)

    async def acquire(
        self,
        domain: str,
        descriptors: Descriptors,
        hits: int | None = None,
        *,
        max_wait: float | None = DEFAULT_MAX_WAIT,
    ) -> Decision:
        """See `Client.acquire` (awaits `asyncio.sleep` between checks)."""
        start = time.monotonic()
        while True:
            decision = await self.check(domain, descriptors, hits)
            if decision.allowed:
                return decision
            now = time.monotonic()
            left = None if max_wait is None else start + max_wait - now
            await asyncio.sleep(next_sleep(decision, left, now - start))

    async def check_tokens(self, tenant: str) -> Decision:
        """See `Client.check_tokens`."""
        return await self.check(self.tokens_domain, Descriptor({self.tokens_key: tenant}, hits=0))

    async def acquire_tokens(
        self, tenant: str, *, max_wait: float | None = DEFAULT_MAX_WAIT
    ) -> Decision:
        """See `Client.acquire_tokens`."""
        return await self.acquire(
            self.tokens_domain, Descriptor({self.tokens_key: tenant}, hits=0), max_wait=max_wait
        )

    async def record_tokens(self, tenant: str, used: int) -> Decision:
        """See `Client.record_tokens`."""
        return await self.check(
            self.tokens_domain, Descriptor({self.tokens_key: tenant}, hits=used)
        )

    async def check_spend(
        self, tenant: str, model: str | None = None, *, spend_key: str = DEFAULT_SPEND_KEY
    ) -> Decision:
        """See `Client.check_spend`."""
        entries = {spend_key: tenant} if model is None else {spend_key: tenant, "model": model}
        return await self.check(self.tokens_domain, Descriptor(entries, hits=0))

    async def record_usage(
        self,
        tenant: str,
        model: str,
        *,
        input: int = 0,
        output: int = 0,
        cached_input: int = 0,
        spend_key: str = DEFAULT_SPEND_KEY,
    ) -> Decision:
        """See `Client.record_usage`."""
        ds = usage_descriptors(
            spend_key, tenant, model, input=input, output=output, cached_input=cached_input
        )
        return await self.check(self.tokens_domain, ds)

    async def acquire_slot(
        self,
        domain: str,
        descriptors: Descriptors,
        *,
        hits: int = 1,
        max_wait: float | None = DEFAULT_MAX_WAIT,
        timeout: float | None | Literal[_Unset.UNSET] = UNSET,
    ) -> Slot:
        """See `Client.acquire_slot` (awaits `asyncio.sleep` between tries)."""
        req, n = build_request(domain, descriptors, hits)
        t = pick_timeout(self.timeout, timeout)
        start = time.monotonic()
        tries = 0
        while True:
            try:
                resp = await self._acquire_slot(req, timeout=t, metadata=self._metadata)
            except grpc.RpcError as err:
                return failed_open_slot(domain, descriptors, on_rpc_error(err, self.fail_open, n))
            slot, decision = parse_acquire(domain, descriptors, resp)
            if decision.allowed:
                return slot
            now = time.monotonic()
            left = None if max_wait is None else start + max_wait - now
            await asyncio.sleep(next_slot_sleep(decision, left, now - start, tries))
            tries += 1

    async def release_slot(
        self, slot: Slot, *, timeout: float | None | Literal[_Unset.UNSET] = UNSET
    ) -> SlotResult:
        """See `Client.release_slot`."""
        return await self._slot_call(self._release_slot, slot, timeout, release=True)

    async def renew_slot(
        self, slot: Slot, *, timeout: float | None | Literal[_Unset.UNSET] = UNSET
    ) -> SlotResult:
        """See `Client.renew_slot`."""
        return await self._slot_call(self._renew_slot, slot, timeout, release=False)

    async def _slot_call(
        self,
        call: grpc.aio.UnaryUnaryMultiCallable[slots_pb2.SlotRequest, slots_pb2.SlotResponse],
        slot: Slot,
        timeout: float | None | Literal[_Unset.UNSET],
        release: bool,
    ) -> SlotResult:
        if not slot.id:
            return SlotResult(limits=0, failed_open=slot.failed_open)
        req = build_slot_request(slot)
        try:
            resp = await call(
                req, timeout=pick_timeout(self.timeout, timeout), metadata=self._metadata
            )
        except grpc.RpcError as err:
            return SlotResult(limits=0, failed_open=True, error=failed_open(err, self.fail_open))
        result = parse_slot_response(resp)
        slot.expires_at = None if release else result.expires_at
        return result

    @asynccontextmanager
    async def slot(
        self,
        domain: str,
        descriptors: Descriptors,
        *,
        hits: int = 1,
        max_wait: float | None = DEFAULT_MAX_WAIT,
        renew: bool | float = False,
    ) -> AsyncIterator[Slot]:
        """`async with client.slot(...) as slot:` — see `Client.slot` (the background renewal
        is a task of the running loop). The release also runs when the block is cancelled."""
        check_renew(renew)
        slot = await self.acquire_slot(domain, descriptors, hits=hits, max_wait=max_wait)
        interval = renew_interval(slot, renew)
        renewer = (
            asyncio.create_task(self._renew_every(slot, interval), name=f"tollgate-renew-{slot.id}")
            if interval is not None
            else None
        )
        try:
            yield slot
        except BaseException as exc:
            await _stop(renewer)
            try:
                await self.release_slot(slot)
            except TollgateError as err:
                release_failed(exc, slot, err)
            raise
        await _stop(renewer)
        await self.release_slot(slot)

    async def _renew_every(self, slot: Slot, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                result = await self.renew_slot(slot)
            except TollgateError as err:
                slot.renew_error = str(err)
                continue
            if result.failed_open:
                slot.renew_error = result.error
            elif not result.held:
                slot.lost = True
                return


    # ------------------------------------------------------------------ reservations
    async def reserve(
        self,
        domain: str,
        descriptors: Descriptors,
        estimate: int,
        *,
        max_wait: float | None = DEFAULT_MAX_WAIT,
        timeout: float | None | Literal[_Unset.UNSET] = UNSET,
    ) -> AsyncReservation:
        """See `Client.reserve`: `async with await tg.reserve(...) as r:` then
        `await r.settle(used)`."""
        req, n = build_reserve_request(domain, descriptors, estimate)
        t = pick_timeout(self.timeout, timeout)
        start = time.monotonic()
        while True:
            try:
                resp = await self._reserve(req, timeout=t, metadata=self._metadata)
            except grpc.RpcError as err:
                decision = on_rpc_error(err, self.fail_open, n)
                return AsyncReservation(
                    domain, descriptors, "", estimate, decision, self._settle_one
                )
            rid, decision = parse_reserve(resp)
            if decision.allowed:
                return AsyncReservation(
                    domain, descriptors, rid, estimate, decision, self._settle_one
                )
            now = time.monotonic()
            left = None if max_wait is None else start + max_wait - now
            await asyncio.sleep(next_sleep(decision, left, now - start))

    async def settle(
        self, reservation: AsyncReservation, actual: int | Sequence[int]
    ) -> SettleResult:
        """See `Client.settle`."""
        return await reservation.settle(actual)

    async def settle_id(self, domain: str, id: str, descriptors: Descriptors) -> SettleResult:
        """See `Client.settle_id`."""
        r = AsyncReservation(domain, (), id, 1, None, self._settle_one)
        return await r.settle(descriptors=descriptors)

    async def _settle_one(
        self, r: AsyncReservation, req: reservations_pb2.SettleRequest
    ) -> SettleResult:
        if not r.id:
            return SettleResult(limits=0, failed_open=r.failed_open)
        try:
            resp = await self._settle(req, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            return SettleResult(limits=0, failed_open=True, error=failed_open(err, self.fail_open))
        return SettleResult(limits=resp.limits)


    async def close(self) -> None:
        if self._own_channel:
            await self._channel.close(grace=None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def _stop(task: asyncio.Task[None] | None) -> None:
    """Cancels the renewal task and waits for it (asyncio.wait: a cancellation of the caller
    still propagates)."""
    if task is not None:
        task.cancel()
        await asyncio.wait([task])
