#!/usr/bin/env bash
# The example agent, in one command, from a clean clone:
#
#   bash examples/agent/run.sh
#
# Builds toolgate (release; skipped when $TOOLGATE names a binary), installs the Python client
# (clients/python) into a virtualenv under target/, copies ./workspace to a scratch directory,
# starts the sidecar there on a free loopback port with the shipped policies and the DEMO
# tokens, runs agent.py against it, and stops the sidecar. Needs Python 3.11+, Node 20+ (the
# workspace's tests run with `npm test`), and PyPI for the client's one dependency (httpx).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [ -z "${TOOLGATE:-}" ]; then
  echo "==> building toolgate (cargo build --release; the first build takes a while)"
  (cd "$repo" && cargo build --release --locked --quiet)
  TOOLGATE="$repo/target/release/toolgate"
fi
TOOLGATE="$(cd "$(dirname "$TOOLGATE")" && pwd)/$(basename "$TOOLGATE")"

venv="${TOOLGATE_EXAMPLE_VENV:-$repo/target/example-agent-venv}"
if ! "$venv/bin/python" -c 'import httpx' 2>/dev/null; then
  echo "==> installing the Python client into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$repo/clients/python"
else
  # This checkout's client, whatever the venv held before (a few seconds).
  "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$repo/clients/python"
fi

# A scratch copy of the workspace (the agent edits it), readable by the user tools run as.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/toolgate-example.XXXXXX")"
chmod 755 "$scratch"
cp -R "$here/workspace" "$scratch/workspace"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$scratch/toolgate.toml" <<TOML
# The example agent's sidecar: the shipped policies, the DEMO tokens, this scratch workspace.
listen = "127.0.0.1:$port"
policies_dir = "$repo/policies"
schemas_dir = "$repo/schemas"

[auth]
tokens_file = "$repo/examples/demo-tokens.json"

[exec]
root = "$scratch/workspace"
TOML

"$TOOLGATE" serve --config "$scratch/toolgate.toml" --data-dir "$scratch/data" \
  >"$scratch/sidecar.log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
for _ in $(seq 1 300); do
  if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
    "http://127.0.0.1:$port/readyz" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "error: toolgate exited at start:" >&2
    cat "$scratch/sidecar.log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! kill -0 "$pid" 2>/dev/null; then
  echo "error: toolgate exited at start:" >&2
  cat "$scratch/sidecar.log" >&2
  exit 1
fi
echo "==> toolgate is listening on 127.0.0.1:$port (log: $scratch/sidecar.log)"
echo

TOOLGATE_URL="http://127.0.0.1:$port" WORKSPACE="$scratch/workspace" \
  "$venv/bin/python" "$here/agent.py"
