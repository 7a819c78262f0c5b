//! A run's events, [`RunEvent`], and the [`EventSink`] that receives them.
//!
//! [`RunEvent`] is the one definition of what a run's log holds, whoever writes it: the loop
//! emits `run.status`, `agent.message`, `agent.reasoning`, `action.started`,
//! `action.finished`, `control.taken`, `control.returned`, `input.requested`,
//! `input.received`, `error` and `usage`; the program embedding the loop adds `run.status
//! queued` before the loop starts and `artifact.created` / `artifact.skipped` for the files it
//! keeps. Each is serialisable with a `type` tag; [`RunStatus`] and [`ErrorKind`] are the one
//! status and the one error vocabulary every reader (store, API, CLI, console) uses. Events
//! carry no sequence number: the embedding program assigns one as it stores them. Screenshots are not
//! in events: the sink receives their bytes through [`EventSink::screenshot`] and events refer
//! to them by observation id. After each completed step and before each tool call the sink
//! gets a [`Checkpoint`] to persist for restarts. The loop is the only emitter and emits from
//! one task, so events arrive in order.

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::checkpoint::Checkpoint;
use crate::model::{ToolRequest, Usage};
use crate::observation::ObservationMeta;
use crate::transcript::SafetyCheck;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted; waiting for its sandbox or for a driver.
    Queued,
    Running,
    /// A person holds control.
    Paused,
    /// The agent asked the person something (answer with `POST /v1/runs/{id}/input`).
    WaitingForInput,
    /// A remote agent (an `a2a:` run) needs the person to authenticate with it, out of band.
    AuthRequired,
    /// A cancel was sent to a remote agent, which has not confirmed it yet.
    Canceling,
    Completed,
    Failed,
    Canceled,
    /// How it ended cannot be known: a remote agent was sent the task and no handle to it
    /// came back (the task is never sent a second time blindly).
    Unknown,
}

impl RunStatus {
    pub const ALL: [RunStatus; 10] = [
        Self::Queued,
        Self::Running,
        Self::Paused,
        Self::WaitingForInput,
        Self::AuthRequired,
        Self::Canceling,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
        Self::Unknown,
    ];

    /// The wire and storage name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::WaitingForInput => "waiting_for_input",
            Self::AuthRequired => "auth_required",
            Self::Canceling => "canceling",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Unknown => "unknown",
        }
    }

    /// Completed, failed, canceled or unknown: never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Canceled | RunStatus::Unknown
        )
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown status `{s}` (one of queued, running, paused, waiting_for_input, \
                     auth_required, canceling, completed, failed, canceled, unknown)"
                )
            })
    }
}

/// What went wrong, in an `error` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The loop refused a tool call before sending it (out of range, stale, declined).
    ActionRefused,
    /// The sandbox refused or failed an action.
    ActionFailed,
    /// The model's tool call could not be decoded.
    InvalidToolCall,
    /// The model repeated the same action without effect too often.
    RepeatedAction,
    /// The model provider failed (after its retries).
    ModelError,
    /// A `script:` model's file is wrong.
    ScriptError,
    /// A run limit (steps, time, images) was reached.
    Limit,
    /// The sandbox could not be had or reached.
    SandboxError,
    /// The program driving the loop failed (its store, a stored state it cannot read).
    Internal,
    /// The agent declined the task (an A2A agent's `rejected`): the run failed without trying.
    Rejected,
    /// A remote A2A agent failed the task, broke the protocol or could not be reached.
    RemoteError,
}

impl ErrorKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ActionRefused => "action_refused",
            Self::ActionFailed => "action_failed",
            Self::InvalidToolCall => "invalid_tool_call",
            Self::RepeatedAction => "repeated_action",
            Self::ModelError => "model_error",
            Self::ScriptError => "script_error",
            Self::Limit => "limit",
            Self::SandboxError => "sandbox_error",
            Self::Internal => "internal",
            Self::Rejected => "rejected",
            Self::RemoteError => "remote_error",
        }
    }
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionOutcome {
    Ok,
    /// The sandbox refused it or failed.
    Error,
    /// The loop refused it before sending it (out of range, stale, invalid, declined).
    Refused,
    /// Started before a restart and not known to have finished; not repeated.
    Unknown,
}

