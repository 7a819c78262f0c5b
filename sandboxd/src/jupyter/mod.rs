//! Jupyter code execution: named sessions, each a real IPython kernel (see [`kernel`]), with
//! limits, idle expiry and restart of kernels that die.
//!
//! A session holds at most one kernel; executions in one session run one at a time, in order
//! (variables persist between them). Executions without a session id share the session
//! [`DEFAULT_SESSION`], so that repeated calls are fast and see each other's state, as in a
//! notebook. A kernel that dies (the code called `os._exit`, or ran out of memory) or stays
//! stuck after an interrupt is replaced on the next execution; the execution that saw it go
//! reports it as an error. Nothing here knows HTTP.

pub mod kernel;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::code_sessions::{CodeSession, Full, SessionProcess, SessionTable};

pub use kernel::{Execution, Kernel, LaunchSpec};

/// The session executions without a session id use.
pub const DEFAULT_SESSION: &str = "default";
/// The kernel name every request may use.
pub const DEFAULT_KERNEL: &str = "python3";

/// Why a Jupyter call failed.
#[derive(Debug, thiserror::Error)]
pub enum JupyterError {
    #[error("unknown kernel {name:?}: available kernels are {available:?}")]
    UnknownKernel {
        name: String,
        available: Vec<String>,
    },
    #[error("no session {0:?}")]
    NoSession(String),
    #[error("session {0:?} already exists")]
    SessionExists(String),
    #[error("at most {0} sessions may exist at once: delete one first")]
    TooManySessions(usize),
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the kernel did not become ready within {0:?}")]
    StartTimeout(Duration),
    #[error("the kernel died")]
    Died,
    #[error("the kernel did not respond to an interrupt and was restarted")]
    Stuck,
    #[error("kernel protocol: {0}")]
    Protocol(String),
    #[error("{0}")]
    Runtime(String),
}

/// How an execution ended (AIO's `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionStatus {
    Ok,
    Error,
    Timeout,
}

impl ExecutionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Ok => "ok",
            ExecutionStatus::Error => "error",
            ExecutionStatus::Timeout => "timeout",
        }
    }
}

/// One output of an execution, in nbformat's shape (`output_type` and the fields of its kind).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub output_type: &'static str,
    pub name: Option<String>,
    pub text: Option<String>,
    pub data: Option<Value>,
    pub metadata: Option<Value>,
    pub execution_count: Option<usize>,
    pub ename: Option<String>,
    pub evalue: Option<String>,
    pub traceback: Option<Vec<String>>,
}

impl Output {
    pub fn stream(name: &str, text: String) -> Self {
        Self {
            output_type: "stream",
            name: Some(name.to_string()),
            text: Some(text),
            ..Self::default()
        }
    }

    pub fn data(
        output_type: &'static str,
        data: Value,
        metadata: Value,
        execution_count: Option<usize>,
    ) -> Self {
        Self {
            output_type,
            data: Some(data),
            metadata: Some(metadata),
            execution_count,
            ..Self::default()
        }
    }

    pub fn error(ename: String, evalue: String, traceback: Vec<String>) -> Self {
        Self {
            output_type: "error",
            ename: Some(ename),
            evalue: Some(evalue),
            traceback: Some(traceback),
            ..Self::default()
        }
    }

    /// Bytes this output holds (for the per-execution bound).
    pub fn approximate_size(&self) -> usize {
        let text = self.text.as_ref().map_or(0, String::len);
        let data = self
            .data
            .as_ref()
            .map_or(0, |d| serde_json::to_string(d).map_or(0, |s| s.len()));
        let error = self.evalue.as_ref().map_or(0, String::len)
            + self
                .traceback
                .as_ref()
                .map_or(0, |t| t.iter().map(String::len).sum());
        text + data + error
    }
}

/// Bounds on what one execution returns.
#[derive(Debug, Clone)]
pub struct OutputLimits {
    /// Text, data (images as base64) and tracebacks together.
    pub max_bytes: usize,
}

/// Limits and places for [`Jupyter`].
#[derive(Debug, Clone)]
pub struct JupyterConfig {
    pub python: PathBuf,
    pub runtime_dir: PathBuf,
    pub workspace: PathBuf,
    pub run_as: Option<(u32, u32)>,
    pub max_sessions: usize,
    pub idle_expiry: Duration,
    pub output: OutputLimits,
}

