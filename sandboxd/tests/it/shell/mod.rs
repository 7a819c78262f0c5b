//! The shell API against a real server on a loopback port, with real bash processes: the
//! fixtures every file here shares (a sandboxd on a loopback port, `/proc` readers, waits), and
//! a module per theme.
//!
//! When the tests run as root, commands drop to `nobody` (as sandboxd drops to `agent` in the
//! image); otherwise they run as the current user. The test process is made a child subreaper
//! with the reaper in all-children mode, as sandboxd is in a container, so orphans of killed
//! commands are reaped here and "no zombies" can be checked.

mod bash_api;
mod cleanup;
mod commands;
mod ready_bashes;
mod terminal;

use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::{Pid, Uid};
use reqwest::StatusCode;
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use sandboxd::shell::{Shell, ShellConfig};
use serde_json::{Value, json};
use supervisor::{Supervisor, SupervisorConfig};

/// Generous: the machine may be slow and busy.
const PATIENCE: Duration = Duration::from_secs(30);

struct Sandbox {
    base: String,
    client: reqwest::Client,
    shell: Arc<Shell>,
    activity: Arc<Activity>,
    workspace: PathBuf,
    _workspace: tempfile::TempDir,
    /// Where the shell makes its state root.
    state_parent: tempfile::TempDir,
}

fn init_reaping() {
    static ONCE: Once = Once::new();
    ONCE.call_once(sandboxd::pid1::init_reaping);
}

fn unprivileged_user() -> Option<&'static str> {
    Uid::effective().is_root().then_some("nobody")
}

async fn start() -> Sandbox {
    init_reaping();
    let workspace_dir = tempfile::tempdir().unwrap();
    let workspace = workspace_dir.path().canonicalize().unwrap();
    if Uid::effective().is_root() {
        std::os::unix::fs::chown(&workspace, Some(65534), Some(65534)).unwrap();
    }
    let state_parent = tempfile::tempdir().unwrap();
    // Like /tmp: the unprivileged user must reach its state directory inside.
    std::fs::set_permissions(
        state_parent.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    let mut settings =
        Settings::from_lookup(|name| (name == "SANDBOX_AUTH").then(|| "none".to_string())).unwrap();
    settings.workspace = workspace.clone();
    let activity = Activity::new();
    let shell = Arc::new(Shell::new(
        ShellConfig {
            workspace: workspace.clone(),
            run_as: unprivileged_user().map(str::to_owned),
            max_sessions: 16,
            idle_expiry: Duration::from_secs(3600),
            default_no_change_timeout: Duration::from_secs(120),
            output_limit: 1024 * 1024,
            stop_grace: Duration::from_secs(1),
            state_parent: state_parent.path().to_path_buf(),
            zygote: true,
        },
        activity.clone(),
    ));
    let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default()).unwrap());
    let state =
        AppState::new(supervisor, Arc::new(settings), activity.clone()).with_shell(shell.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    Sandbox {
        base: format!("http://{address}"),
        client: reqwest::Client::new(),
        shell,
        activity,
        workspace,
        _workspace: workspace_dir,
        state_parent,
    }
}

impl Sandbox {
    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn post_raw(&self, path: &str, body: &'static str) -> (StatusCode, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `exec` that must succeed; returns `data`.
    async fn exec(&self, body: Value) -> Value {
        let (status, answer) = self.post("/v1/shell/exec", body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body} -> {answer}");
        assert_eq!(answer["success"], true);
        answer["data"].clone()
    }

    async fn run(&self, session: &str, command: &str) -> Value {
        self.exec(json!({"id": session, "command": command})).await
    }
}

/// The number in `output` after `label` (e.g. "pid:123").
fn number_after(output: &str, label: &str) -> i32 {
    let start = output
        .find(label)
        .unwrap_or_else(|| panic!("{label} not in {output:?}"))
        + label.len();
    output[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// Processes whose session id is `sid`, zombies included.
fn session_members(sid: i32) -> Vec<i32> {
    procs_where(|_, _, session| session == sid)
}

/// Zombie children of this test process.
fn own_zombies() -> Vec<i32> {
    let me = std::process::id() as i32;
    procs_where(|state, ppid, _| state == "Z" && ppid == me)
}

fn procs_where(keep: impl Fn(&str, i32, i32) -> bool) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (state, ppid, session) = (
            fields[0],
            fields[1].parse().unwrap(),
            fields[3].parse().unwrap(),
        );
        if keep(state, ppid, session) {
            found.push(pid);
        }
    }
    found
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process as `/proc` shows it, with its parent's, for failure messages.
fn describe(pid: i32) -> String {
    let stat = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let cmdline = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default()
    };
    let environ = std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|v| v.starts_with("AGENTBOX"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let own = stat(pid);
    let ppid: i32 = own
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    format!(
        "{own:?} [{}] env [{environ}]; parent {:?} [{}]; me {}",
        cmdline(pid),
        stat(ppid),
        cmdline(ppid),
        std::process::id()
    )
}

fn gone(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH)
}

// ---- The bash pipe API, `/v1/bash/*`: the same sessions, stdout and stderr apart. ----

impl Sandbox {
    /// A `/v1/bash/*` call that must succeed; returns `data`.
    async fn bash(&self, path: &str, body: Value) -> Value {
        let (status, answer) = self.post(&format!("/v1/bash/{path}"), body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{path} {body} -> {answer}");
        assert_eq!(answer["success"], true, "{answer}");
        answer["data"].clone()
    }

    /// A `/v1/bash/*` call that must be refused with 422 at `loc`.
    async fn bash_refused(&self, path: &str, body: Value, loc: &[&str]) {
        let (status, answer) = self.post(&format!("/v1/bash/{path}"), body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path} {body} -> {answer}"
        );
        assert_eq!(answer["detail"][0]["loc"], json!(loc), "{body} -> {answer}");
        let field = loc[loc.len() - 1];
        assert!(
            answer["message"].as_str().unwrap().contains(field),
            "{body} -> {answer}"
        );
    }
}
