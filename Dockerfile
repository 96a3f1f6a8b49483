# tollgate container image.
#
#   docker build -t REGISTRY/tollgate:0.2.0 .        (then: docker push REGISTRY/tollgate:0.2.0)
#   docker run --rm -p 8080:8080 -p 8081:8081 REGISTRY/tollgate:0.2.0
#   docker run --rm -p 8080:8080 -p 8081:8081 -v "$PWD/my-config:/etc/tollgate/config:ro" \
#       -e TOLLGATE_REDIS_URL=redis://redis:6379 REGISTRY/tollgate:0.2.0
#
# Default command: `tollgate serve --config /etc/tollgate/config`. /bin/ratelimit is a symlink
# to tollgate: run as `ratelimit` it reads envoyproxy/ratelimit's environment (RUNTIME_ROOT,
# REDIS_URL, PORT, GRPC_PORT, ...), so manifests with `command: ["/bin/ratelimit"]` (Istio's
# sample) work by swapping the image.
#
# The binary is built with Cargo's `dist` profile (release, stripped, no debug info, fat LTO; the
# bench scripts measure it with TOLLGATE_PROFILE=dist). The build needs no protoc: build.rs
# compiles proto/ with protox (pure Rust).
# Build arguments VERSION, REVISION and CREATED fill the OCI labels, e.g.
#   --build-arg REVISION="$(git rev-parse HEAD)" --build-arg CREATED="$(date -u +%FT%TZ)"
# REVISION is also the commit `tollgate --version` prints (the build context has no .git, so
# without it the binary says `commit unknown`). VERSION must be Cargo.toml's version
# (tests/server/version.rs holds every file that names the release to it).

############################ builder ############################
FROM rust:1.95-slim-bookworm AS builder
WORKDIR /build

# 1. Dependencies only. This layer is rebuilt only when a manifest, the lock file, build.rs or
#    the protos change, not on every source edit. The dummy sources give cargo every target the
#    workspace's manifests declare: the root package's library, binary and `[[bench]]` targets,
#    and the tollgate-bench member's library and binary.
COPY Cargo.toml Cargo.lock build.rs ./
COPY tollgate-bench/Cargo.toml ./tollgate-bench/
COPY proto ./proto
# fred, patched (vendor/README.md): Cargo.toml's [patch.crates-io] builds it.
COPY vendor ./vendor
RUN mkdir -p src benches tollgate-bench/src \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && echo 'fn main() {}' > benches/decide.rs \
    && echo 'fn main() {}' > benches/local_cache.rs \
    && echo 'fn main() {}' > benches/xds_propagation.rs \
    && echo 'fn main() {}' > tollgate-bench/src/main.rs \
    && echo '' > tollgate-bench/src/lib.rs \
    && cargo build --profile dist --locked -p tollgate --bin tollgate \
    && rm -rf src benches tollgate-bench/src

# 2. The real sources. lua/ is include_str!-ed by src/store/redis/; tollgate-bench/ comes along
#    so the build is right whichever way the two crates depend on each other. COPY keeps the
#    files' original mtimes, which can be older than the dummy build above: touching the crate
#    roots makes cargo rebuild both crates (dependencies stay cached).
COPY src ./src
COPY lua ./lua
COPY benches ./benches
COPY tollgate-bench ./tollgate-bench
ARG REVISION=unknown
RUN touch -c src/main.rs src/lib.rs tollgate-bench/src/main.rs tollgate-bench/src/lib.rs \
    && TOLLGATE_COMMIT="${REVISION}" cargo build --profile dist --locked -p tollgate --bin tollgate \
    && install -D -m 0755 target/dist/tollgate /out/tollgate

############################ runtime ############################
FROM debian:bookworm-slim

ARG VERSION=0.2.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="Envoy-compatible gRPC rate-limit decision service (drop-in for envoyproxy/ratelimit)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim"

# ca-certificates (for rediss:// with rustls) is left unpinned on purpose: it should follow
# Debian's security updates whenever the image is rebuilt.
# /bin/ratelimit -> tollgate: envoyproxy/ratelimit's entry point (see the top of this file).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 tollgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin tollgate \
    && ln -s /usr/local/bin/tollgate /bin/ratelimit

COPY --from=builder /out/tollgate /usr/local/bin/tollgate
# Both examples for reference; the default config directory holds the envoyproxy/ratelimit-style
# example only. Mount your own directory (or a ConfigMap) over /etc/tollgate/config.
COPY examples/ /etc/tollgate/examples/
COPY examples/ratelimit.yaml /etc/tollgate/config/ratelimit.yaml

# Numeric user so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001

# 8080: admin HTTP (/healthz, /readyz, /healthcheck, /metrics, /rlconfig; POST /json only with
#       --admin-json)
# 8081: gRPC (envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1)
# Both bind [::] (dual-stack) by default.
EXPOSE 8080 8081

# Liveness of the admin server without curl/wget (not in the slim image): bash's /dev/tcp.
# It assumes the default --http-addr port 8080; Kubernetes ignores HEALTHCHECK and uses the
# Helm chart's probes instead. /healthz (not /readyz) so a Redis outage does not mark the
# container unhealthy: readiness already follows Redis.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]

ENTRYPOINT ["tollgate"]
CMD ["serve", "--config", "/etc/tollgate/config"]
