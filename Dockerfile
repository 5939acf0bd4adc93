# Multi-stage build of the same binary the tests exercise (`cargo build --release --locked`).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock clippy.toml ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin toolgate

FROM debian:bookworm-slim
# cvc5 (bookworm's 1.0.3): the solver the reload review proves policy changes with. Without
# it no change can be proved narrowing, and under the default `reload.widening = "hold"`
# every policy change would wait for a human's approval.
RUN useradd --system --uid 10001 --no-create-home toolgate \
 && apt-get update && apt-get install -y --no-install-recommends curl ca-certificates cvc5 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/toolgate /usr/local/bin/toolgate
COPY policies /etc/toolgate/policies
COPY schemas /etc/toolgate/schemas
# Mount a real config (tokens file or JWT keys) at /etc/toolgate/toolgate.toml. The sidecar
# listens on loopback by default; in a pod, the agent container shares the network namespace.
USER toolgate
WORKDIR /etc/toolgate
ENV TOOLGATE_CONFIG=/etc/toolgate/toolgate.toml
EXPOSE 8181
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD curl -fsS http://127.0.0.1:8181/readyz || exit 1
ENTRYPOINT ["toolgate"]
CMD ["serve"]
