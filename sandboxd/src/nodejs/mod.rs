//! JavaScript on Node (Debian's `nodejs`): stateless runs (a fresh `node` process per call, in
//! its own directory with the files the caller passed, killed as a process group on timeout)
//! and stateful sessions (see [`session`]: one long-lived `node` per session whose globals
//! persist). Output is bounded; nothing here knows HTTP.

pub mod session;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use std::os::unix::process::CommandExt;
use supervisor::process::ProcessGroup;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::jupyter::Output;

pub use session::{NodeSessions, SessionInfo};

/// Why a Node call failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Runtime(String),
    #[error("no session {0:?}")]
    NoSession(String),
    #[error("session {0:?} already exists")]
    SessionExists(String),
    #[error("at most {0} sessions may exist at once: delete one first")]
    TooManySessions(usize),
    #[error("the session's node process ended: {0}")]
    SessionDied(String),
}

/// Places and limits for Node runs.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node: PathBuf,
    /// Parent of each run's own directory.
    pub runtime_dir: PathBuf,
    pub workspace: PathBuf,
    pub run_as: Option<(u32, u32)>,
    /// Bytes kept of stdout and of stderr each.
    pub output_limit: usize,
    pub max_sessions: usize,
    pub default_idle: Duration,
}

/// A stateless run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub code: String,
    pub stdin: Option<String>,
    /// Plain file names (checked by the caller) to contents.
    pub files: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub timeout: Duration,
}

/// What a run or a session execution produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// `ok`, `error` or `timeout`.
    pub status: &'static str,
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i64,
    pub outputs: Vec<Output>,
    pub execution_count: Option<u64>,
}

/// Runs `code` in a fresh `node` process.
pub async fn run(config: &NodeConfig, request: RunRequest) -> Result<RunResult, NodeError> {
    let dir = config
        .runtime_dir
        .join(format!("run-{}", uuid::Uuid::new_v4().simple()));
    let result = run_in(config, &dir, request).await;
    if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
        tracing::debug!(error = %e, dir = %dir.display(), "removing the run's directory");
    }
    result
}

async fn run_in(
    config: &NodeConfig,
    dir: &Path,
    request: RunRequest,
) -> Result<RunResult, NodeError> {
    make_dir(dir, config.run_as)?;
    let script = dir.join("main.js");
    write_file(&script, request.code.as_bytes(), config.run_as)?;
    for (name, contents) in &request.files {
        write_file(&dir.join(name), contents.as_bytes(), config.run_as)?;
    }
    let mut command = std::process::Command::new(&config.node);
    command
        .arg(&script)
        .current_dir(request.cwd.as_deref().unwrap_or(dir))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some((uid, gid)) = config.run_as {
        command.uid(uid).gid(gid);
    }
    let spawned = supervisor::reaper()
        .spawn(&mut command)
        .map_err(|e| NodeError::Spawn {
            program: config.node.display().to_string(),
            source: e,
        })?;
    let pgid = Some(spawned.pid);
    let mut child = spawned.child;
    let pipe_error = |e: std::io::Error| NodeError::Runtime(format!("node's pipes: {e}"));
    let stdin = child
        .stdin
        .take()
        .map(tokio::process::ChildStdin::from_std)
        .transpose()
        .map_err(pipe_error)?;
    let stdout = child
        .stdout
        .take()
        .map(tokio::process::ChildStdout::from_std)
        .transpose()
        .map_err(pipe_error)?;
    let stderr = child
        .stderr
        .take()
        .map(tokio::process::ChildStderr::from_std)
        .transpose()
        .map_err(pipe_error)?;
    let exit = spawned.exit;
    let input = request.stdin.unwrap_or_default();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // A program that does not read its input closes the pipe: not an error.
            let _ = stdin.write_all(input.as_bytes()).await;
        }
    };
    let limit = config.output_limit;
    let outcome = tokio::time::timeout(request.timeout, async {
        let ((), out, err, status) = tokio::join!(
            feed,
            read_bounded(stdout, limit),
            read_bounded(stderr, limit),
            exit
        );
        (out, err, status)
    })
    .await;
    let (stdout, stderr, exit_code, timed_out) = match outcome {
        Ok((out, err, status)) => {
            let status =
                status.map_err(|_| NodeError::Runtime("node's exit status was lost".into()))?;
            (out, err, i64::from(status.as_shell_code()), false)
        }
        Err(_) => {
            if let Some(pgid) = pgid {
                ProcessGroup::new(pgid).kill();
            }
            (String::new(), String::new(), 137, true)
        }
    };
    // The run's processes are ended as a group in every case (a background child of the code
    // must not outlive its run).
    if let Some(pgid) = pgid {
        ProcessGroup::new(pgid).kill();
    }
    Ok(assemble(
        stdout,
        stderr,
        exit_code,
        timed_out,
        request.timeout,
    ))
}

