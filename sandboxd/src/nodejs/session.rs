//! Stateful Node sessions: one long-lived `node` process per session running `driver.js`, which
//! evaluates each request in the process's global context, so globals, functions and modules
//! persist between calls. Requests and answers are JSON lines; answers carry a random marker so
//! that stray output (a child process writing to the shared stdout) cannot pass for one. A
//! request that does not answer in time kills the session's process group (its state is lost
//! and the session is removed). Sessions unused for their idle time are removed.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use std::os::unix::process::CommandExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use super::{NodeConfig, NodeError, RunResult};
use crate::code_sessions::{CodeSession, Full, SessionProcess, SessionTable};
use crate::jupyter::Output;
use supervisor::process::ProcessGroup;

const DRIVER: &str = include_str!("driver.js");
/// Time for a new session's node to print its ready line.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest answer line read from the driver (its captured output is bounded below this).
const MAX_LINE: usize = 8 * 1024 * 1024;

/// A session as listed.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: String,
    pub cwd: PathBuf,
    pub created_at: SystemTime,
    pub last_used: SystemTime,
    pub max_idle: Duration,
    pub idle_for: Duration,
    pub executing: bool,
}

struct Process {
    pgid: i32,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Line>,
}

enum Line {
    Answer(String),
    Stray(String),
}

impl SessionProcess for Process {
    fn pgid(&self) -> i32 {
        self.pgid
    }
}

/// What a Node session keeps of its own: the working directory of its next execution.
struct SessionMeta {
    cwd: StdMutex<PathBuf>,
}

impl SessionMeta {
    fn cwd(&self) -> PathBuf {
        self.cwd.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_cwd(&self, cwd: PathBuf) {
        *self.cwd.lock().unwrap_or_else(|e| e.into_inner()) = cwd;
    }
}

type Session = CodeSession<SessionMeta, Process>;

fn info(id: &str, session: &Session) -> SessionInfo {
    SessionInfo {
        id: id.to_string(),
        cwd: session.meta.cwd(),
        created_at: session.created_at(),
        last_used: session.last_used(),
        max_idle: session.max_idle(),
        idle_for: session.idle_for(),
        executing: session.busy(),
    }
}

fn too_many(Full(max): Full) -> NodeError {
    NodeError::TooManySessions(max)
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    execution_count: Option<u64>,
    #[serde(default)]
    outputs: Vec<DriverOutput>,
    #[serde(default)]
    truncated: bool,
}

#[derive(Deserialize)]
struct DriverOutput {
    output_type: String,
    name: Option<String>,
    text: Option<String>,
    data: Option<serde_json::Value>,
    metadata: Option<serde_json::Value>,
    execution_count: Option<usize>,
    ename: Option<String>,
    evalue: Option<String>,
    traceback: Option<Vec<String>>,
}

/// The Node sessions of this sandbox.
pub struct NodeSessions {
    config: NodeConfig,
    sessions: Arc<SessionTable<SessionMeta, Process>>,
}

impl NodeSessions {
    pub fn new(config: NodeConfig) -> Self {
        Self {
            sessions: Arc::new(SessionTable::new(config.max_sessions)),
            config,
        }
    }

    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// Creates a session; `Ok(false)` when it already existed (it is left as it was).
    pub async fn create(
        &self,
        id: String,
        cwd: Option<PathBuf>,
        max_idle: Option<Duration>,
    ) -> Result<(bool, SessionInfo), NodeError> {
        let (session, new) = self
            .sessions
            .get_or_insert(&id, || {
                let meta = SessionMeta {
                    cwd: StdMutex::new(cwd.unwrap_or_else(|| self.config.workspace.clone())),
                };
                CodeSession::new(meta, max_idle.unwrap_or(self.config.default_idle))
            })
            .map_err(too_many)?;
        if !new {
            return Ok((false, info(&id, &session)));
        }
        self.sessions
            .start(&id, &session, self.start(&session))
            .await?;
        Ok((true, info(&id, &session)))
    }

