//! The bash pipe API, `/v1/bash/*`: the same sessions as `/v1/shell/*`, with stdout and
//! stderr apart, offsets and long polls, timeouts and kills, snapshots, refused input.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::killpg;
use nix::unistd::Pid;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{eventually, number_after, own_zombies, session_members, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_exec_captures_stdout_and_stderr_apart_with_offsets() {
    let sandbox = start().await;
    let data = sandbox
        .bash(
            "exec",
            json!({"command": "echo out; echo err >&2; printf 'é'; exit 3"}),
        )
        .await;
    assert_eq!(data["status"], "completed", "{data}");
    assert_eq!(data["exit_code"], 3);
    assert_eq!(data["stdout"], "out\né");
    assert_eq!(data["stderr"], "err\n");
    assert_eq!(data["offset"], 6, "bytes, not characters");
    assert_eq!(data["stderr_offset"], 4);
    assert_eq!(data["truncated"], false);
    let session = data["session_id"].as_str().unwrap().to_string();
    let command_id = data["command_id"].as_str().unwrap().to_string();
    assert!(!command_id.is_empty());

    // Reading again from the answer's offsets gives nothing new; from 0, everything.
    let read = sandbox
        .bash(
            "output",
            json!({"session_id": session, "offset": 6, "stderr_offset": 4}),
        )
        .await;
    assert_eq!(
        (read["stdout"].as_str(), read["stderr"].as_str()),
        (Some(""), Some(""))
    );
    assert_eq!(read["command"]["command_id"], command_id.as_str());
    assert_eq!(read["command"]["status"], "completed");
    assert_eq!(read["command"]["exit_code"], 3);
    let read = sandbox
        .bash(
            "output",
            json!({"session_id": session, "command_id": command_id, "offset": 4}),
        )
        .await;
    assert_eq!(
        (read["stdout"].as_str(), read["stderr"].as_str()),
        (Some("é"), Some("err\n"))
    );
    assert_eq!(
        (read["offset"].as_u64(), read["stderr_offset"].as_u64()),
        (Some(6), Some(4))
    );
    // The same session shows up in the shell API too.
    let (status, _) = sandbox.post("/v1/shell/view", json!({"id": session})).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_async_output_is_read_incrementally_and_long_polled() {
    let sandbox = start().await;
    let data = sandbox
        .bash(
            "exec",
            json!({
                "session_id": "inc",
                "async_mode": true,
                "command": "echo a; sleep 0.4; echo b >&2; sleep 0.4; echo c; sleep 0.4; echo d >&2",
            }),
        )
        .await;
    assert_eq!(data["status"], "running");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let (mut offset, mut stderr_offset) = (0u64, 0u64);
    let mut polls = 0;
    loop {
        polls += 1;
        assert!(polls < 100, "the command never completed");
        let read = sandbox
            .bash(
                "output",
                json!({
                    "session_id": "inc", "offset": offset, "stderr_offset": stderr_offset,
                    "wait": true, "wait_timeout": 10,
                }),
            )
            .await;
        stdout += read["stdout"].as_str().unwrap();
        stderr += read["stderr"].as_str().unwrap();
        offset = read["offset"].as_u64().unwrap();
        stderr_offset = read["stderr_offset"].as_u64().unwrap();
        if read["command"]["status"] == "completed" {
            assert_eq!(read["command"]["exit_code"], 0);
            break;
        }
    }
    assert_eq!((stdout.as_str(), stderr.as_str()), ("a\nc\n", "b\nd\n"));
    assert!(
        polls >= 2,
        "long polls returned with each new piece ({polls})"
    );
    // A long poll with nothing new ends at its wait_timeout for a running command.
    sandbox
        .bash(
            "exec",
            json!({"session_id": "inc", "async_mode": true, "command": "sleep 1000"}),
        )
        .await;
    let started = std::time::Instant::now();
    let read = sandbox
        .bash(
            "output",
            json!({"session_id": "inc", "wait": true, "wait_timeout": 0.5}),
        )
        .await;
    assert!(started.elapsed() >= Duration::from_millis(450));
    assert_eq!(read["command"]["status"], "running");
    // A second command while one runs: 409.
    let (status, answer) = sandbox
        .post(
            "/v1/bash/exec",
            json!({"session_id": "inc", "command": "true"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let killed = sandbox.bash("kill", json!({"session_id": "inc"})).await;
    assert_eq!(killed["status"], "killed", "{killed}");
    assert_eq!(killed["signal"], "SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_sessions_keep_state_and_env_is_for_one_command() {
    let sandbox = start().await;
    let run = |command: &'static str, env: Value| {
        let sandbox = &sandbox;
        async move {
            sandbox
                .bash(
                    "exec",
                    json!({"session_id": "env", "command": command, "env": env}),
                )
                .await
        }
    };
    run("export FOO=orig; KEPT=1; cd /", Value::Null).await;
    let data = run(
        "echo $FOO $BAR $KEPT; pwd; bash -c 'echo child:$FOO'",
        json!({"FOO": "temp value", "BAR": "x"}),
    )
    .await;
    assert_eq!(
        data["stdout"], "temp value x 1\n/\nchild:temp value\n",
        "{data}"
    );
    let data = run("echo ${FOO}-${BAR-unset}", Value::Null).await;
    assert_eq!(
        data["stdout"], "orig-unset\n",
        "the session's values are back"
    );
    let data = run("echo ${FOO-none}", json!({"FOO": null})).await;
    assert_eq!(data["stdout"], "none\n");
    let data = run("echo $FOO", Value::Null).await;
    assert_eq!(data["stdout"], "orig\n");
    // exec_dir moves the session for good.
    let workspace = sandbox.workspace.display().to_string();
    let data = sandbox
        .bash(
            "exec",
            json!({"session_id": "env", "command": "pwd", "exec_dir": workspace}),
        )
        .await;
    assert_eq!(data["stdout"], format!("{workspace}\n"));
    let data = run("pwd", Value::Null).await;
    assert_eq!(data["stdout"], format!("{workspace}\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_hard_timeouts_and_kills_end_every_process() {
    let sandbox = start().await;
    let data = sandbox
        .bash(
            "exec",
            json!({
                "session_id": "hard",
                "command": "echo pid:$$; echo started >&2; sleep 1000 & sleep 1000; wait",
                "hard_timeout": 1,
            }),
        )
        .await;
    assert_eq!(data["status"], "timed_out", "{data}");
    assert_eq!(data["stderr"], "started\n");
    let pid = number_after(data["stdout"].as_str().unwrap(), "pid:");
    eventually("every process of the command is gone", || {
        killpg(Pid::from_raw(pid), None) == Err(Errno::ESRCH) && session_members(pid).is_empty()
    })
    .await;

    // `timeout` answers `running` and the command goes on; input reaches it; SIGINT interrupts.
    let data = sandbox
        .bash(
            "exec",
            json!({"session_id": "hard", "command": "read line; echo got:$line; sleep 1000", "timeout": 0.3}),
        )
        .await;
    assert_eq!(data["status"], "running");
    let command_id = data["command_id"].clone();
    let wrote = sandbox
        .bash(
            "write",
            json!({"session_id": "hard", "input": "hello\n", "command_id": command_id}),
        )
        .await;
    assert_eq!(wrote["bytes_written"], 6);
    let read = sandbox
        .bash(
            "output",
            json!({"session_id": "hard", "wait": true, "wait_timeout": 10}),
        )
        .await;
    assert_eq!(read["stdout"], "got:hello\n", "{read}");
    let interrupted = sandbox
        .bash("kill", json!({"session_id": "hard", "signal": "SIGINT"}))
        .await;
    assert_eq!(interrupted["exit_code"], 130, "{interrupted}");
    assert_ne!(interrupted["status"], "running");
    // Nothing runs now: writing is a conflict.
    let (status, _body) = sandbox
        .post(
            "/v1/bash/write",
            json!({"session_id": "hard", "input": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{_body}");
    eventually("no zombie children remain", || own_zombies().is_empty()).await;
}

/// SIGINT that reaches bash just before it forks its foreground program leaves that program
/// unsignalled (bash runs its trap only once the program ends), so `kill` also interrupts what
/// bash forked after the signal. The moment is swept across the command's start, repeatedly:
/// CI once saw a command go on running after SIGINT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_sigint_ends_a_command_whatever_moment_it_arrives() {
    let sandbox = start().await;
    for round in 0..60u64 {
        let session = format!("int-{round}");
        let started = sandbox
            .bash(
                "exec",
                json!({"session_id": session, "command": "echo ready; sleep 1000", "async_mode": true}),
            )
            .await;
        assert_eq!(started["status"], "running", "{started}");
        // Half the rounds interrupt as soon as the command starts (while bash may be setting
        // up), half once it has said `ready` (while it forks `sleep`), at varying delays.
        if round % 2 == 1 {
            let read = sandbox
                .bash(
                    "output",
                    json!({"session_id": session, "wait": true, "wait_timeout": 10}),
                )
                .await;
            assert_eq!(read["stdout"], "ready\n", "{read}");
        }
        tokio::time::sleep(Duration::from_micros(round * 40)).await;
        let interrupted = sandbox
            .bash("kill", json!({"session_id": session, "signal": "SIGINT"}))
            .await;
        assert_eq!(
            interrupted["exit_code"], 130,
            "round {round}: {interrupted}"
        );
        assert_ne!(
            interrupted["status"], "running",
            "round {round}: {interrupted}"
        );
    }
    eventually("no zombie children remain", || own_zombies().is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_output_is_bounded_and_cut_in_the_middle() {
    let sandbox = start().await;
    let data = sandbox
        .bash(
            "exec",
            json!({"command": "seq 1 10000", "max_output_length": 200}),
        )
        .await;
    let stdout = data["stdout"].as_str().unwrap();
    assert!(stdout.chars().count() <= 200, "{}", stdout.len());
    assert!(
        stdout.starts_with("1\n2\n") && stdout.ends_with("9999\n10000\n"),
        "{stdout}"
    );
    assert!(stdout.contains("characters omitted"), "{stdout}");
    assert_eq!(data["truncated"], true);
    assert_eq!(data["offset"], 48894, "the offset counts every byte");
    // More than the 1 MiB kept per stream: the oldest bytes are dropped, offsets still count.
    let data = sandbox
        .bash(
            "exec",
            json!({"command": "head -c 3000000 /dev/zero | tr '\\0' x", "max_output_length": 0}),
        )
        .await;
    assert_eq!(data["offset"], 3_000_000);
    let kept = data["stdout"].as_str().unwrap().len();
    assert!((1 << 20..=(1 << 20) + (1 << 18)).contains(&kept), "{kept}");
    assert_eq!(data["truncated"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_sessions_are_created_from_snapshots_listed_and_closed() {
    let sandbox = start().await;
    let snapshot = sandbox.workspace.join("snap.sh");
    std::fs::write(
        &snapshot,
        "export SNAP=yes\nsnapfn() { echo fn; }\ncd /tmp\n",
    )
    .unwrap();
    let workspace = sandbox.workspace.display().to_string();
    let info = sandbox
        .bash(
            "sessions/create",
            json!({"session_id": "snap", "exec_dir": workspace, "snapshot_path": snapshot}),
        )
        .await;
    assert_eq!(info["session_id"], "snap");
    assert_eq!(info["status"], "ready");
    assert_eq!(info["working_dir"], "/tmp", "{info}");
    let data = sandbox
        .bash(
            "exec",
            json!({"session_id": "snap", "command": "echo $SNAP; snapfn; pwd"}),
        )
        .await;
    assert_eq!(data["stdout"], "yes\nfn\n/tmp\n");
    let (status, answer) = sandbox.get("/v1/bash/sessions").await;
    assert_eq!(status, StatusCode::OK);
    let listed = answer["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == "snap")
        .cloned()
        .unwrap();
    assert_eq!(listed["command_count"], 2, "{listed}");
    assert!(listed["created_at"].as_str().unwrap().ends_with('Z'));

    // A failing snapshot: 422 naming it, and no session left behind.
    let bad = sandbox.workspace.join("bad.sh");
    std::fs::write(&bad, "echo broken >&2\nreturn 3\n").unwrap();
    let (status, answer) = sandbox
        .post(
            "/v1/bash/sessions/create",
            json!({"session_id": "bad", "snapshot_path": bad}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains("broken"),
        "{answer}"
    );
    let (_, answer) = sandbox.get("/v1/bash/sessions").await;
    assert!(!answer["data"].to_string().contains("\"bad\""), "{answer}");

    let closed = sandbox.bash("sessions/snap/close", json!({})).await;
    assert_eq!(closed["session_id"], "snap");
    let (status, _) = sandbox
        .post("/v1/bash/output", json!({"session_id": "snap"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = sandbox
        .post("/v1/bash/sessions/snap/close", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_bad_input_is_refused_naming_the_field() {
    let sandbox = start().await;
    for (body, loc) in [
        (json!({}), vec!["body", "command"]),
        (json!({"command": " "}), vec!["body", "command"]),
        (
            json!({"command": "ls", "timeout": -1}),
            vec!["body", "timeout"],
        ),
        (
            json!({"command": "ls", "hard_timeout": 0}),
            vec!["body", "hard_timeout"],
        ),
        (
            json!({"command": "ls", "max_output_length": -1}),
            vec!["body", "max_output_length"],
        ),
        (
            json!({"command": "ls", "max_output_length": 1.5}),
            vec!["body", "max_output_length"],
        ),
        (
            json!({"command": "ls", "exec_dir": "rel"}),
            vec!["body", "exec_dir"],
        ),
        (
            json!({"command": "ls", "exec_dir": "/no/such/dir"}),
            vec!["body", "exec_dir"],
        ),
        (
            json!({"command": "ls", "session_id": ""}),
            vec!["body", "session_id"],
        ),
        (
            json!({"command": "ls", "env": {"1X": "v"}}),
            vec!["body", "env", "1X"],
        ),
        (
            json!({"command": "ls", "env": {"A-B": "v"}}),
            vec!["body", "env", "A-B"],
        ),
        (
            json!({"command": "ls", "env": {"AGENTBOX_SHELL_JOB": "v"}}),
            vec!["body", "env", "AGENTBOX_SHELL_JOB"],
        ),
        (
            json!({"command": "ls", "env": {"X": "a\u{0}b"}}),
            vec!["body", "env", "X"],
        ),
        (json!({"command": "ls", "env": "X=1"}), vec!["body", "env"]),
    ] {
        let loc: Vec<&str> = loc;
        sandbox.bash_refused("exec", body, &loc).await;
    }
    sandbox
        .bash("exec", json!({"session_id": "b", "command": "echo hi"}))
        .await;
    for (body, field) in [
        (json!({"session_id": "b", "offset": -1}), "offset"),
        (json!({"session_id": "b", "offset": 0.5}), "offset"),
        (json!({"session_id": "b", "offset": 4}), "offset"),
        (
            json!({"session_id": "b", "stderr_offset": 1}),
            "stderr_offset",
        ),
        (
            json!({"session_id": "b", "wait": true, "wait_timeout": -2}),
            "wait_timeout",
        ),
        (json!({}), "session_id"),
    ] {
        sandbox.bash_refused("output", body, &["body", field]).await;
    }
    sandbox
        .bash_refused(
            "kill",
            json!({"session_id": "b", "signal": "SIGHUP"}),
            &["body", "signal"],
        )
        .await;
    sandbox
        .bash_refused("write", json!({"session_id": "b"}), &["body", "input"])
        .await;
    for (path, field) in [
        ("rel.sh", "snapshot_path"),
        ("/no/such.sh", "snapshot_path"),
    ] {
        sandbox
            .bash_refused(
                "sessions/create",
                json!({"snapshot_path": path}),
                &["body", field],
            )
            .await;
    }
    for (path, body) in [
        ("/v1/bash/output", json!({"session_id": "ghost"})),
        (
            "/v1/bash/output",
            json!({"session_id": "b", "command_id": "nope"}),
        ),
        (
            "/v1/bash/write",
            json!({"session_id": "ghost", "input": "x"}),
        ),
        ("/v1/bash/kill", json!({"session_id": "ghost"})),
        ("/v1/bash/sessions/ghost/close", json!({})),
    ] {
        let (status, answer) = sandbox.post(path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {answer}");
    }
}
