#!/usr/bin/env bash
# Builds the sandbox image `agentbox/sandbox:latest`.
#
#   images/build.sh                 # offline: base from Debian packages (debootstrap), then Dockerfile
#   BASE_IMAGE=debian:bookworm-slim images/build.sh   # with a registry: packages via apt in the Dockerfile
#
# Building sandboxd needs cmake and nasm on the host (libjpeg-turbo is compiled in; Debian:
# `apt-get install cmake nasm`); scripts/up.sh and scripts/test.sh install them.
#
# Incremental: the base image is tagged by a hash of its inputs and reused; cargo and the Docker
# layer cache skip unchanged steps, so a re-run with unchanged inputs takes seconds, and a change
# to sandboxd alone rebuilds only the image's last layer (the Dockerfile copies it last).
#
# AGENTBOX_CARGO_TARGETS (default "-p sandboxd -p bash-fork") is what cargo builds: a caller that
# builds more of the workspace passes its own selection, so that cargo resolves the same
# features and reuses that build instead of compiling the dependencies a second time.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
image=${SANDBOX_IMAGE:-agentbox/sandbox:latest}
target=${CARGO_TARGET_DIR:-$root/target}
log() { printf '[build] %s\n' "$*" >&2; }

start=$(date +%s)
log "compiling sandboxd and its bash builtin (release)"
read -r -a targets <<<"${AGENTBOX_CARGO_TARGETS:--p sandboxd -p bash-fork}"
cargo build --release --locked "${targets[@]}" --manifest-path "$root/Cargo.toml" >&2

if [ -n "${BASE_IMAGE:-}" ]; then
  base=$BASE_IMAGE
  install_packages=true
else
  base=$("$root/images/base/build-base.sh")
  install_packages=false
fi

context="$root/target/image-context/sandbox"
mkdir -p "$context"
rsync_like() { # copy $1 to $2 only if the content differs, keeping mtimes stable for the cache
  if ! cmp -s "$1" "$2" 2>/dev/null; then cp "$1" "$2"; fi
}
rsync_like "$root/images/sandbox/Dockerfile" "$context/Dockerfile"
rsync_like "$root/images/sandbox/packages.txt" "$context/packages.txt"
rsync_like "$root/images/sandbox/python-packages.txt" "$context/python-packages.txt"
rsync_like "$target/release/sandboxd" "$context/sandboxd"
# Everything else the image adds goes into one tree copied in one layer: the files of
# images/sandbox/rootfs, xterm.js for the terminal page (/terminal; see images/xterm/fetch.sh)
# and the bash builtin sandboxd's shell zygotes fork ready bashes with.
rm -rf "$context/rootfs" "$context/xterm" "$context/libbash_fork.so"
cp -a "$root/images/sandbox/rootfs" "$context/rootfs"
xterm=$("$root/images/xterm/fetch.sh")
mkdir -p "$context/rootfs/usr/share/agentbox/xterm" "$context/rootfs/usr/local/lib/agentbox"
for file in xterm.js xterm.css xterm-addon-fit.js; do
  cp "$xterm/$file" "$context/rootfs/usr/share/agentbox/xterm/$file"
done
cp "$target/release/libbash_fork.so" "$context/rootfs/usr/local/lib/agentbox/libbash_fork.so"

log "building $image from $base"
docker build -q \
  --build-arg "BASE_IMAGE=$base" \
  --build-arg "INSTALL_PACKAGES=$install_packages" \
  -t "$image" "$context" >/dev/null
log "built $image in $(( $(date +%s) - start )) s"
