#!/usr/bin/env bash
# Runs the whole test suite: formatting and lints, unit tests, end-to-end tests against the real
# image in real Docker, and a smoke run of every benchmark harness. Ends with "N passed, N failed".
# Sourced instead of run, it only defines its functions (tests/tests/it/scripts.rs tests them).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

passed=0
failed=0
failures=()
started=$(date +%s)
# The phases run, their seconds and their outcome, for the table printed at the end.
phase_names=()
phase_secs=()
phase_results=()

record_phase() { # name seconds result
  phase_names+=("$1")
  phase_secs+=("$2")
  phase_results+=("$3")
}

step() { # name command...
  local name=$1
  shift
  log "== $name"
  local t0
  t0=$(date +%s)
  if "$@"; then
    passed=$((passed + 1))
    log "ok: $name ($(( $(date +%s) - t0 )) s)"
    record_phase "$name" $(( $(date +%s) - t0 )) ok
  else
    failed=$((failed + 1))
    failures+=("$name")
    log "FAILED: $name ($(( $(date +%s) - t0 )) s)"
    record_phase "$name" $(( $(date +%s) - t0 )) FAILED
  fi
}

# Runs functions that are each a series of `step`s side by side, each in a subshell whose output
# is printed whole once it is done (in the order given); their steps count and enter the phase
# table as if they had run here. The benchmark smoke runs mostly wait on their containers: two
# lanes of them take about half the time of one.
side_by_side() { # function...
  local dir fn i=0 pids=() name secs result
  dir=$(mktemp -d)
  for fn in "$@"; do
    (
      phase_names=() phase_secs=() phase_results=() failures=()
      passed=0 failed=0
      "$fn"
      for j in "${!phase_names[@]}"; do
        printf '%s\t%s\t%s\n' "${phase_names[$j]}" "${phase_secs[$j]}" "${phase_results[$j]}"
      done >"$dir/$i.phases"
    ) >"$dir/$i.out" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || true
    cat "$dir/$i.out"
    if [ ! -s "$dir/$i.phases" ]; then
      failed=$((failed + 1))
      failures+=("lane $((i + 1)) (no steps recorded)")
      continue
    fi
    while IFS=$'\t' read -r name secs result; do
      record_phase "$name" "$secs" "$result"
      if [ "$result" = ok ]; then
        passed=$((passed + 1))
      else
        failed=$((failed + 1))
        failures+=("$name")
      fi
    done <"$dir/$i.phases"
  done
  rm -rf "$dir"
}

# Runs a function whose counts are its own (nextest, pytests) as a timed phase of the table.
counted_phase() { # name function
  log "== $1"
  local t0 result=ok
  t0=$(date +%s)
  "$2" || result=FAILED
  record_phase "$1" $(( $(date +%s) - t0 )) "$result"
}

phase_table() {
  local i
  printf '\n%-64s %7s  %s\n' phase seconds result
  for i in "${!phase_names[@]}"; do
    printf '%-64s %7s  %s\n' "${phase_names[$i]}" "${phase_secs[$i]}" "${phase_results[$i]}"
  done
  printf '%-64s %7s\n\n' total $(( $(date +%s) - started ))
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
bench() { # harness args...
  "$(target_dir "$root")/release/agentbox-bench" "$@"
}

# Virtualenvs with the Python test clients, cached outside the clone by requirements hash: the
# main one, and one for the A2A 0.3 client (its package has the 1.x client's name).
python_env() {
  venv=$(python_venv tests/python/requirements.txt) || return 1
  venv_a2a03=$(python_venv tests/python/a2a03/requirements.txt) || return 1
}

# Prints the path of the virtualenv of one requirements file, made if missing.
python_venv() { # requirements
  local hash dir
  hash=$(sha256sum "$1" | cut -c1-16)
  dir="$(cache_dir)/venv-$hash"
  if [ ! -x "$dir/bin/pytest" ]; then
    log "creating the Python test environment for $1 ($dir)"
    rm -rf "$dir"
    python3 -m venv "$dir" >&2 || return 1
    "$dir/bin/pip" install -q --upgrade pip >&2 || return 1
    "$dir/bin/pip" install -q -r "$1" >&2 || return 1
  fi
  echo "$dir"
}

# The Python suites, as groups that run side by side (each its own pytest with its own
# sandbox or orchestrator: they wait on containers and browsers more than they use the cores).
# The sandboxd contract run (schemathesis, ~110 s) is a group of its own.
# A group whose first word is `a2a03:` runs in the A2A 0.3 client's virtualenv.
python_groups=(
  "tests/python/sandbox/test_sandboxd_contract.py"
  "tests/python/sandbox --ignore=tests/python/sandbox/test_sandboxd_contract.py"
  "tests/python/orchestrator tests/python/console"
  "a2a03: tests/python/a2a03"
)

# Runs the Python groups side by side and adds their per-test counts to the totals, as
# `nextest` does; each group's output is printed whole once it is done.
pytests() {
  local dir group i pids=() status=0
  dir=$(mktemp -d)
  for i in "${!python_groups[@]}"; do
    read -r -a group <<<"${python_groups[$i]}"
    local env=$venv
    if [ "${group[0]}" = "a2a03:" ]; then
      env=$venv_a2a03
      group=("${group[@]:1}")
    fi
    ORCHESTRATOR_BIN="$(target_dir "$root")/release/orchestrator" \
      "$env/bin/pytest" -q -p no:cacheprovider "${group[@]}" >"$dir/$i.out" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    local one=0
    wait "${pids[$i]}" || one=$?
    log "pytest ${python_groups[$i]} (exit $one)"
    cat "$dir/$i.out"
    count_pytest "$dir/$i.out" "$one" || status=1
  done
  rm -rf "$dir"
  return "$status"
}

# Adds one pytest run's counts (its output file, its exit status) to the totals; a run that
# fails without a failing test (a usage or collection error) counts as one failure.
count_pytest() { # output status
  local summary p f e
  summary=$(grep -E '(passed|failed|error)' "$1" | tail -1)
  p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  e=$(grep -oE '[0-9]+ errors?' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p))
  failed=$((failed + f + e))
  if [ "$2" != 0 ]; then
    if [ "$f" = 0 ] && [ "$e" = 0 ]; then
      failed=$((failed + 1))
      failures+=("pytest (exit $2)")
    else
      failures+=("pytest")
    fi
  fi
  [ "$2" = 0 ]
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
  # clippy's driver, which build_and_lint compiles the workspace with.
  clippy_driver="$(dirname "$(command -v cargo)")/clippy-driver"
  if ! "$clippy_driver" --version >/dev/null 2>&1; then
    log "clippy is missing: rustup component add clippy"
    return 1
  fi
  if ! cargo nextest --version >/dev/null 2>&1; then
    log "installing cargo-nextest"
    cargo install --locked cargo-nextest >&2 || return 1
  fi
}

