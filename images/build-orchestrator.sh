#!/usr/bin/env bash
# Builds the orchestrator image `agentbox/orchestrator:latest` (override with ORCHESTRATOR_IMAGE).
#
#   images/build-orchestrator.sh                                  # offline: base from Debian packages
#   BASE_IMAGE=debian:bookworm-slim images/build-orchestrator.sh  # with a registry
#
# Offline, the base is `debootstrap --variant=minbase bookworm` plus ca-certificates and iptables
# (the egress rules that keep sandboxes off the host and private networks), imported
# with `docker import` and tagged by a hash of this script, so a re-run finds it at once.
#
# AGENTBOX_CARGO_TARGETS (default "-p orchestrator") is what cargo builds; see images/build.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
image=${ORCHESTRATOR_IMAGE:-agentbox/orchestrator:latest}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { printf '[build-orchestrator] %s\n' "$*" >&2; }

start=$(date +%s)
log "compiling the orchestrator (release)"
read -r -a targets <<<"${AGENTBOX_CARGO_TARGETS:--p orchestrator}"
cargo build --release --locked "${targets[@]}" --manifest-path "$root/Cargo.toml" >&2

if [ -n "${BASE_IMAGE:-}" ]; then
  base=$BASE_IMAGE
  install_packages=true
else
  hash=$(sha256sum "$0" | cut -c1-16)
  base="agentbox/orchestrator-base:$hash"
  install_packages=false
  if docker image inspect "$base" >/dev/null 2>&1; then
    log "base image $base is up to date"
  else
    if [ "$(id -u)" != 0 ]; then
      log "error: building the base from Debian packages needs root (debootstrap)"
      exit 1
    fi
    command -v debootstrap >/dev/null 2>&1 ||
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2
    work=$(mktemp -d /var/tmp/agentbox-orchestrator-base.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    log "debootstrap bookworm (minbase + ca-certificates, iptables)"
    debootstrap --variant=minbase --include=ca-certificates,iptables bookworm "$work/rootfs" "$mirror" >&2
    rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/archives/*.deb \
      "$work"/rootfs/var/log/apt/* "$work"/rootfs/var/log/dpkg.log
    : >"$work/rootfs/etc/resolv.conf"
    log "importing rootfs as $base"
    tar -C "$work/rootfs" -c . | docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' - "$base" >/dev/null
  fi
fi

context="$root/target/image-context/orchestrator"
mkdir -p "$context"
copy_if_changed() { if ! cmp -s "$1" "$2" 2>/dev/null; then cp "$1" "$2"; fi; }
copy_if_changed "$root/images/orchestrator/Dockerfile" "$context/Dockerfile"
copy_if_changed "$root/target/release/orchestrator" "$context/orchestrator"

log "building $image from $base"
docker build -q --build-arg "BASE_IMAGE=$base" --build-arg "INSTALL_PACKAGES=$install_packages" \
  -t "$image" "$context" >/dev/null
log "built $image in $(( $(date +%s) - start )) s"
