//! The [`Computer`] trait: what the loop needs from one sandbox (observe, act, wait for the
//! screen to settle, zoom, run a shell command, read/write/edit files), and the reports it gets
//! back. [`sandboxd::SandboxdComputer`] implements it over sandboxd's REST API.
//!
//! A computer refuses bad input with [`ComputerError::Refused`] (its message is written for the
//! model and given back to it as a tool error); everything else is a failure of the sandbox or
//! of the connection.

pub mod sandboxd;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::action::DesktopAction;
use crate::observation::{Observation, ObservationMeta, ObserveRequest};

pub use sandboxd::SandboxdComputer;

/// One sandbox, as the loop drives it. Object-safe; shared between tasks.
#[async_trait]
pub trait Computer: Send + Sync {
    /// Takes a screenshot; every call gives a new observation id.
    async fn observe(&self, request: &ObserveRequest) -> Result<Observation, ComputerError>;

    /// Performs `action`. Its coordinates are pixels of the observation `observation_id`
    /// (which the computer maps to the screen); `None` means screen pixels.
    async fn act(
        &self,
        action: &DesktopAction,
        observation_id: Option<&str>,
    ) -> Result<ActionReport, ComputerError>;

    /// Waits until the screen has been still for `quiet`, at most `timeout`.
    async fn wait_settled(
        &self,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<SettleReport, ComputerError>;

    /// An image of `region` (x0, y0, x1, y1 in pixels of `observation`, exclusive ends) at up to
    /// the screen's resolution, fitting within `bounds`.
    async fn zoom(
        &self,
        observation: &ObservationMeta,
        region: [f64; 4],
        bounds: (u32, u32),
    ) -> Result<Observation, ComputerError>;

    /// Runs a shell command line in the sandbox's persistent shell session (a new session when
    /// `restart`). Answers after `timeout` even if the command still runs (it keeps running).
    async fn run_shell(
        &self,
        command: &str,
        timeout: Duration,
        restart: bool,
    ) -> Result<ShellOutcome, ComputerError>;

    /// Reads a text file.
    async fn read_file(&self, path: &str) -> Result<String, ComputerError>;

    /// Writes a file (creating parent directories).
    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ComputerError>;

    /// Anthropic's text-editor commands (view, create, str_replace, insert, undo_edit).
    async fn edit(&self, command: &EditCommand) -> Result<EditOutcome, ComputerError>;
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionReport {
    /// The pointer after the action, in screen pixels.
    pub cursor: Option<(i32, i32)>,
    /// For `WAIT_SETTLED`.
    pub settle: Option<SettleReport>,
}

/// How waiting for the screen to settle went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleReport {
    /// False when the timeout passed with the screen still changing.
    pub settled: bool,
    pub waited_ms: u64,
    pub frames: u32,
    /// When the last change was seen, from the start of the wait (None: no change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_ms: Option<u64>,
    /// The quiet period sandboxd applied (half the asked one when the action's effect was
    /// already on screen).
    #[serde(default)]
    pub quiet_ms: u64,
}

/// How a shell command went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellOutcome {
    /// `None` while it still runs (the timeout passed first).
    pub exit_code: Option<i32>,
    /// stdout and stderr as interleaved, possibly cut (then `truncated`).
    pub output: String,
    pub still_running: bool,
    pub truncated: bool,
}

/// A text-editor command (Anthropic's `str_replace_based_edit_tool`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum EditCommand {
    View {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        view_range: Option<[i64; 2]>,
    },
    Create {
        path: String,
        file_text: String,
    },
    StrReplace {
        path: String,
        old_str: String,
        #[serde(default)]
        new_str: String,
    },
    Insert {
        path: String,
        insert_line: u64,
        new_str: String,
    },
    UndoEdit {
        path: String,
    },
}

impl EditCommand {
    pub fn path(&self) -> &str {
        match self {
            EditCommand::View { path, .. }
            | EditCommand::Create { path, .. }
            | EditCommand::StrReplace { path, .. }
            | EditCommand::Insert { path, .. }
            | EditCommand::UndoEdit { path } => path,
        }
    }
}

/// What an editor command answered (text for the model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditOutcome {
    pub output: String,
}

/// Why a computer call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComputerError {
    /// The sandbox refused the input (a bad field, an unknown or too old screenshot id, a
    /// missing file). The message is written for the model.
    #[error("{message}")]
    Refused {
        /// The offending field, when the sandbox named it.
        field: Option<String>,
        message: String,
    },
    /// The sandbox answered that a part of it is not available (no X display).
    #[error("the sandbox is unavailable ({step}): {message}")]
    Unavailable { step: &'static str, message: String },
    /// The connection failed (refused, reset, timed out).
    #[error("cannot reach the sandbox ({step}): {message}")]
    Transport { step: &'static str, message: String },
    /// Any other error status.
    #[error("the sandbox answered {status} to {step}: {message}")]
    Http {
        step: &'static str,
        status: u16,
        message: String,
    },
    /// An answer that does not have the expected shape.
    #[error("unexpected answer from the sandbox to {step}: {message}")]
    Protocol { step: &'static str, message: String },
}

impl ComputerError {
    /// Whether the error is the sandbox refusing the input (to be told to the model), as
    /// opposed to the sandbox failing.
    pub fn is_refusal(&self) -> bool {
        matches!(self, ComputerError::Refused { .. })
    }
}
