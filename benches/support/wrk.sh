# Shared by the wrk benches (durable.sh, shipping.sh, fleet.sh, traces.sh): source it after
# setting $work (and, for `sidecar`, a `pids` array).
#   post_lua BODY   writes $work/post.lua, a POST /v1/authorize as the demo agent
#   p50 PORT        p50 latency (µs) at one connection for $DURATION seconds
#   median          the median of numbers on stdin
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }

post_lua() {
  cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.path = "/v1/authorize"
wrk.body = [[$1]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer demo-dev-token"
LUA
}
to_us() { awk '{v=$1; if (v ~ /us$/) {sub(/us/,"",v); print v} else if (v ~ /ms$/) {sub(/ms/,"",v); print v*1000} else if (v ~ /s$/) {sub(/s/,"",v); print v*1000000} else print v}'; }
p50() { wrk -t1 -c1 -d"${DURATION}s" --latency -s "$work/post.lua" "http://127.0.0.1:$1" 2>&1 | awk '$1=="50%"{print $2}' | to_us; }
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }

# The two-sidecar comparison of shipping.sh, fleet.sh and traces.sh: the same binary, one
# plain (the floor) and one with an extra config section, both with durable (group) audit.
#   sidecar NAME PORT EXTRA   writes $work/NAME.toml and starts it (RUST_LOG=warn, log in
#                             $work/NAME.log); the caller's `pids` array gets its pid
#   ready PORT...             waits until each answers /readyz 200
#   rps PORT                  requests/s at 32 connections for $DURATION seconds
#   compare FLOOR X LABEL_FLOOR LABEL_X
#                             $ROUNDS rounds of p50 and rps on ports $FLOOR and $X, medians
#                             printed with the ratios (X / floor)
body='{"tool":"read_file","args":{"path":"src/main.rs","max_bytes":4096},"context":{"conv_id":"c-1","iter":1}}'
sidecar() {
  cat > "$work/$1.toml" <<TOML
listen = "127.0.0.1:$2"
data_dir = "$work/$1"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
[audit]
sync = "group"
$3
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
TOML
  RUST_LOG=warn target/release/toolgate serve --config "$work/$1.toml" 2>"$work/$1.log" &
  pids+=($!)
}
ready() {
  for port in "$@"; do
    for _ in $(seq 100); do curl -sf -o /dev/null "127.0.0.1:$port/readyz" && break; sleep 0.1; done
  done
}
rps() { wrk -t2 -c32 -d"${DURATION}s" -s "$work/post.lua" "http://127.0.0.1:$1" 2>&1 | awk '$1=="Requests/sec:"{print $2}'; }
compare() {
  local fp="" xp="" fr="" xr=""
  for _ in $(seq "$ROUNDS"); do
    fp+="$(p50 "$1") "; xp+="$(p50 "$2") "; fr+="$(rps "$1") "; xr+="$(rps "$2") "
  done
  local m_fp m_xp m_fr m_xr
  m_fp=$(echo "$fp" | tr ' ' '\n' | grep . | median)
  m_xp=$(echo "$xp" | tr ' ' '\n' | grep . | median)
  m_fr=$(echo "$fr" | tr ' ' '\n' | grep . | median)
  m_xr=$(echo "$xr" | tr ' ' '\n' | grep . | median)
  printf '%-44s %10s %10s\n' "" "p50 µs" "req/s" "$3" "$m_fp" "$m_fr" "$4" "$m_xp" "$m_xr"
  awk -v a="$m_xp" -v b="$m_fp" -v c="$m_xr" -v d="$m_fr" 'BEGIN {
    printf "p50 ratio = %.2fx (%+.0f µs); throughput ratio = %.2fx\n", a / b, a - b, c / d }'
}
