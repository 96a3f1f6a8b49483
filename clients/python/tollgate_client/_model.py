"""Results, errors and the request/response mapping shared by Client and AsyncClient."""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Union

import grpc

from ._pb.envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from ._pb.envoy.service.ratelimit.v3 import rls_pb2
from ._pb.tollgate.slots.v1 import slots_pb2

#: Shortest sleep between two checks of `acquire`, in seconds, even when the server reports a
#: wait of 0 with OVER_LIMIT: acquire never spins.
MIN_SLEEP = 0.05

#: Longest sleep, in seconds, between two tries of `acquire_slot` while a concurrency limit is
#: full. Its reported wait is when a lease ends (the latest a slot frees itself), but a release
#: frees one at any moment without telling anyone, so the client asks again sooner: after
#: MIN_SLEEP, then twice as long each time up to this, with jitter.
SLOT_POLL = 0.5

#: gRPC codes that mean "no answer from tollgate" (fail_open applies to these, and only these).
UNAVAILABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class _Unset(enum.Enum):
    UNSET = 0


#: "Not given" for per-call options whose None means something (timeout=None: no deadline).
UNSET = _Unset.UNSET


class Code(enum.IntEnum):
    """`RateLimitResponse.Code`."""

    UNKNOWN = 0
    OK = 1
    OVER_LIMIT = 2


@dataclass(frozen=True)
class Limit:
    """The limit that decided a descriptor (`current_limit`)."""

    name: str
    requests_per_unit: int
    unit: str  # "SECOND", "MINUTE", ... as the server reports it; "UNKNOWN": in flight

    @property
    def in_flight(self) -> bool:
        """A cap on requests in flight (tollgate's `algorithm: concurrency`), which tollgate
        reports in no unit of time (UNKNOWN)."""
        return self.unit == "UNKNOWN"


@dataclass(frozen=True)
class DescriptorStatus:
    """One descriptor's answer; `Decision.statuses[i]` belongs to the i-th descriptor sent."""

    code: Code
    #: The deciding limit; None when no limit applies (unknown domain, nothing matched) or when
    #: the result was made up by fail_open.
    limit: Limit | None
    #: `limit_remaining`; None when there is no limit.
    remaining: int | None
    #: `duration_until_reset` in seconds (whole seconds, rounded up by the server); None when
    #: absent. OVER_LIMIT: when this cost can succeed. OK: when the limit is whole again.
    reset: float | None

    @property
    def allowed(self) -> bool:
        return self.code == Code.OK


@dataclass(frozen=True)
class Decision:
    """The answer to one `check`."""

    code: Code
    statuses: tuple[DescriptorStatus, ...]
    #: Seconds until this request can succeed: the longest `duration_until_reset` among the
    #: OVER_LIMIT statuses (whole seconds, rounded up by the server). None when allowed.
    wait: float | None = None
    #: True when tollgate did not answer (UNAVAILABLE / DEADLINE_EXCEEDED) and the client was
    #: built with fail_open=True: this "allowed" result was made up by the client.
    failed_open: bool = False
    #: The gRPC error behind a failed-open result.
    error: str | None = field(default=None, compare=False)
    #: The id of the concurrency slots this request took (tollgate's `tollgate.slot` dynamic
    #: metadata), for `release_slot` / `renew_slot`; None when it took none.
    slot_id: str | None = field(default=None, compare=False)

    @property
    def allowed(self) -> bool:
        return self.code == Code.OK

    @property
    def remaining(self) -> int | None:
        """The least `limit_remaining` among the statuses that have a limit (None if none)."""
        left = [s.remaining for s in self.statuses if s.remaining is not None]
        return min(left) if left else None


class TollgateError(Exception):
    """Base class of this package's errors."""


class TollgateUnavailable(TollgateError):
    """tollgate did not answer in time (gRPC UNAVAILABLE or DEADLINE_EXCEEDED), fail_open=False."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"tollgate unavailable: {code.name}: {details}")
        self.code = code
        self.details = details


class TollgateRequestError(TollgateError):
    """Any other gRPC error, above all INVALID_ARGUMENT for a malformed request (an empty
    domain, too many descriptors). Raised whatever fail_open says: fail_open covers outages,
    not bugs in the caller."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"tollgate answered with an error: {code.name}: {details}")
        self.code = code
        self.details = details


