//! What a run is asked to do and within which bounds: [`RunConfig`], its [`Limits`], its
//! settle and repeat policies, and the checks that refuse a bad one ([`ConfigError`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::observation::ImageFormat;

/// Longest task text, in characters.
pub const MAX_TASK_CHARS: usize = 100_000;
/// Longest wait a shell call may ask for.
pub const MAX_SHELL_WAIT: Duration = Duration::from_secs(600);

/// Hard limits of a run (a field left out is its default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Model calls.
    pub max_steps: u32,
    /// Seconds of driving (pauses and waits for input excluded).
    pub max_seconds: u64,
    /// Screenshots kept in the conversation.
    pub max_images: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: 100,
            max_seconds: 3600,
            max_images: 5,
        }
    }
}

/// How the loop waits for the screen after an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettlePolicy {
    /// The screen counts as settled after being still this long.
    pub quiet: Duration,
    /// Stop waiting after this long even if it still changes.
    pub timeout: Duration,
}

impl Default for SettlePolicy {
    fn default() -> Self {
        Self {
            quiet: Duration::from_millis(100),
            timeout: Duration::from_secs(3),
        }
    }
}

/// When repeating an action without effect is flagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepeatPolicy {
    /// Warn the model at this many identical actions in a row with no screen change.
    pub warn_after: u32,
    /// Fail the run at this many.
    pub fail_after: u32,
}

impl Default for RepeatPolicy {
    fn default() -> Self {
        Self {
            warn_after: 3,
            fail_after: 5,
        }
    }
}

/// What a run does and within which bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub task: String,
    pub limits: Limits,
    pub settle: SettlePolicy,
    pub repeat: RepeatPolicy,
    /// Extra instructions appended to the system prompt.
    pub instructions: Option<String>,
    pub image_format: ImageFormat,
    /// How long a shell call waits for its command before answering (it keeps running).
    pub shell_timeout: Duration,
}

impl RunConfig {
    pub fn new(task: impl Into<String>) -> Self {
        Self {
            task: task.into(),
            limits: Limits::default(),
            settle: SettlePolicy::default(),
            repeat: RepeatPolicy::default(),
            instructions: None,
            image_format: ImageFormat::Png,
            shell_timeout: Duration::from_secs(30),
        }
    }

    /// Checks the task and the limits; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &'static str, message: String| Err(ConfigError { field, message });
        if self.task.trim().is_empty() {
            return bad("task", "task must not be empty".into());
        }
        if self.task.chars().count() > MAX_TASK_CHARS {
            return bad(
                "task",
                format!("task is longer than {MAX_TASK_CHARS} characters"),
            );
        }
        if self.limits.max_steps == 0 {
            return bad("limits.max_steps", "max_steps must be at least 1".into());
        }
        if self.limits.max_seconds == 0 {
            return bad(
                "limits.max_seconds",
                "max_seconds must be at least 1".into(),
            );
        }
        if self.limits.max_images == 0 {
            return bad(
                "limits.max_images",
                "max_images must be at least 1 (the model needs the latest screenshot)".into(),
            );
        }
        if self.repeat.warn_after == 0 || self.repeat.fail_after < self.repeat.warn_after {
            return bad(
                "repeat",
                "warn_after must be at least 1 and fail_after at least warn_after".into(),
            );
        }
        Ok(())
    }
}

/// A bad run configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    pub field: &'static str,
    pub message: String,
}