/// Where a step's time went, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Timings {
    /// Taking the screenshot the action was planned on.
    pub capture_ms: u64,
    /// The model call that planned it.
    pub model_ms: u64,
    /// Performing it.
    pub action_ms: u64,
    /// Waiting for the screen to settle after it.
    pub settle_ms: u64,
}

/// Why the loop asks the person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// The model called `request_human`.
    Question,
    /// The provider raised safety checks on an action; it runs only if the person approves.
    SafetyCheck,
}

/// One event of a run (its `type` tag names the variant). Its schema is `RunEventData` in the
/// orchestrator's OpenAPI document, whose `RunEvent` is the stored form (this, with `seq` and
/// `at`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type")]
#[schema(as = RunEventData)]
pub enum RunEvent {
    #[serde(rename = "run.status")]
    RunStatus {
        status: RunStatus,
        /// Why it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The final answer of a completed run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
    #[serde(rename = "agent.message")]
    AgentMessage { step: u32, text: String },
    #[serde(rename = "agent.reasoning")]
    AgentReasoning { step: u32, text: String },
    #[serde(rename = "action.started")]
    ActionStarted {
        step: u32,
        call_id: String,
        /// The tool call, decoded (`kind`: `desktop`, `screenshot`, `zoom`, `shell`, `edit`, ...).
        #[schema(value_type = Object)]
        action: ToolRequest,
        /// The observation the action was planned on (its coordinates are that image's pixels).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observation_id: Option<String>,
    },
    #[serde(rename = "action.finished")]
    ActionFinished {
        step: u32,
        call_id: String,
        #[schema(value_type = Object)]
        action: ToolRequest,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observation_id: Option<String>,
        outcome: ActionOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Where the action's points landed on the screen (screen pixels, `[x, y]` each).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schema(value_type = Vec<Vec<i32>>)]
        screen_points: Vec<(i32, i32)>,
        timings: Timings,
        /// The observation taken after it, when one was (the sink got its bytes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        screenshot: Option<String>,
    },
    #[serde(rename = "control.taken")]
    ControlTaken {},
    #[serde(rename = "control.returned")]
    ControlReturned {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    #[serde(rename = "input.requested")]
    InputRequested {
        request_id: String,
        kind: InputKind,
        question: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        safety_checks: Vec<SafetyCheck>,
    },
    #[serde(rename = "input.received")]
    InputReceived {
        request_id: String,
        text: String,
        /// For safety checks: whether the answer approved them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approved: Option<bool>,
        /// The id of the message that carried the answer (an A2A client's message id).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    #[serde(rename = "error")]
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u32>,
        kind: ErrorKind,
        message: String,
        /// Whether the run ends because of it.
        fatal: bool,
    },
    #[serde(rename = "usage")]
    Usage {
        step: u32,
        usage: Usage,
        /// Summed over the run so far.
        total: Usage,
        /// HTTP attempts the model call took.
        attempts: u32,
        model_ms: u64,
    },
    /// A file the run produced was kept (written by the program embedding the loop).
    #[serde(rename = "artifact.created")]
    ArtifactCreated {
        /// `outputs/<file>` or `screenshots/<observation id>.<ext>`.
        name: String,
        /// `output` or `screenshot`.
        kind: String,
        size: u64,
        content_type: String,
        sha256: String,
    },
    /// A file the run produced was not kept: it would pass the run's or the key's artifact
    /// budget.
    #[serde(rename = "artifact.skipped")]
    ArtifactSkipped {
        name: String,
        size: u64,
        reason: String,
    },
    /// The task was sent to a remote A2A agent (an `a2a:` run); its answer is not in yet. Once
    /// this is written the task is never sent again: a restart asks the remote about the task
    /// it names in `remote.task`, or ends `unknown` when none came back.
    #[serde(rename = "remote.submitted")]
    RemoteSubmitted {
        /// The remote agent's card.
        agent: String,
        /// The A2A message id it was sent as.
        message_id: String,
    },
    /// What the remote A2A agent says of its task, in its own terms.
    #[serde(rename = "remote.task")]
    RemoteTask {
        /// The remote's task id (absent: it answered with a message and made no task).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_id: Option<String>,
        /// The remote's state, as its wire names it (`TASK_STATE_WORKING`, ...; `message` for a
        /// direct answer).
        state: String,
        /// What it said with it (its question, its reason, its answer).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The run's sandbox was paused (frozen) while the run waited: it stays paused until the
    /// run acts again (an answer, a takeover, a hand-back), which resumes it first.
    #[serde(rename = "sandbox.paused")]
    SandboxPaused { sandbox_id: String, reason: String },
    /// The run's sandbox was resumed.
    #[serde(rename = "sandbox.resumed")]
    SandboxResumed { sandbox_id: String, reason: String },
    /// The run's sandbox was hibernated while the run waited (its container removed, its
    /// home kept): woken when the run acts again.
    #[serde(rename = "sandbox.hibernated")]
    SandboxHibernated { sandbox_id: String, reason: String },
    /// The run's sandbox was woken from hibernation (a new container with its kept home).
    #[serde(rename = "sandbox.woken")]
    SandboxWoken { sandbox_id: String, reason: String },
}

impl RunEvent {
    /// The `type` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::RunStatus { .. } => "run.status",
            RunEvent::AgentMessage { .. } => "agent.message",
            RunEvent::AgentReasoning { .. } => "agent.reasoning",
            RunEvent::ActionStarted { .. } => "action.started",
            RunEvent::ActionFinished { .. } => "action.finished",
            RunEvent::ControlTaken {} => "control.taken",
            RunEvent::ControlReturned { .. } => "control.returned",
            RunEvent::InputRequested { .. } => "input.requested",
            RunEvent::InputReceived { .. } => "input.received",
            RunEvent::Error { .. } => "error",
            RunEvent::Usage { .. } => "usage",
            RunEvent::ArtifactCreated { .. } => "artifact.created",
            RunEvent::ArtifactSkipped { .. } => "artifact.skipped",
            RunEvent::RemoteSubmitted { .. } => "remote.submitted",
            RunEvent::RemoteTask { .. } => "remote.task",
            RunEvent::SandboxPaused { .. } => "sandbox.paused",
            RunEvent::SandboxResumed { .. } => "sandbox.resumed",
            RunEvent::SandboxHibernated { .. } => "sandbox.hibernated",
            RunEvent::SandboxWoken { .. } => "sandbox.woken",
        }
    }
}

/// The sink failed to store something; the run stops (it cannot report anything any more).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event sink failed: {0}")]
pub struct SinkError(pub String);

/// Where a run's events, screenshots and checkpoints go.
#[async_trait]
pub trait EventSink: Send + Sync {
    async fn emit(&self, event: RunEvent) -> Result<(), SinkError>;

