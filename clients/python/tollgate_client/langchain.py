"""A LangChain rate limiter backed by tollgate (needs the `[langchain]` extra: langchain-core).

    from tollgate_client import Client
    from tollgate_client.langchain import TollgateRateLimiter

    limiter = TollgateRateLimiter(
        Client("tollgate:8081"), "llm-gateway", {"tier": "free", "tenant": "acme"}
    )
    model = ChatOpenAI(..., rate_limiter=limiter)

Every process and host that asks the same tollgate with the same descriptors shares one limit.
LangChain's `acquire` carries no cost, so each acquire is one request (cost 1) against the given
descriptors; tokens go through `Client.check_tokens` / `Client.record_tokens` — or add a
check-only token descriptor to `descriptors` (`Descriptor({"tenant_tokens": "acme"}, hits=0)`)
so that one call also waits while the tenant's token budget is spent.
"""

from __future__ import annotations

import asyncio

try:
    from langchain_core.rate_limiters import BaseRateLimiter
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tollgate_client.langchain needs langchain-core: pip install 'tollgate-client[langchain]'"
    ) from e

from ._model import Descriptors
from .aio import AsyncClient
from .client import DEFAULT_MAX_WAIT, Client


class TollgateRateLimiter(BaseRateLimiter):
    """A `BaseRateLimiter` whose budget lives in tollgate.

    Args:
        client: the blocking Client used by `acquire` (its `fail_open` and `timeout` apply).
        domain, descriptors: what each acquire asks for (cost 1, or each Descriptor's own hits).
        async_client: used by `aacquire`; without one, `aacquire` runs the blocking `acquire`
            in a worker thread.
        max_wait: longest blocking wait in seconds (None: no limit). Past it `acquire` raises
            AcquireTimeout rather than returning False, because LangChain's chat models ignore
            the return value and would call the model anyway.
    """

    def __init__(
        self,
        client: Client,
        domain: str,
        descriptors: Descriptors,
        *,
        async_client: AsyncClient | None = None,
        max_wait: float | None = DEFAULT_MAX_WAIT,
    ) -> None:
        self.client = client
        self.async_client = async_client
        self.domain = domain
        self.descriptors = descriptors
        self.max_wait = max_wait

    def acquire(self, *, blocking: bool = True) -> bool:
        """blocking=True: wait until allowed (True) or raise AcquireTimeout; blocking=False:
        one check, True when allowed (and charged)."""
        if not blocking:
            return self.client.check(self.domain, self.descriptors).allowed
        self.client.acquire(self.domain, self.descriptors, max_wait=self.max_wait)
        return True

    async def aacquire(self, *, blocking: bool = True) -> bool:
        """As `acquire`, awaiting instead of blocking."""
        if self.async_client is None:
            return await asyncio.to_thread(self.acquire, blocking=blocking)
        if not blocking:
            return (await self.async_client.check(self.domain, self.descriptors)).allowed
        await self.async_client.acquire(self.domain, self.descriptors, max_wait=self.max_wait)
        return True
