#!/usr/bin/env bash
# HTTP latency and throughput of toolgate on loopback, in one run, next to
#   - the floor: an axum endpoint returning a fixed JSON for the same POST (benches/echo_floor.rs)
#   - cedar-agent (crates.io), loaded with the same policies and entities (benches/cedar_agent_data.rs)
# and p99 while the 5,000-policy set is edited and reloaded under load.
#
# Usage: benches/load.sh            (ROUNDS=3 DURATION=5 by default; medians are reported)
# Needs: wrk (installed with apt-get when missing), cedar-agent (cargo install when missing).
# Traffic goes only to 127.0.0.1; every wrk run is bounded by DURATION seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
P_TG=18181 P_FLOOR=18182 P_CA=18183 P_BIG=18184 P_TGB=18185 P_TGO=18186

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
command -v cedar-agent >/dev/null || cargo install cedar-agent --locked
cargo build --release --quiet --bin toolgate --example echo_floor --example cedar_agent_data --example gen_policies
bin=target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# --- inputs -------------------------------------------------------------------------------
"$bin/examples/cedar_agent_data" "$work/ca" >/dev/null
"$bin/examples/gen_policies" "$work/big" 500 10 >/dev/null
cat > "$work/tg.toml" <<TOML
listen = "127.0.0.1:$P_TG"
data_dir = "$work/tg-data"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
TOML
# The same sidecar with the audit log acknowledged from memory instead of after each flush.
sed -e "s/$P_TG/$P_TGB/" -e "s#tg-data#tgb-data#" "$work/tg.toml" > "$work/tgb.toml"
printf '[audit]\nsync = "buffered"\n' >> "$work/tgb.toml"
# And with no audit log at all: what the log costs (never run a sidecar like this).
sed -e "s/$P_TG/$P_TGO/" -e "s#tg-data#tgo-data#" "$work/tg.toml" > "$work/tgo.toml"
printf '[audit]\nsync = "off"\n' >> "$work/tgo.toml"
cat > "$work/big.toml" <<TOML
listen = "127.0.0.1:$P_BIG"
data_dir = "$work/big-data"
policies_dir = "$work/big/policies"
schemas_dir = "$work/big/schemas"
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
TOML
body='{"tool":"read_file","args":{"path":"src/main.rs","max_bytes":4096},"context":{"conv_id":"c-1","iter":1}}'
big_body='{"tool":"t0000","args":{"path":"src/a.rs","n":5,"tags":["x"]}}'
# The same Cedar context toolgate builds for $body: arguments, path facts, approval, usage,
# anomaly, correlation.
ca_body='{"principal":"Agent::\"dev-agent\"","action":"Action::\"read_file\"","resource":"Tool::\"read_file\"","context":{"args":{"path":"src/main.rs","max_bytes":4096},"paths":{"path":{"segments":["src","main.rs"],"name":"main.rs","ext":"rs"}},"approval":{"granted":false},"usage":{"tool_last_minute":0,"tool_last_hour":0,"calls_last_minute":0,"denials_last_minute":0},"anomaly":{"active":false,"kinds":[]},"conv_id":"c-1","iter":1}}'
lua() { # name path body
  cat > "$work/$1.lua" <<LUA
wrk.method = "POST"
wrk.path = "$2"
wrk.body = [[$3]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer demo-dev-token"
LUA
}
lua tg /v1/authorize "$body"
lua tgb /v1/authorize "$body"
lua tgo /v1/authorize "$body"
lua floor /v1/authorize "$body"
lua ca /v1/is_authorized "$ca_body"
lua big /v1/authorize "$big_body"

# --- servers ------------------------------------------------------------------------------
RUST_LOG=warn "$bin/toolgate" serve --config "$work/tg.toml" 2>"$work/tg.log" & pids+=($!)
RUST_LOG=warn "$bin/toolgate" serve --config "$work/tgb.toml" 2>"$work/tgb.log" & pids+=($!)
RUST_LOG=warn "$bin/toolgate" serve --config "$work/tgo.toml" 2>"$work/tgo.log" & pids+=($!)
RUST_LOG=warn "$bin/toolgate" serve --config "$work/big.toml" 2>"$work/big.log" & pids+=($!)
"$bin/examples/echo_floor" "127.0.0.1:$P_FLOOR" & pids+=($!)
cedar-agent --addr 127.0.0.1 --port "$P_CA" --log-level error \
  --policies "$work/ca/policies.json" --data "$work/ca/data.json" >"$work/ca.log" 2>&1 & pids+=($!)
for port in $P_TG $P_TGB $P_TGO $P_FLOOR $P_CA $P_BIG; do
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$port/" && break; sleep 0.1; done
done
# Same answer from both deciders before measuring anything.
curl -s "127.0.0.1:$P_TG/v1/authorize" -H 'Authorization: Bearer demo-dev-token' -H 'Content-Type: application/json' -d "$body" | grep -q '"decision":"allow"'
curl -s "127.0.0.1:$P_TGB/v1/authorize" -H 'Authorization: Bearer demo-dev-token' -H 'Content-Type: application/json' -d "$body" | grep -q '"decision":"allow"'
curl -s "127.0.0.1:$P_TGO/v1/authorize" -H 'Authorization: Bearer demo-dev-token' -H 'Content-Type: application/json' -d "$body" | grep -q '"decision":"allow"'
curl -s "127.0.0.1:$P_CA/v1/is_authorized" -H 'Content-Type: application/json' -d "$ca_body" | grep -q '"decision":"Allow"'
curl -s "127.0.0.1:$P_BIG/v1/authorize" -H 'Authorization: Bearer demo-dev-token' -H 'Content-Type: application/json' -d "$big_body" | grep -q '"decision":"allow"'

# --- measure ------------------------------------------------------------------------------
to_us() { awk '{v=$1; if (v ~ /us$/) {sub(/us/,"",v); print v} else if (v ~ /ms$/) {sub(/ms/,"",v); print v*1000} else if (v ~ /s$/) {sub(/s/,"",v); print v*1000000} else print v}'; }
run() { # name port conns threads -> "p50_us p99_us rps"
  local out; out=$(wrk -t"$4" -c"$3" -d"${DURATION}s" --latency -s "$work/$1.lua" "http://127.0.0.1:$2" 2>&1)
  local p50 p99 rps
  p50=$(echo "$out" | awk '$1=="50%"{print $2}' | to_us)
  p99=$(echo "$out" | awk '$1=="99%"{print $2}' | to_us)
  rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  echo "$p50 $p99 $rps"
}
applied() { curl -s "127.0.0.1:$P_BIG/metrics" | awk '/reloads_total\{result="applied"\}/{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
declare -A R
for round in $(seq "$ROUNDS"); do
  for t in tg:$P_TG tgb:$P_TGB tgo:$P_TGO floor:$P_FLOOR ca:$P_CA; do
    name=${t%%:*}; port=${t##*:}
    read -r p50 p99 _ <<<"$(run "$name" "$port" 1 1)"
    read -r _ _ rps <<<"$(run "$name" "$port" 32 2)"
    R[$name.p50]+="$p50 "; R[$name.p99]+="$p99 "; R[$name.rps]+="$rps "
  done
  read -r _ p99 _ <<<"$(run big $P_BIG 1 1)"; R[big.steady]+="$p99 "
  # Edit one of the ten policy files every 0.5 s while measuring: the watcher reloads the
  # 5,000-policy set again and again, as during a busy review day.
  ( end=$((SECONDS + DURATION)); n=0
    while [ $SECONDS -lt $end ]; do n=$((n + 1)); echo "// edit $round.$n" >> "$work/big/policies/tools-0003.cedar"; sleep 0.5; done ) &
  editor=$!
  read -r _ p99 _ <<<"$(run big $P_BIG 1 1)"; R[big.reload]+="$p99 "
  wait "$editor"
  # Let the last reload finish before anything else is measured.
  prev=-1; while [ "$(applied)" != "$prev" ]; do prev=$(applied); sleep 1.5; done
done
m() { echo "${R[$1]}" | tr ' ' '\n' | grep -v '^$' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
reloads=$(applied)

printf '\nmedians of %s rounds, %ss each, loopback, %s cores\n\n' "$ROUNDS" "$DURATION" "$(nproc)"
printf '| target | p50 µs (1 conn) | p99 µs (1 conn) | req/s (32 conns) |\n|---|---|---|---|\n'
for n in floor tg tgb tgo ca; do
  case $n in
    tg) label="toolgate (audit: group commit, the default)" ;;
    tgb) label="toolgate (audit: buffered)" ;;
    tgo) label="toolgate (audit: off, for comparison only)" ;;
    ca) label=cedar-agent ;;
    *) label="axum floor" ;;
  esac
  printf '| %s | %s | %s | %s |\n' "$label" "$(m $n.p50)" "$(m $n.p99)" "$(m $n.rps)"
done
for n in tg tgb tgo; do
  printf '\n%s / floor: p50 %sx, p99 %sx (targets <= 3x)\n' "$n" "$(ratio "$(m $n.p50)" "$(m floor.p50)")" "$(ratio "$(m $n.p99)" "$(m floor.p99)")"
  printf '%s / cedar-agent throughput at 32 conns: %sx (target >= 4x)\n' "$n" "$(ratio "$(m $n.rps)" "$(m ca.rps)")"
done
printf 'audit cost: group commit / off throughput %sx (target >= 0.6x); buffered / off p50 %sx (target <= 1.15x)\n' \
  "$(ratio "$(m tg.rps)" "$(m tgo.rps)")" "$(ratio "$(m tgb.p50)" "$(m tgo.p50)")"
printf '5,000 policies: p99 steady %s µs, during reloads %s µs: %sx (target <= 1.5x); %s reloads applied\n' \
  "$(m big.steady)" "$(m big.reload)" "$(ratio "$(m big.reload)" "$(m big.steady)")" "$reloads"
