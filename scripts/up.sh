#!/usr/bin/env bash
# Builds what Agentbox needs and starts it: today, the sandbox image and one sandbox.
# Prints the noVNC URL (watch and take over the desktop in a browser) and the API URL.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

ensure_docker
ensure_command debootstrap debootstrap
"$root/images/build.sh"

name=${AGENTBOX_SANDBOX_NAME:-agentbox-sandbox}
key=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
docker rm -f "$name" >/dev/null 2>&1 || true
docker run -d --rm --name "$name" \
  --shm-size 1g \
  -p 127.0.0.1:8080:8080 -p 127.0.0.1:6080:6080 -p 127.0.0.1:9222:9222 \
  -e SANDBOX_API_KEY="$key" \
  agentbox/sandbox:latest >/dev/null

log "waiting for every program to be ready"
for _ in $(seq 1 600); do
  if curl -fsS -o /dev/null -H "Authorization: Bearer $key" http://127.0.0.1:8080/readyz; then
    cat <<MSG

Agentbox sandbox "$name" is ready.

  Desktop (noVNC):  http://127.0.0.1:6080/vnc.html?autoconnect=1&resize=scale
  Sandbox API:      http://127.0.0.1:8080   (header: Authorization: Bearer $key)
  CDP:              http://127.0.0.1:9222/json/version

  Try:  curl -H 'Authorization: Bearer $key' http://127.0.0.1:8080/v1/processes
  Stop: docker stop $name

MSG
    exit 0
  fi
  sleep 0.1
done
log "the sandbox did not become ready; its logs:"
docker logs --tail 50 "$name" >&2 || true
exit 1