fn assemble(
    stdout: String,
    stderr: String,
    exit_code: i64,
    timed_out: bool,
    timeout: Duration,
) -> RunResult {
    let mut outputs = Vec::new();
    if !stdout.is_empty() {
        outputs.push(Output::stream("stdout", stdout.clone()));
    }
    if !stderr.is_empty() {
        outputs.push(Output::stream("stderr", stderr.clone()));
    }
    let status = if timed_out {
        outputs.push(Output::error(
            "TimeoutError".into(),
            format!("the program ran longer than {timeout:?} and was killed"),
            Vec::new(),
        ));
        "timeout"
    } else if exit_code != 0 {
        let (ename, evalue) = uncaught_error(&stderr)
            .unwrap_or_else(|| ("Error".into(), format!("node exited with code {exit_code}")));
        outputs.push(Output::error(
            ename,
            evalue,
            stderr.lines().map(str::to_string).collect(),
        ));
        "error"
    } else {
        "ok"
    };
    RunResult {
        status,
        stdout,
        stderr,
        exit_code,
        outputs,
        execution_count: None,
    }
}

/// The `Name: message` line Node prints for an uncaught exception.
fn uncaught_error(stderr: &str) -> Option<(String, String)> {
    stderr.lines().find_map(|line| {
        let (name, message) = line.split_once(": ")?;
        let is_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && name.ends_with("Error");
        is_name.then(|| (name.to_string(), message.to_string()))
    })
}

/// Reads a pipe to its end, keeping the first `limit` bytes (the rest is drained).
async fn read_bounded(pipe: Option<impl AsyncRead + Unpin>, limit: usize) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut dropped = false;
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                dropped |= n > room;
            }
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if dropped {
        text.push_str(&format!(
            "\n[agentbox: output truncated at {limit} bytes]\n"
        ));
    }
    text
}

pub(crate) fn make_dir(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), NodeError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| NodeError::Runtime(format!("creating {}: {e}", dir.display())))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(|e| NodeError::Runtime(format!("chown {}: {e}", dir.display())))?;
    }
    Ok(())
}

fn write_file(path: &Path, contents: &[u8], owner: Option<(u32, u32)>) -> Result<(), NodeError> {
    std::fs::write(path, contents)
        .map_err(|e| NodeError::Runtime(format!("writing {}: {e}", path.display())))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| NodeError::Runtime(format!("chown {}: {e}", path.display())))?;
    }
    Ok(())
}

/// The installed Node's version (`v18.19.0`) and npm's, if npm is there.
pub async fn versions(node: &Path) -> (Option<String>, Option<String>) {
    let limit = Duration::from_secs(10);
    let node_version = crate::system_info::run_for_output(node, &["--version"], limit).await;
    let npm_version =
        crate::system_info::run_for_output(Path::new("npm"), &["--version"], limit).await;
    let trim = |v: Option<String>| v.map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    (trim(node_version), trim(npm_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncaught_errors_are_named() {
        let stderr = "/tmp/x/main.js:1\nnull.x\n     ^\n\nTypeError: Cannot read properties of null (reading 'x')\n    at Object.<anonymous> (/tmp/x/main.js:1:6)\n";
        assert_eq!(
            uncaught_error(stderr),
            Some((
                "TypeError".into(),
                "Cannot read properties of null (reading 'x')".into()
            ))
        );
        assert_eq!(uncaught_error("just text\n"), None);
    }

    #[test]
    fn exit_codes_become_statuses() {
        let r = assemble(
            "hi\n".into(),
            String::new(),
            0,
            false,
            Duration::from_secs(1),
        );
        assert_eq!(r.status, "ok");
        assert_eq!(r.outputs.len(), 1);
        let r = assemble(
            String::new(),
            "boom\n".into(),
            3,
            false,
            Duration::from_secs(1),
        );
        assert_eq!(r.status, "error");
        assert_eq!(
            r.outputs.last().and_then(|o| o.ename.clone()).as_deref(),
            Some("Error")
        );
        let r = assemble(
            String::new(),
            String::new(),
            137,
            true,
            Duration::from_secs(1),
        );
        assert_eq!(r.status, "timeout");
    }
}
