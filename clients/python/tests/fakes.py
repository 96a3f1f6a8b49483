"""An in-process fake RLS server for behaviours a real tollgate does not show on demand
(a hung server, OVER_LIMIT with a zero wait)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc

from tollgate_client._pb.envoy.service.ratelimit.v3 import rls_pb2

Handler = Callable[[rls_pb2.RateLimitRequest], rls_pb2.RateLimitResponse]


class FakeServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.calls = 0
        self._lock = threading.Lock()

    def _serve(self, req: rls_pb2.RateLimitRequest, ctx: grpc.ServicerContext) -> rls_pb2.RateLimitResponse:
        with self._lock:
            self.calls += 1
        return self.handler(req)


@contextmanager
def fake_server(handler: Handler) -> Iterator[tuple[str, FakeServer]]:
    fake = FakeServer(handler)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc = grpc.unary_unary_rpc_method_handler(
        fake._serve,
        request_deserializer=rls_pb2.RateLimitRequest.FromString,
        response_serializer=rls_pb2.RateLimitResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(
            "envoy.service.ratelimit.v3.RateLimitService", {"ShouldRateLimit": rpc}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", fake
    finally:
        server.stop(grace=None)


def over_limit(wait_seconds: int | None) -> Handler:
    """Always OVER_LIMIT for every descriptor, with this duration_until_reset (None: absent)."""

    def handle(req: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        resp = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OVER_LIMIT)
        for _ in req.descriptors:
            st = resp.statuses.add(code=rls_pb2.RateLimitResponse.OVER_LIMIT)
            st.current_limit.name = "fake"
            st.current_limit.requests_per_unit = 1
            st.current_limit.unit = rls_pb2.RateLimitResponse.RateLimit.SECOND
            if wait_seconds is not None:
                st.duration_until_reset.SetInParent()
                st.duration_until_reset.seconds = wait_seconds
        return resp

    return handle


def hang(seconds: float) -> Handler:
    """OK at once for the first call (to connect), then OK only after `seconds`."""
    import time

    calls = [0]

    def handle(req: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        calls[0] += 1
        if calls[0] > 1:
            time.sleep(seconds)
        return rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)

    return handle