class CostNeverFits(TollgateError):
    """OVER_LIMIT without a wait: the cost is larger than a limit can ever grant, so waiting and
    retrying would never succeed."""

    def __init__(self, decision: Decision, never: Sequence[int]) -> None:
        names = ", ".join(f"#{i} ({_limit_name(decision.statuses[i])})" for i in never)
        super().__init__(
            f"OVER_LIMIT with no wait: the cost can never fit the limit of descriptor {names}"
            if never
            else "OVER_LIMIT without any over-limit descriptor status"
        )
        self.decision = decision
        #: Indexes of the descriptors whose cost can never fit.
        self.descriptors = tuple(never)


def _limit_name(status: DescriptorStatus) -> str:
    return status.limit.name or "unnamed limit" if status.limit else "no limit reported"


class AcquireTimeout(TollgateError):
    """`acquire` could not be allowed before its deadline (raised as soon as the reported wait
    exceeds the time left, not after sleeping uselessly)."""

    def __init__(self, decision: Decision, waited: float) -> None:
        super().__init__(
            f"rate limited: the server's wait of {decision.wait}s goes past the deadline "
            f"(waited {waited:.2f}s)"
        )
        self.decision = decision
        self.waited = waited


@dataclass(frozen=True, init=False)
class Descriptor:
    """A descriptor: ordered entries, and optionally its own cost (`hits_addend`; 0 = check only).

    `Descriptor({"tier": "free", "tenant": "acme"})`, `Descriptor([("k", "v")], hits=0)`.
    """

    entries: tuple[tuple[str, str], ...]
    hits: int | None

    def __init__(
        self, entries: Mapping[str, str] | Iterable[tuple[str, str]], hits: int | None = None
    ) -> None:
        items = entries.items() if isinstance(entries, Mapping) else entries
        pairs = tuple((str(k), str(v)) for k, v in items)
        if hits is not None and (hits < 0 or hits != int(hits)):
            raise ValueError(f"hits must be a non-negative integer, got {hits!r}")
        object.__setattr__(self, "entries", pairs)
        object.__setattr__(self, "hits", None if hits is None else int(hits))


#: One descriptor (a mapping keeps its order) or a `Descriptor`.
DescriptorLike = Union[Mapping[str, str], Descriptor]
#: One descriptor, or a sequence of them.
Descriptors = Union[DescriptorLike, Sequence[DescriptorLike]]


def _as_descriptors(descriptors: Descriptors) -> list[Descriptor]:
    if isinstance(descriptors, (Mapping, Descriptor)):
        descriptors = [descriptors]
    if isinstance(descriptors, (str, bytes)):
        raise TypeError("descriptors must be a mapping, a Descriptor or a sequence of them")
    out = []
    for d in descriptors:
        if isinstance(d, Descriptor):
            out.append(d)
        elif isinstance(d, Mapping):
            out.append(Descriptor(d))
        else:
            raise TypeError(f"a descriptor must be a mapping or a Descriptor, got {d!r}")
    return out


#: The one RPC, as grpc's generic multicallable arguments (typed, unlike the generated stub).
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
SERIALIZE = rls_pb2.RateLimitRequest.SerializeToString
DESERIALIZE = rls_pb2.RateLimitResponse.FromString


def build_request(
    domain: str, descriptors: Descriptors, hits: int | None
) -> tuple[rls_pb2.RateLimitRequest, int]:
    """The request, and its number of descriptors. `hits` is the cost of every descriptor that
    has none of its own (sent as the descriptor's `hits_addend`, so 0 means check only)."""
    if hits is not None and (hits < 0 or hits != int(hits)):
        raise ValueError(f"hits must be a non-negative integer, got {hits!r}")
    req = rls_pb2.RateLimitRequest(domain=domain)
    ds = _as_descriptors(descriptors)
    for d in ds:
        msg = req.descriptors.add()
        for k, v in d.entries:
            msg.entries.add(key=k, value=v)
        cost = d.hits if d.hits is not None else hits
        if cost is not None:
            # Field by field: the message classes live in this package's own descriptor pool.
            msg.hits_addend.value = int(cost)
    return req, len(ds)


