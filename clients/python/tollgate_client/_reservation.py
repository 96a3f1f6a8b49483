"""Reservations (tollgate.reservations.v1.Reservations): a cost charged up front with an
estimate, then settled with the actual use. Shared by the blocking and the async client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from ._model import (
    Decision,
    Descriptors,
    _as_descriptors,
    build_request,
    parse_response,
)
from ._pb.envoy.service.ratelimit.v3 import rls_pb2
from ._pb.tollgate.reservations.v1 import reservations_pb2

RESERVE_METHOD = "/tollgate.reservations.v1.Reservations/Reserve"
SETTLE_METHOD = "/tollgate.reservations.v1.Reservations/Settle"
RESERVE_DESERIALIZE = reservations_pb2.ReserveResponse.FromString
SETTLE_SERIALIZE = reservations_pb2.SettleRequest.SerializeToString
SETTLE_DESERIALIZE = reservations_pb2.SettleResponse.FromString


@dataclass(frozen=True)
class SettleResult:
    """The answer to a settle."""

    #: On how many limits the reservation was settled; 0: nothing changed (the id was settled
    #: already, expired, or never issued).
    limits: int
    #: tollgate did not answer and the client fails open (nothing was done: the estimate stays
    #: charged), or the reservation was a failed-open one.
    failed_open: bool = False
    error: str | None = field(default=None, compare=False)

    @property
    def settled(self) -> bool:
        return self.limits > 0


class _Reservation:
    """What both reservation kinds hold."""

    def __init__(
        self,
        domain: str,
        descriptors: Descriptors,
        id: str,
        estimate: int,
        decision: Decision | None,
    ) -> None:
        self.domain = domain
        self.descriptors = tuple(_as_descriptors(descriptors))
        self.id = id
        self.estimate = estimate
        self.decision = decision
        #: The settle's answer, once settled.
        self.result: SettleResult | None = None

    @property
    def failed_open(self) -> bool:
        """tollgate did not answer the reserve and the client fails open: nothing is charged."""
        return self.decision is not None and self.decision.failed_open

    def _settle_request(
        self, actual: int | Sequence[int] | None, descriptors: Descriptors | None
    ) -> reservations_pb2.SettleRequest:
        return build_settle_request(self, actual, descriptors)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(domain={self.domain!r}, id={self.id!r}, "
            f"estimate={self.estimate}, settled={self.result is not None})"
        )


class Reservation(_Reservation):
    """An estimate charged up front (`Client.reserve`) under an id, until `settle(actual)`
    turns it into the actual use on every limit it charged: the unused part comes back, an
    excess lands (past the limit if need be).

    `with client.reserve(domain, descriptors, estimate) as r: ...; r.settle(actual)`. Leaving
    the block without settling (an exception in it, or no settle) keeps the estimate charged:
    tollgate cannot know what was used, and charging the estimate is the conservative answer.
    The reservation's record expires with its limits' windows (twice the longest); a settle
    after that changes nothing.
    """

    def __init__(
        self,
        domain: str,
        descriptors: Descriptors,
        id: str,
        estimate: int,
        decision: Decision | None,
        settle: Callable[[Reservation, reservations_pb2.SettleRequest], SettleResult],
    ) -> None:
        super().__init__(domain, descriptors, id, estimate, decision)
        self._settle = settle

    def settle(
        self,
        actual: int | Sequence[int] | None = None,
        *,
        descriptors: Descriptors | None = None,
    ) -> SettleResult:
        """Settles with the actual use: `actual` an int (the use on every descriptor), or a
        sequence of ints, one per descriptor reserved (index-aligned: requests 1, tokens their
        count); or `descriptors=` other descriptors, each with its own `hits` (e.g. one per token
        kind for a money budget: `Descriptor({..., "kind": "input"}, hits=1200)`). A second
        settle changes nothing (tollgate answers 0 limits)."""
        req = self._settle_request(actual, descriptors)
        self.result = self._settle(self, req)
        return self.result

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class AsyncReservation(_Reservation):
    """`Reservation`'s asyncio twin (`AsyncClient.reserve`): `async with`, `await r.settle(n)`."""

    def __init__(
        self,
        domain: str,
        descriptors: Descriptors,
        id: str,
        estimate: int,
        decision: Decision | None,
        settle: Callable[
            [AsyncReservation, reservations_pb2.SettleRequest], Awaitable[SettleResult]
        ],
    ) -> None:
        super().__init__(domain, descriptors, id, estimate, decision)
        self._settle = settle

    async def settle(
        self,
        actual: int | Sequence[int] | None = None,
        *,
        descriptors: Descriptors | None = None,
    ) -> SettleResult:
        """As `Reservation.settle`."""
        req = self._settle_request(actual, descriptors)
        self.result = await self._settle(self, req)
        return self.result

    async def __aenter__(self) -> AsyncReservation:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


def check_estimate(estimate: int) -> int:
    if estimate != int(estimate) or estimate < 1:
        raise ValueError(f"an estimate must be a positive integer, got {estimate!r}")
    return int(estimate)


def build_reserve_request(
    domain: str, descriptors: Descriptors, estimate: int
) -> tuple[rls_pb2.RateLimitRequest, int]:
    """The Reserve request (a RateLimitRequest: each descriptor's hits the estimate, unless it
    has its own) and its number of descriptors."""
    return build_request(domain, descriptors, check_estimate(estimate))


def parse_reserve(
    resp: reservations_pb2.ReserveResponse,
) -> tuple[str, Decision]:
    """The reservation id ("" when nothing was reserved) and the decision."""
    return resp.reservation_id, parse_response(resp.decision)


def _check_use(n: int) -> int:
    if isinstance(n, bool) or n != int(n) or n < 0:
        raise ValueError(f"the actual use must be a non-negative integer, got {n!r}")
    return int(n)


def build_settle_request(
    r: _Reservation,
    actual: int | Sequence[int] | None,
    descriptors: Descriptors | None = None,
) -> reservations_pb2.SettleRequest:
    """The Settle request: every reserved descriptor with `actual` (an int), or each with its own
    (a sequence, index-aligned), or the `descriptors` given, each with its own `hits`."""
    pairs: list[tuple[tuple[tuple[str, str], ...], int]]
    if descriptors is not None:
        if actual is not None:
            raise ValueError("settle takes the actual use or descriptors, not both")
        pairs = []
        for d in _as_descriptors(descriptors):
            if d.hits is None:
                raise ValueError(f"a settle descriptor needs its hits (the use): {d!r}")
            pairs.append((d.entries, d.hits))
    elif actual is None:
        raise ValueError("settle needs the actual use")
    elif isinstance(actual, Sequence):
        if len(actual) != len(r.descriptors):
            raise ValueError(
                f"{len(actual)} uses for {len(r.descriptors)} reserved descriptors: give one each"
            )
        pairs = [(d.entries, _check_use(n)) for d, n in zip(r.descriptors, actual)]
    else:
        use = _check_use(actual)
        pairs = [(d.entries, use) for d in r.descriptors]
    req = reservations_pb2.SettleRequest(domain=r.domain, reservation_id=r.id)
    for entries, n in pairs:
        msg = req.descriptors.add()
        for k, v in entries:
            msg.entries.add(key=k, value=v)
        msg.hits_addend.value = n
    return req
