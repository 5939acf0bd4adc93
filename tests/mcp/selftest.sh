#!/usr/bin/env bash
# Self-test for the Python side of toolgate's MCP tests (driver.py, mutable_server.py).
# Runs selftest.py with the CI venv against the real servers installed under
# ~/.cache/toolgate-ci/mcp (override the root with TOOLGATE_MCP_CI), bounded in time.
#   ./selftest.sh                   run all checks; exit non-zero on any failure
#   ./selftest.sh --dump-dir DIR    also write DIR/tools-<server>.json (list_tools answers)
#   ./selftest.sh --keep            keep the temp dir with every driver's stderr
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ci="${TOOLGATE_MCP_CI:-$HOME/.cache/toolgate-ci/mcp}"
py="$ci/client/bin/python"
[ -x "$py" ] || { echo "selftest: missing $py (install the MCP test components first)" >&2; exit 1; }
export TOOLGATE_MCP_CI="$ci"
# Whole run: about 60 s on 2 cores; hard bound 300 s (SIGTERM, then SIGKILL 10 s later).
exec timeout --kill-after=10 300 "$py" "$here/selftest.py" "$@"