def _seconds(d: object) -> float:
    return d.seconds + d.nanos / 1e9  # type: ignore[attr-defined, no-any-return]


SLOT_KEY = "tollgate.slot"
SLOT_LEASE_KEY = "tollgate.slot_lease_ms"


def _metadata(resp: rls_pb2.RateLimitResponse, key: str) -> object:
    if not resp.HasField("dynamic_metadata") or key not in resp.dynamic_metadata.fields:
        return None
    v = resp.dynamic_metadata.fields[key]
    kind = v.WhichOneof("kind")
    return getattr(v, kind) if kind else None


def parse_response(resp: rls_pb2.RateLimitResponse) -> Decision:
    """The Decision; raises CostNeverFits for OVER_LIMIT without a wait."""
    statuses = []
    for s in resp.statuses:
        has_limit = s.HasField("current_limit")
        limit = (
            Limit(
                name=s.current_limit.name,
                requests_per_unit=s.current_limit.requests_per_unit,
                unit=rls_pb2.RateLimitResponse.RateLimit.Unit.Name(s.current_limit.unit),
            )
            if has_limit
            else None
        )
        statuses.append(
            DescriptorStatus(
                code=_code(s.code),
                limit=limit,
                remaining=s.limit_remaining if has_limit else None,
                reset=_seconds(s.duration_until_reset)
                if s.HasField("duration_until_reset")
                else None,
            )
        )
    code = _code(resp.overall_code)
    wait = None
    if code == Code.OVER_LIMIT:
        over = [(i, s) for i, s in enumerate(statuses) if s.code == Code.OVER_LIMIT]
        never = [i for i, s in over if s.reset is None]
        decision = Decision(code=code, statuses=tuple(statuses))
        if never or not over:
            # No OVER_LIMIT status at all would be a server bug; report it the same way.
            raise CostNeverFits(decision, never)
        wait = max(s.reset for _, s in over if s.reset is not None)
    slot = _metadata(resp, SLOT_KEY)
    return Decision(
        code=code,
        statuses=tuple(statuses),
        wait=wait,
        slot_id=slot if isinstance(slot, str) and slot else None,
    )


def _code(value: int) -> Code:
    try:
        return Code(value)
    except ValueError:
        return Code.UNKNOWN


