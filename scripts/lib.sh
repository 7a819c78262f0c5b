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
