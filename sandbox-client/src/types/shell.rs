//! `/v1/shell/*`: AIO's shell contract (field names as AIO's SDK sends and reads them), and the
//! messages of the terminal WebSocket.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// AIO's `BashCommandStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BashCommandStatus {
    /// Still running (also: an `exec` whose `timeout` passed, or `async_mode`).
    Running,
    /// Exited by itself; `exit_code` says how.
    Completed,
    /// Still running, but its output did not change for `no_change_timeout` seconds.
    NoChangeTimeout,
    /// Ended by its `hard_timeout` (its whole process group and session were killed).
    HardTimeout,
    /// Ended by `kill` or session clean-up.
    Terminated,
}

/// `POST /v1/shell/exec` (also the `shell_exec` MCP tool's arguments).
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ShellExecRequest {
    /// The command line, run by bash exactly as typed at a prompt.
    pub command: String,
    /// Session id; a new session is created when absent or unknown.
    #[serde(default)]
    pub id: Option<String>,
    /// Absolute directory to run in (the session stays there afterwards).
    #[serde(default)]
    pub exec_dir: Option<String>,
    /// Return at once with status `running`.
    #[serde(default)]
    pub async_mode: Option<bool>,
    /// Seconds to wait before answering `running` (the command keeps running).
    #[serde(default)]
    pub timeout: Option<f64>,
    /// With `exec_dir`: fail when it does not exist (otherwise the session's directory is used).
    #[serde(default)]
    pub strict: Option<bool>,
    /// Seconds without new output before answering `no_change_timeout` (default: the
    /// session's, 120).
    #[serde(default)]
    pub no_change_timeout: Option<f64>,
    /// Seconds after which the command and every process it started are killed.
    #[serde(default)]
    pub hard_timeout: Option<f64>,
    /// Keep symlinks in the working directory's path (`pwd -L`) instead of resolving them.
    #[serde(default)]
    pub preserve_symlinks: Option<bool>,
    /// Cut `output` to its last 30000 characters, saying so (default true).
    #[serde(default)]
    pub truncate: Option<bool>,
}

/// One command as it appeared on the console.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ConsoleRecord {
    /// The prompt, `user@host:dir$ `.
    pub ps1: String,
    pub command: String,
    pub output: String,
}

/// `exec` answer.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellCommandResult {
    pub session_id: String,
    pub command: String,
    pub status: BashCommandStatus,
    /// stdout and stderr as they were interleaved, as plain text (no terminal escapes).
    pub output: String,
    pub console: Vec<ConsoleRecord>,
    /// Set once the command has ended (128 + signal if a signal ended it).
    pub exit_code: Option<i32>,
    /// True when `output` was cut (it then starts with a note saying so).
    pub truncated: bool,
}

/// `POST /v1/shell/view`, `/v1/shell/kill`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellSessionRequest {
    pub id: String,
}

/// `view` answer: the session's latest command.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellViewResult {
    pub output: String,
    pub session_id: String,
    pub status: BashCommandStatus,
    pub console: Vec<ConsoleRecord>,
    pub command: Option<String>,
    pub exit_code: Option<i32>,
    pub truncated: bool,
}

/// `POST /v1/shell/wait`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct ShellWaitRequest {
    pub id: String,
    /// Seconds to wait at most.
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Seconds to wait at most (the smaller of the two applies). With neither, the wait ends
    /// when the output stops changing for the session's no-change timeout.
    #[serde(default)]
    pub max_wait_seconds: Option<f64>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellWaitResult {
    pub status: BashCommandStatus,
    pub exit_code: Option<i32>,
}

