//! How a run looks as an A2A task: its log of [`agent::RunEvent`]s folded into the task's
//! status and history, each event also read as the change a stream carries.
//!
//! | run | task |
//! |---|---|
//! | `queued` | `submitted` |
//! | `running` | `working` (an `agent.message` is a `working` status with that message) |
//! | `waiting_for_input` | `input-required`, the agent's question as the status message |
//! | `paused` (a person holds the desktop) | `input-required`, saying so |
//! | `completed` | `completed`, the answer as the status message |
//! | `failed` | `failed` with the reason, or `rejected` when the agent declined the task |
//! | `canceled` | `canceled` |
//!
//! The history is the conversation: the client's message that made the run (its own id), the
//! agent's messages, questions and answer, and the client's answers (ids `<run id>:<seq>`).

use agent::{ErrorKind, RunEvent, RunStatus};
use agentbox_http::timestamp::rfc3339_from_unix_ms as rfc3339;

use crate::a2a::model::{Message, Part, Role, TaskState, TaskStatus, Update};
use crate::db::{EventRecord, RunRecord};

/// A change a stream carries, before its artifact (if any) is read from the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Status(TaskStatus),
    /// The artifact of this name was kept.
    Artifact {
        name: String,
        kind: String,
    },
}

/// The task's state so far, as events are applied in order.
#[derive(Debug, Clone)]
pub struct Projection {
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    pub history: Vec<Message>,
    /// The seq of the last event applied.
    pub last_seq: i64,
    rejected: bool,
}

/// The context a run belongs to: its own id stands for it when it has none.
pub fn context_of(run: &RunRecord) -> String {
    run.context_id.clone().unwrap_or_else(|| run.id.clone())
}

/// The state a run's status maps to.
pub fn state_of(status: RunStatus, rejected: bool) -> TaskState {
    match status {
        RunStatus::Queued => TaskState::Submitted,
        // A cancel passed on to a remote agent: still working until it confirms.
        RunStatus::Running | RunStatus::Canceling => TaskState::Working,
        RunStatus::Paused | RunStatus::WaitingForInput => TaskState::InputRequired,
        RunStatus::AuthRequired => TaskState::AuthRequired,
        RunStatus::Completed => TaskState::Completed,
        RunStatus::Failed if rejected => TaskState::Rejected,
        // A2A has no "unknown" end: failed, with the reason saying the outcome is not known.
        RunStatus::Failed | RunStatus::Unknown => TaskState::Failed,
        RunStatus::Canceled => TaskState::Canceled,
    }
}

impl Projection {
    /// A run before any of its events: the client's message, and the state of the record.
    pub fn new(run: &RunRecord) -> Self {
        let context_id = context_of(run);
        let first = Message {
            message_id: run
                .message_id
                .clone()
                .unwrap_or_else(|| format!("{}:task", run.id)),
            role: Role::User,
            parts: vec![Part::text(run.task.clone())],
            context_id: Some(context_id.clone()),
            task_id: Some(run.id.clone()),
            metadata: None,
        };
        Self {
            task_id: run.id.clone(),
            context_id,
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: rfc3339(run.created_at),
            },
            history: vec![first],
            last_seq: 0,
            rejected: false,
        }
    }

    fn message(&self, seq: i64, role: Role, text: impl Into<String>) -> Message {
        let mut message = Message::agent_text(
            format!("{}:{seq}", self.task_id),
            text,
            Some(self.task_id.clone()),
            Some(self.context_id.clone()),
        );
        message.role = role;
        message
    }

    /// Applies the next event; returns the change a stream shows for it, if any.
    pub fn apply(&mut self, record: &EventRecord) -> Option<Change> {
        self.last_seq = record.seq;
        let event: RunEvent = serde_json::from_str(&record.data).ok()?;
        let at = rfc3339(record.at);
        match event {
            RunEvent::RunStatus {
                status,
                reason,
                answer,
            } => {
                let state = state_of(status, self.rejected);
                let message = match status {
                    RunStatus::Completed => {
                        answer.map(|a| self.message(record.seq, Role::Agent, a))
                    }
                    RunStatus::Failed | RunStatus::Unknown | RunStatus::AuthRequired => {
                        reason.map(|r| self.message(record.seq, Role::Agent, r))
                    }
                    RunStatus::Paused => Some(self.message(
                        record.seq,
                        Role::Agent,
                        "A person has taken control of the computer; the task goes on when \
                         they hand it back.",
                    )),
                    // The question, already in the history.
                    RunStatus::WaitingForInput => self
                        .history
                        .last()
                        .filter(|m| m.role == Role::Agent)
                        .cloned(),
                    _ => None,
                };
                if state == self.status.state && message.is_none() {
                    return None;
                }
                if let Some(message) = &message
                    && status != RunStatus::WaitingForInput
                {
                    self.history.push(message.clone());
                }
                self.status = TaskStatus {
                    state,
                    message,
                    timestamp: at,
                };
                Some(Change::Status(self.status.clone()))
            }
            RunEvent::AgentMessage { text, .. } => {
                let message = self.message(record.seq, Role::Agent, text);
                self.history.push(message.clone());
                self.status = TaskStatus {
                    state: TaskState::Working,
                    message: Some(message),
                    timestamp: at,
                };
                Some(Change::Status(self.status.clone()))
            }
            RunEvent::InputRequested { question, .. } => {
                // Shown with the `waiting_for_input` status that follows.
                let message = self.message(record.seq, Role::Agent, question);
                self.history.push(message);
                None
            }
            RunEvent::InputReceived {
                text, message_id, ..
            } => {
                let mut message = self.message(record.seq, Role::User, text);
                if let Some(id) = message_id {
                    // The client's own id for the message it sent.
                    message.message_id = id;
                }
                self.history.push(message);
                None
            }
            RunEvent::Error {
                kind: ErrorKind::Rejected,
                fatal: true,
                ..
            } => {
                self.rejected = true;
                None
            }
            RunEvent::ArtifactCreated { name, kind, .. } if shown_artifact(&kind) => {
                Some(Change::Artifact { name, kind })
            }
            _ => None,
        }
    }

    /// The history's last `length` messages (all when `None`).
    pub fn history(&self, length: Option<usize>) -> Vec<Message> {
        let length = length.unwrap_or(self.history.len());
        let skip = self.history.len().saturating_sub(length);
        self.history[skip..].to_vec()
    }

    /// The update a change is, once its artifact is read.
    pub fn status_update(&self, status: TaskStatus) -> Update {
        Update::Status {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status,
        }
    }
}

