//! Bashes started ahead of time: commands reach them byte for byte, a zygote forks them as
//! session leaders, they survive the shell state's removal, wait in the workspace and follow
//! it, and leave commands they cannot take to a fresh bash; and the directory a command
//! leaves is read as `pwd` would print it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::{
    PATIENCE, eventually, number_after, own_zombies, procs_where, start, unprivileged_user,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_reach_prewarmed_shells_byte_for_byte() {
    // After a session's first command, the next bash of each kind is started ahead of time and
    // handed its command on a pipe: whitespace, newlines, quotes and the wrapper's own flag must
    // arrive exactly as sent, in fresh and in continuing sessions alike.
    let sandbox = start().await;
    for session in ["warm-a", "warm-b"] {
        for _ in 0..3 {
            let data = sandbox
                .run(
                    session,
                    "  printf '[%s]' \"  two  spaces  \"\nprintf '\\n%s' 'line\ttab'  ",
                )
                .await;
            assert_eq!(data["output"], "[  two  spaces  ]\nline\ttab");
            assert_eq!(data["exit_code"], 0);
        }
    }
    let data = sandbox.run("warm-c", "--wait-for-command").await;
    assert_eq!(data["exit_code"], 127, "{data}");
    let data = sandbox.run("warm-c", "x=$((${x:-0} + 1)); echo $x").await;
    assert_eq!(data["output"], "1");
    let data = sandbox.run("warm-c", "x=$((x + 1)); echo $x").await;
    assert_eq!(
        data["output"], "2",
        "the saved environment still carries over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_bashes_are_forked_by_a_zygote_and_still_lead_their_own_sessions() {
    // The workspace's test run builds the bash builtin (the bash-fork crate) into the target
    // directory, where sandboxd finds it: after a session's first command the next bashes of
    // both kinds are forked by a long-lived zygote bash (its command line shows it) instead of
    // started from scratch. Each is still its own session leader, a child of this process
    // (which reaps it), with its own $$ and $RANDOM, and runs commands as before.
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        deps.join("libbash_fork.so").is_file()
            || deps.parent().unwrap().join("libbash_fork.so").is_file(),
        "libbash_fork.so is missing beside {}: build it with `cargo build -p bash-fork` \
         (same profile)",
        deps.display()
    );
    let sandbox = start().await;
    let probe = "[[ $(tr '\\0' ' ' </proc/$$/cmdline) == *' --zygote '* ]] && echo forked; \
                 [[ -e /proc/$$/fd/3 ]] || echo fd3:closed; read -r -a s </proc/$$/stat; \
                 echo \"self:$$ bashpid:$BASHPID sid:${s[5]} parent:$PPID random:$RANDOM.$RANDOM.$RANDOM\"";
    let mut seen = Vec::new();
    for session in ["zygote-a", "zygote-b"] {
        // The first command of a session also fills the waiting bash of the other kind.
        sandbox.run("zygote-warm", "true").await;
        let mut forked = None;
        for _ in 0..50 {
            // Give the refill, which runs after the answer, time to finish.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let data = sandbox.run(session, probe).await;
            assert_eq!(data["exit_code"], 0, "{data}");
            let output = data["output"].as_str().unwrap().to_string();
            if output.starts_with("forked") {
                forked = Some(output);
                break;
            }
        }
        let output = forked.expect("a command ran in a forked bash");
        assert!(
            output.contains("fd3:closed"),
            "the hand-over pipe is closed before the command: {output}"
        );
        let pid = number_after(&output, "self:");
        assert_eq!(number_after(&output, "bashpid:"), pid, "{output}");
        assert_eq!(number_after(&output, "sid:"), pid, "{output}");
        assert_eq!(
            number_after(&output, "parent:"),
            std::process::id() as i32,
            "{output}"
        );
        let random = output.split("random:").nth(1).unwrap().trim().to_string();
        seen.push((pid, random));
    }
    assert_ne!(
        seen[0], seen[1],
        "each forked bash has its own pid and $RANDOM"
    );
    // State still carries over between forked bashes.
    sandbox
        .run("zygote-a", "cd /; export ZYGOTE_TEST=kept")
        .await;
    let data = sandbox.run("zygote-a", "echo \"$PWD $ZYGOTE_TEST\"").await;
    assert_eq!(data["output"], "/ kept");
    eventually("forked bashes are reaped", || own_zombies().is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_still_run_after_the_shell_state_is_removed() {
    // The state root lives in /dev/shm, which a command may clear: sandboxd reaches it through
    // a descriptor, so it must notice that it is gone and make a new one (and new zygotes, which
    // run there) instead of failing every command from then on.
    let sandbox = start().await;
    sandbox.run("kept", "export KEPT=1; cd /").await;
    let data = sandbox.run("kept", "echo \"[$KEPT]\"").await;
    assert_eq!(data["output"], "[1]");
    let roots = || -> Vec<PathBuf> {
        std::fs::read_dir(sandbox.state_parent.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect()
    };
    let removed = roots();
    assert_eq!(removed.len(), 1, "{removed:?}");
    // sandboxd may be making a directory in it meanwhile (the FIFOs of the next ready bash, off
    // the request path), which fails a single removal with ENOTEMPTY: remove until it is gone,
    // as a command repeating `rm -rf` would.
    let mut attempts = 0;
    while let Err(error) = std::fs::remove_dir_all(&removed[0]) {
        attempts += 1;
        match error.kind() {
            std::io::ErrorKind::NotFound => break,
            std::io::ErrorKind::DirectoryNotEmpty if attempts < 100 => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            _ => panic!("removing {}: {error}", removed[0].display()),
        }
    }
    for session in ["kept", "new-a", "new-b", "kept", "new-a"] {
        let data = sandbox.run(session, "echo ran; pwd").await;
        assert_eq!(data["exit_code"], 0, "{data}");
        assert!(
            data["output"].as_str().unwrap().starts_with("ran\n"),
            "{data}"
        );
    }
    let data = sandbox.run("new-a", "export AGAIN=2").await;
    assert_eq!(data["exit_code"], 0, "{data}");
    let data = sandbox.run("new-a", "echo \"[$AGAIN]\"").await;
    assert_eq!(data["output"], "[2]", "state carries over in the new root");
    let now = roots();
    assert_eq!(now.len(), 1, "a root again: {now:?}");
    // And commands run in forked bashes again (the zygotes ran in the removed directory).
    let probe = "[[ $(tr '\\0' ' ' </proc/$$/cmdline) == *' --zygote '* ]] && echo forked";
    let mut forked = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if sandbox.run("new-b", probe).await["output"] == "forked" {
            forked = true;
            break;
        }
    }
    assert!(forked, "no command ran in a forked bash after the removal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_a_command_leaves_is_read_as_pwd_would_print_it() {
    // With symlinks resolved (the default) the wrapper reports no directory and sandboxd reads
    // bash's from /proc: it must be what `pwd -P` prints, through symlinks, with spaces and
    // newlines in names, and a removed directory must not become the session's.
    let sandbox = start().await;
    let odd = sandbox.workspace.join("a dir\nwith newline");
    std::fs::create_dir(&odd).unwrap();
    std::os::unix::fs::symlink(&odd, sandbox.workspace.join("link")).unwrap();
    if unprivileged_user().is_some() {
        // Commands run as nobody, who makes a directory in it below.
        std::os::unix::fs::chown(&odd, Some(65534), Some(65534)).unwrap();
    }
    let data = sandbox.run("cwd", "cd link && pwd -P").await;
    assert_eq!(data["output"], odd.display().to_string());
    let (_, listed) = sandbox.get("/v1/shell/sessions").await;
    assert_eq!(
        listed["data"]["sessions"]["cwd"]["working_dir"],
        odd.display().to_string()
    );
    let data = sandbox.run("cwd", "pwd").await;
    assert_eq!(
        data["output"],
        odd.display().to_string(),
        "the next command starts there"
    );
    // A directory removed under the command: the session stays where it was.
    let gone = odd.join("gone");
    let data = sandbox
        .run(
            "cwd",
            &format!("mkdir gone && cd gone && rmdir {}", quoted(&gone)),
        )
        .await;
    assert_eq!(data["exit_code"], 0, "{data}");
    let data = sandbox.run("cwd", "pwd").await;
    assert_eq!(data["output"], odd.display().to_string(), "{data}");
    // Kept symlinks still come from bash itself.
    let data = sandbox
        .exec(json!({
            "id": "cwd-l",
            "command": format!("cd {}", quoted(&sandbox.workspace.join("link"))),
            "preserve_symlinks": true
        }))
        .await;
    assert_eq!(data["exit_code"], 0, "{data}");
    let data = sandbox
        .exec(json!({"id": "cwd-l", "command": "pwd", "preserve_symlinks": true}))
        .await;
    assert_eq!(
        data["output"],
        sandbox.workspace.join("link").display().to_string()
    );
}

/// `path` in single quotes for bash.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_bashes_wait_in_the_workspace_and_follow_it_when_it_is_made_anew() {
    // Bashes started ahead of time wait in the default directory, so that a new session's first
    // command need not `cd` there. One that has waited in a directory since removed and made
    // anew under the same name must still run its command in the new one; and a first command
    // sees PWD and OLDPWD as a fresh bash has them, whichever way it started.
    let sandbox = start().await;
    let workspace = sandbox.workspace.display().to_string();
    sandbox.run("ready-warm", "true").await;
    let probe = "pwd; ls; declare -p OLDPWD; \
                 [[ $(tr '\\0' ' ' </proc/$$/cmdline) == *' --zygote '* ]] && echo forked";
    let mut forked = false;
    for generation in 0..50 {
        // Give the refill, which runs after the answer, time to finish.
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::remove_dir_all(&sandbox.workspace).unwrap();
        std::fs::create_dir(&sandbox.workspace).unwrap();
        if unprivileged_user().is_some() {
            std::os::unix::fs::chown(&sandbox.workspace, Some(65534), Some(65534)).unwrap();
        }
        let marker = format!("generation-{generation}");
        std::fs::write(sandbox.workspace.join(&marker), "").unwrap();
        let data = sandbox.run(&format!("ready-{generation}"), probe).await;
        let output = data["output"].as_str().unwrap();
        let expected = format!("{workspace}\n{marker}\ndeclare -x OLDPWD");
        assert!(
            output.starts_with(&expected),
            "expected {expected:?} first: {data}"
        );
        if output.ends_with("forked") {
            forked = true;
            break;
        }
    }
    assert!(forked, "no command ran in a bash that waited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_a_waiting_bash_cannot_take_leave_it_waiting() {
    // A bash started ahead of time has one output pipe and takes no variables of the command's
    // own. The bash API's commands (stdout and stderr apart, maybe `env`) run in bashes of
    // their own and leaves the waiting ones for the commands that fit them: none is taken,
    // thrown away and made again.
    let sandbox = start().await;
    let me = std::process::id() as i32;
    let bashes = || {
        let mut found = procs_where(|state, ppid, _| state != "Z" && ppid == me);
        found.retain(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "bash")
        });
        found.sort();
        found
    };
    // Two sessions' first commands fill the waiting bashes of both kinds; then wait until the
    // set has stayed the same for a while (refills run after the answers).
    sandbox.run("fit-warm", "true").await;
    sandbox.run("fit-warm-2", "true").await;
    let settled = || async {
        let mut last = bashes();
        let mut same_for = 0;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while same_for < 5 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "bashes never settle"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = bashes();
            same_for = if now == last { same_for + 1 } else { 0 };
            last = now;
        }
        last
    };
    let before = settled().await;
    assert!(!before.is_empty(), "no bash waits");
    let data = sandbox
        .bash(
            "exec",
            json!({"session_id": "fit-env", "command": "echo $ONLY_HERE", "env": {"ONLY_HERE": "x"}}),
        )
        .await;
    assert_eq!(data["stdout"], "x\n", "{data}");
    let data = sandbox
        .bash(
            "exec",
            json!({"session_id": "fit-bash", "command": "echo out; echo err >&2"}),
        )
        .await;
    assert_eq!(
        (data["stdout"].as_str(), data["stderr"].as_str()),
        (Some("out\n"), Some("err\n")),
        "{data}"
    );
    let after = settled().await;
    assert_eq!(after, before, "the waiting bashes are the same ones");
}
