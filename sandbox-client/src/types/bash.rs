//! `/v1/bash/*`: AIO's bash pipe API (field names as AIO's `agent-sandbox` SDK sends and reads
//! them): commands in shell sessions with stdout and stderr captured apart, read incrementally
//! by byte offsets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// AIO's `CommandStatus` for the bash API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BashPipeStatus {
    /// Accepted, not started (never reported by sandboxd: commands start at once).
    Pending,
    /// Still running (also: an `exec` whose `timeout` passed, or `async_mode`).
    Running,
    /// Exited by itself; `exit_code` says how.
    Completed,
    /// Ended by its `hard_timeout` (every process it started was ended).
    TimedOut,
    /// Ended by `kill` or by closing its session.
    Killed,
}

/// AIO's `SessionStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BashSessionStatus {
    Ready,
    Closed,
}

/// `POST /v1/bash/exec`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct BashExecRequest {
    /// The command line, run by bash exactly as typed at a prompt.
    pub command: String,
    /// Session to run in; created when absent or unknown. Working directory and environment
    /// carry over between the commands of a session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Absolute directory to run in; the session stays there afterwards.
    #[serde(default)]
    pub exec_dir: Option<String>,
    /// Variables for this command only: a string sets and exports one, `null` unsets it.
    /// Names are shell identifiers.
    #[serde(default)]
    pub env: Option<BTreeMap<String, Option<String>>>,
    /// Answer at once with status `running`; read the output with `/v1/bash/output`.
    #[serde(default)]
    pub async_mode: Option<bool>,
    /// Seconds to wait before answering `running` (the command keeps running). Without it
    /// (and without `async_mode`) the answer waits for the command to end.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Seconds after which the command and every process it started are ended (`timed_out`).
    #[serde(default)]
    pub hard_timeout: Option<f64>,
    /// Most characters of `stdout` and of `stderr` in a waited answer: longer text keeps its
    /// head and tail around a marker. 0 turns it off; default 30000.
    #[serde(default)]
    pub max_output_length: Option<f64>,
}

/// `exec` answer.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct BashExecResult {
    pub session_id: String,
    /// The command's id (for `output` and `write`).
    pub command_id: String,
    pub command: String,
    pub status: BashPipeStatus,
    /// stdout so far, raw (not cleaned of terminal escapes).
    pub stdout: String,
    /// stderr so far, raw.
    pub stderr: String,
    /// Set once the command has ended (128 + signal if a signal ended it).
    pub exit_code: Option<i32>,
    /// stdout's byte offset after what was read: pass it to `output` for what follows.
    pub offset: u64,
    /// stderr's byte offset after what was read.
    pub stderr_offset: u64,
    /// True when `stdout` or `stderr` was cut (by `max_output_length`, or because the oldest
    /// output beyond the buffer, 1 MiB per stream, was dropped).
    pub truncated: bool,
}

/// `POST /v1/bash/output`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct BashOutputRequest {
    pub session_id: String,
    /// A command of the session (its latest); by default the latest command.
    #[serde(default)]
    pub command_id: Option<String>,
    /// stdout byte offset to read from (default 0).
    #[serde(default)]
    pub offset: Option<f64>,
    /// stderr byte offset to read from (default 0).
    #[serde(default)]
    pub stderr_offset: Option<f64>,
    /// Wait until there is output past the offsets or the command ends (at most
    /// `wait_timeout`).
    #[serde(default)]
    pub wait: Option<bool>,
    /// Seconds `wait` may take (default 30).
    #[serde(default)]
    pub wait_timeout: Option<f64>,
}

/// A command's status.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct BashCommandInfo {
    pub command_id: String,
    pub command: String,
    pub status: BashPipeStatus,
    pub exit_code: Option<i32>,
}

/// `output` answer: what the streams received past the given offsets.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct BashOutputResult {
    pub session_id: String,
    /// New stdout since `offset`.
    pub stdout: String,
    /// New stderr since `stderr_offset`.
    pub stderr: String,
    /// Where the next read of stdout starts.
    pub offset: u64,
    /// Where the next read of stderr starts.
    pub stderr_offset: u64,
    /// The command read (None when the session has run none).
    pub command: Option<BashCommandInfo>,
}

/// `POST /v1/bash/write`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct BashWriteRequest {
    pub session_id: String,
    /// Bytes for the command's stdin, as given (no newline is added).
    pub input: String,
    /// The command to write to (must be the session's running one); default: that one.
    #[serde(default)]
    pub command_id: Option<String>,
}

/// `write` answer.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct BashWriteResult {
    pub command_id: String,
    /// Bytes written.
    pub bytes_written: usize,
}

/// `POST /v1/bash/kill`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct BashKillRequest {
    pub session_id: String,
    /// `SIGTERM` (default) or `SIGKILL` end the command and every process it started;
    /// `SIGINT` interrupts its foreground programs, like Ctrl-C.
    #[serde(default)]
    pub signal: Option<String>,
}

/// `kill` answer.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct BashKillResult {
    pub command_id: String,
    pub signal: String,
    pub status: BashPipeStatus,
    pub exit_code: Option<i32>,
}

/// `POST /v1/bash/sessions/create`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct BashCreateSessionRequest {
    /// The new session's id (default: a fresh one). An existing id is returned unchanged.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Absolute directory the session starts in.
    #[serde(default)]
    pub exec_dir: Option<String>,
    /// Absolute path of a script sourced in the new session before anything else (its
    /// variables, functions and directory carry over).
    #[serde(default)]
    pub snapshot_path: Option<String>,
}

/// A bash session.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct BashSessionInfo {
    pub session_id: String,
    pub status: BashSessionStatus,
    pub working_dir: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub last_used_at: String,
    /// The command running now, if any.
    pub current_command: Option<String>,
    /// Commands started in the session.
    pub command_count: u64,
}

/// `POST /v1/bash/sessions/{session_id}/close` answer.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct BashCloseResult {
    pub session_id: String,
}
