#!/usr/bin/env bash
# Builds `agentbox/swarm-node`, the image of one node of a local Docker Swarm (scripts/cluster-up.sh
# and the cluster tests): a Docker Engine from Debian's packages (docker.io, containerd, runc)
# running inside a container, with no container registry.
#
#   images/swarm-node/build.sh     -> prints the image reference it built or found
#
# The image is `debootstrap --variant=minbase bookworm` plus the engine, imported with
# `docker import` and tagged by a hash of this script, so a re-run finds it at once. It is also
# tagged `agentbox/swarm-node:latest`.
set -euo pipefail

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
hash=$(sha256sum "$0" | cut -c1-16)
image="agentbox/swarm-node:$hash"
log() { printf '[build-swarm-node] %s\n' "$*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
  docker tag "$image" agentbox/swarm-node:latest
  log "node image $image is up to date"
  echo "$image"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "error: building the node image from Debian packages needs root (debootstrap)"
  exit 1
fi
command -v debootstrap >/dev/null 2>&1 ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2

start=$(date +%s)
work=$(mktemp -d /var/tmp/agentbox-swarm-node.XXXXXX)
trap 'rm -rf "$work"' EXIT
packages=ca-certificates,iptables,iproute2,procps,docker.io,containerd,runc,tini
log "debootstrap bookworm (minbase + $packages)"
debootstrap --variant=minbase --include="$packages" bookworm "$work/rootfs" "$mirror" >&2
rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/archives/*.deb \
  "$work"/rootfs/var/log/apt/* "$work"/rootfs/var/log/dpkg.log
: >"$work/rootfs/etc/resolv.conf"
# The node's entry point: its engine in the foreground, under tini (zombies reaped, signals
# passed on). The cgroup parent keeps the node's containers apart from the host's in a shared
# cgroup v1 hierarchy; /var/lib/docker must be a volume (overlay2 needs a real file system).
# The engine listens on its Unix socket only: nothing on the nodes' network (sandboxes
# included) reaches a Docker API. A restarted node's stale pid files are removed first.
cat >"$work/rootfs/usr/local/bin/swarm-node" <<'NODE'
#!/bin/sh
set -e
rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
exec dockerd --host=unix:///var/run/docker.sock --storage-driver=overlay2 \
  --cgroup-parent="/${NODE_NAME:-$(hostname)}" "$@"
NODE
chmod 0755 "$work/rootfs/usr/local/bin/swarm-node"
log "importing rootfs as $image"
tar -C "$work/rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/swarm-node"]' - "$image" >/dev/null
docker tag "$image" agentbox/swarm-node:latest
log "node image built in $(( $(date +%s) - start )) s"
echo "$image"
