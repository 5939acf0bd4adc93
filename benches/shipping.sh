#!/usr/bin/env bash
# What audit shipping (`[audit] ship_file`) costs the decision path, against the same sidecar
# without it, in one run on one disk: p50 latency at one connection and throughput at 32,
# both with durable (group) audit. The shipper is its own thread and reads only what is
# durable, so the ratio should be 1.0 within noise; it also reports the lag after the load.
#
# Usage: benches/shipping.sh   (ROUNDS=3 DURATION=5; medians reported)
# Needs wrk (apt-get install wrk). Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
P_PLAIN=18194 P_SHIP=18195
cargo build --release --quiet --bin toolgate
work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-shipping.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. benches/support/wrk.sh

post_lua "$body"
sidecar plain $P_PLAIN ""
sidecar ship $P_SHIP "ship_file = \"$work/ship/audit.jsonl\""
ready $P_PLAIN $P_SHIP
echo "disk: $(df -h "$work" | awk 'NR==2{print $1" ("$2")"}')"
compare $P_PLAIN $P_SHIP "toolgate, durable audit (floor)" "toolgate, durable audit + shipping"
sleep 1
lag=$(curl -s "127.0.0.1:$P_SHIP/metrics" | awk '$1=="toolgate_audit_ship_lag_records"{print $2}')
lines=$(cat "$work"/ship/audit.jsonl* | wc -l)
echo "shipped lines: $lines; lag 1 s after the load: ${lag:-?} records"