    async fn start(&self, session: &Session) -> Result<Process, NodeError> {
        let marker = format!("\u{1e}agentbox-{}:", uuid::Uuid::new_v4().simple());
        let cwd = session.meta.cwd();
        let mut command = std::process::Command::new(&self.config.node);
        command
            .args(["-e", DRIVER])
            .current_dir(&cwd)
            .env("AGENTBOX_NODE_MARKER", &marker)
            .env(
                "AGENTBOX_NODE_OUTPUT_LIMIT",
                self.config.output_limit.to_string(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        if let Some((uid, gid)) = self.config.run_as {
            command.uid(uid).gid(gid);
        }
        let spawned = supervisor::reaper()
            .spawn(&mut command)
            .map_err(|e| NodeError::Spawn {
                program: self.config.node.display().to_string(),
                source: e,
            })?;
        let pgid = spawned.pid;
        let mut child = spawned.child;
        let pipes = match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => ChildStdin::from_std(stdin)
                .and_then(|i| tokio::process::ChildStdout::from_std(stdout).map(|o| (i, o))),
            _ => Err(std::io::Error::other("not set up")),
        };
        let (stdin, stdout) = match pipes {
            Ok(pipes) => pipes,
            Err(e) => {
                ProcessGroup::new(pgid).kill();
                return Err(NodeError::Runtime(format!("node's pipes: {e}")));
            }
        };
        let (tx, mut lines) = mpsc::channel(256);
        tokio::spawn(read_lines(stdout, marker, tx));
        let ready = tokio::time::timeout(START_TIMEOUT, async {
            loop {
                match lines.recv().await {
                    Some(Line::Answer(_)) => return true,
                    Some(Line::Stray(_)) => {}
                    None => return false,
                }
            }
        })
        .await;
        if ready != Ok(true) {
            ProcessGroup::new(pgid).kill();
            return Err(NodeError::SessionDied(
                "node did not start the session".into(),
            ));
        }
        Ok(Process { pgid, stdin, lines })
    }

    /// Runs code in the session (created when missing).
    pub async fn execute(
        &self,
        id: &str,
        code: &str,
        cwd: Option<PathBuf>,
        timeout: Duration,
    ) -> Result<RunResult, NodeError> {
        let session = match self.sessions.get(id) {
            Some(s) => s,
            None => {
                self.create(id.to_string(), cwd.clone(), None).await?;
                self.sessions
                    .get(id)
                    .ok_or_else(|| NodeError::NoSession(id.to_string()))?
            }
        };
        session.touch();
        if let Some(cwd) = &cwd {
            session.meta.set_cwd(cwd.clone());
        }
        let mut slot = session.process.lock().await;
        let process = match slot.as_mut() {
            Some(p) => p,
            None => {
                let p = self.start(&session).await?;
                session.install(&mut slot, p)
            }
        };
        let request = serde_json::json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "code": code,
            "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            "cwd": cwd.as_ref().map(|c| c.to_string_lossy().into_owned()),
        });
        // Output printed between requests (a timer of an earlier cell) is not this request's.
        while process.lines.try_recv().is_ok() {}
        let mut line = request.to_string();
        line.push('\n');
        let written = process.stdin.write_all(line.as_bytes()).await;
        let mut stray = String::new();
        // The driver enforces the timeout itself (synchronous code through V8, promises by a
        // timer); a second of grace covers it, then the process is killed.
        let answer = if written.is_err() {
            None
        } else {
            tokio::time::timeout(timeout + Duration::from_secs(1), async {
                loop {
                    match process.lines.recv().await {
                        Some(Line::Answer(a)) => return Some(a),
                        Some(Line::Stray(s)) => {
                            if stray.len() < self.config.output_limit {
                                stray.push_str(&s);
                                stray.push('\n');
                            }
                        }
                        None => return None,
                    }
                }
            })
            .await
            .unwrap_or(None)
        };
        session.touch();
        let Some(answer) = answer.and_then(|a| serde_json::from_str::<Answer>(&a).ok()) else {
            // Timed out or died: the state is gone, and so is the process group.
            session.discard(&mut slot);
            let (status, message) = if written.is_ok() {
                (
                    "timeout",
                    format!(
                        "the code did not finish within {timeout:?}: the session's node process was killed and its state is lost"
                    ),
                )
            } else {
                (
                    "error",
                    "the session's node process had ended: its state is lost".into(),
                )
            };
            return Ok(RunResult {
                status,
                stdout: stray.clone(),
                stderr: String::new(),
                exit_code: 137,
                outputs: vec![
                    Output::stream("stdout", stray),
                    Output::error("SessionLost".into(), message, Vec::new()),
                ],
                execution_count: None,
            });
        };
        Ok(convert(answer, stray, self.config.output_limit))
    }

