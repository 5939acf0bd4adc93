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
bin=target/release
work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-shipping.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. benches/support/wrk.sh

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
config $P_PLAIN plain "" > "$work/plain.toml"
config $P_SHIP ship "ship_file = \"$work/ship/audit.jsonl\"" > "$work/ship.toml"
body='{"tool":"read_file","args":{"path":"src/main.rs","max_bytes":4096},"context":{"conv_id":"c-1","iter":1}}'
post_lua "$body"
RUST_LOG=warn "$bin/toolgate" serve --config "$work/plain.toml" 2>"$work/plain.log" & pids+=($!)
RUST_LOG=warn "$bin/toolgate" serve --config "$work/ship.toml" 2>"$work/ship.log" & pids+=($!)
for port in $P_PLAIN $P_SHIP; do
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$port/healthz" && break; sleep 0.1; done
done

rps() { wrk -t2 -c32 -d"${DURATION}s" -s "$work/post.lua" "http://127.0.0.1:$1" 2>&1 | awk '$1=="Requests/sec:"{print $2}'; }
declare -A R
for _ in $(seq "$ROUNDS"); do
  R[plain_p50]+="$(p50 $P_PLAIN) "
  R[ship_p50]+="$(p50 $P_SHIP) "
  R[plain_rps]+="$(rps $P_PLAIN) "
  R[ship_rps]+="$(rps $P_SHIP) "
done
m() { echo "${R[$1]}" | tr ' ' '\n' | grep . | median; }
sleep 1
lag=$(curl -s "127.0.0.1:$P_SHIP/metrics" | awk '$1=="toolgate_audit_ship_lag_records"{print $2}')
lines=$(cat "$work"/ship/audit.jsonl* | wc -l)
echo "disk: $(df -h "$work" | awk 'NR==2{print $1" ("$2")"}')"
printf '%-40s %10s %10s\n' "" "p50 µs" "req/s" \
  "toolgate, durable audit (floor)" "$(m plain_p50)" "$(m plain_rps)" \
  "toolgate, durable audit + shipping" "$(m ship_p50)" "$(m ship_rps)"
awk -v a="$(m ship_p50)" -v b="$(m plain_p50)" -v c="$(m ship_rps)" -v d="$(m plain_rps)" 'BEGIN {
  printf "p50 ratio (shipping / floor) = %.2fx; throughput ratio = %.2fx\n", a / b, c / d }'
echo "shipped lines: $lines; lag 1 s after the load: ${lag:-?} records"
