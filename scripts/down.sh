#!/usr/bin/env bash
# Stops what scripts/up.sh started: removes the orchestrator's sandboxes, then the orchestrator.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
data=${AGENTBOX_DATA_DIR:-$root/.agentbox}
listen=${AGENTBOX_LISTEN:-127.0.0.1:8090}
orchestrator="$(target_dir "$root")/release/orchestrator"
pid_file="$data/orchestrator.pid"
if [ -s "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
  export AGENTBOX_URL="http://$listen" AGENTBOX_API_KEY
  AGENTBOX_API_KEY=$(cat "$data/admin-key")
  for id in $("$orchestrator" sandbox ls --json | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin).get("sandboxes", [])]'); do
    "$orchestrator" sandbox rm "$id" || true
  done
  kill "$(cat "$pid_file")"
  log "orchestrator stopped; pool containers exit on their own within a few heartbeats"
else
  log "no orchestrator started by scripts/up.sh is running"
fi
rm -f "$pid_file"
