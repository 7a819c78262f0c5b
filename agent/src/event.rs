//! The events a run emits and the [`EventSink`] that receives them.
//!
//! Events are serialisable with a `type` tag (`run.status`, `agent.message`,
//! `agent.reasoning`, `action.started`, `action.finished`, `control.taken`,
//! `control.returned`, `input.requested`, `input.received`, `error`, `usage`). They carry no
//! sequence number: the embedding program assigns one as it stores them. Screenshots are not
//! in events: the sink receives their bytes through [`EventSink::screenshot`] and events refer
//! to them by observation id. After each completed step and before each tool call the sink
//! gets a [`Checkpoint`] to persist for restarts. The loop is the only emitter and emits from
//! one task, so events arrive in order.

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoint;
use crate::model::{ToolRequest, Usage};
use crate::observation::ObservationMeta;
use crate::transcript::SafetyCheck;

/// The state of a run, as events report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Paused,
    WaitingForInput,
    Completed,
    Failed,
    Canceled,
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Canceled
        )
    }
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// The model called `request_human`.
    Question,
    /// The provider raised safety checks on an action; it runs only if the person approves.
    SafetyCheck,
}

/// One event of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
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
        action: ToolRequest,
        /// The observation the action was planned on (its coordinates are that image's pixels).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observation_id: Option<String>,
    },
    #[serde(rename = "action.finished")]
    ActionFinished {
        step: u32,
        call_id: String,
        action: ToolRequest,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observation_id: Option<String>,
        outcome: ActionOutcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Where the action's points landed on the screen (screen pixels).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
    },
    #[serde(rename = "error")]
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u32>,
        /// `action_refused`, `action_failed`, `invalid_tool_call`, `repeated_action`,
        /// `model_error`, `limit`, `sandbox_error`.
        kind: String,
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
}

impl Event {
    /// The `type` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStatus { .. } => "run.status",
            Event::AgentMessage { .. } => "agent.message",
            Event::AgentReasoning { .. } => "agent.reasoning",
            Event::ActionStarted { .. } => "action.started",
            Event::ActionFinished { .. } => "action.finished",
            Event::ControlTaken {} => "control.taken",
            Event::ControlReturned { .. } => "control.returned",
            Event::InputRequested { .. } => "input.requested",
            Event::InputReceived { .. } => "input.received",
            Event::Error { .. } => "error",
            Event::Usage { .. } => "usage",
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
    async fn emit(&self, event: Event) -> Result<(), SinkError>;

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
        event: Event,
        checkpoint: &Checkpoint,
    ) -> Result<(), SinkError> {
        self.checkpoint(checkpoint).await?;
        self.emit(event).await
    }
}

/// A sink that keeps everything in memory (tests, small embeddings).
#[derive(Debug, Default)]
pub struct RecordingSink {
    events: Mutex<Vec<Event>>,
    screenshots: Mutex<Vec<(ObservationMeta, Bytes)>>,
    checkpoints: Mutex<Vec<Checkpoint>>,
    /// Events that came with a checkpoint, and that checkpoint.
    checkpointed: Mutex<Vec<(Event, Checkpoint)>>,
}

impl RecordingSink {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn events(&self) -> Vec<Event> {
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
    pub fn checkpointed(&self) -> Vec<(Event, Checkpoint)> {
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
    async fn emit(&self, event: Event) -> Result<(), SinkError> {
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
        event: Event,
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
        let event = Event::RunStatus {
            status: RunStatus::WaitingForInput,
            reason: None,
            answer: None,
        };
        assert_eq!(
            serde_json::to_value(&event)?,
            json!({"type": "run.status", "status": "waiting_for_input"})
        );
        let taken = serde_json::to_value(Event::ControlTaken {})?;
        assert_eq!(taken, json!({"type": "control.taken"}));
        let back: Event = serde_json::from_value(taken)?;
        assert_eq!(back.kind(), "control.taken");
        Ok(())
    }
}
