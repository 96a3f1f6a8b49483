"""The asyncio client (grpc.aio)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Literal

import grpc
import grpc.aio

from ._model import (
    DESERIALIZE,
    METHOD,
    SERIALIZE,
    UNSET,
    Decision,
    Descriptor,
    Descriptors,
    _Unset,
    build_request,
    check_timeout,
    next_sleep,
    on_rpc_error,
    parse_response,
    pick_timeout,
    target,
)
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