def failed_open(err: grpc.RpcError, fail_open: bool) -> str:
    """Why a call failed open ("CODE: details"), or the right exception."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or str(code)
    if code in UNAVAILABLE_CODES:
        if fail_open:
            return f"{code.name}: {details}"
        raise TollgateUnavailable(code, details) from err
    raise TollgateRequestError(code, details) from err


def on_rpc_error(err: grpc.RpcError, fail_open: bool, n_descriptors: int) -> Decision:
    """A failed-open Decision, or the right exception."""
    error = failed_open(err, fail_open)
    ok = DescriptorStatus(code=Code.OK, limit=None, remaining=None, reset=None)
    return Decision(code=Code.OK, statuses=(ok,) * n_descriptors, failed_open=True, error=error)


def next_sleep(decision: Decision, time_left: float | None, waited: float) -> float:
    """How long acquire sleeps after an OVER_LIMIT decision, or AcquireTimeout."""
    wait = max(decision.wait or 0.0, MIN_SLEEP)
    if time_left is not None and wait > time_left:
        raise AcquireTimeout(decision, waited)
    return wait


def target(addr: str) -> tuple[str, bool]:
    """gRPC target and whether TLS is implied, for "host:port", "http://…" or "https://…"."""
    if addr.startswith("http://"):
        return addr[len("http://") :].rstrip("/"), False
    if addr.startswith("https://"):
        return addr[len("https://") :].rstrip("/"), True
    return addr, False


def pick_timeout(default: float | None, given: float | None | Literal[_Unset.UNSET]) -> float | None:
    return default if given is UNSET else check_timeout(given)


def check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and (not math.isfinite(timeout) or timeout <= 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    return timeout


# ---------------------------------------------------------------------- concurrency slots
@dataclass(init=False, eq=False)
class Slot:
    """Slots held under one id on the concurrency limits (`algorithm: concurrency`) a request
    reached, as `acquire_slot` returns them. Each frees itself when its lease ends unless
    released (`release_slot`) or renewed (`renew_slot`).

    Built by hand, `Slot(domain, descriptors, id)` names slots taken elsewhere (another process,
    or a `check` whose `Decision.slot_id` says it took some); release and renew need the same
    domain and descriptors that took them.
    """

    domain: str
    descriptors: tuple[Descriptor, ...]
    #: The slot id (26 hex digits); "" when no slot was taken: the descriptors reach no
    #: concurrency limit, or tollgate did not answer and the client fails open.
    id: str
    #: When the shortest of its leases ends unless renewed (Unix time, seconds); None when none
    #: is held (nothing taken, released, or found expired by a renew).
    expires_at: float | None
    #: The shortest lease of these slots in seconds, as the server reported it (None: unknown).
    lease: float | None
    #: The acquire's decision (None for a Slot built by hand).
    decision: Decision | None
    #: Set by the background renewal of `slot(..., renew=...)` when a renew found the id held
    #: nothing any more (its lease had ended): the work goes on without a slot.
    lost: bool
    #: The last error of a background renew (it keeps trying until the block ends).
    renew_error: str | None

    def __init__(
        self,
        domain: str,
        descriptors: Descriptors,
        id: str,
        *,
        expires_at: float | None = None,
        lease: float | None = None,
        decision: Decision | None = None,
    ) -> None:
        self.domain = domain
        self.descriptors = tuple(_as_descriptors(descriptors))
        self.id = id
        self.expires_at = expires_at
        self.lease = lease
        self.decision = decision
        self.lost = False
        self.renew_error = None

    @property
    def failed_open(self) -> bool:
        """tollgate did not answer the acquire and the client fails open: nothing is held."""
        return self.decision is not None and self.decision.failed_open


@dataclass(frozen=True)
class SlotResult:
    """The answer to `release_slot` / `renew_slot`."""

    #: On how many concurrency limits the id held slots (and so were released or renewed);
    #: 0: it held none (never taken, already released, or its lease ended).
    limits: int
    #: Renew: when the shortest renewed lease ends (Unix time, seconds); None when none was.
    expires_at: float | None = None
    #: tollgate did not answer and the client fails open (nothing was done), or the slot was
    #: a failed-open one.
    failed_open: bool = False
    error: str | None = field(default=None, compare=False)

    @property
    def held(self) -> bool:
        return self.limits > 0


ACQUIRE_METHOD = "/tollgate.slots.v1.Slots/Acquire"
RELEASE_METHOD = "/tollgate.slots.v1.Slots/Release"
RENEW_METHOD = "/tollgate.slots.v1.Slots/Renew"
ACQUIRE_DESERIALIZE = slots_pb2.AcquireResponse.FromString
SLOT_SERIALIZE = slots_pb2.SlotRequest.SerializeToString
SLOT_DESERIALIZE = slots_pb2.SlotResponse.FromString


def parse_acquire(
    domain: str, descriptors: Descriptors, resp: slots_pb2.AcquireResponse
) -> tuple[Slot, Decision]:
    """The Slot (id "" when none was taken) and the decision; raises CostNeverFits as
    `parse_response`."""
    decision = parse_response(resp.decision)
    lease_ms = _metadata(resp.decision, SLOT_LEASE_KEY)
    slot = Slot(
        domain,
        descriptors,
        resp.slot_id,
        expires_at=resp.expires_at_unix_ms / 1000 if resp.expires_at_unix_ms else None,
        lease=lease_ms / 1000 if isinstance(lease_ms, float) and resp.slot_id else None,
        decision=decision,
    )
    return slot, decision


def failed_open_slot(domain: str, descriptors: Descriptors, decision: Decision) -> Slot:
    return Slot(domain, descriptors, "", decision=decision)


def build_slot_request(slot: Slot) -> slots_pb2.SlotRequest:
    req = slots_pb2.SlotRequest(domain=slot.domain, slot_id=slot.id)
    for d in slot.descriptors:
        msg = req.descriptors.add()
        for k, v in d.entries:
            msg.entries.add(key=k, value=v)
    return req


def parse_slot_response(resp: slots_pb2.SlotResponse) -> SlotResult:
    return SlotResult(
        limits=resp.limits,
        expires_at=resp.expires_at_unix_ms / 1000 if resp.expires_at_unix_ms else None,
    )


def next_slot_sleep(
    decision: Decision, time_left: float | None, waited: float, tries: int
) -> float:
    """How long acquire_slot sleeps after an OVER_LIMIT decision, or AcquireTimeout.

    A full concurrency limit reports when a lease ends, the latest a slot frees itself; a
    release may free one at any moment, so the next try comes sooner (backing off from
    MIN_SLEEP to SLOT_POLL, with jitter) and the deadline is reached before giving up. An over
    rate limit's wait is exact: past the deadline it fails at once, as `acquire` does."""
    over = [s for s in decision.statuses if s.code == Code.OVER_LIMIT]
    exact = max((s.reset or 0.0 for s in over if not (s.limit and s.limit.in_flight)), default=0.0)
    if time_left is not None and (time_left <= 0 or exact > time_left):
        raise AcquireTimeout(decision, waited)
    wait = decision.wait or 0.0
    if any(s.limit and s.limit.in_flight for s in over):
        poll = min(SLOT_POLL, MIN_SLEEP * 2 ** min(tries, 16)) * random.uniform(0.5, 1.0)
        wait = max(exact, min(wait, poll))
    wait = max(wait, MIN_SLEEP)
    return wait if time_left is None else min(wait, time_left)


