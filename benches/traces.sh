#!/usr/bin/env bash
# What OpenTelemetry traces (`[telemetry] otlp_endpoint`) cost the decision path, against the
# same sidecar with traces off, in one run: p50 latency at one connection and throughput at
# 32, both with durable (group) audit. With traces on, every decision opens a root span and
# a span per stage and gate, and the SDK's batch processor exports them over OTLP/HTTP to the
# test receiver (tests/otlp/receiver.py, which decodes each request with opentelemetry-proto
# and shares the machine's cores: the ratio includes its CPU).
#
# Usage: benches/traces.sh   (ROUNDS=3 DURATION=5; medians reported)
# Needs wrk and the receiver's venv (bash .ci/otlp-deps). Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
P_OFF=18201 P_ON=18202
cargo build --release --quiet --bin toolgate
bin=target/release
work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-traces.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. benches/support/wrk.sh
deps=$(bash .ci/otlp-deps)

"$deps/bin/python3" tests/otlp/receiver.py "$work/spans.jsonl" > "$work/ports.json" & pids+=($!)
for _ in $(seq 100); do [ -s "$work/ports.json" ] && break; sleep 0.1; done
rx=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$work/ports.json")
config() { # port data extra
  cat <<TOML
listen = "127.0.0.1:$1"
data_dir = "$work/$2"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
[audit]
sync = "group"
$3
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
TOML
}
config $P_OFF off "" > "$work/off.toml"
config $P_ON on "[telemetry]
otlp_endpoint = \"http://127.0.0.1:$rx\"" > "$work/on.toml"
body='{"tool":"read_file","args":{"path":"src/main.rs","max_bytes":4096},"context":{"conv_id":"c-1","iter":1}}'
post_lua "$body"
RUST_LOG=warn "$bin/toolgate" serve --config "$work/off.toml" 2>"$work/off.log" & pids+=($!)
RUST_LOG=warn "$bin/toolgate" serve --config "$work/on.toml" 2>"$work/on.log" & pids+=($!)
for port in $P_OFF $P_ON; do
  for _ in $(seq 100); do curl -sf -o /dev/null "127.0.0.1:$port/readyz" && break; sleep 0.1; done
done

rps() { wrk -t2 -c32 -d"${DURATION}s" -s "$work/post.lua" "http://127.0.0.1:$1" 2>&1 | awk '$1=="Requests/sec:"{print $2}'; }
declare -A R
for _ in $(seq "$ROUNDS"); do
  R[off_p50]+="$(p50 $P_OFF) "
  R[on_p50]+="$(p50 $P_ON) "
  R[off_rps]+="$(rps $P_OFF) "
  R[on_rps]+="$(rps $P_ON) "
done
m() { echo "${R[$1]}" | tr ' ' '\n' | grep . | median; }
sleep 6
spans=$(wc -l < "$work/spans.jsonl")
roots=$(grep -c '"name": "toolgate.authorize"' "$work/spans.jsonl" || true)
dropped=$(grep -ci "dropped\|queue.*full" "$work/on.log" || true)
printf '%-40s %10s %10s\n' "" "p50 µs" "req/s" \
  "toolgate, traces off (floor)" "$(m off_p50)" "$(m off_rps)" \
  "toolgate, traces on (OTLP/HTTP)" "$(m on_p50)" "$(m on_rps)"
awk -v a="$(m on_p50)" -v b="$(m off_p50)" -v c="$(m on_rps)" -v d="$(m off_rps)" 'BEGIN {
  printf "p50 ratio (on / off) = %.2fx; throughput ratio = %.2fx\n", a / b, c / d }'
echo "spans received: $spans ($roots request roots); log lines about dropped spans: $dropped"
grep -i "dropped\|queue.*full" "$work/on.log" | cut -c1-200 | head -3 || true
