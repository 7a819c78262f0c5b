//! The supervisor's state table.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One row of `GET /v1/processes`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ProcessInfo {
    pub name: String,
    /// stopped | starting | ready | stopping | backoff | exited | fatal
    pub state: String,
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

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub description: String,
}

/// `GET /v1/processes`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ProcessTable {
    pub programs: Vec<ProcessInfo>,
    /// Orphaned processes sandboxd has reaped as PID 1.
    pub reaped_orphans: u64,
}