/// A session as listed.
#[derive(Debug, Clone)]
pub struct SessionSummary {
    pub id: String,
    pub kernel_name: String,
    /// Seconds since the Unix epoch.
    pub last_used: f64,
    pub age: Duration,
}

/// What a Jupyter session keeps of its own.
struct SessionMeta {
    kernel_name: String,
    cwd: PathBuf,
}

type Session = CodeSession<SessionMeta, Kernel>;

impl SessionProcess for Kernel {
    fn pgid(&self) -> i32 {
        Kernel::pgid(self)
    }
}

fn too_many(Full(max): Full) -> JupyterError {
    JupyterError::TooManySessions(max)
}

/// A request to run code.
#[derive(Debug, Clone)]
pub struct ExecuteRequest {
    pub code: String,
    pub session_id: Option<String>,
    pub kernel_name: Option<String>,
    pub cwd: Option<PathBuf>,
    pub timeout: Duration,
}

/// The result of [`Jupyter::execute`].
#[derive(Debug, Clone)]
pub struct ExecuteOutcome {
    pub session_id: String,
    pub kernel_name: String,
    pub execution: Execution,
}

/// The Jupyter sessions of this sandbox.
pub struct Jupyter {
    config: JupyterConfig,
    sessions: Arc<SessionTable<SessionMeta, Kernel>>,
    kernels: Vec<String>,
}

impl Jupyter {
    pub fn new(config: JupyterConfig) -> Self {
        let kernels = kernel_names(&config.python);
        Self {
            sessions: Arc::new(SessionTable::new(config.max_sessions)),
            config,
            kernels,
        }
    }

    pub fn config(&self) -> &JupyterConfig {
        &self.config
    }

    /// Kernel names accepted: `python3` and `python3.N` for the installed interpreter.
    pub fn kernel_names(&self) -> &[String] {
        &self.kernels
    }

    fn check_kernel(&self, name: Option<&str>) -> Result<String, JupyterError> {
        let name = name.unwrap_or(DEFAULT_KERNEL);
        if self.kernels.iter().any(|k| k == name) {
            Ok(name.to_string())
        } else {
            Err(JupyterError::UnknownKernel {
                name: name.to_string(),
                available: self.kernels.clone(),
            })
        }
    }

    /// Creates a session and starts its kernel.
    pub async fn create(
        &self,
        id: Option<String>,
        kernel_name: Option<&str>,
        cwd: Option<PathBuf>,
    ) -> Result<(String, String), JupyterError> {
        let kernel_name = self.check_kernel(kernel_name)?;
        let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let (session, new) = self
            .sessions
            .get_or_insert(&id, || self.new_session(kernel_name.clone(), cwd))
            .map_err(too_many)?;
        if !new {
            return Err(JupyterError::SessionExists(id));
        }
        // Start the kernel now so that the first execution is fast.
        let spec = self.launch_spec(&session.meta.cwd);
        self.sessions
            .start(&id, &session, Kernel::start(&spec))
            .await?;
        Ok((id, kernel_name))
    }

    fn new_session(&self, kernel_name: String, cwd: Option<PathBuf>) -> Session {
        let meta = SessionMeta {
            kernel_name,
            cwd: cwd.unwrap_or_else(|| self.config.workspace.clone()),
        };
        CodeSession::new(meta, self.config.idle_expiry)
    }

    fn launch_spec(&self, cwd: &std::path::Path) -> LaunchSpec {
        LaunchSpec {
            python: self.config.python.clone(),
            cwd: cwd.to_path_buf(),
            runtime_dir: self.config.runtime_dir.clone(),
            run_as: self.config.run_as,
        }
    }

