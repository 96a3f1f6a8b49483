"""A client for tollgate, the Envoy-compatible rate limit service (ShouldRateLimit over gRPC).

    from tollgate_client import Client

    with Client("127.0.0.1:8081") as tg:
        d = tg.check("edge", {"api_key": "abc"})
        if not d.allowed:
            print("retry in", d.wait, "s")

`with tg.slot("llm-gateway", {"model_in_flight": "gpt-4o"}):` holds a slot of a concurrency
limit (requests in flight) while the block runs; `with tg.reserve(domain, descriptors, 4096) as
r: ... r.settle(used)` charges an estimate up front and settles it to the actual use. `AsyncClient` is the asyncio twin;
`tollgate_client.langchain` (extra `[langchain]`) has a LangChain rate limiter
(`TollgateRateLimiter`) and a callback handler that caps generations in flight
(`TollgateSlotHandler`).
"""

from ._model import (
    MIN_SLEEP,
    SLOT_POLL,
    AcquireTimeout,
    Code,
    CostNeverFits,
    Decision,
    Descriptor,
    DescriptorLike,
    Descriptors,
    DescriptorStatus,
    Limit,
    Slot,
    SlotResult,
    TollgateError,
    TollgateRequestError,
    TollgateUnavailable,
)
from ._model import DEFAULT_SPEND_KEY
from ._reservation import AsyncReservation, Reservation, SettleResult
from .aio import AsyncClient
from .client import (
    DEFAULT_MAX_WAIT,
    DEFAULT_TIMEOUT,
    DEFAULT_TOKENS_DOMAIN,
    DEFAULT_TOKENS_KEY,
    Client,
)

__version__ = "0.2.0"

__all__ = [
    "DEFAULT_MAX_WAIT",
    "DEFAULT_SPEND_KEY",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TOKENS_DOMAIN",
    "DEFAULT_TOKENS_KEY",
    "MIN_SLEEP",
    "SLOT_POLL",
    "AcquireTimeout",
    "AsyncClient",
    "AsyncReservation",
    "Client",
    "Code",
    "CostNeverFits",
    "Decision",
    "Descriptor",
    "DescriptorLike",
    "DescriptorStatus",
    "Descriptors",
    "Limit",
    "Reservation",
    "SettleResult",
    "Slot",
    "SlotResult",
    "TollgateError",
    "TollgateRequestError",
    "TollgateUnavailable",
]