    /// A screenshot the model was (or will be) shown, before any event refers to it.
    async fn screenshot(
        &self,
        observation: &ObservationMeta,
        image: &Bytes,
    ) -> Result<(), SinkError>;

    /// The state to resume from after a restart.
    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), SinkError>;

    /// `event` and the state to resume from, stored no later than the event: one write where
    /// the sink can (the loop uses it for the checkpoint that marks a call in flight, which
    /// must be stored before the call starts and is announced by its `action.started`).
    async fn emit_checkpointed(
        &self,
        event: RunEvent,
        checkpoint: &Checkpoint,
    ) -> Result<(), SinkError> {
        self.checkpoint(checkpoint).await?;
        self.emit(event).await
    }
}

/// A sink that keeps everything in memory (tests, small embeddings).
#[derive(Debug, Default)]
pub struct RecordingSink {
    events: Mutex<Vec<RunEvent>>,
    screenshots: Mutex<Vec<(ObservationMeta, Bytes)>>,
    checkpoints: Mutex<Vec<Checkpoint>>,
    /// Events that came with a checkpoint, and that checkpoint.
    checkpointed: Mutex<Vec<(RunEvent, Checkpoint)>>,
}

impl RecordingSink {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn events(&self) -> Vec<RunEvent> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn screenshots(&self) -> Vec<(ObservationMeta, Bytes)> {
        self.screenshots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn checkpoints(&self) -> Vec<Checkpoint> {
        self.checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The events emitted together with a checkpoint, each with it.
    pub fn checkpointed(&self) -> Vec<(RunEvent, Checkpoint)> {
        self.checkpointed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn last_checkpoint(&self) -> Option<Checkpoint> {
        self.checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned()
    }
}

#[async_trait]
impl EventSink for RecordingSink {
    async fn emit(&self, event: RunEvent) -> Result<(), SinkError> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
        Ok(())
    }

    async fn screenshot(
        &self,
        observation: &ObservationMeta,
        image: &Bytes,
    ) -> Result<(), SinkError> {
        self.screenshots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((observation.clone(), image.clone()));
        Ok(())
    }

    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        self.checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(checkpoint.clone());
        Ok(())
    }

