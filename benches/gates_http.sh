#!/usr/bin/env bash
# The output gate over HTTP (`POST /v1/gates/output`), next to its floor measured in the same
# run: an axum endpoint that echoes the body back (benches/echo_floor.rs).
#   - server CPU per request for a 1 KB body, clean and with a secret (the masked answer and
#     its audit record), read from /proc for the server process only;
#   - throughput for a 1 MiB log body with a secret every 50 lines and a key every 70;
#   - throughput for 64 distinct 64 KiB bodies dense with secrets (a finding every ~150 bytes),
#     each request the next body, at 8 connections (issue 43: one repeated body hides what a
#     new finding costs);
#   - the clean 1 MiB body's server CPU per request and the server's RSS before and after
#     20 distinct dense 1 MiB bodies.
#
# Usage: benches/gates_http.sh          (DURATION=5 seconds per run by default)
# Needs: wrk (installed with apt-get when missing). Traffic goes only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
P_TG=18281 P_FLOOR=18282

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet --bin toolgate --example echo_floor
bin=target/release
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

cat > "$work/tg.toml" <<TOML
listen = "127.0.0.1:$P_TG"
data_dir = "$work/tg-data"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
max_body_bytes = 4194304
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
TOML

python3 - "$work" <<'PY'
import json, random, string, sys
work = sys.argv[1]
r = random.Random(7)
words = "the quick brown fox jumps over lazy dog build deploy server log info warn user request".split()
clean = " ".join(r.choice(words) for _ in range(200))[:1000]
json.dump({"content": clean}, open(f"{work}/clean1k.json", "w"))
json.dump({"content": clean[:900] + " password: Tr0ub4dor&3x"}, open(f"{work}/secret1k.json", "w"))
lines, size, i = [], 0, 0
log = "2024-01-01T10:00:00Z GET /api/v1/items 200 12ms".split()
while size < (1 << 20) - 200:
    line = " ".join(r.choice(words + log) for _ in range(12))
    if i % 50 == 0:
        line += f" password: Tr0ub4dor&3x{i}"
    if i % 70 == 0:
        line += " key AKIA" + "".join(r.choice(string.ascii_uppercase + "234567") for _ in range(16))
    lines.append(line); size += len(line) + 1; i += 1
json.dump({"content": "\n".join(lines)}, open(f"{work}/mixed1m.json", "w"))
json.dump({"content": " ".join(r.choice(words) for _ in range(200000))[:1 << 20]}, open(f"{work}/clean1m.json", "w"))

def chars(n, alphabet):
    return "".join(r.choice(alphabet) for _ in range(n))
ALNUM = string.ascii_letters + string.digits
def dense(size):
    out = []
    n = 0
    while n < size:
        words_ = " ".join(r.choice(words) for _ in range(r.randrange(8, 20)))
        k = r.randrange(8)
        secret = [
            lambda: "aws_access_key_id=AKIA" + chars(16, string.ascii_uppercase + "234567"),
            lambda: "token: ghp_" + chars(36, ALNUM),
            lambda: f"mail {chars(6, 'abcdefgh')}.{chars(5, 'xyz')}@example.org",
            lambda: f'password = "{chars(14, ALNUM)}"',
            lambda: "sk_live_" + chars(24, ALNUM),
            lambda: f"Authorization: Bearer eyJ{chars(20, ALNUM)}.eyJ{chars(30, ALNUM)}.{chars(43, ALNUM)}",
            lambda: "api_key: " + chars(32, "0123456789abcdef"),
            lambda: f"xoxb-{chars(12, string.digits)}-{chars(24, ALNUM)}",
        ][k]()
        line = f"{words_} {secret}\n"
        out.append(line)
        n += len(line)
    return "".join(out)[:size]
for i in range(64):
    json.dump({"content": dense(64 << 10)}, open(f"{work}/dense64k-{i}.json", "w"))
for i in range(20):
    json.dump({"content": dense(1 << 20)}, open(f"{work}/dense1m-{i}.json", "w"))
