#!/usr/bin/env bash
# Builds the orchestrator image `agentbox/orchestrator:latest` (override with ORCHESTRATOR_IMAGE).
#
#   images/build-orchestrator.sh                                  # offline: base from Debian packages
#   BASE_IMAGE=debian:bookworm-slim images/build-orchestrator.sh  # with a registry
#
# Offline, the base comes from images/base/build-orchestrator-base.sh (debootstrap, tagged by a
# hash of that script, so a re-run finds it at once).
#
# AGENTBOX_CARGO_TARGETS (default "-p orchestrator") is what cargo builds; see images/build.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
image=${ORCHESTRATOR_IMAGE:-agentbox/orchestrator:latest}
target=${CARGO_TARGET_DIR:-$root/target}
log() { printf '[build-orchestrator] %s\n' "$*" >&2; }

start=$(date +%s)
log "compiling the orchestrator (release)"
read -r -a targets <<<"${AGENTBOX_CARGO_TARGETS:--p orchestrator}"
cargo build --release --locked "${targets[@]}" --manifest-path "$root/Cargo.toml" >&2

if [ -n "${BASE_IMAGE:-}" ]; then
  base=$BASE_IMAGE
  install_packages=true
else
  base=$("$root/images/base/build-orchestrator-base.sh")
  install_packages=false
fi

context="$root/target/image-context/orchestrator"
mkdir -p "$context"
copy_if_changed() { if ! cmp -s "$1" "$2" 2>/dev/null; then cp "$1" "$2"; fi; }
copy_if_changed "$root/images/orchestrator/Dockerfile" "$context/Dockerfile"
copy_if_changed "$target/release/orchestrator" "$context/orchestrator"

log "building $image from $base"
docker build -q --build-arg "BASE_IMAGE=$base" --build-arg "INSTALL_PACKAGES=$install_packages" \
  -t "$image" "$context" >/dev/null
log "built $image in $(( $(date +%s) - start )) s"
