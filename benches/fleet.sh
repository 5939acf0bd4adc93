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
work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-fleet.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. benches/support/wrk.sh
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }

redis-server --port $P_REDIS --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 & pids+=($!)
limits='[rate_limits]
per_principal = { per_second = 1000000, burst = 1000000 }
per_principal_tool = { per_day = 100000000 }'
post_lua "$body"
sidecar local $P_LOCAL "$limits"
sidecar fleet $P_FLEET "$limits
[fleet]
redis_url = \"redis://127.0.0.1:$P_REDIS/0\""
ready $P_LOCAL $P_FLEET
curl -s "127.0.0.1:$P_FLEET/v1/authorize" -H 'Authorization: Bearer demo-dev-token' \
  -H 'Content-Type: application/json' -d "$body" | grep -q '"decision":"allow"' \
  || { echo "the fleet sidecar does not allow the bench call" >&2; exit 1; }
compare $P_LOCAL $P_FLEET "toolgate, limits kept locally (floor)" "toolgate, limits shared through Redis"
# The round trip itself: redis-benchmark's p50 for a PING on one connection, same Redis.
rtt=$(redis-benchmark -p $P_REDIS -c 1 -n 20000 -t ping_mbulk -q 2>/dev/null | grep -o 'p50=[0-9.]*' | head -1 | awk -F= '{print $2 * 1000}')
calls=$(redis-cli -p $P_REDIS info commandstats | awk -F'[:=,]' '/cmdstat_evalsha/{print $3}')
echo "Redis PING p50 on one connection: ${rtt:-?} µs; limit scripts run: ${calls:-?}"