PY
for b in clean1k secret1k mixed1m clean1m; do
  cat > "$work/$b.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer demo-dev-token"
local f = io.open("$work/$b.json"); wrk.body = f:read("*a"); f:close()
LUA
done
# One distinct body per request, in turn.
cat > "$work/dense64k.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer demo-dev-token"
local bodies = {}
for i = 0, 63 do
  local f = io.open("$work/dense64k-" .. i .. ".json"); bodies[#bodies + 1] = f:read("*a"); f:close()
end
local n = 0
request = function()
  n = n % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[n])
end
LUA
cp "$work/dense64k-0.json" "$work/dense64k.json"

"$bin/toolgate" serve --config "$work/tg.toml" >"$work/tg.log" 2>&1 & pids+=($!); tg=$!
"$bin/examples/echo_floor" "127.0.0.1:$P_FLOOR" >/dev/null 2>&1 & pids+=($!); floor=$!
for port in $P_TG $P_FLOOR; do
  for _ in $(seq 300); do curl -s -o /dev/null -m 1 "http://127.0.0.1:$port/" && break; sleep 0.1; done
done
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# run NAME PID PORT BODY CONNECTIONS -> "requests cpu_us_per_request MB_per_s"
run() {
  local c0 out c1 reqs secs bytes
  c0=$(cpu "$2")
  out=$(wrk -t1 -c"$5" -d"${DURATION}s" -s "$work/$4.lua" "http://127.0.0.1:$3/v1/gates/output")
  c1=$(cpu "$2")
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  secs=$(echo "$out" | awk '/requests in/ {gsub("s,","",$4); print $4}')
  bytes=$(stat -c %s "$work/$4.json")
  python3 -c "r=$reqs; print(r, round(($c1-$c0)*1e6/$tck/max(r,1),1), round(r*$bytes/$secs/1e6,1))"
}
printf '| body | connections | toolgate CPU µs/req | floor CPU µs/req | toolgate MB/s | floor MB/s | ratio (MB/s) |\n|---|---|---|---|---|---|---|\n'
for spec in "clean1k 1" "clean1k 4" "secret1k 1" "secret1k 4" "mixed1m 1" "mixed1m 2" "dense64k 8"; do
  set -- $spec
  read -r _ tcpu tmb <<<"$(run tg "$tg" $P_TG "$1" "$2")"
  read -r _ fcpu fmb <<<"$(run floor "$floor" $P_FLOOR "$1" "$2")"
  ratio=$(python3 -c "print(round($tmb/max($fmb,0.001),3))")
  echo "| $1 | $2 | $tcpu | $fcpu | $tmb | $fmb | $ratio |"
done

# The clean 1 MiB body before and after 20 distinct dense 1 MiB bodies: server CPU per request
# (median of 3 rounds of 10) and RSS. Nothing a dense body leaves behind may slow or grow the server.
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
post() { curl -s -o /dev/null -H 'Content-Type: application/json' -H 'Authorization: Bearer demo-dev-token' --data-binary "@$work/$1.json" "http://127.0.0.1:$P_TG/v1/gates/output"; }
clean_cpu() {
  local all=() c0 c1
  for _ in 1 2 3; do
    c0=$(cpu "$tg"); for _ in 1 2 3 4 5 6 7 8 9 10; do post clean1m; done; c1=$(cpu "$tg")
    all+=("$(( (c1 - c0) * 100000 / tck ))")
  done
  printf '%s\n' "${all[@]}" | sort -n | sed -n 2p
}
before=$(clean_cpu); rss0=$(rss "$tg")
for i in $(seq 0 19); do post "dense1m-$i"; done
after=$(clean_cpu); rss1=$(rss "$tg")
echo
echo "clean 1 MiB after 20 dense 1 MiB bodies: server CPU $before -> $after µs per request ($(python3 -c "print(round($after/max($before,1),2))")×); RSS $((rss0 / 1024)) -> $((rss1 / 1024)) MB"
