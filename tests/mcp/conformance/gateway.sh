#!/usr/bin/env bash
# The MCP conformance suite through toolgate's gateway: our conformance fixture
# (fixture_server.py, every tool, resource and prompt the suite asks for) is a stdio upstream
# mounted WITHOUT a name prefix (`prefix = ""`), so the suite's scenarios name its tools as
# they are; the suite talks to toolgate's /mcp with an agent's token; each call goes through
# the decision, the durable audit record, the gates and the forward.
#
# usage: gateway.sh TOOLGATE_BIN   (CI: after `cargo test`, with target/debug/toolgate)
# Prints the suite's summary ("passed N/M scenarios ...") and exits 1 when a scenario fails
# that gateway-expected-failures.txt does not list (with its reason), or when a listed one
# now passes (so the list stays true). Needs the MCP components (.ci/mcp-deps).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
bin=${1:?usage: gateway.sh TOOLGATE_BIN}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
DEPS="${TOOLGATE_MCP_DEPS:-$(bash "$REPO/.ci/mcp-deps")}"
PY="$DEPS/client/bin/python3"
expected="$HERE/gateway-expected-failures.txt"

work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-conformance.XXXXXX")
chmod 755 "$work"
serve_pid=""
cleanup() { [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; wait 2>/dev/null; if [ -n "${KEEP_WORK:-}" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/policies" "$work/schemas/tools" "$work/schemas/mcp" "$work/workspace"
cp "$HERE/fixture_server.py" "$work/workspace/"
chmod -R a+rX "$work/workspace"
cat >"$work/policies/entities.json" <<'JSON'
[
  {"uid": {"type": "Role", "id": "developer"}, "attrs": {}, "parents": []},
  {"uid": {"type": "Agent", "id": "dev-agent"}, "attrs": {}, "parents": [{"type": "Role", "id": "developer"}]}
]
JSON
cat >"$work/policies/conformance.cedar" <<'CEDAR'
// The suite's agent (dev-agent, a developer) may use every tool of the fixture.
@id("developers-use-the-fixture")
permit (principal in Role::"developer", action in [Action::"read", Action::"write", Action::"destructive"], resource);
CEDAR
# The fixture's tools carry no MCP annotations: this overlay classifies each (read, low), as an
# operator would. Anything unclassified stays hidden (default deny).
"$PY" - "$work/schemas/mcp/fixture.json" <<'PYEOF'
import json, sys
tools = ["test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
         "test_multiple_content_types", "test_tool_with_logging", "test_error_handling",
         "test_tool_with_progress", "test_sampling", "test_elicitation",
         "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
         "json_schema_2020_12_tool", "test_reconnection"]
json.dump({"tools": {t: {"classification": "read", "risk": "low"} for t in tools}},
          open(sys.argv[1], "w"), indent=2)
PYEOF
token=conformance-agent-token
printf '{"tokens": [{"sha256": "%s", "kind": "agent", "id": "dev-agent"}]}\n' \
  "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/tokens.json"
cat >"$work/toolgate.toml" <<TOML
listen = "127.0.0.1:$port"
policies_dir = "policies"
schemas_dir = "schemas"
[auth]
tokens_file = "tokens.json"
[exec]
root = "workspace"
[[mcp.upstreams]]
name = "fixture"
prefix = ""
command = "$PY"
args = ["fixture_server.py"]
# The suite's tools log, and ask the client's model and human during a call: let them.
relay = ["logging", "sampling", "elicitation"]
TOML

if ! "$bin" mcp sync --config "$work/toolgate.toml" >"$work/sync.log" 2>&1; then
  echo "error: toolgate mcp sync failed:" >&2
  cat "$work/sync.log" >&2
  exit 1
fi
if ! "$bin" validate --config "$work/toolgate.toml" >"$work/validate.log" 2>&1; then
  echo "error: toolgate validate refused the conformance set:" >&2
  cat "$work/validate.log" >&2
  exit 1
fi
"$bin" serve --config "$work/toolgate.toml" 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

bash "$HERE/conformance.sh" "http://127.0.0.1:$port/mcp" --bearer "$token" \
  --results "$work/results" --timeout "${CONFORMANCE_TIMEOUT:-300}" | tee "$work/summary.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "error: the conformance suite did not run to the end (exit $rc); toolgate's log:" >&2
  tail -n 30 "$work/serve.log" >&2
  exit 1
fi

# Failed scenarios vs the expected list (first word of each non-comment line).
failed=$(sed -n 's/^FAIL \([^ ]*\) .*/\1/p' "$work/summary.txt" | sort -u)
listed=$(grep -v '^\s*#' "$expected" | awk 'NF {print $1}' | sort -u)
unexpected=$(comm -23 <(printf '%s\n' "$failed" | sed '/^$/d') <(printf '%s\n' "$listed" | sed '/^$/d'))
now_pass=$(comm -13 <(printf '%s\n' "$failed" | sed '/^$/d') <(printf '%s\n' "$listed" | sed '/^$/d'))
status=0
if [ -n "$unexpected" ]; then
  echo "error: scenarios failed through the gateway that $expected does not list:" >&2
  printf '  %s\n' $unexpected >&2
  status=1
fi
if [ -n "$now_pass" ]; then
  echo "error: scenarios listed in $expected pass now; remove them from the list:" >&2
  printf '  %s\n' $now_pass >&2
  status=1
fi
[ "$status" -eq 0 ] && echo "conformance through the gateway: as expected ($(printf '%s\n' "$listed" | sed '/^$/d' | wc -l) known failures, listed with reasons in $expected)"
exit "$status"