    /// Runs code in the named session (created if missing), or in [`DEFAULT_SESSION`].
    pub async fn execute(&self, request: ExecuteRequest) -> Result<ExecuteOutcome, JupyterError> {
        let requested_kernel = request
            .kernel_name
            .as_deref()
            .map(|k| self.check_kernel(Some(k)))
            .transpose()?;
        let id = request
            .session_id
            .clone()
            .unwrap_or_else(|| DEFAULT_SESSION.to_string());
        let (session, _) = self
            .sessions
            .get_or_insert(&id, || {
                let name = requested_kernel
                    .clone()
                    .unwrap_or_else(|| DEFAULT_KERNEL.to_string());
                self.new_session(name, request.cwd.clone())
            })
            .map_err(too_many)?;
        session.touch();
        let mut slot = session.process.lock().await;
        if slot.as_ref().is_some_and(Kernel::is_dead) {
            tracing::info!(session = %id, "the session's kernel died: starting a new one");
            session.discard(&mut slot);
        }
        let kernel = match slot.as_mut() {
            Some(k) => k,
            None => {
                let k = Kernel::start(&self.launch_spec(&session.meta.cwd)).await?;
                session.install(&mut slot, k)
            }
        };
        if let Some(cwd) = &request.cwd {
            let code = format!(
                "__import__('os').chdir({})",
                serde_json::to_string(&cwd.to_string_lossy()).unwrap_or_default()
            );
            kernel
                .execute(&code, true, request.timeout, &self.config.output)
                .await?;
        }
        let result = kernel
            .execute(&request.code, false, request.timeout, &self.config.output)
            .await;
        session.touch();
        let execution = match result {
            Ok(execution) => execution,
            Err(e @ (JupyterError::Died | JupyterError::Stuck)) => {
                // The session's state is gone; the next execution starts a new kernel.
                session.discard(&mut slot);
                tracing::warn!(session = %id, error = %e, "kernel lost");
                let (ename, evalue) = match e {
                    JupyterError::Died => (
                        "KernelDied",
                        "the kernel died while running this code; the session's state is lost and a new kernel starts on the next execution",
                    ),
                    _ => (
                        "KernelRestarted",
                        "the code did not stop when interrupted after the timeout; the kernel was killed, the session's state is lost and a new kernel starts on the next execution",
                    ),
                };
                Execution {
                    status: if matches!(e, JupyterError::Stuck) {
                        ExecutionStatus::Timeout
                    } else {
                        ExecutionStatus::Error
                    },
                    execution_count: None,
                    outputs: vec![Output::error(ename.into(), evalue.into(), Vec::new())],
                    msg_id: String::new(),
                }
            }
            Err(e) => return Err(e),
        };
        Ok(ExecuteOutcome {
            session_id: id,
            kernel_name: session.meta.kernel_name.clone(),
            execution,
        })
    }

    /// The sessions, newest use first.
    pub fn list(&self) -> Vec<SessionSummary> {
        let mut list: Vec<SessionSummary> = self
            .sessions
            .list()
            .into_iter()
            .map(|(id, s)| SessionSummary {
                id,
                kernel_name: s.meta.kernel_name.clone(),
                last_used: s
                    .last_used()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
                age: s.age(),
            })
            .collect();
        list.sort_by(|a, b| b.last_used.total_cmp(&a.last_used));
        list
    }

    /// Removes a session and kills its kernel (an execution in flight ends with an error).
    pub async fn delete(&self, id: &str) -> Result<(), JupyterError> {
        if self.sessions.delete(id).await {
            Ok(())
        } else {
            Err(JupyterError::NoSession(id.to_string()))
        }
    }

    /// Removes every session; returns how many there were.
    pub async fn delete_all(&self) -> usize {
        self.sessions.delete_all().await
    }

    /// Removes sessions idle for longer than the expiry (run periodically).
    pub async fn expire_idle(&self) -> usize {
        self.sessions.expire_idle().await
    }

    /// Expires idle sessions every minute for as long as `self` lives.
    pub fn spawn_reaper(self: &Arc<Self>) {
        self.sessions
            .spawn_reaper(Duration::from_secs(60), "Jupyter");
    }
}

/// `python3` plus `python3.N` for the interpreter found (read from its real path).
fn kernel_names(python: &std::path::Path) -> Vec<String> {
    let mut names = vec![DEFAULT_KERNEL.to_string()];
    let resolved = which(python).and_then(|p| std::fs::canonicalize(p).ok());
    if let Some(name) = resolved
        .as_deref()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .filter(|n| n.starts_with("python3."))
    {
        names.push(name.to_string());
    }
    names
}

fn which(program: &std::path::Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return Some(program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}
