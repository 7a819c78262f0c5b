//! The one internal model of A2A that both wire versions are read into and written from
//! ([`super::v03`], [`super::v10`]): messages and their parts, tasks with their status, history
//! and artifacts, the updates a stream carries, and the calls a client makes.

use serde_json::{Map, Value};

/// Where a task is. `Submitted`, `Working` go on; `InputRequired`, `AuthRequired` wait for
/// the client; the rest are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
}

impl TaskState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Waits for the client (a blocking send returns, a stream ends).
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    /// The end of a blocking send or of a stream: terminal or interrupted.
    pub fn ends_wait(self) -> bool {
        self.is_terminal() || self.is_interrupted()
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Agent,
}

/// What a part carries.
#[derive(Debug, Clone, PartialEq)]
pub enum PartBody {
    Text(String),
    /// File content, inline.
    Bytes(Vec<u8>),
    /// File content, by reference.
    Url(String),
    /// Structured data.
    Data(Value),
}

/// One part of a message or an artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub body: PartBody,
    pub media_type: Option<String>,
    pub filename: Option<String>,
}

impl Part {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            body: PartBody::Text(text.into()),
            media_type: None,
            filename: None,
        }
    }
}

/// A message of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub message_id: String,
    pub role: Role,
    pub parts: Vec<Part>,
    pub context_id: Option<String>,
    pub task_id: Option<String>,
    pub metadata: Option<Map<String, Value>>,
}

impl Message {
    /// An agent's message of one text part.
    pub fn agent_text(
        message_id: String,
        text: impl Into<String>,
        task_id: Option<String>,
        context_id: Option<String>,
    ) -> Self {
        Self {
            message_id,
            role: Role::Agent,
            parts: vec![Part::text(text)],
            context_id,
            task_id,
            metadata: None,
        }
    }

    /// The text of its text parts, one per line.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|part| match &part.body {
                PartBody::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A task's state now.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    pub state: TaskState,
    /// What the agent says about it (its question when input is required, its answer when
    /// completed, the reason when it failed).
    pub message: Option<Message>,
    /// RFC 3339, UTC.
    pub timestamp: String,
}

/// Something a task produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub artifact_id: String,
    pub name: Option<String>,
    pub parts: Vec<Part>,
}

/// A unit of work: an Agentbox run.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    pub history: Vec<Message>,
    pub artifacts: Vec<Artifact>,
    pub metadata: Option<Map<String, Value>>,
}

/// A change to a task, as a stream carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Status {
        task_id: String,
        context_id: String,
        status: TaskStatus,
    },
    Artifact {
        task_id: String,
        context_id: String,
        artifact: Artifact,
    },
}

impl Update {
    /// Whether the stream ends with it.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Status { status, .. } if status.state.ends_wait())
    }
}

/// What a send answers: a task, or a direct message (no task is made).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Task(Task),
    Message(Message),
}

/// One event of a stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Task(Task),
    Message(Message),
    Update(Update),
}

/// `SendMessage` / `message/send` (and their streaming forms).
#[derive(Debug, Clone, PartialEq)]
pub struct SendRequest {
    pub message: Message,
    /// Answer at once rather than when the task ends or waits for the client.
    pub return_immediately: bool,
    pub history_length: Option<usize>,
    /// The HTTP request's `Idempotency-Key`: the same key and message give the same task.
    pub idempotency_key: Option<String>,
}

/// `GetTask` / `tasks/get`.
#[derive(Debug, Clone, PartialEq)]
pub struct GetRequest {
    pub id: String,
    pub history_length: Option<usize>,
}

/// `ListTasks`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListRequest {
    pub context_id: Option<String>,
    pub state: Option<TaskState>,
    pub page_size: Option<usize>,
    pub page_token: Option<String>,
    pub history_length: Option<usize>,
    pub include_artifacts: bool,
    /// Only tasks whose status changed after this time (ms since the epoch).
    pub status_timestamp_after: Option<i64>,
}

/// A page of tasks, newest change first.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// Empty on the last page.
    pub next_page_token: String,
    pub page_size: usize,
    pub total_size: usize,
}

/// A call a client makes, whichever version it spoke.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Send(SendRequest),
    Stream(SendRequest),
    Get(GetRequest),
    List(ListRequest),
    Cancel {
        id: String,
    },
    Subscribe {
        id: String,
    },
    /// Any push-notification configuration method (not offered).
    PushConfig,
    /// The authenticated extended card (not offered).
    ExtendedCard,
}

impl Call {
    /// Whether it is answered with a stream.
    pub fn streams(&self) -> bool {
        matches!(self, Self::Stream(_) | Self::Subscribe { .. })
    }
}
