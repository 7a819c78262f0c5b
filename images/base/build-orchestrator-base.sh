#!/usr/bin/env bash
# Builds the orchestrator image's base from Debian packages alone, with no container registry.
#
#   images/base/build-orchestrator-base.sh   -> prints the base image reference it built or found
#
# The base is `debootstrap --variant=minbase bookworm` plus ca-certificates and iptables (the
# egress rules that keep sandboxes off the host and private networks), imported with
# `docker import` and tagged by a hash of this script, so a re-run finds it at once.
set -euo pipefail

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
hash=$(sha256sum "$0" | cut -c1-16)
image="agentbox/orchestrator-base:$hash"
log() { printf '[build-orchestrator-base] %s\n' "$*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
  log "base image $image is up to date"
  echo "$image"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "error: building the base from Debian packages needs root (debootstrap)"
  exit 1
fi
command -v debootstrap >/dev/null 2>&1 ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2

start=$(date +%s)
work=$(mktemp -d /var/tmp/agentbox-orchestrator-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
log "debootstrap bookworm (minbase + ca-certificates, iptables)"
debootstrap --variant=minbase --include=ca-certificates,iptables bookworm "$work/rootfs" "$mirror" >&2
rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/archives/*.deb \
  "$work"/rootfs/var/log/apt/* "$work"/rootfs/var/log/dpkg.log
: >"$work/rootfs/etc/resolv.conf"
log "importing rootfs as $image"
tar -C "$work/rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' - "$image" >/dev/null
log "base image built in $(( $(date +%s) - start )) s"
echo "$image"