/// `POST /v1/shell/write`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellWriteRequest {
    pub id: String,
    /// Text for the running command's standard input.
    pub input: String,
    /// Append a newline.
    pub press_enter: bool,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellWriteResult {
    pub status: BashCommandStatus,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellKillResult {
    pub status: BashCommandStatus,
    pub exit_code: Option<i32>,
    /// Deprecated alias of `exit_code`.
    pub returncode: Option<i32>,
}

/// `POST /v1/shell/sessions/create` (the body may be empty).
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct ShellCreateSessionRequest {
    /// An existing id returns that session unchanged.
    #[serde(default)]
    pub id: Option<String>,
    /// Absolute, existing directory to start in (default: the workspace).
    #[serde(default)]
    pub exec_dir: Option<String>,
    #[serde(default)]
    pub no_change_timeout: Option<f64>,
    #[serde(default)]
    pub preserve_symlinks: Option<bool>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellCreateSessionResponse {
    pub session_id: String,
    pub working_dir: String,
}

/// `POST /v1/shell/sessions/update`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellUpdateSessionRequest {
    pub id: String,
    #[serde(default)]
    pub no_change_timeout: Option<f64>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellSessionSettings {
    pub session_id: String,
    pub no_change_timeout: u64,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellSessionStats {
    pub total_sessions: usize,
    /// Sessions running a command.
    pub active_sessions: usize,
    pub idle_sessions: usize,
    pub max_sessions: usize,
    /// Seconds after which an idle session is removed.
    pub session_timeout: u64,
    pub usage_ratio: f64,
}

/// Whether a shell session is running a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShellSessionStatus {
    /// A command is running.
    Running,
    /// No command is running.
    Idle,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellSessionInfo {
    pub working_dir: String,
    /// RFC 3339.
    pub created_at: String,
    pub last_used_at: String,
    pub age_seconds: u64,
    pub status: ShellSessionStatus,
    /// The latest command, running or not.
    pub current_command: Option<String>,
}

/// `GET /v1/shell/sessions`: id -> session.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ActiveShellSessionsResult {
    pub sessions: BTreeMap<String, ShellSessionInfo>,
}

/// `DELETE /v1/shell/sessions[/{id}]`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ShellCleanupResult {
    /// Ids of the sessions removed.
    pub removed: Vec<String>,
}

/// Query of `GET /v1/shell/ws`.
#[derive(Debug, Deserialize, Serialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TerminalQuery {
    /// Names the terminal (one open terminal per id); generated when absent.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// The `type` of a message from the terminal WebSocket's client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TerminalClientMessageKind {
    /// `data` is text to type.
    Input,
    /// `data` is the new size, `{"cols", "rows"}`.
    Resize,
    /// The answer to sandboxd's `ping`; ignored.
    Pong,
    /// Ignored.
    Ping,
}

/// A message from the terminal WebSocket's client: `{"type": "input" | "resize" | "pong" |
/// "ping", "data": ...}`. Input data is text to type; resize data is `{"cols", "rows"}`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TerminalClientMessage {
    #[serde(rename = "type")]
    pub kind: TerminalClientMessageKind,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// `resize` data.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TerminalResize {
    pub cols: f64,
    pub rows: f64,
}

/// A message from sandboxd on the terminal WebSocket: `session_id` (data: the id), `ready`
/// (data: id, pid, size), `output` (data: text), `ping` (data: unix milliseconds), `exit`
/// (data: exit code) and `error` (data: what was wrong with a client message).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum TerminalServerMessage {
    SessionId(String),
    Ready(TerminalReady),
    Output(String),
    Ping(u64),
    Exit(i32),
    Error(String),
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TerminalReady {
    pub session_id: String,
    pub pid: i32,
    pub cols: u16,
    pub rows: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_message_types_are_read_as_sent_and_no_other_way() {
        for (text, kind) in [
            ("input", TerminalClientMessageKind::Input),
            ("resize", TerminalClientMessageKind::Resize),
            ("pong", TerminalClientMessageKind::Pong),
            ("ping", TerminalClientMessageKind::Ping),
        ] {
            let message: TerminalClientMessage =
                serde_json::from_value(serde_json::json!({"type": text})).expect(text);
            assert_eq!(message.kind, kind);
            assert_eq!(message.data, serde_json::Value::Null);
            assert_eq!(serde_json::to_value(kind).expect(text), text);
        }
        for refused in ["Input", "RESIZE", "launch", ""] {
            let error = serde_json::from_value::<TerminalClientMessage>(
                serde_json::json!({"type": refused}),
            )
            .expect_err(refused);
            assert!(error.to_string().contains("input"), "{error}");
        }
    }
}
