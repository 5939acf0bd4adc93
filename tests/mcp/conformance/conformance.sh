#!/usr/bin/env bash
# Run the MCP conformance suite (@modelcontextprotocol/conformance, server mode) against an MCP
# server that speaks streamable HTTP at URL, and print a one-line summary plus the failures.
#
# usage: conformance.sh URL [--bearer TOKEN] [--header 'Name: value']... [--scenarios a,b,...]
#                           [--results DIR] [--timeout SECONDS] [--strict] [SUITE ARGS...]
#
#   URL               the server's MCP endpoint, e.g. http://127.0.0.1:8080/mcp
#   --bearer TOKEN    send "Authorization: Bearer TOKEN" on every request to URL's origin
#                     (default: $MCP_BEARER_TOKEN if set). The suite itself has no header option;
#                     auth-preload.mjs adds the headers in-process (see there).
#   --header 'N: v'   send another header the same way (repeatable)
#   --scenarios LIST  run only these scenarios (comma-separated), one suite call each
#   --results DIR     keep the suite's checks.json files here (default: a new temp dir)
#   --timeout S       bound for the whole run (default $CONFORMANCE_TIMEOUT or 300)
#   --strict          exit with the suite's own exit code when it ran (1 on any failure, or on a
#                     mismatch with --expected-failures); default is 0 whenever it ran
#   SUITE ARGS        passed to `conformance server` as they are: --suite active|all|pending,
#                     --scenario NAME, --spec-version V, --expected-failures FILE, --verbose
#
# exit: 0 it ran (whatever passed or failed; see --strict); 2 bad usage or no scenario ran;
#       3 could not install; 4 server unreachable; 124 the time bound cut the run short.
#
# Installs @modelcontextprotocol/conformance (pinned) into
# ${XDG_CACHE_HOME:-$HOME/.cache}/toolgate-ci/mcp/conformance only if missing; at run time it needs
# no network but the server's.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=mcp-node-lib.sh
. "$HERE/mcp-node-lib.sh"

CONFORMANCE_VERSION="${CONFORMANCE_VERSION:-0.1.16}"

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }

[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage 0 ;; esac
url=$1
shift
case "$url" in http://* | https://*) ;; *) mcp_log "URL must start with http:// or https://: $url"; exit 2 ;; esac

bearer="${MCP_BEARER_TOKEN:-}"
headers=()
scenarios=""
results=""
limit="${CONFORMANCE_TIMEOUT:-300}"
strict=0
suite_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bearer) [ $# -ge 2 ] || usage; bearer=$2; shift 2 ;;
    --bearer=*) bearer=${1#*=}; shift ;;
    --header) [ $# -ge 2 ] || usage; headers+=("$2"); shift 2 ;;
    --scenarios) [ $# -ge 2 ] || usage; scenarios=$2; shift 2 ;;
    --results) [ $# -ge 2 ] || usage; results=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || usage; limit=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    -o | --output-dir) mcp_log "use --results DIR instead of $1"; exit 2 ;;
    -h | --help) usage 0 ;;
    *) suite_args+=("$1"); shift ;;
  esac
done
case "$limit" in '' | *[!0-9]*) mcp_log "--timeout needs whole seconds"; exit 2 ;; esac

node=$(mcp_node22) || exit 3
dir="$MCP_TOOLS_CACHE/conformance"
mcp_npm_install "$dir" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" || exit 3
suite="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[ -f "$suite" ] || { mcp_log "suite not found at $suite after install"; exit 3; }

# Is anything listening there? (A refused connection would otherwise show as 30 failed scenarios.)
if ! timeout 10 "$node" -e '
  const net = require("node:net");
  const u = new URL(process.argv[1]);
  const port = Number(u.port || (u.protocol === "https:" ? 443 : 80));
  const host = u.hostname.replace(/^\[|\]$/g, "");
  const s = net.connect({ host, port, timeout: 5000 });
  s.on("connect", () => { s.destroy(); process.exit(0); });
  s.on("timeout", () => { console.error(`no answer from ${host}:${port} within 5s`); process.exit(1); });
  s.on("error", (e) => { console.error(`cannot connect to ${host}:${port}: ${e.message}`); process.exit(1); });
' "$url"; then
  mcp_log "server unreachable: $url"
  exit 4
fi

preload=()
if [ -n "$bearer" ] || [ ${#headers[@]} -gt 0 ]; then
  hdr_json=$("$node" -e '
    const [bearer, ...pairs] = process.argv.slice(1);
    const out = {};
    if (bearer) out["Authorization"] = `Bearer ${bearer}`;
    for (const p of pairs) {
      const i = p.indexOf(":");
      if (i <= 0) { console.error(`bad --header (want "Name: value"): ${p}`); process.exit(2); }
      out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
    }
    process.stdout.write(JSON.stringify(out));
  ' "$bearer" "${headers[@]}") || exit 2
  export MCP_CONF_HEADERS="$hdr_json"
  MCP_CONF_ORIGIN=$("$node" -p 'new URL(process.argv[1]).origin' "$url") || exit 2
  export MCP_CONF_ORIGIN
  export MCP_CONF_UNDICI_FROM="$suite"
  preload=(--import "file://$HERE/auth-preload.mjs")
fi

if [ -z "$results" ]; then
  results=$(mktemp -d "${TMPDIR:-/tmp}/mcp-conformance.XXXXXX") || exit 2
fi
mkdir -p "$results" || exit 2
log="$results/suite.log"
: >"$log"

deadline=$((SECONDS + limit))
suite_rc=0
cut_short=0
run_suite() { # run_suite ARGS... : one suite process, bounded by what is left of the deadline
  local left=$((deadline - SECONDS))
  if [ "$left" -le 0 ]; then cut_short=1; return 124; fi
  # No stdin; the suite talks to the server only.
  timeout --kill-after=5 "$left" "$node" "${preload[@]}" "$suite" server --url "$url" -o "$results" \
    "$@" </dev/null >>"$log" 2>&1
  local rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then cut_short=1; fi
  return "$rc"
}

start=$SECONDS
if [ -n "$scenarios" ]; then
  IFS=',' read -r -a list <<<"$scenarios"
  for s in "${list[@]}"; do
    [ -n "$s" ] || continue
    run_suite --scenario "$s" "${suite_args[@]}"
    rc=$?
    [ "$rc" -ne 0 ] && suite_rc=$rc
    [ "$cut_short" -eq 1 ] && break
  done
else
  run_suite "${suite_args[@]}"
  suite_rc=$?
fi
elapsed=$((SECONDS - start))

"$node" "$HERE/conformance-summary.mjs" "$results" "$log" "$url"
sum_rc=$?
mcp_log "conformance $CONFORMANCE_VERSION: ${elapsed}s, suite exit $suite_rc, log $log"

if [ "$cut_short" -eq 1 ]; then
  mcp_log "cut short by the ${limit}s time bound"
  exit 124
fi
if [ "$sum_rc" -ne 0 ]; then
  mcp_log "the suite ran no scenario; the start and end of its output:"
  head -n 8 "$log" >&2
  mcp_log "..."
  tail -n 8 "$log" >&2
  exit 2
fi
if [ "$strict" -eq 1 ]; then exit "$suite_rc"; fi
exit 0
