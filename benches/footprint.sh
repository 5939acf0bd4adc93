#!/usr/bin/env bash
# Disk and memory under sustained load: what docs/performance.md and docs/audit.md quote.
#
# Each run starts a fresh release sidecar (durable `sync = "group"`, the shipped policies,
# a new data directory), drives `POST /v1/authorize` with wrk (2 threads, 32 connections,
# $DURATION seconds; every call a distinct `read_file` path in its own conversation), samples
# the sidecar's RSS every second, stops it with SIGTERM, and reports:
#   records        the audit head's sequence number (every decision is one record)
#   bytes/record   the data directory's size (du, everything: sled, ledger, snapshots,
#                  conversations) over the records
#   rss_end        RSS at the end of the load, and the highest seen
# The median of $ROUNDS runs is printed with the spread (lowest, highest).
#
# Usage: benches/footprint.sh            (ROUNDS=3 DURATION=60 by default; EXTRA is appended
#        to the config, e.g. EXTRA=$'[provenance]\npersist = false')
# Needs: wrk (installed with apt-get when missing). Traffic goes only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-60}
PORT=18191
work=$(mktemp -d)
source benches/support/wrk.sh
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

cargo build --release --quiet --bin toolgate
bin=target/release/toolgate

cat > "$work/distinct.lua" <<'LUA'
counter = 0
request = function()
  counter = counter + 1
  local id = tostring(math.random(1, 1e9)) .. "-" .. counter
  local body = '{"tool":"read_file","args":{"path":"src/f' .. id .. '.rs","max_bytes":4096},"context":{"conv_id":"c-' .. id .. '"}}'
  return wrk.format("POST", "/v1/authorize", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer demo-dev-token"}, body)
end
LUA

results=()
for round in $(seq 1 "$ROUNDS"); do
  data="$work/data-$round"
  cat > "$work/tg.toml" <<TOML
listen = "127.0.0.1:$PORT"
data_dir = "$data"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
${EXTRA:-}
TOML
  RUST_LOG=warn "$bin" serve --config "$work/tg.toml" 2>"$work/serve-$round.log" &
  pid=$!
  for _ in $(seq 1 200); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.05
  done
  rss() { awk '/VmRSS/{print int($2/1024)}' "/proc/$pid/status"; }
  start_rss=$(rss)
  peak=$start_rss
  wrk -t2 -c32 -d"${DURATION}s" -s "$work/distinct.lua" "http://127.0.0.1:$PORT" >"$work/wrk-$round.txt" 2>&1 &
  wrk_pid=$!
  while kill -0 "$wrk_pid" 2>/dev/null; do
    r=$(rss)
    [ "$r" -gt "$peak" ] && peak=$r
    sleep 1
  done
  end_rss=$(rss)
  records=$(curl -sf -H "Authorization: Bearer demo-alice-token" "http://127.0.0.1:$PORT/v1/audit/head" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seq"])')
  rps=$(awk '/Requests\/sec/{print int($2)}' "$work/wrk-$round.txt")
  kill -TERM "$pid"
  wait "$pid" || true
  pid=
  bytes=$(du -sb "$data" | awk '{print $1}')
  per=$((bytes / records))
  echo "run $round: $records records at $rps req/s, data dir $((bytes / 1048576)) MB = $per bytes/record, RSS $start_rss -> $end_rss MB (peak $peak)"
  results+=("$per $end_rss $peak $records")
  rm -rf "$data"
done

col() { for r in "${results[@]}"; do echo "$r" | awk -v c="$1" '{print $c}'; done; }
summary() { # column label unit
  local values median lo hi
  values=$(col "$1")
  median=$(echo "$values" | median)
  lo=$(echo "$values" | sort -g | head -1)
  hi=$(echo "$values" | sort -g | tail -1)
  echo "$2: median $median $3 (spread $lo to $hi, $ROUNDS runs of ${DURATION}s)"
}
summary 1 "bytes/record" "B"
summary 2 "RSS at the end of the load" "MB"
summary 3 "RSS peak" "MB"
summary 4 "records" ""
