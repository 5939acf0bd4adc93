#!/usr/bin/env bash
# What a durable answer costs, against its floor, in one run on one disk:
#   - fdatasync floors (benches/fdatasync_floor.rs), in the directory the sidecar's data
#     lives in: one ~640-byte append + fdatasync, and one ~640-byte overwrite of a file
#     written and made durable ahead + fdatasync (the ledger's layout: the ratio uses it);
#   - axum floor: a fixed JSON answer to the same POST (benches/echo_floor.rs);
#   - toolgate with `[audit] sync = "off"`: HTTP + decision, no record (measurement only);
#   - toolgate with `sync = "group"` (the default): each answer waits for the fdatasync of
#     the ledger frame holding its record.
# Target (issues 21, 46): durable p50 at one connection <= 1.3 x (off p50 + the overwrite
# fdatasync p50), where off p50 is the axum floor plus the decision.
#
# Usage: benches/durable.sh [DATA_PARENT]   (ROUNDS=3 DURATION=5 BIN_DIR=; medians reported)
# Needs wrk (apt-get install wrk). Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
P_TG=18191 P_OFF=18192 P_FLOOR=18193
# BIN_DIR: binaries built elsewhere (toolgate and examples/ below it); built here otherwise.
if [ -z "${BIN_DIR:-}" ]; then
  cargo build --release --quiet --bin toolgate --example echo_floor --example fdatasync_floor
fi
bin=${BIN_DIR:-target/release}
work=$(mktemp -d "${1:-${TMPDIR:-/tmp}}/toolgate-durable.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. benches/support/wrk.sh

config() { # port data sync
  cat <<TOML
listen = "127.0.0.1:$1"
data_dir = "$work/$2"
policies_dir = "$PWD/policies"
schemas_dir = "$PWD/schemas"
[audit]
sync = "$3"
[auth]
tokens_file = "$PWD/examples/demo-tokens.json"
TOML
}
config $P_TG tg group > "$work/tg.toml"
config $P_OFF off off > "$work/off.toml"
body='{"tool":"read_file","args":{"path":"src/main.rs","max_bytes":4096},"context":{"conv_id":"c-1","iter":1}}'
post_lua "$body"
RUST_LOG=warn "$bin/toolgate" serve --config "$work/tg.toml" 2>"$work/tg.log" & pids+=($!)
RUST_LOG=warn "$bin/toolgate" serve --config "$work/off.toml" 2>"$work/off.log" & pids+=($!)
"$bin/examples/echo_floor" "127.0.0.1:$P_FLOOR" & pids+=($!)
for port in $P_TG $P_OFF $P_FLOOR; do
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$port/" && break; sleep 0.1; done
done
for port in $P_TG $P_OFF; do
  curl -s "127.0.0.1:$port/v1/authorize" -H 'Authorization: Bearer demo-dev-token' \
    -H 'Content-Type: application/json' -d "$body" | grep -q '"decision":"allow"'
done

declare -A R
for _ in $(seq "$ROUNDS"); do
  read -r sync _ <<<"$("$bin/examples/fdatasync_floor" "$work/floor" 2000 640 overwrite)"
  R[sync]+="$sync "
  read -r append _ <<<"$("$bin/examples/fdatasync_floor" "$work/floor" 2000 640 append)"
  R[append]+="$append "
  R[floor]+="$(p50 $P_FLOOR) "
  R[off]+="$(p50 $P_OFF) "
  R[tg]+="$(p50 $P_TG) "
done
m() { echo "${R[$1]}" | tr ' ' '\n' | grep . | median; }
sync=$(m sync) append=$(m append) floor=$(m floor) off=$(m off) tg=$(m tg)
echo "runs: $ROUNDS x ${DURATION}s; per run: overwrite ${R[sync]}| off ${R[off]}| group ${R[tg]}"
echo "disk: $(df -h "$work" | awk 'NR==2{print $1" ("$2")"}')"
printf '%-52s %8s µs\n' "append + fdatasync" "$append" \
  "overwrite + fdatasync (floor: the ledger's layout)" "$sync" "axum echo (floor)" "$floor" \
  "toolgate, audit off (axum + decision)" "$off" "toolgate, audit group (durable)" "$tg"
awk -v tg="$tg" -v off="$off" -v s="$sync" -v f="$floor" 'BEGIN {
  printf "durable p50 / (off p50 + fdatasync p50) = %.0f / %.0f = %.2fx (target <= 1.3x)\n", tg, off + s, tg / (off + s);
  printf "decision alone: %.0f µs; durable overhead over off: %.0f µs (fdatasync floor %.0f µs)\n", off - f, tg - off, s }'
