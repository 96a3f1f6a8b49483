"""The blocking client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Literal

import grpc

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
    Reservation,
    SettleResult,
    build_reserve_request,
    parse_reserve,
)
from ._pb.tollgate.reservations.v1 import reservations_pb2
from ._pb.tollgate.slots.v1 import slots_pb2

#: Default deadline of one ShouldRateLimit call, in seconds.
DEFAULT_TIMEOUT = 0.5
#: Default longest time `acquire` waits in total, in seconds.
DEFAULT_MAX_WAIT = 60.0
#: Defaults of the LLM token helpers, matching examples/llm-gateway.yaml.
DEFAULT_TOKENS_DOMAIN = "llm-gateway"
DEFAULT_TOKENS_KEY = "tenant_tokens"


class Client:
    """A blocking tollgate client (thread-safe; share one per process).

    Args:
        addr: "host:port", "http://host:port" or "https://host:port" (TLS).
        timeout: deadline of each ShouldRateLimit call in seconds (default 0.5); None = no
            deadline (not recommended: an unreachable server then blocks until it answers).
        fail_open: when tollgate does not answer (gRPC UNAVAILABLE or DEADLINE_EXCEEDED),
            True returns an allowed Decision with `failed_open=True`; False (the default) raises
            TollgateUnavailable. Other gRPC errors (INVALID_ARGUMENT, ...) always raise.
        tokens_domain, tokens_key: where `check_tokens` / `record_tokens` send tenant tokens
            (defaults: examples/llm-gateway.yaml's `llm-gateway` and `tenant_tokens`).
        credentials: channel credentials for TLS (default for https://: system roots).
        options: extra gRPC channel options.
        metadata: gRPC metadata sent with every call.
        channel: use this channel instead of creating one (addr is then ignored; it is not
            closed by `close`).
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
        channel: grpc.Channel | None = None,
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
                grpc.secure_channel(tgt, credentials, options=list(options))
                if credentials is not None
                else grpc.insecure_channel(tgt, options=list(options))
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

    def check(
        self,
        domain: str,
        descriptors: Descriptors,
        hits: int | None = None,
        *,
        timeout: float | None | Literal[_Unset.UNSET] = UNSET,
    ) -> Decision:
        """Ask once (and charge when allowed).

        Args:
            domain: the config domain.
            descriptors: one descriptor (a mapping such as {"tenant": "acme"}, in order, or a
                Descriptor) or a sequence of them; all are decided together, all or nothing.
            hits: cost of each descriptor without its own `Descriptor.hits`; default 1,
                0 = check only (nothing is charged).
            timeout: this call's deadline (default: the client's).

        Returns the Decision. Raises CostNeverFits when OVER_LIMIT with no wait (the cost can
        never fit), TollgateUnavailable (fail_open=False) or TollgateRequestError.
        """
        req, n = build_request(domain, descriptors, hits)
        t = pick_timeout(self.timeout, timeout)
        try:
            resp = self._call(req, timeout=t, metadata=self._metadata)
        except grpc.RpcError as err:
            return on_rpc_error(err, self.fail_open, n)
        return parse_response(resp)

    def acquire(
        self,
        domain: str,
        descriptors: Descriptors,
        hits: int | None = None,
        *,
        max_wait: float | None = DEFAULT_MAX_WAIT,
    ) -> Decision:
        """Block until the request is allowed (and charged), sleeping the wait the server
        reported between checks, never spinning.

        The server reports waits in whole seconds, rounded up, so acquire may return up to about
        a second later than strictly necessary, never earlier. A wait of 0 with OVER_LIMIT still
        sleeps MIN_SLEEP (50 ms). When the reported wait goes past `max_wait` seconds from the
        call (None: no deadline), AcquireTimeout is raised at once instead of sleeping. A
        check in flight may run past the deadline by up to one call's timeout.
        """
        start = time.monotonic()
        while True:
            decision = self.check(domain, descriptors, hits)
            if decision.allowed:
                return decision
            now = time.monotonic()
            left = None if max_wait is None else start + max_wait - now
            time.sleep(next_sleep(decision, left, now - start))

    # ------------------------------------------------------------------ LLM token budget
    def check_tokens(self, tenant: str) -> Decision:
        """Before a model call: is the tenant's token budget spent? Check only (cost 0), so it
        charges nothing; OVER_LIMIT (with `wait`) while the budget is in debt."""
        return self.check(self.tokens_domain, Descriptor({self.tokens_key: tenant}, hits=0))

    def acquire_tokens(self, tenant: str, *, max_wait: float | None = DEFAULT_MAX_WAIT) -> Decision:
        """`check_tokens`, waiting (as `acquire`) until the budget is no longer spent."""
        return self.acquire(
            self.tokens_domain, Descriptor({self.tokens_key: tenant}, hits=0), max_wait=max_wait
        )

    def record_tokens(self, tenant: str, used: int) -> Decision:
        """After a model call: charge the tokens it used. With an `overdraft: true` limit (as in
        examples/llm-gateway.yaml) the charge always lands, even past the limit; the Decision
        then says whether the budget is now spent. With a limit without overdraft an
        OVER_LIMIT answer means nothing was recorded."""
        return self.check(self.tokens_domain, Descriptor({self.tokens_key: tenant}, hits=used))

    def check_spend(
        self, tenant: str, model: str | None = None, *, spend_key: str = DEFAULT_SPEND_KEY
    ) -> Decision:
        """Before a model call: is the tenant's money budget (a `spend:` limit) spent? Check
        only (cost 0); naming `model` also refuses (CostNeverFits) a model the domain's prices
        do not know.
        `remaining` is in micro-units of the currency (capped at 2^32 - 1 by Envoy's API)."""
        entries = {spend_key: tenant} if model is None else {spend_key: tenant, "model": model}
        return self.check(self.tokens_domain, Descriptor(entries, hits=0))

    def record_usage(
        self,
        tenant: str,
        model: str,
        *,
        input: int = 0,
        output: int = 0,
        cached_input: int = 0,
        spend_key: str = DEFAULT_SPEND_KEY,
    ) -> Decision:
        """After a model call: charge its tokens against the tenant's money budget, each kind at
        the model's price (the domain's `prices:`), in one decision: one descriptor per kind
        (`tenant_spend, model, kind`). With `overdraft: true` (examples/llm-gateway.yaml) the
        charge always lands; a model the prices do not know is refused and charges nothing
        (CostNeverFits: no wait would help)."""
        ds = usage_descriptors(
            spend_key, tenant, model, input=input, output=output, cached_input=cached_input
        )
        return self.check(self.tokens_domain, ds)

    # ------------------------------------------------------------------ concurrency slots
    def acquire_slot(
        self,
        domain: str,
        descriptors: Descriptors,
        *,
        hits: int = 1,
        max_wait: float | None = DEFAULT_MAX_WAIT,
        timeout: float | None | Literal[_Unset.UNSET] = UNSET,
    ) -> Slot:
        """Take slots on the concurrency limits (`algorithm: concurrency`) the descriptors reach
        (`tollgate.slots.v1.Slots/Acquire`), waiting while they are full; release them with
        `release_slot` (or use `slot(...)`, which does).

        The request is decided as `check` decides it (every limit it reaches, all or nothing);
        when OK, it holds `hits` slots on each concurrency limit under the id returned, each
        freeing itself after the limit's lease_ttl unless released or renewed. While over, it
        sleeps and asks again (see `next_slot_sleep`: soon for a full concurrency limit, whose
        slots a release may free at any moment; the exact wait for an over rate limit). Past
        `max_wait` seconds (None: no deadline; 0: one try) it raises AcquireTimeout, as
        `acquire` does; CostNeverFits when `hits` is more than a limit holds.

        Returns the Slot; its id is "" when no slot was taken (the descriptors reach no
        concurrency limit, or, with fail_open=True, tollgate did not answer: `failed_open`).
        """
        req, n = build_request(domain, descriptors, hits)
        t = pick_timeout(self.timeout, timeout)
        start = time.monotonic()
        tries = 0
        while True:
            try:
                resp = self._acquire_slot(req, timeout=t, metadata=self._metadata)
            except grpc.RpcError as err:
                return failed_open_slot(domain, descriptors, on_rpc_error(err, self.fail_open, n))
            slot, decision = parse_acquire(domain, descriptors, resp)
            if decision.allowed:
                return slot
            now = time.monotonic()
            left = None if max_wait is None else start + max_wait - now
            time.sleep(next_slot_sleep(decision, left, now - start, tries))
            tries += 1

    def release_slot(
        self, slot: Slot, *, timeout: float | None | Literal[_Unset.UNSET] = UNSET
    ) -> SlotResult:
        """Free the slots `slot.id` holds (`Slots/Release`). `limits` says on how many
        concurrency limits it held some: 0 when it held none (never taken, already released,
        or its lease ended). A slot without an id (none taken, failed open) is not sent.
        TollgateUnavailable (fail_open=False) or a failed-open result when tollgate does not
        answer: the slots then free themselves when their lease ends."""
        return self._slot_call(self._release_slot, slot, timeout, release=True)

    def renew_slot(
        self, slot: Slot, *, timeout: float | None | Literal[_Unset.UNSET] = UNSET
    ) -> SlotResult:
        """Move the end of the leases `slot.id` holds to now plus each limit's lease_ttl
        (`Slots/Renew`), and `slot.expires_at` with it. `limits` 0: it holds nothing any more
        (released, or the lease ended first)."""
        return self._slot_call(self._renew_slot, slot, timeout, release=False)

    def _slot_call(
        self,
        call: grpc.UnaryUnaryMultiCallable[slots_pb2.SlotRequest, slots_pb2.SlotResponse],
        slot: Slot,
        timeout: float | None | Literal[_Unset.UNSET],
        release: bool,
    ) -> SlotResult:
        if not slot.id:
            return SlotResult(limits=0, failed_open=slot.failed_open)
        req = build_slot_request(slot)
        try:
            resp = call(req, timeout=pick_timeout(self.timeout, timeout), metadata=self._metadata)
        except grpc.RpcError as err:
            return SlotResult(limits=0, failed_open=True, error=failed_open(err, self.fail_open))
        result = parse_slot_response(resp)
        slot.expires_at = None if release else result.expires_at
        return result

    @contextmanager
    def slot(
        self,
        domain: str,
        descriptors: Descriptors,
        *,
        hits: int = 1,
        max_wait: float | None = DEFAULT_MAX_WAIT,
        renew: bool | float = False,
    ) -> Iterator[Slot]:
        """`with client.slot(domain, descriptors) as slot:` — `acquire_slot` on entering
        (waiting up to `max_wait`, then AcquireTimeout), `release_slot` on leaving, however the
        block ends. If that release fails after the block raised, the block's exception goes
        on (with a note); the slots then free themselves when their lease ends.

        renew: True renews the slots in a background thread every half lease while the block
        runs; a number renews every that many seconds. A renew that finds nothing held sets
        `slot.lost` and stops; errors are kept in `slot.renew_error` and retried.
        """
        check_renew(renew)
        slot = self.acquire_slot(domain, descriptors, hits=hits, max_wait=max_wait)
        interval = renew_interval(slot, renew)
        renewer = _Renewer(self, slot, interval) if interval is not None else None
        if renewer is not None:
            renewer.start()
        try:
            yield slot
        except BaseException as exc:
            if renewer is not None:
                renewer.stop()
            try:
                self.release_slot(slot)
            except TollgateError as err:
                release_failed(exc, slot, err)
            raise
        if renewer is not None:
            renewer.stop()
        self.release_slot(slot)

    # ------------------------------------------------------------------ reservations
    def reserve(
        self,
        domain: str,
        descriptors: Descriptors,
        estimate: int,
        *,
        max_wait: float | None = DEFAULT_MAX_WAIT,
        timeout: float | None | Literal[_Unset.UNSET] = UNSET,
    ) -> Reservation:
        """Charge `estimate` up front (`tollgate.reservations.v1.Reservations/Reserve`) on every
        limit the descriptors reach (each descriptor without its own `hits`), all or nothing,
        so that calls made at once see each other; `settle(actual)` later turns it into the
        actual use. Waits while over, as `acquire` does (AcquireTimeout past `max_wait`;
        CostNeverFits when the estimate can never fit).

        `with tg.reserve("llm-gateway", {"tenant_reserved_tokens": "acme"}, 4096) as r:`
        then `r.settle(used)` once the use is known. Leaving the block without settling (an
        exception in it, or no settle) keeps the estimate charged. The Reservation's id is ""
        when nothing was reserved (no limit applies, or tollgate did not answer and the client
        fails open: `failed_open`).
        """
        req, n = build_reserve_request(domain, descriptors, estimate)
        t = pick_timeout(self.timeout, timeout)
        start = time.monotonic()
        while True:
            try:
                resp = self._reserve(req, timeout=t, metadata=self._metadata)
            except grpc.RpcError as err:
                decision = on_rpc_error(err, self.fail_open, n)
                return Reservation(domain, descriptors, "", estimate, decision, self._settle_one)
            rid, decision = parse_reserve(resp)
            if decision.allowed:
                return Reservation(domain, descriptors, rid, estimate, decision, self._settle_one)
            now = time.monotonic()
            left = None if max_wait is None else start + max_wait - now
            time.sleep(next_sleep(decision, left, now - start))

    def settle(
        self, reservation: Reservation, actual: int | Sequence[int]
    ) -> SettleResult:
        """Settle `reservation` with the `actual` use (`Reservations/Settle`): the unused part
        of its estimate comes back, an excess lands. `limits` 0: nothing changed (settled
        already, expired, or never reserved). When tollgate does not answer: a failed-open
        result (fail_open=True) or TollgateUnavailable; the estimate then stays charged."""
        return reservation.settle(actual)

    def settle_id(self, domain: str, id: str, descriptors: Descriptors) -> SettleResult:
        """Settle the reservation `id` taken elsewhere (another process, or a hook that kept only
        the id): `descriptors` are what it reserved, or one per token kind for a money budget,
        each `Descriptor` with its `hits` the actual use."""
        r = Reservation(domain, (), id, 1, None, self._settle_one)
        return r.settle(descriptors=descriptors)

    def _settle_one(
        self, r: Reservation, req: reservations_pb2.SettleRequest
    ) -> SettleResult:
        if not r.id:
            return SettleResult(limits=0, failed_open=r.failed_open)
        try:
            resp = self._settle(req, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            return SettleResult(limits=0, failed_open=True, error=failed_open(err, self.fail_open))
        return SettleResult(limits=resp.limits)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        if self._own_channel:
            self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Renewer(threading.Thread):
    """Renews a slot every `interval` seconds until stopped (or until it holds nothing)."""

    def __init__(self, client: Client, slot: Slot, interval: float) -> None:
        super().__init__(name=f"tollgate-renew-{slot.id}", daemon=True)
        self._client = client
        self._slot = slot
        self._interval = interval
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self._interval):
            try:
                result = self._client.renew_slot(self._slot)
            except TollgateError as err:
                self._slot.renew_error = str(err)
                continue
            if result.failed_open:
                self._slot.renew_error = result.error
            elif not result.held:
                self._slot.lost = True
                return

    def stop(self) -> None:
        self._done.set()
        self.join()