def check_renew(renew: bool | float) -> None:
    if not isinstance(renew, bool) and (not math.isfinite(renew) or renew <= 0):
        raise ValueError(
            f"renew must be True, False or a positive number of seconds, got {renew!r}"
        )


def renew_interval(slot: Slot, renew: bool | float) -> float | None:
    """The background renewal's period: half the lease for True, or the seconds given; None:
    no renewal (not asked, or nothing held)."""
    check_renew(renew)
    if renew is False or not slot.id:
        return None
    if renew is True:
        return max(slot.lease / 2, MIN_SLEEP) if slot.lease else None
    return float(renew)


def release_failed(exc: BaseException, slot: Slot, err: BaseException) -> None:
    """A release at the end of a block that raised failed: say so on the block's exception
    (which goes on), rather than hide it behind the release's."""
    exc.add_note(
        f"tollgate_client: releasing slot {slot.id} failed ({err}); "
        "it frees itself when its lease ends"
    )


#: The descriptor key of examples/llm-gateway.yaml's monthly money budget (`spend:`).
DEFAULT_SPEND_KEY = "tenant_spend"


def usage_descriptors(
    spend_key: str,
    tenant: str,
    model: str,
    *,
    input: int = 0,
    output: int = 0,
    cached_input: int = 0,
) -> list[Descriptor]:
    """One descriptor per token kind used (`spend_key=tenant, model=…, kind=…`, its count the
    cost), as a domain's `prices:` read them; a check naming the model when none was used."""
    counts = [("input", input), ("output", output), ("cached_input", cached_input)]
    for kind, n in counts:
        if n != int(n) or n < 0:
            raise ValueError(f"a token count must be a non-negative integer, got {kind}={n!r}")
    out = [
        Descriptor({spend_key: tenant, "model": model, "kind": kind}, hits=int(n))
        for kind, n in counts
        if n > 0
    ]
    return out or [Descriptor({spend_key: tenant, "model": model}, hits=0)]