/// Whether an artifact of this kind is one of the task's (screenshots are the run's record
/// and inputs the client's own files, not its result).
pub fn shown_artifact(kind: &str) -> bool {
    !matches!(kind, "screenshot" | "input")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: i64, event: RunEvent) -> EventRecord {
        EventRecord {
            seq,
            kind: event.kind().to_string(),
            data: serde_json::to_string(&event).unwrap(),
            at: 1_700_000_000_000 + seq,
        }
    }

    fn status(status: RunStatus) -> RunEvent {
        RunEvent::RunStatus {
            status,
            reason: None,
            answer: None,
        }
    }

    fn run() -> RunRecord {
        RunRecord {
            id: "run_1".into(),
            owner_key_id: "k".into(),
            task: "book a table".into(),
            model: "conformance".into(),
            sandbox_id: None,
            sandbox_taken: false,
            status: RunStatus::Queued,
            limits: agent::Limits::default(),
            metadata: Default::default(),
            idempotency_key: None,
            request_hash: None,
            answer: None,
            reason: None,
            lease_owner: None,
            lease_expires_at: None,
            last_seq: 0,
            created_at: 1_700_000_000_000,
            updated_at: 1_700_000_000_000,
            ended_at: None,
            context_id: Some("ctx-1".into()),
            message_id: Some("msg-1".into()),
        }
    }

    #[test]
    fn a_question_and_its_answer_become_the_conversation() {
        let mut p = Projection::new(&run());
        assert_eq!(p.apply(&record(1, status(RunStatus::Queued))), None);
        assert!(matches!(
            p.apply(&record(2, status(RunStatus::Running))),
            Some(Change::Status(TaskStatus {
                state: TaskState::Working,
                ..
            }))
        ));
        let ask = RunEvent::InputRequested {
            request_id: "input-1".into(),
            kind: agent::InputKind::Question,
            question: "Which day?".into(),
            safety_checks: vec![],
        };
        assert_eq!(p.apply(&record(3, ask)), None);
        let Some(Change::Status(waiting)) = p.apply(&record(4, status(RunStatus::WaitingForInput)))
        else {
            panic!("no status");
        };
        assert_eq!(waiting.state, TaskState::InputRequired);
        assert_eq!(waiting.message.as_ref().unwrap().text(), "Which day?");
        let answer = RunEvent::InputReceived {
            request_id: "input-1".into(),
            text: "Friday".into(),
            approved: None,
            message_id: Some("client-msg-2".into()),
        };
        p.apply(&record(5, answer));
        p.apply(&record(6, status(RunStatus::Running)));
        let done = RunEvent::RunStatus {
            status: RunStatus::Completed,
            reason: None,
            answer: Some("Booked".into()),
        };
        p.apply(&record(7, done));
        assert_eq!(p.status.state, TaskState::Completed);
        let texts: Vec<_> = p.history.iter().map(|m| (m.role, m.text())).collect();
        assert_eq!(
            texts,
            vec![
                (Role::User, "book a table".to_string()),
                (Role::Agent, "Which day?".to_string()),
                (Role::User, "Friday".to_string()),
                (Role::Agent, "Booked".to_string()),
            ]
        );
        assert_eq!(p.history[0].message_id, "msg-1");
        assert_eq!(
            p.history[2].message_id, "client-msg-2",
            "the client's own id"
        );
        assert_eq!(p.history(Some(1)).len(), 1);
        assert_eq!(p.history(Some(0)).len(), 0);
    }

    #[test]
    fn a_declined_task_is_rejected_and_screenshots_are_not_artifacts() {
        let mut p = Projection::new(&run());
        p.apply(&record(
            1,
            RunEvent::Error {
                step: None,
                kind: ErrorKind::Rejected,
                message: "no".into(),
                fatal: true,
            },
        ));
        p.apply(&record(2, status(RunStatus::Failed)));
        assert_eq!(p.status.state, TaskState::Rejected);
        let shot = RunEvent::ArtifactCreated {
            name: "screenshots/o1.png".into(),
            kind: "screenshot".into(),
            size: 1,
            content_type: "image/png".into(),
            sha256: String::new(),
        };
        assert_eq!(p.apply(&record(3, shot)), None);
    }
}
