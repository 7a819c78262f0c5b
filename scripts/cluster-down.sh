#!/usr/bin/env bash
# Tears down what scripts/cluster-up.sh built: the nodes (and every sandbox on them), their
# volumes and their network.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
# shellcheck source=scripts/cluster-lib.sh
. "$root/scripts/cluster-lib.sh"
cluster_remove
log "cluster removed"
