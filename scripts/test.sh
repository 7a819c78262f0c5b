#!/usr/bin/env bash
# Runs the whole test suite: formatting and lints, unit tests, end-to-end tests against the real
# image in real Docker, and a smoke run of every benchmark harness. Ends with "N passed, N failed".
# Sourced instead of run, it only defines its functions (tests/tests/scripts.rs tests them).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

passed=0
failed=0
failures=()
started=$(date +%s)

step() { # name command...
  local name=$1
  shift
  log "== $name"
  local t0
  t0=$(date +%s)
  if "$@"; then
    passed=$((passed + 1))
    log "ok: $name ($(( $(date +%s) - t0 )) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    log "FAILED: $name ($(( $(date +%s) - t0 )) s)"
  fi
}

# Runs nextest and adds its per-test counts to the totals; a run that fails without a failing
# test (a build error) counts as one failure. Records its own name in `failures` when it fails.
nextest() {
  local out
  out=$(mktemp)
  cargo nextest run --locked --workspace --release --profile ci 2>&1 | tee "$out"
  local status=${PIPESTATUS[0]}
  local summary
  summary=$(grep -E 'Summary \[' "$out" | tail -1)
  local p f
  p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  local timed_out
  timed_out=$(grep -oE '[0-9]+ timed out' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  rm -f "$out"
  passed=$((passed + p))
  failed=$((failed + f + timed_out))
  if [ "$status" != 0 ]; then
    if [ "$f" = 0 ] && [ "$timed_out" = 0 ]; then
      failed=$((failed + 1))
      failures+=("nextest (exit $status)")
    else
      failures+=("nextest")
    fi
  fi
  [ "$status" = 0 ]
}

# Runs a benchmark harness from the workspace build (`cargo run -p agentbox-bench` would resolve
# features for that package alone and compile again).
bench() { # name args...
  local name=$1
  shift
  "$root/target/release/$name" "$@"
}

# A virtualenv with the Python test clients, cached outside the clone by requirements hash.
python_env() {
  local hash
  hash=$(sha256sum tests/python/requirements.txt | cut -c1-16)
  venv="${AGENTBOX_CACHE:-$HOME/.cache/agentbox}/venv-$hash"
  if [ ! -x "$venv/bin/pytest" ]; then
    log "creating the Python test environment ($venv)"
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install -q --upgrade pip >&2 || return 1
    "$venv/bin/pip" install -q -r tests/python/requirements.txt >&2 || return 1
  fi
}

# Runs pytest and adds its per-test counts to the totals, as `nextest` does.
pytests() {
  local out
  out=$(mktemp)
  ORCHESTRATOR_BIN="$root/target/release/orchestrator" \
    "$venv/bin/pytest" -q -p no:cacheprovider tests/python 2>&1 | tee "$out"
  local status=${PIPESTATUS[0]}
  local summary
  summary=$(grep -E '(passed|failed|error)' "$out" | tail -1)
  local p f e
  p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  e=$(grep -oE '[0-9]+ errors?' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  rm -f "$out"
  passed=$((passed + p))
  failed=$((failed + f + e))
  if [ "$status" != 0 ]; then
    if [ "$f" = 0 ] && [ "$e" = 0 ]; then
      failed=$((failed + 1))
      failures+=("pytest (exit $status)")
    else
      failures+=("pytest")
    fi
  fi
  [ "$status" = 0 ]
}

prepare() {
  ensure_docker || return 1
  ensure_command debootstrap debootstrap || return 1
  ensure_command curl curl || return 1
  # The desktop crate compiles libjpeg-turbo (the JPEG encoder) from source: cmake, and nasm
  # for its SIMD code.
  ensure_command cmake cmake || return 1
  ensure_command nasm nasm || return 1
  # The desktop crate's tests drive a real Xvfb on the host.
  ensure_command Xvfb xvfb || return 1
  ensure_command xdpyinfo x11-utils || return 1
  # sandboxd's VNC tests run a real x11vnc behind its gateway; the orchestrator's egress tests
  # read and write the host's iptables rules and bridges.
  ensure_command x11vnc x11vnc || return 1
  ensure_command iptables iptables || return 1
  ensure_command ip iproute2 || return 1
  # sandboxd serves noVNC's files from Debian's package, as in the image.
  [ -f /usr/share/novnc/vnc.html ] || ensure_command /nonexistent/novnc novnc || return 1
  # The orchestrator's store tests start a throwaway Postgres cluster.
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    ensure_command /usr/lib/postgresql/nonexistent postgresql || return 1
  fi
  ensure_command docker-compose docker-compose || return 1
  ensure_command python3 python3 || return 1
  # sandboxd's code execution tests run a real IPython kernel and Node on the host, as the
  # image does.
  /usr/bin/python3 -c 'import ipykernel' 2>/dev/null ||
    ensure_command /nonexistent/python3-ipykernel python3-ipykernel || return 1
  ensure_command node nodejs || return 1
  # The web console's end-to-end tests drive Debian's Chromium through Playwright.
  ensure_command chromium chromium || return 1
  python3 -c 'import venv, ensurepip' 2>/dev/null || ensure_command /nonexistent/python3-venv python3-venv || return 1
  python_env || return 1
  if ! cargo nextest --version >/dev/null 2>&1; then
    log "installing cargo-nextest"
    cargo install --locked cargo-nextest >&2 || return 1
  fi
}

# Free space on the file systems the run writes to (the clone's target/ and Docker's), logged at
# the start and the end of a run: a full disk shows up as "no space left on device" far from its
# cause.
disk_report() { # when
  local line containers
  for dir in "$root" "$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)"; do
    line=$(df -h --output=avail,size "$dir" 2>/dev/null | tail -1 | awk '{print $1 " free of " $2}')
    log "disk ($1): $dir: $line"
  done
  log "disk ($1): target/ $(du -sh "$root/target" 2>/dev/null | cut -f1)"
  containers=$(docker ps -aq 2>/dev/null | wc -l)
  log "disk ($1): $containers container(s) present; docker's own figures:"
  docker system df 2>/dev/null | sed 's/^/    /' >&2 || true
}

main() {
  # In CI the release build carries no debug line tables: the 50-odd test binaries shrink from
  # ~200 MB to ~45 MB each (about 5 GB less on disk, and faster links). Elsewhere the tests
  # share the line-tables build that images/build.sh and the quickstart make.
  if [ "${CI:-}" = true ]; then
    export CARGO_PROFILE_RELEASE_DEBUG=false
  fi
  if ! prepare; then
    echo "0 passed, 1 failed (environment preparation)"
    exit 1
  fi

  disk_report start
  step "cargo fmt --check" cargo fmt --all -- --check
  step "cargo clippy" cargo clippy --locked --workspace --all-targets --release -- -D warnings
  # One build of everything, with one feature resolution: the images, the tests and the
  # benchmark harnesses all use it (cargo resolves features per selection, and each narrower
  # selection would compile most dependencies again: ~7 minutes apiece on 2 cores).
  export AGENTBOX_CARGO_TARGETS="--workspace --all-targets"
  step "cargo build (release, the whole workspace)" cargo build --locked --release --workspace --all-targets
  step "build the sandbox image" images/build.sh
  # Both images are built while the disk is at its emptiest: the last steps of a run found
  # none left once (the tests' release binaries and containers' layers take their share).
  step "build the orchestrator image" images/build-orchestrator.sh
  log "== tests (unit, router and end-to-end)"
  nextest
  log "== Python clients (agent-sandbox SDK, Playwright, mcp)"
  pytests
  disk_report "after the tests"
  step "benchmark harness smoke run (startup, 1 iteration)" \
    bench startup --iterations 1
  step "benchmark harness smoke run (capabilities, 2 iterations)" \
    bench capabilities --iterations 2
  step "benchmark harness smoke run (shell exec, 2 iterations)" \
    bench shell-exec --iterations 2 --rounds 1
  step "benchmark harness smoke run (file watch, 2 iterations)" \
    bench file-watch --iterations 2
  step "benchmark harness smoke run (code execution, 10 iterations)" \
    bench code-exec --iterations 10
  step "benchmark harness smoke run (memory, 1 sandbox)" \
    bench memory --settle-secs 2
  step "benchmark harness smoke run (first viewer's picture, 1 sandbox)" \
    bench first-view --iterations 1
  step "compose.yaml is valid" docker-compose config -q
  step "benchmark harness smoke run (orchestrator)" \
    bench orchestrator-bench \
    --iterations 1 --claims 2 --running 2 --clients 20 --requests-per-client 5

  step "benchmark harness smoke run (run steps, 1 iteration)" \
    bench run-steps --iterations 1

  disk_report end
  log "finished in $(( $(date +%s) - started )) s"
  if [ ${#failures[@]} -gt 0 ]; then
    log "failed: ${failures[*]}"
  fi
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}

# Sourced (tests/tests/scripts.rs checks the counting), it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
