"""A LangChain rate limiter and a cap on generations in flight, backed by tollgate (needs the
`[langchain]` extra: langchain-core).

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

A `BaseRateLimiter` only has `acquire` (nothing is given back when the call ends), so a cap on
generations in flight (`algorithm: concurrency`) is a callback handler instead:

    handler = TollgateSlotHandler(Client("tollgate:8081"), "llm-gateway",
                                  {"model_in_flight": "gpt-4o"})
    model = ChatOpenAI(..., callbacks=[handler])

and a token budget that holds under concurrency reserves each call's `max_tokens` when it starts
and settles with the tokens it used when it ends:

    handler = TollgateReservationHandler(Client("tollgate:8081"), "llm-gateway",
                                         {"tenant_reserved_tokens": "acme"})
    model = ChatOpenAI(..., max_tokens=1024, callbacks=[handler])
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any
from uuid import UUID

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import BaseMessage
    from langchain_core.outputs import LLMResult
    from langchain_core.rate_limiters import BaseRateLimiter
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tollgate_client.langchain needs langchain-core: pip install 'tollgate-client[langchain]'"
    ) from e

from ._model import Descriptors, Slot, TollgateError
from ._reservation import Reservation
from .aio import AsyncClient
from .client import DEFAULT_MAX_WAIT, Client

log = logging.getLogger(__name__)


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


class TollgateSlotHandler(BaseCallbackHandler):
    """A callback handler that caps generations in flight with tollgate concurrency slots.

    Each generation (each prompt of a batch: one LangChain run) takes a slot when it starts
    (`on_llm_start` / `on_chat_model_start`: `Client.acquire_slot`, waiting up to `max_wait`,
    then AcquireTimeout, which stops the generation before the model is called) and gives it
    back when it ends (`on_llm_end` / `on_llm_error`: `Client.release_slot`), keyed by run id.
    Every process and host using the same tollgate and descriptors shares one cap.

    Pass it where the model's runs see it: `ChatOpenAI(..., callbacks=[handler])` or
    `model.invoke(x, config={"callbacks": [handler]})`. It uses the blocking Client; in
    `ainvoke` LangChain runs it in a worker thread (so a wait blocks a thread, not the loop).

    A release that fails is logged, never raised (the generation already has its answer): the
    slot frees itself when its lease ends (lease_ttl), as does the slot of a process that dies
    mid-generation.

    Args:
        client: the blocking Client (its `fail_open` and `timeout` apply; failing open, a
            generation goes ahead without a slot).
        domain, descriptors: what each generation takes a slot on (`hits` slots each).
        max_wait: longest wait for a slot in seconds (None: no limit; 0: refuse at once).
    """

    #: An AcquireTimeout must stop the generation, not be logged and ignored.
    raise_error: bool = True

    def __init__(
        self,
        client: Client,
        domain: str,
        descriptors: Descriptors,
        *,
        hits: int = 1,
        max_wait: float | None = DEFAULT_MAX_WAIT,
    ) -> None:
        self.client = client
        self.domain = domain
        self.descriptors = descriptors
        self.hits = hits
        self.max_wait = max_wait
        self._slots: dict[UUID, Slot] = {}
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Generations holding a slot taken by this handler right now."""
        with self._lock:
            return len(self._slots)

    def _take(self, run_id: UUID) -> None:
        slot = self.client.acquire_slot(
            self.domain, self.descriptors, hits=self.hits, max_wait=self.max_wait
        )
        with self._lock:
            self._slots[run_id] = slot

    def _give_back(self, run_id: UUID) -> None:
        with self._lock:
            slot = self._slots.pop(run_id, None)
        if slot is None:
            return
        try:
            self.client.release_slot(slot)
        except TollgateError as err:
            log.warning("releasing slot %s failed (%s); it frees itself when its lease ends",
                        slot.id, err)

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any
    ) -> None:
        self._take(run_id)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        self._take(run_id)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self._give_back(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._give_back(run_id)


class TollgateReservationHandler(BaseCallbackHandler):
    """A callback handler that keeps a token budget exact under concurrency with tollgate
    reservations.

    Each generation (one LangChain run) reserves its estimate when it starts
    (`on_llm_start` / `on_chat_model_start`: `Client.reserve`, waiting up to `max_wait`, then
    AcquireTimeout, which stops the generation before the model is called): the run's
    `max_tokens` (from its invocation parameters), else `default_estimate`. When it ends
    (`on_llm_end`) the reservation is settled with the tokens the result reports it used (the
    `total_tokens` of `llm_output["token_usage"]`, else of the generations' messages'
    `usage_metadata`): the unused part of the estimate comes back to the budget at once.

    A generation that errors, or whose result reports no usage, is not settled: its estimate
    stays charged (tollgate cannot know what it used; it is the conservative answer). A settle
    that fails is logged, never raised.

    Args:
        client: the blocking Client (its `fail_open` and `timeout` apply).
        domain, descriptors: where the tokens are counted.
        default_estimate: the estimate of a run without `max_tokens`.
        max_wait: longest wait for the estimate to fit, in seconds (None: no limit; 0: refuse
            at once).
    """

    #: An AcquireTimeout must stop the generation, not be logged and ignored.
    raise_error: bool = True

    def __init__(
        self,
        client: Client,
        domain: str,
        descriptors: Descriptors,
        *,
        default_estimate: int = 4096,
        max_wait: float | None = DEFAULT_MAX_WAIT,
    ) -> None:
        self.client = client
        self.domain = domain
        self.descriptors = descriptors
        self.default_estimate = default_estimate
        self.max_wait = max_wait
        self._reservations: dict[UUID, Reservation] = {}
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Generations holding a reservation made by this handler right now."""
        with self._lock:
            return len(self._reservations)

    def _reserve(self, run_id: UUID, kwargs: dict[str, Any]) -> None:
        params = kwargs.get("invocation_params") or {}
        estimate = params.get("max_tokens") or params.get("max_output_tokens")
        r = self.client.reserve(
            self.domain,
            self.descriptors,
            int(estimate) if estimate else self.default_estimate,
            max_wait=self.max_wait,
        )
        with self._lock:
            self._reservations[run_id] = r

    def _settle(self, run_id: UUID, used: int | None) -> None:
        with self._lock:
            r = self._reservations.pop(run_id, None)
        if r is None or used is None:
            return
        try:
            r.settle(used)
        except TollgateError as err:
            log.warning("settling reservation %s failed (%s); its estimate stays charged",
                        r.id, err)

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any
    ) -> None:
        self._reserve(run_id, kwargs)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        self._reserve(run_id, kwargs)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self._settle(run_id, tokens_used(response))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._settle(run_id, None)


def tokens_used(response: LLMResult) -> int | None:
    """The tokens a result reports it used: `llm_output["token_usage"]["total_tokens"]`
    (OpenAI-style), else the sum of its messages' `usage_metadata["total_tokens"]`; None when
    it reports none."""
    usage = (response.llm_output or {}).get("token_usage") or {}
    if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
        return int(usage["total_tokens"])
    total, found = 0, False
    for generations in response.generations:
        for g in generations:
            meta = getattr(getattr(g, "message", None), "usage_metadata", None)
            if isinstance(meta, dict) and isinstance(meta.get("total_tokens"), int):
                total += int(meta["total_tokens"])
                found = True
    return total if found else None
