#!/usr/bin/env bash
# What resolving path arguments at decision time costs (issue 39): `/v1/authorize` p50 of
# `read_file` over one keep-alive connection, sequential requests, on two sidecars over the
# shipped set with the audit log off (measurement only):
#   - `lexical`: no `[exec] root`, so the path is judged as asked (no file system access);
#   - `resolved`: `[exec] root` set, so each path argument goes through the jail (openat2,
#     readlink of the descriptor, fstat) before Cedar;
# for a plain file, a link inside the root, a path three directories deep, and `echo` (a tool
# with no path argument) as the control.
#
# Usage: benches/paths.sh   (ROUNDS=3 N=2000; medians of the rounds' p50s are reported)
#        BIN=target/debug/toolgate benches/paths.sh   to measure a debug build instead
# Needs python3. Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
N=${N:-2000}
P_LEX=18201 P_RES=18202
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --bin toolgate
  BIN=target/release/toolgate
fi
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/root/a/b/c"
echo fine > "$work/root/ok.txt"
echo deep > "$work/root/a/b/c/deep.txt"
ln -s ok.txt "$work/root/link.txt"
config() { # port data [exec]
  cat <<TOML
listen = "127.0.0.1:$1"
data_dir = "$work/$2"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
[audit]
sync = "off"
[anomaly]
enabled = false
$3
TOML
}
config $P_LEX lex-data "" > "$work/lex.toml"
config $P_RES res-data "[exec]
root = \"$work/root\"
programs = [\"printf\", \"git\", \"npm\"]" > "$work/res.toml"
for which in lex res; do
  "$BIN" serve --config "$work/$which.toml" > "$work/$which.log" 2>&1 &
  pids+=($!)
done
for port in $P_LEX $P_RES; do
  for _ in $(seq 100); do
    curl -sf "127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.1
  done
done

python3 - "$ROUNDS" "$N" "$P_LEX" "$P_RES" <<'PY'
import http.client, json, statistics, sys, time
rounds, n, p_lex, p_res = (int(a) for a in sys.argv[1:])
cases = [
    ("read_file ok.txt", "read_file", {"path": "ok.txt"}),
    ("read_file link.txt", "read_file", {"path": "link.txt"}),
    ("read_file a/b/c/deep.txt", "read_file", {"path": "a/b/c/deep.txt"}),
    ("echo (no path arg)", "echo", {"message": "hi"}),
]
def p50(port, tool, args):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = json.dumps({"tool": tool, "args": args})
    head = {"Authorization": "Bearer demo-dev-token", "Content-Type": "application/json"}
    lat = []
    for i in range(n + 200):
        t = time.perf_counter()
        c.request("POST", "/v1/authorize", body, head)
        r = c.getresponse()
        answer = json.loads(r.read())
        if i >= 200:  # warm-up left out
            lat.append(time.perf_counter() - t)
    assert answer["decision"] == "allow", answer
    return statistics.median(lat) * 1e6
print(f"{'case':28} {'lexical p50 us':>15} {'resolved p50 us':>16} {'delta us':>9}")
for label, tool, args in cases:
    lex = statistics.median(p50(p_lex, tool, args) for _ in range(rounds))
    res = statistics.median(p50(p_res, tool, args) for _ in range(rounds))
    print(f"{label:28} {lex:15.1f} {res:16.1f} {res - lex:9.1f}")
PY
