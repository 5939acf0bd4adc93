#!/usr/bin/env bash
# Run one request through the MCP Inspector CLI (@modelcontextprotocol/inspector, --cli mode)
# against an MCP server over streamable HTTP (a URL) or stdio (a command), non-interactively.
#
# usage: inspector.sh [--bearer TOKEN] [--header 'Name: value']... [--method M] [--tool NAME]
#                     [--args JSON] [--era legacy|auto|modern] [--timeout SECONDS]
#                     [-x INSPECTOR_ARG]... [--] TARGET [TARGET ARGS...]
#
#   TARGET            http(s)://host:port/mcp for streamable HTTP, or a command (and its
#                     arguments) to start a stdio server
#   --bearer TOKEN    send "Authorization: Bearer TOKEN" (HTTP only; default $MCP_BEARER_TOKEN)
#   --header 'N: v'   another HTTP header (repeatable)
#   --method M        tools/list (default), tools/call, resources/list, prompts/list, ...
#   --tool NAME       tool name for tools/call (e.g. echo, or everything.echo through toolgate)
#   --args JSON       tool arguments as one JSON object (default {})
#   --era E           protocol era the inspector negotiates (default legacy: plain initialize)
#   --timeout S       bound for the whole call (default $INSPECTOR_TIMEOUT or 60)
#   -x ARG            pass ARG to the inspector CLI as it is (repeatable)
#
# stdout: the inspector's JSON ({"result":...} or {"error":...}), one line.
# stderr: a one-line summary, e.g. "inspector tools/list: ok, 13 tools: echo, ...".
# exit:   the inspector's own code (0 ok, 1 usage/protocol error, 3 auth required, 4 unreachable,
#         5 tool error or unknown tool), 100 could not install, 124 time bound hit.
#
# Installs @modelcontextprotocol/inspector (pinned) into
# ${XDG_CACHE_HOME:-$HOME/.cache}/toolgate-ci/mcp/inspector only if missing. The inspector keeps
# its catalog/OAuth state in a throwaway directory, never in ~/.mcp-inspector, and never starts an
# interactive OAuth login (--stored-auth-only).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=mcp-node-lib.sh
. "$HERE/mcp-node-lib.sh"

INSPECTOR_VERSION="${INSPECTOR_VERSION:-2.12.0}"

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-1}"; }

bearer="${MCP_BEARER_TOKEN:-}"
headers=()
method="tools/list"
tool=""
args_json=""
era="legacy"
limit="${INSPECTOR_TIMEOUT:-60}"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bearer) [ $# -ge 2 ] || usage; bearer=$2; shift 2 ;;
    --bearer=*) bearer=${1#*=}; shift ;;
    --header) [ $# -ge 2 ] || usage; headers+=("$2"); shift 2 ;;
    --method) [ $# -ge 2 ] || usage; method=$2; shift 2 ;;
    --tool) [ $# -ge 2 ] || usage; tool=$2; shift 2 ;;
    --args) [ $# -ge 2 ] || usage; args_json=$2; shift 2 ;;
    --era) [ $# -ge 2 ] || usage; era=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || usage; limit=$2; shift 2 ;;
    -x) [ $# -ge 2 ] || usage; extra+=("$2"); shift 2 ;;
    -h | --help) usage 0 ;;
    --) shift; break ;;
    -*) mcp_log "unknown option $1"; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
case "$limit" in '' | *[!0-9]*) mcp_log "--timeout needs whole seconds"; exit 1 ;; esac
if [ -n "$tool" ] && [ "$method" = "tools/list" ]; then method="tools/call"; fi
if [ "$method" = "tools/call" ] && [ -z "$tool" ]; then mcp_log "tools/call needs --tool NAME"; exit 1; fi

node=$(mcp_node22) || exit 100
dir="$MCP_TOOLS_CACHE/inspector"
mcp_npm_install "$dir" "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" || exit 100
cli="$dir/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
[ -f "$cli" ] || { mcp_log "inspector not found at $cli after install"; exit 100; }

state=$(mktemp -d "${TMPDIR:-/tmp}/mcp-inspector.XXXXXX") || exit 1
trap 'rm -rf "$state"' EXIT
export MCP_STORAGE_DIR="$state/storage" MCP_CATALOG_PATH="$state/mcp.json"
export MCP_CLIENT_CONFIG_PATH="$state/client.json" MCP_INSPECTOR_OAUTH_STATE_PATH="$state/oauth.json"

opts=(--cli --method "$method" --format json -q --stored-auth-only --protocol-era "$era"
  --connect-timeout "$(((limit > 3 ? limit - 2 : 1) * 1000))")
[ -n "$args_json" ] || args_json='{}'
if [ -n "$tool" ]; then opts+=(--tool-name "$tool" --tool-args-json "$args_json"); fi
case "$1" in
  http://* | https://*)
    [ -n "$bearer" ] && opts+=(--header "Authorization: Bearer $bearer")
    for h in "${headers[@]}"; do opts+=(--header "$h"); done
    ;;
  *)
    if [ -n "$bearer" ] || [ ${#headers[@]} -gt 0 ]; then
      mcp_log "note: --bearer/--header apply to HTTP targets only; ignored for the stdio command"
    fi
    ;;
esac

out="$state/out.json"
start=$SECONDS
timeout --kill-after=5 "$limit" "$node" "$cli" "${opts[@]}" "${extra[@]}" -- "$@" </dev/null >"$out"
rc=$?
elapsed=$((SECONDS - start))
cat "$out"
[ -s "$out" ] && [ "$(tail -c 1 "$out")" != "" ] && echo

if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  mcp_log "inspector $method: timed out after ${limit}s"
  exit 124
fi
# The inspector prints {"error":...} on stderr with -q, {"result":...} on stdout.
"$node" -e '
  const fs = require("node:fs");
  const [file, method, rc, secs] = process.argv.slice(1);
  let j = null;
  try { j = JSON.parse(fs.readFileSync(file, "utf8")); } catch {}
  const r = j && j.result;
  let s;
  if (rc === "0" && r) {
    if (Array.isArray(r.tools)) s = `ok, ${r.tools.length} tools: ${r.tools.map((t) => t.name).join(", ")}`;
    else if (Array.isArray(r.content)) {
      const text = r.content.map((c) => (c.type === "text" ? c.text : `[${c.type}]`)).join(" ");
      s = `ok: ${text.replace(/\s+/g, " ").slice(0, 200)}`;
    } else s = "ok";
  } else s = `failed (inspector exit ${rc}; see its error above)`;
  console.error(`inspector ${method}: ${s} [${secs}s]`);
' "$out" "$method${tool:+ $tool}" "$rc" "$elapsed"
exit "$rc"
