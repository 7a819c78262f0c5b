#!/usr/bin/env bash
# Builds what Agentbox needs and starts it: the sandbox image, the orchestrator (SQLite in
# .agentbox/, no external services, no model key), one sandbox, a live desktop link, and the
# demo run in that sandbox: seed 003's acceptance task (open the paint program, draw a red
# triangle, save it as PNG under ~/outputs) with the script provider, no model needed.
#
# Re-running restarts the orchestrator with the same data and admin key: it adopts the sandboxes
# that are still running. Stop everything: scripts/down.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

listen=${AGENTBOX_LISTEN:-127.0.0.1:8090}
data=${AGENTBOX_DATA_DIR:-$root/.agentbox}
url="http://$listen"

started=$(date +%s)
ensure_docker
ensure_command debootstrap debootstrap
ensure_command curl curl
# sandboxd compiles libjpeg-turbo (its JPEG encoder) from source: cmake, and nasm for SIMD.
ensure_command cmake cmake
ensure_command nasm nasm
# The image's Debian base downloads while cargo compiles (on a fresh machine, ~7 and ~10 min:
# one after the other they took most of the quickstart).
start_bases "$root" sandbox
# One selection for both builds: cargo resolves features per selection, so building sandboxd
# and the orchestrator apart would compile most dependencies twice.
export AGENTBOX_CARGO_TARGETS=${AGENTBOX_CARGO_TARGETS:--p sandboxd -p bash-fork -p orchestrator}
read -r -a targets <<<"$AGENTBOX_CARGO_TARGETS"
log "building sandboxd and the orchestrator (release)"
cargo build --release --locked "${targets[@]}" --manifest-path "$root/Cargo.toml"
orchestrator="$(target_dir "$root")/release/orchestrator"
log "waiting for the image's Debian base"
wait_for_bases || die "the sandbox image's base could not be built"
"$root/images/build.sh"
log "built in $(( $(date +%s) - started )) s"

mkdir -p "$data"
chmod 700 "$data"
if [ ! -s "$data/admin-key" ]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$data/admin-key")
fi
admin_key=$(cat "$data/admin-key")

if [ -s "$data/orchestrator.pid" ] && kill -0 "$(cat "$data/orchestrator.pid")" 2>/dev/null; then
  log "stopping the orchestrator started earlier (pid $(cat "$data/orchestrator.pid"))"
  kill "$(cat "$data/orchestrator.pid")"
  for _ in $(seq 1 100); do kill -0 "$(cat "$data/orchestrator.pid")" 2>/dev/null || break; sleep 0.1; done
fi

log "starting the orchestrator on $url (log: $data/orchestrator.log)"
AGENTBOX_ADMIN_KEY="$admin_key" nohup "$orchestrator" serve \
  --listen "$listen" --data-dir "$data" --scripts-dir "$root/examples" --pool-size "${AGENTBOX_POOL_SIZE:-1}" \
  >>"$data/orchestrator.log" 2>&1 &
echo $! > "$data/orchestrator.pid"
for _ in $(seq 1 300); do
  curl -fsS -o /dev/null "$url/healthz" 2>/dev/null && break
  kill -0 "$(cat "$data/orchestrator.pid")" 2>/dev/null || { tail -20 "$data/orchestrator.log" >&2; die "the orchestrator exited"; }
  sleep 0.1
done

export AGENTBOX_URL="$url" AGENTBOX_API_KEY="$admin_key"
log "creating a sandbox (first start of the image takes a few seconds)"
id=$("$orchestrator" sandbox create --metadata created_by=up.sh)
viewer=$("$orchestrator" token "$id" --scope control --ttl 3600 2>/dev/null)
task="Open the paint program, draw a red triangle, save it as PNG under ~/outputs"
run=$("$orchestrator" run "$task" --model script:draw-red-triangle.json --sandbox "$id" \
  --metadata created_by=up.sh 2>/dev/null)

cat <<MSG

Agentbox is running.

  Web console:       $url/   (sign in with the admin key in $data/admin-key)
  Orchestrator API:  $url   (admin key in $data/admin-key)
  Sandbox:           $id
  Live desktop:      $viewer
                     (control token, 1 hour; 'orchestrator token $id' gives a view-only link)
  Demo run:          $run   (drawing a red triangle in that sandbox now: watch it live)
                     $url/runs/$run   (in the console: timeline, take over, the PNG)
  Its events:        $orchestrator run events $run --follow
  The PNG, when done: curl -H "Authorization: Bearer \$AGENTBOX_API_KEY" -o red-triangle.png \\
                       $url/v1/runs/$run/artifacts/outputs/red-triangle.png
  Sandbox API:       $url/v1/sandboxes/$id/api   (AIO-compatible, e.g. the agent-sandbox SDK)
  CDP (Playwright):  ws://$listen/v1/sandboxes/$id/cdp

  export AGENTBOX_URL=$url AGENTBOX_API_KEY=\$(cat $data/admin-key)
  $orchestrator sandbox ls
  $orchestrator run ls
  # The same task driven by a model: start the orchestrator with an OpenAI-compatible server
  # (vLLM, Ollama, SGLang), e.g. OPENAI_CHAT_BASE_URL=http://127.0.0.1:11434/v1, then
  $orchestrator run "$task" --model openai-chat:qwen2.5vl --follow
  $orchestrator sandbox exec $id -- uname -a
  curl -H "Authorization: Bearer \$AGENTBOX_API_KEY" $url/v1/sandboxes/$id/api/v1/sandbox

  Stop: scripts/down.sh

MSG
