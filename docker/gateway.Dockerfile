# rl-gateway in an image of its own, running as a non-root user.
#
#   docker build -f docker/gateway.Dockerfile -t rl-gateway .      # from the repository's root
#   docker run --network host -v "$PWD/policy.json:/etc/rl-gateway/policy.json:ro" rl-gateway \
#       --policy /etc/rl-gateway/policy.json --store redis://127.0.0.1:6379 \
#       --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 --admin 127.0.0.1:9090
#
# Arguments after the image name go to rl-gateway. `docker stop` sends SIGTERM: requests in
# flight finish (within --drain-timeout), then it exits 0.
#
# Build arguments:
#   BASE        the runtime image: `debian:bookworm-slim` (the binary links the glibc of the
#               build stage, Debian 12's).
#   RUST_IMAGE  the build stage: `rust:1-bookworm`, which compiles rl-gateway from the context.
#   PREBUILT    a path in the context to an rl-gateway built beforehand (e.g.
#               target/release/rl-gateway): copied instead of compiled, so RUST_IMAGE can be any
#               image with a shell. docker/test builds this way offline.

ARG BASE=debian:bookworm-slim
ARG RUST_IMAGE=rust:1-bookworm

FROM ${RUST_IMAGE} AS build
LABEL org.opencontainers.image.title=rl-gateway
ARG PREBUILT=
WORKDIR /src
COPY . .
RUN set -eu; \
    if [ -n "$PREBUILT" ]; then \
      install -D -m 0755 "$PREBUILT" /out/rl-gateway; \
    else \
      cargo build --release --locked -p rl-gateway; \
      install -D -m 0755 target/release/rl-gateway /out/rl-gateway; \
    fi

FROM ${BASE}
LABEL org.opencontainers.image.title=rl-gateway \
      org.opencontainers.image.description="rl-gateway: redis-rl's reverse proxy, forward-auth endpoint and Envoy rate limit service"
COPY --from=build /out/rl-gateway /usr/local/bin/rl-gateway
RUN useradd --system --no-create-home --shell /usr/sbin/nologin rl-gateway
USER rl-gateway
ENTRYPOINT ["/usr/local/bin/rl-gateway"]
