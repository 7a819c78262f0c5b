# Shared helpers for the scripts in this directory. Source it; do not run it.

log() { printf '\033[1m[agentbox]\033[0m %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# Makes sure the Docker engine answers; starts Debian's dockerd when it does not (root only).
ensure_docker() {
  if docker info >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    log "the Docker engine does not answer and this is not root: start Docker and retry"
    return 1
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io (Debian's Docker Engine)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >&2
  fi
  log "starting dockerd"
  nohup dockerd >/var/log/agentbox-dockerd.log 2>&1 &
  for _ in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  log "dockerd did not come up; see /var/log/agentbox-dockerd.log"
  return 1
}

# Installs a Debian package when a command is missing (root only).
ensure_command() { # command package
  if command -v "$1" >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ]; then
    log "installing $2"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2; }
  else
    log "missing $1: install the Debian package $2"
    return 1
  fi
}

# Where the scripts keep what outlives a clone: the Python test clients' environment, xterm.js
# and, under CI=true, cargo's target directory (see scripts/test.sh).
cache_dir() { printf '%s\n' "${AGENTBOX_CACHE:-$HOME/.cache/agentbox}"; }

# The cargo target directory builds go to (CARGO_TARGET_DIR, else the clone's target/).
target_dir() { # root
  local dir=${CARGO_TARGET_DIR:-$1/target}
  case $dir in
    /*) ;;
    *) dir=$PWD/$dir ;;
  esac
  printf '%s\n' "$dir"
}

# Builds the images' Debian bases in the background (debootstrap and apt: bound by the download,
# not the CPU) so that they overlap the cargo build; `wait_for_bases` waits for them and fails
# with their log when they failed. A base whose inputs did not change is found at once.
start_bases() { # root image... (sandbox, orchestrator, swarm-node, stack-services)
  local root=$1
  shift
  bases_log=$(mktemp /tmp/agentbox-bases.XXXXXX)
  (
    for image in "$@"; do
      case $image in
        sandbox) "$root/images/base/build-base.sh" >/dev/null || exit 1 ;;
        orchestrator) "$root/images/base/build-orchestrator-base.sh" >/dev/null || exit 1 ;;
        swarm-node) "$root/images/swarm-node/build.sh" >/dev/null || exit 1 ;;
        stack-services) "$root/images/stack-services/build.sh" >/dev/null || exit 1 ;;
      esac
    done
  ) >"$bases_log" 2>&1 &
  bases_pid=$!
}

wait_for_bases() {
  local status=0
  wait "$bases_pid" || status=$?
  if [ "$status" != 0 ]; then
    log "building the image bases failed (exit $status):"
    tail -40 "$bases_log" >&2
  fi
  rm -f "$bases_log"
  return "$status"
}
