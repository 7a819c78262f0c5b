#!/usr/bin/env bash
# Builds the sandbox base image from Debian packages alone, with no container registry.
#
#   images/base/build-base.sh            -> prints the base image reference it built or found
#
# The base is `debootstrap --variant=minbase bookworm` plus the packages in
# images/sandbox/packages.txt, imported with `docker import`. Its tag is a hash of the package
# list and of this script, so a re-run with unchanged inputs finds the image and returns at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
packages_file="$here/../sandbox/packages.txt"
python_packages_file="$here/../sandbox/python-packages.txt"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
suite=bookworm

hash=$(cat "$packages_file" "$python_packages_file" "$0" | sha256sum | cut -c1-16)
image="agentbox/sandbox-base:$hash"

log() { printf '[build-base] %s\n' "$*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
  log "base image $image is up to date"
  echo "$image"
  exit 0
fi

for tool in debootstrap chroot; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      log "installing $tool"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2
    else
      log "error: $tool is required (apt-get install debootstrap) and this script must run as root"
      exit 1
    fi
  fi
done
if [ "$(id -u)" != 0 ]; then
  log "error: building the base from Debian packages needs root (debootstrap, chroot)"
  exit 1
fi

packages=$(grep -v -E '^\s*(#|$)' "$packages_file" | tr '\n' ' ')
work=$(mktemp -d /var/tmp/agentbox-base.XXXXXX)
rootfs="$work/rootfs"
cleanup() {
  umount -l "$rootfs/proc" 2>/dev/null || true
  umount -l "$rootfs/dev/pts" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

start=$(date +%s)
log "debootstrap $suite (minbase) into $rootfs"
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >&2

cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
SOURCES
# Keep the image lean: no recommends, no docs or man pages.
cat >"$rootfs/etc/apt/apt.conf.d/90agentbox" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
APT
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/90agentbox-nodoc" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
DPKG

mount -t proc proc "$rootfs/proc"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
log "installing packages: $packages"
chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
# shellcheck disable=SC2086 # word splitting of the package list is intended
chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $packages >&2
chroot "$rootfs" apt-get clean
python_packages=$(grep -v -E '^\s*(#|$)' "$python_packages_file" | tr '\n' ' ')
if [ -n "$python_packages" ]; then
  # Fetched by this host's pip (its index, proxy and certificates are the ones that work here),
  # installed by the image's pip from the files alone: into /usr/local (Debian's pip never
  # touches /usr/lib/python3/dist-packages). Their dependencies are Debian packages of
  # packages.txt, hence --no-deps.
  log "fetching from PyPI: $python_packages"
  mkdir -p "$rootfs/tmp/agentbox-wheels"
  # shellcheck disable=SC2086 # word splitting of the package list is intended
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    -d "$rootfs/tmp/agentbox-wheels" $python_packages >&2
  chroot "$rootfs" /bin/sh -c 'python3 -m pip install --no-cache-dir --no-index --no-deps \
    --break-system-packages --root-user-action=ignore /tmp/agentbox-wheels/*.whl' >&2
  rm -rf "$rootfs/tmp/agentbox-wheels"
fi
umount -l "$rootfs/proc"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/tmp/* \
  "$rootfs"/var/log/apt/* "$rootfs"/var/log/dpkg.log
: >"$rootfs/etc/resolv.conf"

log "importing rootfs as $image"
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  - "$image" >/dev/null
log "base image built in $(( $(date +%s) - start )) s"
echo "$image"
