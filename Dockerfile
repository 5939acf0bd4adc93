# Multi-stage build of the same binary the tests exercise (`cargo build --release --locked`).
# tests/it/container.rs reads this file and rebuilds the runtime stage's layout in a temp dir
# (the COPY, ENV, USER, WORKDIR, VOLUME, EXPOSE, ENTRYPOINT and CMD lines below), then starts
# `serve` in it as the runtime user: keep those lines in the forms it reads.
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
# The runtime user is 10001:10001; the data directory is created for it, the rest is root's.
RUN groupadd --system --gid 10001 toolgate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin toolgate \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/toolgate \
 && apt-get update && apt-get install -y --no-install-recommends curl ca-certificates cvc5 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/toolgate /usr/local/bin/toolgate
# Owned by root, read-only to the runtime user.
COPY policies /etc/toolgate/policies
COPY schemas /etc/toolgate/schemas
# A sample config that starts as shipped, with DEMO tokens (listed in docs/policies.md):
# replace both before use (mount your own over /etc/toolgate/toolgate.toml).
COPY examples/container.toml /etc/toolgate/toolgate.toml
COPY examples/demo-tokens.json /etc/toolgate/demo-tokens.json
COPY LICENSE /usr/share/doc/toolgate/LICENSE
# The audit log, approvals, grants and the last good policy set: mount a volume to keep them.
VOLUME /var/lib/toolgate
# Numeric, so that a runtime can check it is not root (Kubernetes' runAsNonRoot).
USER 10001:10001
WORKDIR /var/lib/toolgate
# The data directory is the image's (the VOLUME above, owned by the runtime user), not the
# config's: a config mounted over the sample one needs no `data_dir`, and one that sets it is
# overridden (the environment beats the file). Set TOOLGATE_DATA_DIR at run time to move it;
# TOOLGATE_LISTEN likewise overrides the config's `listen`.
ENV TOOLGATE_CONFIG=/etc/toolgate/toolgate.toml TOOLGATE_DATA_DIR=/var/lib/toolgate
EXPOSE 8181
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD curl -fsS http://127.0.0.1:8181/readyz || exit 1
ENTRYPOINT ["toolgate"]
CMD ["serve"]
