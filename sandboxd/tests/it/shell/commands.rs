//! `/v1/shell/*` commands: output, exit code and user, the state a session keeps, hard and
//! soft timeouts, asynchronous input and kills, refused requests, truncated output; sessions
//! listed and cleaned up with their processes, shutdown, and the OpenAPI document.

use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::killpg;
use nix::unistd::{Pid, Uid};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{
    PATIENCE, describe, eventually, gone, number_after, own_zombies, session_members, start,
    unprivileged_user,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_with_their_output_exit_code_and_user() {
    let sandbox = start().await;
    let data = sandbox.exec(json!({"command": "echo hello"})).await;
    assert_eq!(data["status"], "completed");
    assert_eq!(data["exit_code"], 0);
    assert_eq!(data["output"], "hello");
    assert_eq!(data["command"], "echo hello");
    assert_eq!(data["truncated"], false);
    let session = data["session_id"].as_str().unwrap().to_string();
    assert!(!session.is_empty());
    assert_eq!(data["console"][0]["command"], "echo hello");
    assert_eq!(data["console"][0]["output"], "hello");
    assert!(data["console"][0]["ps1"].as_str().unwrap().ends_with("$ "));

    let data = sandbox.run(&session, "echo partial; exit 3").await;
    assert_eq!(
        (data["status"].as_str(), data["exit_code"].as_i64()),
        (Some("completed"), Some(3))
    );
    assert_eq!(data["output"], "partial");

    let data = sandbox
        .run(
            &session,
            "echo a; echo b >&2; echo c; ls /no-such-path; echo d",
        )
        .await;
    let output = data["output"].as_str().unwrap();
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines[..3], ["a", "b", "c"], "{output}");
    assert!(lines[3].contains("/no-such-path"), "{output}");
    assert_eq!(lines[4], "d");

    let data = sandbox
        .run(&session, r"printf '\033[1;31mred\033[0m\n 10%%\r100%%\n'")
        .await;
    assert_eq!(
        data["output"], "red\n100%",
        "escape sequences and overwrites are cleaned"
    );

    let data = sandbox.run(&session, "id -un; echo \"$HOME\"").await;
    let expected_user = unprivileged_user().map(str::to_owned).unwrap_or_else(|| {
        nix::unistd::User::from_uid(Uid::effective())
            .unwrap()
            .unwrap()
            .name
    });
    assert_eq!(
        data["output"].as_str().unwrap().lines().next(),
        Some(expected_user.as_str())
    );

    let data = sandbox.run(&session, "pwd").await;
    assert_eq!(
        data["output"],
        sandbox.workspace.display().to_string(),
        "sessions start in the workspace"
    );

    let data = sandbox.run(&session, "if then").await;
    assert_eq!(data["exit_code"], 2);
    assert!(data["output"].as_str().unwrap().contains("syntax error"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_and_environment_persist_in_a_session() {
    let sandbox = start().await;
    let (status, created) = sandbox
        .post("/v1/shell/sessions/create", json!({"id": "state"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(created["data"]["session_id"], "state");
    assert_eq!(
        created["data"]["working_dir"],
        sandbox.workspace.display().to_string()
    );

    sandbox
        .run(
            "state",
            "cd /tmp && export A=1 && B=two && greet() { echo \"hi $1\"; }",
        )
        .await;
    let data = sandbox.run("state", "pwd; echo $A $B; greet you").await;
    assert_eq!(data["output"], "/tmp\n1 two\nhi you");

    let data = sandbox.run("state", "unset A; cd /usr; cd -").await;
    assert_eq!(data["output"], "/tmp");
    let data = sandbox.run("state", "echo \"[$A]\"; pwd").await;
    assert_eq!(data["output"], "[]\n/tmp", "unset and cd - carry over too");

    // exec_dir runs the command there, and the session stays there.
    let data = sandbox
        .exec(json!({"id": "state", "command": "pwd", "exec_dir": "/usr"}))
        .await;
    assert_eq!(data["output"], "/usr");
    assert_eq!(sandbox.run("state", "pwd").await["output"], "/usr");

    // A missing exec_dir: an error when strict, a hint otherwise.
    let (status, body) = sandbox
        .post(
            "/v1/shell/exec",
            json!({"id": "state", "command": "pwd", "exec_dir": "/no/such/dir", "strict": true}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "exec_dir"]));
    let (status, body) = sandbox
        .post(
            "/v1/shell/exec",
            json!({"id": "state", "command": "pwd", "exec_dir": "/no/such/dir"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["output"], "/usr");
    assert!(body["hint"].as_str().unwrap().contains("/no/such/dir"));

    // Other sessions have their own state.
    let data = sandbox.run("other", "pwd; echo \"[$B]\"").await;
    assert_eq!(
        data["output"],
        format!("{}\n[]", sandbox.workspace.display())
    );

    let (_, listed) = sandbox.get("/v1/shell/sessions").await;
    let info = &listed["data"]["sessions"]["state"];
    assert_eq!(info["working_dir"], "/usr");
    assert_eq!(info["status"], "idle");
    assert_eq!(info["current_command"], "pwd");
    assert!(info["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(info["age_seconds"].is_u64());

    // Symlinks: resolved by default, kept with preserve_symlinks.
    let link = sandbox.workspace.join("link");
    std::os::unix::fs::symlink("/usr", &link).unwrap();
    let resolved = sandbox
        .run("state", &format!("cd {}; pwd", link.display()))
        .await;
    assert_eq!(resolved["output"], "/usr");
    let kept = sandbox
        .exec(json!({"id": "state", "command": format!("cd {}; pwd", link.display()), "preserve_symlinks": true}))
        .await;
    assert_eq!(kept["output"], link.display().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_timeout_kills_the_whole_process_group() {
    let sandbox = start().await;
    let data = sandbox
        .exec(json!({
            "id": "hard",
            "command": "echo pid:$$; sleep 1000 & sleep 1000; wait",
            "hard_timeout": 1,
        }))
        .await;
    assert_eq!(data["status"], "hard_timeout");
    assert_eq!(data["exit_code"], 128 + 15, "SIGTERM ended bash");
    let pid = number_after(data["output"].as_str().unwrap(), "pid:");
    eventually("every process of the group is gone and reaped", || {
        killpg(Pid::from_raw(pid), None) == Err(Errno::ESRCH) && session_members(pid).is_empty()
    })
    .await;
    eventually("no zombie children remain", || own_zombies().is_empty()).await;

    // Children that made their own process group (timeout(1) does) and ignore SIGTERM are
    // found through the session and killed too.
    let data = sandbox
        .exec(json!({
            "id": "hard",
            "command": "echo pid:$$; timeout 1000 bash -c 'trap \"\" TERM; sleep 1000' & wait",
            "hard_timeout": 1,
        }))
        .await;
    assert_eq!(data["status"], "hard_timeout");
    let pid = number_after(data["output"].as_str().unwrap(), "pid:");
    eventually("the timeout(1) group is gone", || {
        session_members(pid).is_empty()
    })
    .await;

    // The session is not stuck.
    let data = sandbox.run("hard", "echo alive").await;
    assert_eq!(
        (data["status"].as_str(), data["output"].as_str()),
        (Some("completed"), Some("alive"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_timeout_returns_running_and_wait_completes_it() {
    let sandbox = start().await;
    let data = sandbox
        .exec(json!({
            "id": "soft",
            "command": "echo started; read -t 600 line; echo done",
            "timeout": 0.5,
        }))
        .await;
    assert_eq!(data["status"], "running");
    assert_eq!(data["exit_code"], Value::Null);
    assert_eq!(data["output"], "started");

    // One command at a time per session.
    let (status, body) = sandbox
        .post(
            "/v1/shell/exec",
            json!({"id": "soft", "command": "echo second"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body["message"].as_str().unwrap().contains("soft"));

    // A wait that times out says so; writing a line lets the command finish.
    let (status, body) = sandbox
        .post("/v1/shell/wait", json!({"id": "soft", "seconds": 0.2}))
        .await;
    assert_eq!(
        (status, body["data"]["status"].as_str()),
        (StatusCode::OK, Some("running"))
    );
    let (status, _) = sandbox
        .post(
            "/v1/shell/write",
            json!({"id": "soft", "input": "go", "press_enter": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = sandbox
        .post(
            "/v1/shell/wait",
            json!({"id": "soft", "seconds": 30, "max_wait_seconds": 60}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["status"], "completed");
    let (_, view) = sandbox.post("/v1/shell/view", json!({"id": "soft"})).await;
    assert_eq!(view["data"]["output"], "started\ndone");
    assert_eq!(view["data"]["exit_code"], 0);
    assert_eq!(view["data"]["status"], "completed");
    assert_eq!(view["data"]["session_id"], "soft");

    // No new output for no_change_timeout seconds: answered, still running.
    let data = sandbox
        .exec(json!({"id": "soft", "command": "sleep 600", "no_change_timeout": 1}))
        .await;
    assert_eq!(data["status"], "no_change_timeout");
    let (_, killed) = sandbox.post("/v1/shell/kill", json!({"id": "soft"})).await;
    assert_eq!(killed["data"]["status"], "terminated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_commands_take_input_and_can_be_killed() {
    let sandbox = start().await;
    let data = sandbox
        .exec(json!({"id": "async", "command": "read x; echo got:$x", "async_mode": true}))
        .await;
    assert_eq!(data["status"], "running");
    assert_eq!(data["session_id"], "async");
    assert!(
        sandbox.activity.idle_for().is_zero(),
        "a running command counts as activity"
    );

    let (_, view) = sandbox.post("/v1/shell/view", json!({"id": "async"})).await;
    assert_eq!(view["data"]["status"], "running");
    assert_eq!(view["data"]["command"], "read x; echo got:$x");
    let (status, body) = sandbox
        .post(
            "/v1/shell/write",
            json!({"id": "async", "input": "hello", "press_enter": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, waited) = sandbox
        .post("/v1/shell/wait", json!({"id": "async", "seconds": 30}))
        .await;
    assert_eq!(waited["data"]["status"], "completed");
    let (_, view) = sandbox.post("/v1/shell/view", json!({"id": "async"})).await;
    assert_eq!(view["data"]["output"], "got:hello");

    // Writing to a finished command is a conflict.
    let (status, _) = sandbox
        .post(
            "/v1/shell/write",
            json!({"id": "async", "input": "x", "press_enter": false}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    let data = sandbox
        .exec(json!({"id": "async", "command": "echo pid:$$; sleep 1000", "async_mode": true}))
        .await;
    let pid = {
        let mut output = data["output"].as_str().unwrap_or_default().to_string();
        while !output.contains("pid:") {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let (_, view) = sandbox.post("/v1/shell/view", json!({"id": "async"})).await;
            output = view["data"]["output"].as_str().unwrap().to_string();
        }
        number_after(&output, "pid:")
    };
    let (status, killed) = sandbox.post("/v1/shell/kill", json!({"id": "async"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(killed["data"]["status"], "terminated");
    assert_eq!(killed["data"]["exit_code"], 143);
    assert_eq!(killed["data"]["returncode"], 143);
    eventually("the killed command's session is empty", || {
        session_members(pid).is_empty()
    })
    .await;
    let (_, view) = sandbox.post("/v1/shell/view", json!({"id": "async"})).await;
    assert_eq!(view["data"]["status"], "terminated");
    // Killing again reports the same end.
    let (_, again) = sandbox.post("/v1/shell/kill", json!({"id": "async"})).await;
    assert_eq!(again["data"]["status"], "terminated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_command_does_not_block_other_sessions_or_routes() {
    let sandbox = Arc::new(start().await);
    let slow = {
        let sandbox = sandbox.clone();
        tokio::spawn(async move { sandbox.run("slow", "sleep 600; echo never").await })
    };
    eventually("the slow command runs", || {
        sandbox.shell.session("slow").is_ok_and(|s| s.is_running())
    })
    .await;
    let data = sandbox.run("fast", "echo fast").await;
    assert_eq!(data["output"], "fast");
    let (status, stats) = sandbox.get("/v1/shell/sessions/stats").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stats["data"]["active_sessions"], 1);
    assert_eq!(stats["data"]["total_sessions"], 2);
    assert_eq!(stats["data"]["idle_sessions"], 1);
    assert_eq!(stats["data"]["max_sessions"], 16);
    assert_eq!(stats["data"]["session_timeout"], 3600);
    let (status, _) = sandbox.get("/v1/processes").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!slow.is_finished(), "the slow exec is still waiting");

    let (_, killed) = sandbox.post("/v1/shell/kill", json!({"id": "slow"})).await;
    assert_eq!(killed["data"]["status"], "terminated");
    let data = tokio::time::timeout(PATIENCE, slow).await.unwrap().unwrap();
    assert_eq!(data["status"], "terminated");
    assert_eq!(data["output"], "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_naming_the_field() {
    let sandbox = start().await;
    for (path, body) in [
        ("/v1/shell/view", json!({"id": "ghost"})),
        ("/v1/shell/wait", json!({"id": "ghost"})),
        ("/v1/shell/kill", json!({"id": "ghost"})),
        (
            "/v1/shell/write",
            json!({"id": "ghost", "input": "x", "press_enter": true}),
        ),
        (
            "/v1/shell/sessions/update",
            json!({"id": "ghost", "no_change_timeout": 5}),
        ),
    ] {
        let (status, answer) = sandbox.post(path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            answer["message"].as_str().unwrap().contains("ghost"),
            "{path}: {answer}"
        );
    }
    let (status, _) = sandbox.delete("/v1/shell/sessions/ghost").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, _) = sandbox.post_raw("/v1/shell/exec", r#"{"command": "#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    for (body, field) in [
        ("", "command"),
        (r#"{"id": "x"}"#, "command"),
        (r#"{"command": ""}"#, "command"),
        (r#"{"command": "ls", "timeout": "soon"}"#, "timeout"),
        (r#"{"command": "ls", "timeout": -1}"#, "timeout"),
        (r#"{"command": "ls", "hard_timeout": 0}"#, "hard_timeout"),
        (
            r#"{"command": "ls", "no_change_timeout": 1e12}"#,
            "no_change_timeout",
        ),
        (
            r#"{"command": "ls", "exec_dir": "relative/dir"}"#,
            "exec_dir",
        ),
        (r#"{"command": "ls", "id": ""}"#, "id"),
        (r#"{"command": "ls", "id": "a\u0001b"}"#, "id"),
        (r#"{"command": "ls", "async_mode": "yes"}"#, "async_mode"),
    ] {
        let (status, answer) = sandbox.post_raw("/v1/shell/exec", body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(field),
            "{body}: {answer}"
        );
        assert_eq!(answer["detail"][0]["loc"][0], "body", "{body}: {answer}");
    }
    let (status, answer) = sandbox
        .post_raw("/v1/shell/write", r#"{"id": "x", "input": "y"}"#)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer["message"].as_str().unwrap().contains("press_enter"));
    let (status, answer) = sandbox
        .post("/v1/shell/wait", json!({"id": "x", "seconds": -3}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer["message"].as_str().unwrap().contains("seconds"));

    // Nothing was created by the refused requests.
    let (_, stats) = sandbox.get("/v1/shell/sessions/stats").await;
    assert_eq!(stats["data"]["total_sessions"], 0);

    // A session that has run nothing: view and wait say so, kill and write refuse.
    let (status, _) = sandbox.post_raw("/v1/shell/sessions/create", "").await;
    assert_eq!(status, StatusCode::OK, "an empty body is {{}}");
    let (_, created) = sandbox
        .post("/v1/shell/sessions/create", json!({"id": "idle"}))
        .await;
    assert_eq!(created["data"]["session_id"], "idle");
    let (_, view) = sandbox.post("/v1/shell/view", json!({"id": "idle"})).await;
    assert_eq!(view["data"]["output"], "");
    let (status, _) = sandbox.post("/v1/shell/kill", json!({"id": "idle"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, answer) = sandbox
        .post(
            "/v1/shell/sessions/create",
            json!({"exec_dir": "/no/such/dir"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer["detail"][0]["loc"], json!(["body", "exec_dir"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_output_is_truncated_and_says_so() {
    let sandbox = start().await;
    let data = sandbox.exec(json!({"command": "seq 1 20000"})).await;
    let output = data["output"].as_str().unwrap();
    assert_eq!(data["truncated"], true);
    assert!(output.chars().count() <= 30_000);
    assert!(output.starts_with("[output truncated"), "{}", &output[..80]);
    assert!(output.ends_with("\n19999\n20000"));
    let full = sandbox
        .exec(json!({"command": "seq 1 20000", "truncate": false}))
        .await;
    let output = full["output"].as_str().unwrap();
    assert_eq!(full["truncated"], false);
    assert_eq!(output.lines().count(), 20000);
    assert!(output.starts_with("1\n2\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_updated_and_cleaned_up_with_their_processes() {
    let sandbox = start().await;
    let (_, created) = sandbox
        .post("/v1/shell/sessions/create", json!({"id": "team/a"}))
        .await;
    assert_eq!(created["data"]["session_id"], "team/a");
    let (_, again) = sandbox
        .post(
            "/v1/shell/sessions/create",
            json!({"id": "team/a", "exec_dir": "/usr"}),
        )
        .await;
    assert_eq!(
        again["data"]["working_dir"],
        sandbox.workspace.display().to_string(),
        "an existing session is returned unchanged"
    );
    let (status, updated) = sandbox
        .post(
            "/v1/shell/sessions/update",
            json!({"id": "team/a", "no_change_timeout": 7}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(updated["data"]["no_change_timeout"], 7);

    // A background process outlives its command (like a server started with `&`)...
    let data = sandbox
        .run("team/a", "sleep 1000 >/dev/null 2>&1 & echo bg:$!")
        .await;
    assert_eq!(data["status"], "completed");
    let background = number_after(data["output"].as_str().unwrap(), "bg:");
    assert!(!gone(background), "the background process keeps running");
    // ...until its session is removed (the id holds a '/', unencoded, as AIO's SDK sends it).
    let (status, removed) = sandbox.delete("/v1/shell/sessions/team/a").await;
    assert_eq!(status, StatusCode::OK, "{removed}");
    assert_eq!(removed["data"]["removed"], json!(["team/a"]));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !gone(background) {
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out waiting: the background process is gone: {}",
                describe(background)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) = sandbox
        .post("/v1/shell/view", json!({"id": "team/a"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Removing everything ends running commands too.
    let data = sandbox
        .exec(json!({"id": "b", "command": "echo pid:$$; sleep 1000", "timeout": 0.5}))
        .await;
    let pid = number_after(data["output"].as_str().unwrap(), "pid:");
    sandbox.run("c", "true").await;
    let (status, removed) = sandbox.delete("/v1/shell/sessions").await;
    assert_eq!(status, StatusCode::OK);
    let mut ids: Vec<String> = serde_json::from_value(removed["data"]["removed"].clone()).unwrap();
    ids.sort();
    assert_eq!(ids, ["b", "c"]);
    eventually("the running command is gone", || {
        session_members(pid).is_empty()
    })
    .await;
    let (_, listed) = sandbox.get("/v1/shell/sessions").await;
    assert_eq!(listed["data"]["sessions"], json!({}));

    // The terminal page, through the host the client used, with a terminal ticket.
    let (status, url) = sandbox.get("/v1/shell/terminal-url").await;
    assert_eq!(status, StatusCode::OK, "{url}");
    let url = url["data"].as_str().unwrap_or_default();
    let ticket = url
        .strip_prefix(&format!("{}/terminal?ticket=", sandbox.base))
        .unwrap_or_else(|| panic!("terminal URL {url:?}"));
    assert!(ticket.len() >= 32, "{url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_commands_and_refuses_new_ones() {
    let sandbox = start().await;
    let data = sandbox
        .exec(json!({"id": "s", "command": "echo pid:$$; sleep 1000 & sleep 1000", "timeout": 0.5}))
        .await;
    let pid = number_after(data["output"].as_str().unwrap(), "pid:");
    sandbox.shell.shutdown().await;
    assert!(session_members(pid).is_empty());
    let (status, _) = sandbox
        .post("/v1/shell/exec", json!({"command": "true"}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_the_shell() {
    let sandbox = start().await;
    let (_, doc) = sandbox.get("/v1/openapi.json").await;
    for path in [
        "/v1/shell/exec",
        "/v1/shell/view",
        "/v1/shell/wait",
        "/v1/shell/write",
        "/v1/shell/kill",
        "/v1/shell/sessions",
        "/v1/shell/sessions/{id}",
        "/v1/shell/sessions/create",
        "/v1/shell/sessions/update",
        "/v1/shell/sessions/stats",
        "/v1/shell/terminal-url",
        "/v1/shell/ws",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["components"]["schemas"]["ShellCommandResult"].is_object());
    assert!(doc["paths"]["/v1/shell/sessions/{id}"]["delete"]["security"].is_array());
}