    pub fn get(&self, id: &str) -> Option<SessionInfo> {
        self.sessions.get(id).map(|s| info(id, &s))
    }

    pub fn list(&self) -> Vec<SessionInfo> {
        self.sessions
            .list()
            .iter()
            .map(|(id, s)| info(id, s))
            .collect()
    }

    /// Changes a session's idle time or working directory (the directory applies from the
    /// next execution).
    pub fn update(
        &self,
        id: &str,
        max_idle: Option<Duration>,
        cwd: Option<PathBuf>,
    ) -> Result<SessionInfo, NodeError> {
        let session = self
            .sessions
            .get(id)
            .ok_or_else(|| NodeError::NoSession(id.to_string()))?;
        if let Some(idle) = max_idle {
            session.set_max_idle(idle);
        }
        if let Some(cwd) = cwd {
            session.meta.set_cwd(cwd);
        }
        Ok(info(id, &session))
    }

    /// Removes a session and kills its process group.
    pub async fn delete(&self, id: &str) -> Result<(), NodeError> {
        if self.sessions.delete(id).await {
            Ok(())
        } else {
            Err(NodeError::NoSession(id.to_string()))
        }
    }

    /// Removes sessions unused for longer than their idle time.
    pub async fn expire_idle(&self) -> usize {
        self.sessions.expire_idle().await
    }

    /// Expires idle sessions every 30 seconds for as long as `self` lives.
    pub fn spawn_reaper(self: &Arc<Self>) {
        self.sessions.spawn_reaper(Duration::from_secs(30), "Node");
    }
}

fn convert(answer: Answer, stray: String, limit: usize) -> RunResult {
    let mut outputs: Vec<Output> = answer
        .outputs
        .into_iter()
        .map(|o| Output {
            output_type: match o.output_type.as_str() {
                "stream" => "stream",
                "execute_result" => "execute_result",
                "display_data" => "display_data",
                _ => "error",
            },
            name: o.name,
            text: o.text,
            data: o.data,
            metadata: o.metadata,
            execution_count: o.execution_count,
            ename: o.ename,
            evalue: o.evalue,
            traceback: o.traceback,
        })
        .collect();
    if !stray.is_empty() {
        outputs.insert(0, Output::stream("stdout", stray));
    }
    if answer.truncated {
        outputs.push(Output::stream(
            "stderr",
            format!("\n[agentbox: output truncated at {limit} characters]\n"),
        ));
    }
    let joined = |name: &str| -> String {
        outputs
            .iter()
            .filter(|o| o.output_type == "stream" && o.name.as_deref() == Some(name))
            .filter_map(|o| o.text.as_deref())
            .collect()
    };
    let stdout = joined("stdout");
    let stderr = joined("stderr");
    let status = match answer.status.as_str() {
        "ok" => "ok",
        "timeout" => "timeout",
        _ => "error",
    };
    RunResult {
        status,
        stdout,
        stderr,
        exit_code: if status == "ok" { 0 } else { 1 },
        outputs,
        execution_count: answer.execution_count,
    }
}

async fn read_lines(stdout: tokio::process::ChildStdout, marker: String, to: mpsc::Sender<Line>) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end_matches('\n');
        let line = match text.strip_prefix(marker.as_str()) {
            Some(answer) => Line::Answer(answer.to_string()),
            None => Line::Stray(text.to_string()),
        };
        if to.send(line).await.is_err() {
            return;
        }
    }
}
