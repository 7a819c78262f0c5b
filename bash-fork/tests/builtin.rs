//! The builtin loaded into a real bash: the new bash leads its own session, has its own `$$`,
//! `$PPID`, `$RANDOM` sequence and `$SECONDS`, and the old one goes on unchanged.

use std::path::PathBuf;
use std::process::Command;

/// `target/PROFILE/deps/libbash_fork.so`, built beside this test binary (the crate's rlib
/// makes the test build depend on the library, and the cdylib comes with it).
fn builtin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().join("libbash_fork.so");
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

const SCRIPT: &str = r#"
enable -f "$1" agentbox_fork || exit 9
zygote=$$
sleep 2.1
agentbox_fork || exit 8
read -r -a stat < "/proc/$BASHPID/stat"
seconds=$SECONDS
origin=$((EPOCHSECONDS - seconds))
echo "$([[ $$ == "$zygote" ]] && echo old || echo new) pid=$$ bashpid=$BASHPID ppid=$PPID sid=${stat[5]} origin=$origin random=$RANDOM,$RANDOM,$RANDOM"
"#;

fn field(line: &str, name: &str) -> String {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        .to_string()
}

#[test]
fn the_forked_bash_is_a_fresh_session_leader_with_its_own_pid_and_random() {
    // The new bash is re-parented to the nearest subreaper: make that this process.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    // The one spawn of this test; nothing here reaps with waitpid(-1).
    #[allow(clippy::disallowed_methods)]
    let out = Command::new("bash")
        .args(["-c", SCRIPT, "bash"])
        .arg(builtin())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let old = text
        .lines()
        .find(|l| l.starts_with("old"))
        .expect("the old bash went on");
    let new = text
        .lines()
        .find(|l| l.starts_with("new"))
        .expect("the new bash ran");

    let pid = field(new, "pid");
    assert_eq!(field(new, "bashpid"), pid, "$$ is the new bash's own pid");
    assert_eq!(field(new, "sid"), pid, "it leads its own session");
    assert_ne!(pid, field(old, "pid"));
    assert_eq!(
        field(new, "ppid"),
        std::process::id().to_string(),
        "re-parented to us"
    );
    assert_ne!(
        field(new, "random"),
        field(old, "random"),
        "$RANDOM is reseeded"
    );
    // Where each bash's $SECONDS counts from, in whole epoch seconds: the old bash's start
    // (or one second later, if the clock ticked between reading $SECONDS and $EPOCHSECONDS),
    // the new bash's fork, which came 2.1 s after that start. Without the reset both would
    // name the old bash's start. Neither depends on how long a loaded machine takes to print.
    let origin = |line: &str| field(line, "origin").parse::<u64>().expect("whole seconds");
    assert!(
        origin(new) > origin(old),
        "$SECONDS counts from the fork in the new bash and from the start in the old one: {old:?} {new:?}"
    );
}
