# shellcheck shell=bash
# Shared by conformance.sh and inspector.sh (sourced, not run).
#
# Both tools need Node.js >= 22.19: the conformance suite imports fs.globSync (Node 22+) and the
# Inspector 2.x declares engines ">=22.19.0". The machine has Node 20, so when the system node is
# older we install Node 22 from the npm registry package node-linux-<arch> (a prebuilt binary
# shipped inside a registry package) into the cache. Everything is installed only if missing,
# under a lock, with a time bound; nothing is fetched at run time.

MCP_TOOLS_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/toolgate-ci/mcp"
MCP_NODE22_VERSION="${MCP_NODE22_VERSION:-22.23.3}"
MCP_INSTALL_TIMEOUT="${MCP_INSTALL_TIMEOUT:-600}"

mcp_log() { printf '%s\n' "$*" >&2; }

# mcp_npm_install DIR PKG@VERSION... : install the packages into DIR unless DIR/.installed already
# lists exactly these specs. Prints nothing on stdout. Returns nonzero on failure.
mcp_npm_install() {
  local dir=$1
  shift
  local want="$*"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$want" ]; then
    return 0
  fi
  command -v npm >/dev/null 2>&1 || { mcp_log "npm not found: cannot install $want"; return 1; }
  mkdir -p "$dir" || return 1
  (
    # One installer at a time per directory; a second caller waits, then finds the marker.
    flock -w "$MCP_INSTALL_TIMEOUT" 9 || { mcp_log "timed out waiting for the install lock on $dir"; exit 1; }
    if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$want" ]; then
      exit 0
    fi
    rm -f "$dir/.installed"
    [ -f "$dir/package.json" ] || printf '{ "name": "toolgate-ci-mcp-tool", "private": true }\n' >"$dir/package.json"
    mcp_log "installing $want into $dir (npm registry, bounded to ${MCP_INSTALL_TIMEOUT}s)"
    local start=$SECONDS
    # shellcheck disable=SC2086
    if ! timeout --kill-after=10 "$MCP_INSTALL_TIMEOUT" \
      npm install --prefix "$dir" --save-exact --no-fund --no-audit --loglevel=error "$@" >"$dir/install.log" 2>&1; then
      mcp_log "npm install of $want failed; last lines of $dir/install.log:"
      tail -n 20 "$dir/install.log" >&2
      exit 1
    fi
    printf '%s' "$want" >"$dir/.installed"
    mcp_log "installed $want in $((SECONDS - start))s"
  ) 9>"$dir.lock"
}

# mcp_node22 : print the path of a node binary >= 22.19, installing one if needed.
mcp_node22() {
  local sys v major minor
  sys=$(command -v node 2>/dev/null || true)
  if [ -n "$sys" ]; then
    v=$("$sys" -p 'process.versions.node' 2>/dev/null || true)
    major=${v%%.*}
    minor=${v#*.}
    minor=${minor%%.*}
    if [ -n "$v" ] && { [ "$major" -gt 22 ] || { [ "$major" -eq 22 ] && [ "$minor" -ge 19 ]; }; }; then
      printf '%s\n' "$sys"
      return 0
    fi
  fi
  local arch
  case "$(uname -m)" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) mcp_log "no node-linux package for architecture $(uname -m)"; return 1 ;;
  esac
  local dir="$MCP_TOOLS_CACHE/node22"
  mcp_npm_install "$dir" "node-linux-$arch@$MCP_NODE22_VERSION" || return 1
  local bin="$dir/node_modules/node-linux-$arch/bin/node"
  if ! "$bin" --version >/dev/null 2>&1; then
    mcp_log "installed node at $bin does not run"
    return 1
  fi
  printf '%s\n' "$bin"
}