    async fn emit_checkpointed(
        &self,
        event: RunEvent,
        checkpoint: &Checkpoint,
    ) -> Result<(), SinkError> {
        self.checkpointed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((event.clone(), checkpoint.clone()));
        self.checkpoint(checkpoint).await?;
        self.emit(event).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_tagged_by_type() -> anyhow::Result<()> {
        let event = RunEvent::RunStatus {
            status: RunStatus::WaitingForInput,
            reason: None,
            answer: None,
        };
        assert_eq!(
            serde_json::to_value(&event)?,
            json!({"type": "run.status", "status": "waiting_for_input"})
        );
        let taken = serde_json::to_value(RunEvent::ControlTaken {})?;
        assert_eq!(taken, json!({"type": "control.taken"}));
        let back: RunEvent = serde_json::from_value(taken)?;
        assert_eq!(back.kind(), "control.taken");
        Ok(())
    }

    #[test]
    fn every_status_and_error_kind_is_named_as_serde_names_it() -> anyhow::Result<()> {
        for status in RunStatus::ALL {
            assert_eq!(serde_json::to_value(status)?, json!(status.as_str()));
            assert_eq!(status.as_str().parse::<RunStatus>(), Ok(status));
        }
        assert!("stopped".parse::<RunStatus>().is_err());
        for kind in [
            ErrorKind::ActionRefused,
            ErrorKind::ActionFailed,
            ErrorKind::InvalidToolCall,
            ErrorKind::RepeatedAction,
            ErrorKind::ModelError,
            ErrorKind::ScriptError,
            ErrorKind::Limit,
            ErrorKind::SandboxError,
            ErrorKind::Internal,
        ] {
            assert_eq!(serde_json::to_value(kind)?, json!(kind.as_str()));
        }
        Ok(())
    }

    #[test]
    fn the_embedders_events_round_trip() -> anyhow::Result<()> {
        let queued = RunEvent::RunStatus {
            status: RunStatus::Queued,
            reason: None,
            answer: None,
        };
        assert_eq!(
            serde_json::to_value(&queued)?,
            json!({"type": "run.status", "status": "queued"})
        );
        let created = json!({"type": "artifact.created", "name": "outputs/a.txt",
            "kind": "output", "size": 3, "content_type": "text/plain", "sha256": "ab"});
        let event: RunEvent = serde_json::from_value(created.clone())?;
        assert_eq!(event.kind(), "artifact.created");
        assert_eq!(serde_json::to_value(&event)?, created);
        let skipped = json!({"type": "artifact.skipped", "name": "outputs/b.bin",
            "size": 9, "reason": "over budget"});
        let event: RunEvent = serde_json::from_value(skipped.clone())?;
        assert_eq!(serde_json::to_value(&event)?, skipped);
        Ok(())
    }
}
