# tollgate container image.
#
#   docker build -t tollgate:0.1.0 .
#   docker run --rm -p 8080:8080 -p 8081:8081 tollgate:0.1.0
#   docker run --rm -p 8080:8080 -p 8081:8081 -v "$PWD/my-config:/etc/tollgate/config:ro" \
#       -e TOLLGATE_REDIS_URL=redis://redis:6379 tollgate:0.1.0
#
# The build needs no protoc: build.rs compiles proto/ with protox (pure Rust).

############################ builder ############################
FROM rust:1.95-slim-bookworm AS builder
WORKDIR /build

# 1. Dependencies only. This layer is rebuilt only when the manifest, the lock file, build.rs or
#    the protos change, not on every source edit. The dummy sources give cargo the targets
#    Cargo.toml declares: the library (src/lib.rs), the binary (src/main.rs) and the
#    `[[bench]] decide` target, whose file must exist for cargo to parse the manifest.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && echo 'fn main() {}' > benches/decide.rs \
    && cargo build --release --locked --bin tollgate \
    && rm -rf src benches

# 2. The real sources. lua/ is include_str!-ed by src/store/redis.rs. COPY keeps the files'
#    original mtimes, which can be older than the dummy build above: touching the crate roots
#    makes cargo rebuild the tollgate crate (dependencies stay cached).
COPY src ./src
COPY lua ./lua
COPY benches ./benches
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin tollgate \
    && install -D -m 0755 target/release/tollgate /out/tollgate

############################ runtime ############################
FROM debian:bookworm-slim

# ca-certificates (for rediss:// with rustls) is left unpinned on purpose: it should follow
# Debian's security updates whenever the image is rebuilt.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 tollgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin tollgate

COPY --from=builder /out/tollgate /usr/local/bin/tollgate
# Both examples for reference; the default config directory holds the envoyproxy/ratelimit-style
# example only. Mount your own directory (or a ConfigMap) over /etc/tollgate/config.
COPY examples/ /etc/tollgate/examples/
COPY examples/ratelimit.yaml /etc/tollgate/config/ratelimit.yaml

# Numeric user so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001

# 8080: admin HTTP (/healthz, /readyz, /healthcheck, /metrics, /json, /rlconfig)
# 8081: gRPC (envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1)
EXPOSE 8080 8081

# Liveness of the admin server without curl/wget (not in the slim image): bash's /dev/tcp.
# It assumes the default --http-addr port 8080; Kubernetes ignores HEALTHCHECK and uses the
# Helm chart's probes instead. /healthz (not /readyz) so a Redis outage does not mark the
# container unhealthy: readiness already follows Redis.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]

ENTRYPOINT ["tollgate"]
CMD ["serve", "--config", "/etc/tollgate/config"]
