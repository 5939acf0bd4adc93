#!/usr/bin/env bash
# Issue 39: memory after a flood of MCP sessions from one agent. Starts `toolgate serve` with
# the per-principal session bound lifted (so the flood is not refused) and a short idle expiry,
# warms it up, then, RUNS times on a fresh server: RSS before, after FLOOD `initialize`s from
# one agent (benches/support/mcp_flood.py: raw requests on keep-alive connections), and once
# every session has ended (`toolgate_mcp_sessions` 0, then SETTLE seconds more). Prints each
# run and the median with the spread. Then, once, the defaults: the same flood is refused past
# 64. With IDLE=60 every session of the flood is open at its end, as in the issue.
#
# Usage: benches/sessions.sh   (RUNS=3 FLOOD=20000 IDLE=60 SETTLE=5; BIN=target/debug/toolgate
# to skip the release build). Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
FLOOD=${FLOOD:-20000}
IDLE=${IDLE:-60}
SETTLE=${SETTLE:-5}
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --bin toolgate
  BIN=target/release/toolgate
fi
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
sessions() { curl -s "127.0.0.1:$PORT/metrics" | awk '/^toolgate_mcp_sessions / {print $2}'; }
start() { # $1: extra config
  PORT=$(free_port)
  rm -rf "$work/data"
  printf 'listen = "127.0.0.1:%s"\ndata_dir = "%s/data"\npolicies_dir = "%s/policies"\nschemas_dir = "%s/schemas"\n%s\n[auth]\ntokens_file = "%s/examples/demo-tokens.json"\n' \
    "$PORT" "$work" "$PWD" "$PWD" "$1" "$PWD" > "$work/toolgate.toml"
  RUST_LOG=warn "$BIN" serve --config "$work/toolgate.toml" 2>"$work/serve.log" & pid=$!
  for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && return; sleep 0.1; done
  echo "toolgate did not start" >&2; cat "$work/serve.log" >&2; exit 1
}
wait_ended() {
  for _ in $(seq $(( (IDLE + 120) * 10 ))); do [ "$(sessions)" = "0" ] && break; sleep 0.1; done
  sleep "$SETTLE"
}
flood() { python3 benches/support/mcp_flood.py "$PORT" demo-dev-token "$1" 8; }

echo "toolgate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $BIN, $(nproc) cores; $FLOOD sessions, session_idle_secs = $IDLE"
results=()
for run in $(seq "$RUNS"); do
  start "[mcp]
max_sessions_per_principal = 100000
session_idle_secs = $IDLE"
  flood 200 >/dev/null; wait_ended          # warm-up: first-use caches
  before=$(rss)
  out=$(flood "$FLOOD")
  flooded=$(rss)
  healthz=$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$PORT/healthz")
  wait_ended
  after=$(rss)
  echo "run $run: RSS before ${before} KiB, after the flood ${flooded} KiB (/healthz $healthz), sessions ended ${after} KiB ($(( (after - before) * 100 / before ))% over before); flood: $out"
  results+=("$before $flooded $after")
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
done
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics
rows = [list(map(int, l.split())) for l in sys.stdin if l.strip()]
for i, name in enumerate(["before", "flooded", "ended"]):
    col = [r[i] for r in rows]
    print(f"{name:8} median {statistics.median(col)/1024:7.1f} MiB  (min {min(col)/1024:.1f}, max {max(col)/1024:.1f})")
over = [100 * (r[2] - r[0]) / r[0] for r in rows]
print(f"ended vs before: median {statistics.median(over):+.1f}% (min {min(over):+.1f}%, max {max(over):+.1f}%)")
'
start ""
before=$(rss)
out=$(flood "$FLOOD")
echo "defaults: RSS ${before} KiB before, $(rss) KiB after $FLOOD initialize requests from one agent; $out"
