//! `scripts/test.sh` counts what it ran: its `nextest` and `pytests` functions, sourced into
//! bash with a stand-in `cargo` or `pytest` that prints a summary and exits with a status.
//! Needs bash, not Docker.

use std::path::Path;
use std::process::Output;

/// Sources scripts/test.sh, defines `stand_in` (a shell function playing cargo or the venv's
/// pytest), runs `call` and prints `passed failed | failure, failure...`.
fn run_counting(stand_in: &str, call: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let script = format!(
        "source scripts/test.sh\n{stand_in}\n{call} >/dev/null 2>&1\n\
         printf '%s %s |' \"$passed\" \"$failed\"\n\
         printf ' %s,' \"${{failures[@]}}\"\n"
    );
    let output = bash(root, &script);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

// The test runs bash on the script and waits for it (the test process reaps only its own
// children).
#[allow(clippy::disallowed_methods)]
fn bash(root: &Path, script: &str) -> Output {
    std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(root)
        .output()
        .expect("running bash")
}

fn fake_nextest(summary: &str, status: u8) -> String {
    format!("cargo() {{ printf '%s\\n' '{summary}'; return {status}; }}")
}

#[test]
fn each_nextest_failure_counts_once() {
    let summary = |counts: &str| format!("     Summary [   2.0s] 6 tests run: {counts}, 0 skipped");
    for (stand_in, expected) in [
        (fake_nextest(&summary("6 passed"), 0), "6 0 | ,"),
        (
            fake_nextest(&summary("4 passed, 2 failed"), 100),
            "4 2 | nextest,",
        ),
        (
            fake_nextest(&summary("4 passed, 1 failed, 1 timed out"), 100),
            "4 2 | nextest,",
        ),
        // No test failed, yet the run did: a build error counts as one failure, listed once.
        (
            fake_nextest("error: could not compile `sandboxd`", 101),
            "0 1 | nextest (exit 101),",
        ),
    ] {
        assert_eq!(run_counting(&stand_in, "nextest"), expected, "{stand_in}");
    }
}

#[test]
fn steps_run_side_by_side_count_as_their_own() {
    let lanes = "lane_a() { step one true; step two false; }\n\
                 lane_b() { step three true; }\n\
                 lane_c() { exit 3; }";
    // Each step once, the failed one named; a lane that records nothing is a failure too.
    assert_eq!(
        run_counting(lanes, "side_by_side lane_a lane_b"),
        "2 1 | two,"
    );
    assert_eq!(
        run_counting(lanes, "side_by_side lane_b lane_c"),
        "1 1 | lane 2 (no steps recorded),"
    );
}

#[test]
fn each_pytest_failure_counts_once() {
    // `pytests` runs "$venv/bin/pytest" once per group, side by side: a venv whose pytest is a
    // script printing the summary its group's first argument names.
    let venv = tempfile::tempdir().expect("a temporary directory");
    let bin = venv.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let pytest = bin.join("pytest");
    std::fs::write(
        &pytest,
        "#!/bin/sh
\
         for a in \"$@\"; do case $a in group-*) . \"$0.$a\"; exit $status;; esac; done\n\
         exit 99\n",
    )
    .expect("write pytest");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pytest, std::fs::Permissions::from_mode(0o755))
        .expect("chmod pytest");
    let group = |name: &str, summary: &str, status: u8| {
        std::fs::write(
            bin.join(format!("pytest.{name}")),
            format!("echo '{summary}'\nstatus={status}\n"),
        )
        .expect("write a group");
    };
    for (summary, status, expected) in [
        ("5 passed in 1.0s", 0, "5 0 | ,"),
        ("3 passed, 1 failed, 1 error in 1.0s", 1, "3 2 | pytest,"),
        ("ERROR: usage", 4, "0 1 | pytest (exit 4),"),
    ] {
        group("group-a", summary, status);
        let stand_in = format!(
            "venv='{}'; python_groups=(\"group-a --flag\")",
            venv.path().display()
        );
        assert_eq!(run_counting(&stand_in, "pytests"), expected, "{summary}");
    }
    // Several groups: every group's counts, each failure once.
    group("group-a", "5 passed in 1.0s", 0);
    group("group-b", "3 passed, 1 failed in 1.0s", 1);
    group("group-c", "ERROR: usage", 4);
    let stand_in = format!(
        "venv='{}'; python_groups=(group-a group-b \"group-c x\")",
        venv.path().display()
    );
    assert_eq!(
        run_counting(&stand_in, "pytests"),
        "8 2 | pytest, pytest (exit 4),"
    );
}