# Free space on the file systems the run writes to (cargo's target directory and Docker's), logged at
# the start and the end of a run: a full disk shows up as "no space left on device" far from its
# cause.
# Removes the sandbox networks the suite's own orchestrators left behind (a network being made
# when its orchestrator was killed is finished by Docker after the test's cleanup looked; seen:
# 2-3 a run). Only the suite's instance names are touched (tests, benchmarks, the Python
# suites), never a running Agentbox's; a network still in use is left alone.
sweep_test_networks() {
  local names swept=0
  names=$(docker network ls --format '{{.Name}}' 2>/dev/null |
    grep -E '^agentbox-(test|bench|pytest|pyconsole|pya2a|pya2a03)-.+' || true)
  for name in $names; do
    docker network rm "$name" >/dev/null 2>&1 && swept=$((swept + 1))
  done
  log "networks the suite's orchestrators left behind, removed: $swept"
}

disk_report() { # when
  local line containers
  for dir in "$root" "$(target_dir "$root")" "$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)"; do
    line=$(df -h --output=avail,size "$dir" 2>/dev/null | tail -1 | awk '{print $1 " free of " $2}')
    log "disk ($1): $dir: $line"
  done
  log "disk ($1): target directory $(target_dir "$root"): $(du -sh "$(target_dir "$root")" 2>/dev/null | cut -f1)"
  containers=$(docker ps -aq 2>/dev/null | wc -l)
  log "disk ($1): $containers container(s) present; docker's own figures:"
  docker system df 2>/dev/null | sed 's/^/    /' >&2 || true
}

# One compilation of the workspace is both the lint pass and the release build that the images,
# the tests and the benchmark harnesses use: clippy's driver compiles the workspace's own crates
# (RUSTC_WORKSPACE_WRAPPER, as `cargo clippy` itself does), so nothing is type-checked twice.
# Any warning fails this step, as `cargo clippy -- -D warnings` would, without stopping the
# build: the tests still run on it.
build_and_lint() {
  local out status warnings
  out=$(mktemp)
  cargo build --locked --release --workspace --all-targets --timings 2>&1 | tee "$out"
  status=${PIPESTATUS[0]}
  costliest_units
  warnings=$(grep -cE '^(warning|error)(\[[^]]*\])?: ' "$out")
  rm -f "$out"
  if [ "$status" != 0 ]; then
    log "the build failed (exit $status)"
    return 1
  fi
  if [ "$warnings" != 0 ]; then
    log "clippy or rustc printed $warnings warning line(s); the suite allows none"
    return 1
  fi
}

