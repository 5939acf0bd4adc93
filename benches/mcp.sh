#!/usr/bin/env bash
# The MCP gateway's overhead, against its floor in the same run: a `tools/call` of
# server-everything's `echo` straight to the upstream (streamable HTTP) versus the same call
# through toolgate's `/mcp` (decision + durable audit record + forward + output screen +
# result record), alternating call by call, one connection each (benches/mcp_overhead.rs).
# Target (issue 23): toolgate adds at most 1 ms at p50 at one connection, with durable audit.
#
# Usage: benches/mcp.sh [DATA_PARENT]   (CALLS=2000)
# Needs the MCP components (.ci/mcp-deps). Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${CALLS:-2000}
DEPS="$(bash .ci/mcp-deps)"
cargo build --release --quiet --bin toolgate --example mcp_overhead
bin=target/release
work=$(mktemp -d "${1:-${TMPDIR:-/tmp}}/toolgate-mcp-bench.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP=$(free_port); TG=$(free_port)
PORT=$UP "$DEPS/node/node_modules/.bin/mcp-server-everything" streamableHttp >"$work/up.log" 2>&1 & pids+=($!)
mkdir -p "$work/schemas/tools" "$work/schemas/mcp"
mkdir -p "$work/policies"
cp examples/mcp/policies/entities.json examples/mcp/policies/approvals.cedar "$work/policies/"
cat > "$work/policies/mcp.cedar" <<'CEDAR'
@id("developers-use-tools")
permit (principal in Role::"developer", action in [Action::"read", Action::"write", Action::"destructive"], resource);
@id("high-risk-needs-approval")
forbid (principal, action in [Action::"read", Action::"write", Action::"destructive"], resource)
when { resource.risk == "high" || resource.risk == "critical" }
unless { context.approval.granted };
@id("auditors-explain")
permit (principal in Role::"auditor", action == Action::"explain", resource);
@id("directors-approve-descriptors")
permit (principal in Role::"director", action == Action::"approve_descriptor", resource);
CEDAR
cat > "$work/toolgate.toml" <<TOML
listen = "127.0.0.1:$TG"
policies_dir = "policies"
schemas_dir = "schemas"
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
[audit]
sync = "${SYNC:-group}"
[[mcp.upstreams]]
name = "web"
url = "http://127.0.0.1:$UP/mcp"
TOML
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$UP) 2>/dev/null && break; sleep 0.1; done
"$bin/toolgate" mcp sync --config "$work/toolgate.toml" >/dev/null
"$bin/toolgate" validate --config "$work/toolgate.toml" >/dev/null
RUST_LOG=warn "$bin/toolgate" serve --config "$work/toolgate.toml" 2>"$work/tg.log" & pids+=($!)
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$TG) 2>/dev/null && break; sleep 0.1; done
echo "toolgate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, audit sync = ${SYNC:-group}"
"$bin/examples/mcp_overhead" "http://127.0.0.1:$UP/mcp" "http://127.0.0.1:$TG/mcp" demo-dev-token "$CALLS"
