#!/usr/bin/env bash
# Builds a local Docker Swarm of Docker-in-Docker nodes on this machine and starts Agentbox on
# it with the Swarm backend, to try multi-node Agentbox without a cluster. Stop it with
# scripts/cluster-down.sh.
#
#   scripts/cluster-up.sh            # 3 nodes, node 1 the manager; prints the URL and the admin key
#
# Each node is a container of `agentbox/swarm-node` (Debian's docker.io) on a private bridge
# network, with its own engine and image store (a volume). Every node gets the sandbox and
# orchestrator images with `docker save | docker load` (no registry needed), a label
# `agentbox.zone=<n>` to try placement with, and node 1 `agentbox.data=true` and the stack's
# services image (Postgres and the front). Then compose.swarm.yaml is deployed on node 1:
# Postgres, AGENTBOX_REPLICAS orchestrator replicas on it and the front, the one address.
#
# Settings (environment): AGENTBOX_CLUSTER_NODES (3), AGENTBOX_CLUSTER_MANAGERS (1; 3 for a
# control plane that survives a lost manager), AGENTBOX_CLUSTER_PREFIX (agentbox-node),
# AGENTBOX_CLUSTER_SUBNET (10.213.0.0/24), AGENTBOX_CLUSTER_ENCRYPT (false: this machine's
# kernel has no ESP support for IPsec; say true where it has), AGENTBOX_CLUSTER_SKIP_BUILD (set:
# use the images already built), AGENTBOX_REPLICAS (2), AGENTBOX_POOL_SIZE (0),
# AGENTBOX_PUBLISH_MODE (host: the front's port on node 1 itself; this machine's kernel has no
# IPVS for the routing mesh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
# shellcheck source=scripts/cluster-lib.sh
. "$root/scripts/cluster-lib.sh"

started=$(date +%s)
ensure_docker
if [ -z "${AGENTBOX_CLUSTER_SKIP_BUILD:-}" ]; then
  ensure_command debootstrap debootstrap
  ensure_command cmake cmake
  ensure_command nasm nasm
  export AGENTBOX_CARGO_TARGETS=${AGENTBOX_CARGO_TARGETS:--p sandboxd -p bash-fork -p orchestrator}
  "$root/images/build.sh"
  "$root/images/build-orchestrator.sh"
fi
"$root/images/swarm-node/build.sh" >/dev/null
"$root/images/stack-services/build.sh" >/dev/null

cluster_start_nodes
cluster_form_swarm
cluster_load_images agentbox/sandbox:latest agentbox/orchestrator:latest
cluster_load_images_into "${CLUSTER_PREFIX}1" agentbox/stack-services:latest
cluster_deploy
log "cluster up in $(( $(date +%s) - started )) s"
log "Agentbox: $(cluster_url)   admin key: $(cat "$(cluster_state_dir)/admin-key")"
log "nodes: $(cluster_node_names | tr '\n' ' ')  (docker exec ${CLUSTER_PREFIX}1 docker node ls)"