# The compile units that took longest in the build just finished, from cargo's --timings report:
# where a cold build's time goes, in every CI log (bench/RESULTS.md, "Build and suite times").
costliest_units() {
  local report
  report="$(target_dir "$root")/cargo-timings/cargo-timing.html"
  [ -f "$report" ] || return 0
  python3 - "$report" <<'PY' >&2 || true
import json, re, sys
html = open(sys.argv[1], encoding="utf-8").read()
match = re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S)
units = json.loads(match.group(1)) if match else []
units.sort(key=lambda u: u["duration"], reverse=True)
total = sum(u["duration"] for u in units)
print(f"cargo --timings: {len(units)} units compiled, {total:.0f} s of compile time in all; the costliest:")
for u in units[:15]:
    mode = "" if u.get("mode") == "todo" else f' ({u.get("mode")})'
    print(f'  {u["duration"]:7.1f} s  {u["name"]} {u.get("target", "").strip() or "lib"}{mode}')
PY
}

images() {
  wait_for_bases || return 1
  "$root/images/build.sh" || return 1
  # Both images are built while the disk is at its emptiest: the last steps of a run found
  # none left once (the tests' release binaries and containers' layers take their share).
  "$root/images/build-orchestrator.sh"
}

# The benchmark harnesses' smoke runs, in two lanes (`side_by_side`).
bench_lane_1() {
  step "benchmark harness smoke run (orchestrator)" \
    bench orchestrator \
    --iterations 1 --claims 2 --running 2 --clients 20 --requests-per-client 5
  step "benchmark harness smoke run (hibernate, 1 iteration, 2 sandboxes)" \
    bench hibernate --iterations 1 --sandboxes 2 --forks 2 --files-mib 5 --window-secs 2
  step "benchmark harness smoke run (startup, 1 iteration)" \
    bench startup --iterations 1
  step "benchmark harness smoke run (capabilities, 2 iterations)" \
    bench capabilities --iterations 2
  step "compose.yaml is valid" docker-compose config -q
  step "benchmark harness smoke run (A2A, 2 tasks, 20 streams)" \
    bench a2a --iterations 2 --turns 2 --streams 20 --answers 1
}

bench_lane_2() {
  step "benchmark harness smoke run (run steps, 1 iteration)" \
    bench run-steps --iterations 1
  step "benchmark harness smoke run (claims, 6 claims)" \
    bench claims --claims 6 --pool 3 --load-threads 0
  step "benchmark harness smoke run (pause, 1 iteration)" \
    bench pause --iterations 1 --hold-ms 200
  step "benchmark harness smoke run (memory, 1 sandbox)" \
    bench memory --settle-secs 2
  step "benchmark harness smoke run (first viewer's picture, 1 sandbox)" \
    bench first-view --iterations 1
  step "benchmark harness smoke run (code execution, 10 iterations)" \
    bench code-exec --iterations 10
  step "benchmark harness smoke run (shell exec, 2 iterations)" \
    bench shell-exec --iterations 2 --rounds 1
  step "benchmark harness smoke run (file watch, 2 iterations)" \
    bench file-watch --iterations 2
  step "benchmark harness smoke run (replicas, 20 clients)" \
    bench replicas --clients 20 --requests 2 --rounds 1 --sandboxes 1
}

main() {
  if [ "${CI:-}" = true ]; then
    # In CI the release build carries no debug line tables (smaller binaries, faster links).
    export CARGO_PROFILE_RELEASE_DEBUG=false
    # Each CI run is a fresh clone: cargo's target directory lives outside it, so the
    # dependencies compiled by the previous run are reused. Cargo's own fingerprints decide
    # what is stale (the workspace's crates always are: a clone's files are new).
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(cache_dir)/target}
  fi
  local t0
  t0=$(date +%s)
  if ! prepare; then
    echo "0 passed, 1 failed (environment preparation)"
    exit 1
  fi
  record_phase "prepare (tools, Python clients)" $(( $(date +%s) - t0 )) ok
  export RUSTC_WORKSPACE_WRAPPER=$clippy_driver
  # One feature resolution for every cargo command of the run (images, tests, benchmarks): each
  # narrower selection would compile most dependencies again.
  export AGENTBOX_CARGO_TARGETS="--workspace --all-targets"
  # The images' Debian bases download while cargo compiles.
  start_bases "$root" sandbox orchestrator swarm-node stack-services

  disk_report start
  step "cargo fmt --check" cargo fmt --all -- --check
  step "cargo build and clippy (release, whole workspace, all targets)" build_and_lint
  step "build the sandbox and orchestrator images" images
  counted_phase "tests (unit, router and end-to-end)" nextest
  counted_phase "Python clients (agent-sandbox SDK, Playwright, mcp)" pytests
  disk_report "after the tests"
  # Two lanes of about two minutes each (the orchestrator and hibernate harnesses are the long
  # ones).
  side_by_side bench_lane_1 bench_lane_2

  sweep_test_networks
  disk_report end
  phase_table >&2
  log "finished in $(( $(date +%s) - started )) s"
  if [ ${#failures[@]} -gt 0 ]; then
    log "failed: ${failures[*]}"
  fi
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}

# Sourced (tests/tests/it/scripts.rs checks the counting), it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
