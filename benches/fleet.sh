#!/usr/bin/env bash
# What sharing limits and switches through Redis (`[fleet]`) costs the decision path, against
# the same sidecar with the same limits kept locally, in one run: p50 latency at one connection
# and throughput at 32, both with durable (group) audit. Each call with a limit adds one
# EVALSHA round trip to a Redis on loopback; the switch, quarantines and grants are read off
# the path every 250 ms.
#
# Usage: benches/fleet.sh   (ROUNDS=3 DURATION=5; medians reported)
# Needs wrk and redis-server (apt-get install wrk redis-server). Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
P_LOCAL=18196 P_FLEET=18197 P_REDIS=18198
cargo build --release --quiet --bin toolgate
bin=target/release
work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-fleet.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. benches/support/wrk.sh
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }

redis-server --port $P_REDIS --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 & pids+=($!)
config() { # port data extra
  cat <<TOML
listen = "127.0.0.1:$1"
data_dir = "$work/$2"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
[audit]
sync = "group"
[rate_limits]
per_principal = { per_second = 1000000, burst = 1000000 }
per_principal_tool = { per_day = 100000000 }
$3
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
TOML
}
config $P_LOCAL local "" > "$work/local.toml"
config $P_FLEET fleet "[fleet]
redis_url = \"redis://127.0.0.1:$P_REDIS/0\"" > "$work/fleet.toml"
body='{"tool":"read_file","args":{"path":"src/main.rs","max_bytes":4096},"context":{"conv_id":"c-1","iter":1}}'
post_lua "$body"
RUST_LOG=warn "$bin/toolgate" serve --config "$work/local.toml" 2>"$work/local.log" & pids+=($!)
RUST_LOG=warn "$bin/toolgate" serve --config "$work/fleet.toml" 2>"$work/fleet.log" & pids+=($!)
for port in $P_LOCAL $P_FLEET; do
  for _ in $(seq 100); do curl -sf -o /dev/null "127.0.0.1:$port/readyz" && break; sleep 0.1; done
done
curl -s "127.0.0.1:$P_FLEET/v1/authorize" -H 'Authorization: Bearer demo-dev-token' \
  -H 'Content-Type: application/json' -d "$body" | grep -q '"decision":"allow"' \
  || { echo "the fleet sidecar does not allow the bench call" >&2; exit 1; }

rps() { wrk -t2 -c32 -d"${DURATION}s" -s "$work/post.lua" "http://127.0.0.1:$1" 2>&1 | awk '$1=="Requests/sec:"{print $2}'; }
declare -A R
for _ in $(seq "$ROUNDS"); do
  R[local_p50]+="$(p50 $P_LOCAL) "
  R[fleet_p50]+="$(p50 $P_FLEET) "
  R[local_rps]+="$(rps $P_LOCAL) "
  R[fleet_rps]+="$(rps $P_FLEET) "
done
m() { echo "${R[$1]}" | tr ' ' '\n' | grep . | median; }
# The round trip itself: redis-benchmark's p50 for a PING on one connection, same Redis.
rtt=$(redis-benchmark -p $P_REDIS -c 1 -n 20000 -t ping_mbulk -q 2>/dev/null | awk '{for(i=1;i<=NF;i++) if ($i=="p50=") print $(i+1)*1000; else if ($i ~ /^p50=/) {sub(/p50=/,"",$i); print $i*1000}}' | head -1)
calls=$(redis-cli -p $P_REDIS info commandstats | awk -F'[:=,]' '/cmdstat_evalsha/{print $3}')
printf '%-44s %10s %10s\n' "" "p50 µs" "req/s" \
  "toolgate, limits kept locally (floor)" "$(m local_p50)" "$(m local_rps)" \
  "toolgate, limits shared through Redis" "$(m fleet_p50)" "$(m fleet_rps)"
awk -v a="$(m fleet_p50)" -v b="$(m local_p50)" -v c="$(m fleet_rps)" -v d="$(m local_rps)" 'BEGIN {
  printf "p50 ratio (fleet / floor) = %.2fx (+%.0f µs); throughput ratio = %.2fx\n", a / b, a - b, c / d }'
echo "Redis PING p50 on one connection: ${rtt:-?} µs; limit scripts run: ${calls:-?}"
