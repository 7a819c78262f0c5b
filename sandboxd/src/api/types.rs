//! Every type that crosses sandboxd's HTTP boundary, in one place.
//!
//! JSON routes answer in AIO Sandbox's envelope, `{success, message, data}`; clients written for
//! AIO parse these shapes unchanged.

use serde::Serialize;

/// AIO's response envelope. `success: false` with a 2xx status means the operation itself failed;
/// transport, validation and auth problems use 4xx/5xx statuses.
#[derive(Debug, Serialize)]
pub struct Envelope<T: Serialize> {
    pub success: bool,
    pub message: String,
    pub data: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl<T: Serialize> Envelope<T> {
    pub fn ok(data: T) -> Self {
        Self {
            success: true,
            message: "Operation successful".into(),
            data: Some(data),
            hint: None,
        }
    }
}

/// `GET /healthz`.
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
    pub version: &'static str,
}

/// `GET /readyz`: 200 when every required program is ready, else 503.
#[derive(Debug, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// Required programs that are not ready, with their states.
    pub not_ready: Vec<NotReady>,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct NotReady {
    pub name: String,
    pub state: &'static str,
}

/// One row of `GET /v1/processes`.
#[derive(Debug, Serialize)]
pub struct ProcessInfo {
    pub name: String,
    /// stopped | starting | ready | stopping | backoff | exited | fatal
    pub state: &'static str,
    pub pid: Option<i32>,
    pub restarts: u32,
    pub failures: u32,
    pub uptime_secs: Option<f64>,
    /// RFC 3339.
    pub started_at: Option<String>,
    pub ready_at: Option<String>,
    pub last_exit: Option<ExitInfo>,
    pub last_error: Option<String>,
    pub waiting_for: Vec<String>,
    pub depends_on: Vec<String>,
    pub required: bool,
}

#[derive(Debug, Serialize)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub description: String,
}

/// `GET /v1/processes`.
#[derive(Debug, Serialize)]
pub struct ProcessTable {
    pub programs: Vec<ProcessInfo>,
    /// Orphaned processes sandboxd has reaped as PID 1.
    pub reaped_orphans: u64,
}

/// `GET /v1/sandbox`: AIO's envelope, with the context both in `data` and, as AIO's SDK reads
/// it, at the top level.
#[derive(Debug, Serialize)]
pub struct SandboxResponse {
    pub success: bool,
    pub message: String,
    pub data: SandboxContext,
    #[serde(flatten)]
    pub context: SandboxContext,
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxContext {
    pub home_dir: String,
    pub workspace: String,
    pub version: String,
    pub detail: SandboxDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxDetail {
    pub system: SystemEnv,
    pub runtime: RuntimeEnv,
    pub utils: Vec<ToolCategory>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SystemEnv {
    pub os: String,
    pub os_version: String,
    pub kernel: String,
    pub arch: String,
    pub hostname: String,
    pub user: String,
    pub home_dir: String,
    pub workspace: String,
    pub timezone: String,
    /// Listening TCP ports, as strings (AIO's shape).
    pub occupied_ports: Vec<String>,
    pub cpus: usize,
    pub memory_total_bytes: u64,
    pub screen: ScreenInfo,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScreenInfo {
    pub width: u32,
    pub height: u32,
    pub depth: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct RuntimeEnv {
    pub python: Vec<ToolSpec>,
    pub nodejs: Vec<ToolSpec>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub ver: Option<String>,
    pub bin: Option<String>,
    pub alias: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolCategory {
    pub category: String,
    pub tools: Vec<AvailableTool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AvailableTool {
    pub name: String,
    pub description: String,
}
