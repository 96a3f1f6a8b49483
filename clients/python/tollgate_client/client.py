"""The blocking client."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Literal

import grpc

from ._model import (
    DESERIALIZE,
    METHOD,
    SERIALIZE,
    UNSET,
    _Unset,
    Decision,
    Descriptor,
    Descriptors,
    build_request,
    check_timeout,
    next_sleep,
    on_rpc_error,
    parse_response,
    pick_timeout,
    target,
)

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
