# Shared by the CI scripts (`. .ci/lib.sh` from the repository root).

step() { printf '\n==> %s\n' "$*"; }

# need COMMAND PACKAGE WHY [APT_OPTION...]: installs the Debian PACKAGE when COMMAND (a name on
# PATH, or a path) is missing; the package lists are refreshed only when the install fails.
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  local package="$2"
  step "install $package (Debian package; $3)"
  shift 3
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq "$@" "$package" \
    || { $sudo apt-get update -qq && $sudo apt-get install -y -qq "$@" "$package"; }
}
