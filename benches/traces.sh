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
work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-traces.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. benches/support/wrk.sh
deps=$(bash .ci/otlp-deps)

"$deps/bin/python3" tests/otlp/receiver.py "$work/spans.jsonl" > "$work/ports.json" & pids+=($!)
for _ in $(seq 100); do [ -s "$work/ports.json" ] && break; sleep 0.1; done
rx=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$work/ports.json")
post_lua "$body"
sidecar off $P_OFF ""
sidecar on $P_ON "[telemetry]
otlp_endpoint = \"http://127.0.0.1:$rx\""
ready $P_OFF $P_ON
compare $P_OFF $P_ON "toolgate, traces off (floor)" "toolgate, traces on (OTLP/HTTP)"
sleep 6
spans=$(wc -l < "$work/spans.jsonl")
roots=$(grep -c '"name": "toolgate.authorize"' "$work/spans.jsonl" || true)
dropped=$(grep -ci "dropped\|queue.*full" "$work/on.log" || true)
echo "spans received: $spans ($roots request roots); log lines about dropped spans: $dropped"
grep -i "dropped\|queue.*full" "$work/on.log" | cut -c1-200 | head -3 || true
