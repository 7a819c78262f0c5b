//! [`Tasks`]: A2A's task operations over the runs service. A message makes a run (or answers
//! the question of the run it names); a task is read from its run's record, log and
//! artifacts ([`super::project`]); a stream follows the log. Every call is scoped to the API
//! key that makes it: another key's task does not exist for it.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::project::{Change, Projection, context_of, shown_artifact};
use crate::a2a::model::{
    Artifact, ListRequest, Message, Part, PartBody, Reply, Role, SendRequest, StreamItem, Task,
    TaskPage, TaskState, Update,
};
use crate::a2a::rpc::A2aError;
use crate::db::{ArtifactRecord, EventRecord, RunFilter, RunRecord, RunStatus};
use crate::runs::conformance::answers_directly;
use crate::runs::{InputFile, RunError, RunRequest, Runs, backend::CONFORMANCE};
use crate::secret::new_id;

/// Files up to this size are sent inline with a task; larger ones by URL (with the key).
const INLINE_BYTES: i64 = 64 * 1024;
/// Tasks in a page when the client does not say.
const DEFAULT_PAGE: usize = 50;
/// Events a stream may hold for a slow client before it falls behind (it then reads the log).
const STREAM_BUFFER: usize = 64;
/// The key of the task metadata that carries the computer session (an extension, not a
/// standard field).
pub const COMPUTER_SESSION_EXTENSION: &str = "https://agentbox.dev/a2a/computer-session/v1";

/// The task service.
pub struct Tasks {
    runs: Arc<Runs>,
    /// Base URL of this server, for artifact and session links.
    public_url: String,
    /// The model of tasks whose message names none.
    default_model: Option<String>,
}

fn run_error(error: RunError) -> A2aError {
    match error {
        RunError::NotFound(id) => A2aError::TaskNotFound(format!("task {id} not found")),
        RunError::Invalid(invalid) => A2aError::InvalidParams(invalid.to_string()),
        RunError::Conflict(message) => A2aError::Unsupported(message),
        other => {
            tracing::warn!(error = %other, "an A2A call failed");
            A2aError::Internal(other.to_string())
        }
    }
}

impl Tasks {
    pub fn new(runs: Arc<Runs>, public_url: String, default_model: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            runs,
            public_url,
            default_model,
        })
    }

    async fn run(&self, owner: &str, id: &str) -> Result<RunRecord, A2aError> {
        self.runs.get(id, Some(owner)).await.map_err(run_error)
    }

    /// A run's log up to now, folded.
    async fn project(&self, run: &RunRecord) -> Result<Projection, A2aError> {
        let mut projection = Projection::new(run);
        let mut after = 0;
        loop {
            let (_, page) = self
                .runs
                .events(&run.id, None, after, 500)
                .await
                .map_err(run_error)?;
            let full = page.len() == 500;
            for event in &page {
                projection.apply(event);
                after = event.seq;
            }
            if !full {
                return Ok(projection);
            }
        }
    }

    /// The task a run is now.
    async fn task(
        &self,
        run: &RunRecord,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<(Task, Projection), A2aError> {
        let projection = self.project(run).await?;
        let artifacts = if include_artifacts {
            let records = self
                .runs
                .artifacts(&run.id, None)
                .await
                .map_err(run_error)?;
            let mut artifacts = Vec::new();
            for record in records.iter().filter(|r| shown_artifact(&r.kind)) {
                artifacts.push(self.artifact(record).await?);
            }
            artifacts
        } else {
            Vec::new()
        };
        let task = Task {
            id: run.id.clone(),
            context_id: projection.context_id.clone(),
            status: projection.status.clone(),
            history: projection.history(history_length),
            artifacts,
            metadata: Some(self.metadata(run).await),
        };
        Ok((task, projection))
    }

    /// The computer-session extension: which sandbox the run drives and where to see it,
    /// with a watch link (a share link of the run: watch-only desktop, timeline, artifacts)
    /// for a run that drives a computer.
    async fn metadata(&self, run: &RunRecord) -> Map<String, Value> {
        let base = &self.public_url;
        let mut session = json!({
            "runUrl": format!("{base}/v1/runs/{}", run.id),
            "consoleUrl": format!("{base}/runs/{}", run.id),
            "artifactsUrl": format!("{base}/v1/runs/{}/artifacts", run.id),
        });
        if let Some(sandbox) = &run.sandbox_id {
            session["computerSessionId"] = sandbox.clone().into();
        }
        if run.model != CONFORMANCE {
            let token = self
                .runs
                .sandboxes
                .watch_link_token(&run.id, run.sandbox_id.as_deref(), &run.owner_key_id)
                .await;
            match token {
                Ok(token) => {
                    let query = serde_urlencoded::to_string([("token", token.as_str())])
                        .unwrap_or_default();
                    session["watchUrl"] = format!("{base}/share/runs/{}?{query}", run.id).into();
                }
                Err(error) => tracing::warn!(run_id = %run.id, %error, "no watch link"),
            }
        }
        let mut map = Map::new();
        map.insert(COMPUTER_SESSION_EXTENSION.into(), session);
        map
    }

    /// An artifact as a part: text and data kinds by value, a link as its URL, a file inline
    /// when small and by URL (which needs the key) otherwise.
    async fn artifact(&self, record: &ArtifactRecord) -> Result<Artifact, A2aError> {
        let filename = record
            .name
            .rsplit('/')
            .next()
            .unwrap_or(&record.name)
            .to_string();
        let url = format!(
            "{}/v1/runs/{}/artifacts/{}",
            self.public_url, record.run_id, record.name
        );
        let by_value =
            matches!(record.kind.as_str(), "text" | "data" | "link") || record.size <= INLINE_BYTES;
        let bytes = if by_value {
            match self.runs.artifact(&record.run_id, None, &record.name).await {
                Ok((_, bytes)) => Some(bytes),
                Err(RunError::NotFound(_)) => None,
                Err(error) => return Err(run_error(error)),
            }
        } else {
            None
        };
        let media_type = Some(record.content_type.clone());
        let part = match (record.kind.as_str(), bytes) {
            ("text", Some(bytes)) => Part::text(String::from_utf8_lossy(&bytes).into_owned()),
            ("data", Some(bytes)) => Part {
                body: PartBody::Data(serde_json::from_slice(&bytes).unwrap_or(Value::Null)),
                media_type,
                filename: None,
            },
            ("link", Some(bytes)) => Part {
                body: PartBody::Url(String::from_utf8_lossy(&bytes).trim().to_string()),
                media_type,
                filename: Some(filename.clone()),
            },
            (_, Some(bytes)) => Part {
                body: PartBody::Bytes(bytes.to_vec()),
                media_type,
                filename: Some(filename.clone()),
            },
            (_, None) => Part {
                body: PartBody::Url(url),
                media_type,
                filename: Some(filename.clone()),
            },
        };
        Ok(Artifact {
            artifact_id: record.name.clone(),
            name: Some(filename),
            parts: vec![part],
        })
    }

    /// `SendMessage` / `message/send`: a new task, or the answer to a task's question; waits
    /// until the task ends or asks again unless told to return at once.
    pub async fn send(
        self: &Arc<Self>,
        owner: &str,
        request: SendRequest,
    ) -> Result<Reply, A2aError> {
        let history_length = request.history_length;
        let return_immediately = request.return_immediately;
        match self.submit(owner, request).await? {
            Submitted::Direct(message) => Ok(Reply::Message(message)),
            Submitted::Run { run, after } => {
                if !return_immediately {
                    self.settle(&run.id, after).await;
                }
                let run = self.run(owner, &run.id).await?;
                let (task, _) = self.task(&run, history_length, true).await?;
                Ok(Reply::Task(task))
            }
        }
    }

    /// `SendStreamingMessage` / `message/stream`: the task, then its updates until it ends or
    /// asks the client (or one direct message).
    pub async fn stream(
        self: &Arc<Self>,
        owner: &str,
        request: SendRequest,
    ) -> Result<mpsc::Receiver<StreamItem>, A2aError> {
        let history_length = request.history_length;
        match self.submit(owner, request).await? {
            Submitted::Direct(message) => {
                let (tx, rx) = mpsc::channel(1);
                // The receiver is alive: it is returned below.
                let _ = tx.try_send(StreamItem::Message(message));
                Ok(rx)
            }
            Submitted::Run { run, .. } => {
                let run = self.run(owner, &run.id).await?;
                self.follow(run, history_length, Until::EndsOrAsks).await
            }
        }
    }

    /// `SubscribeToTask` / `tasks/resubscribe`: a task that is not over, then its updates.
    pub async fn subscribe(
        self: &Arc<Self>,
        owner: &str,
        id: &str,
    ) -> Result<mpsc::Receiver<StreamItem>, A2aError> {
        let run = self.run(owner, id).await?;
        if run.status.is_terminal() {
            return Err(A2aError::Unsupported(format!(
                "task {id} is {}: there is nothing to subscribe to",
                run.status.as_str()
            )));
        }
        self.follow(run, None, Until::Ends).await
    }

    /// The task now, then each change from the log after it, until the task ends or waits.
    async fn follow(
        self: &Arc<Self>,
        run: RunRecord,
        history_length: Option<usize>,
        until: Until,
    ) -> Result<mpsc::Receiver<StreamItem>, A2aError> {
        let (task, mut projection) = self.task(&run, history_length, true).await?;
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let ended = until.ends_at(task.status.state) && projection.last_seq >= run.last_seq;
        // The receiver is alive: it is returned below.
        let _ = tx.try_send(StreamItem::Task(task));
        if ended {
            return Ok(rx);
        }
        let tasks = self.clone();
        let mut events = self.runs.follow(&run.id, projection.last_seq);
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let Some(change) = projection.apply(&event) else {
                    continue;
                };
                let update = match change {
                    Change::Status(status) => projection.status_update(status),
                    Change::Artifact { name, .. } => {
                        match tasks.artifact_update(&projection, &name).await {
                            Some(update) => update,
                            None => continue,
                        }
                    }
                };
                let last =
                    matches!(&update, Update::Status { status, .. } if until.ends_at(status.state));
                if tx.send(StreamItem::Update(update)).await.is_err() || last {
                    return;
                }
            }
        });
        Ok(rx)
    }

    async fn artifact_update(&self, projection: &Projection, name: &str) -> Option<Update> {
        let record = match self.runs.artifacts(&projection.task_id, None).await {
            Ok(records) => records.into_iter().find(|r| r.name == name)?,
            Err(error) => {
                tracing::warn!(%error, "reading an artifact for a stream failed");
                return None;
            }
        };
        let artifact = self.artifact(&record).await.ok()?;
        Some(Update::Artifact {
            task_id: projection.task_id.clone(),
            context_id: projection.context_id.clone(),
            artifact,
        })
    }

    /// Waits until the run ends or waits for the client, reading the log after `after`.
    async fn settle(self: &Arc<Self>, id: &str, after: i64) {
        let mut events = self.runs.follow(id, after);
        while let Some(event) = events.recv().await {
            if settles(&event) {
                return;
            }
        }
    }

    /// Makes the run a message asks for, or answers the question of the run it names.
    async fn submit(&self, owner: &str, request: SendRequest) -> Result<Submitted, A2aError> {
        let message = request.message;
        if message.role != Role::User {
            return Err(A2aError::InvalidParams(
                "`message.role` must be the user's".into(),
            ));
        }
        if let Some(task_id) = &message.task_id {
            let run = self.run(owner, task_id).await?;
            if let Some(context) = &message.context_id
                && *context != context_of(&run)
            {
                return Err(A2aError::InvalidParams(format!(
                    "`message.contextId` {context:?} is not the context of task {task_id}"
                )));
            }
            if run.status.is_terminal() {
                return Err(A2aError::Unsupported(format!(
                    "task {task_id} is {}: it takes no more messages",
                    run.status.as_str()
                )));
            }
            if !matches!(
                run.status,
                RunStatus::WaitingForInput | RunStatus::AuthRequired
            ) {
                return Err(A2aError::Unsupported(format!(
                    "task {task_id} is {}: it takes a message only when it asks for input",
                    run.status.as_str()
                )));
            }
            let (text, files) = task_of(&message, run.model == CONFORMANCE)?;
            if !files.is_empty() {
                return Err(A2aError::ContentType(
                    "an answer to a task's question is text: files go with the message that \
                     makes the task"
                        .into(),
                ));
            }
            let after = run.last_seq;
            self.runs
                .answer_message(task_id, Some(owner), text, Some(message.message_id.clone()))
                .await
                .map_err(run_error)?;
            return Ok(Submitted::Run {
                run: Box::new(run),
                after,
            });
        }
        let model = match message.metadata.as_ref().and_then(|m| m.get("model")) {
            Some(Value::String(model)) => model.clone(),
            Some(_) => {
                return Err(A2aError::InvalidParams(
                    "`message.metadata.model` must be a string".into(),
                ));
            }
            None => self.default_model.clone().ok_or_else(|| {
                A2aError::InvalidParams(
                    "no model: name one in `message.metadata.model`, or start the server with \
                     --a2a-model"
                        .into(),
                )
            })?,
        };
        let conformance = model.trim() == CONFORMANCE;
        let (text, inputs) = task_of(&message, conformance)?;
        let context_id = message.context_id.clone().unwrap_or_else(|| new_id("ctx"));
        if conformance && let Some(reply) = answers_directly(&message.message_id, &text) {
            return Ok(Submitted::Direct(Message::agent_text(
                new_id("msg"),
                reply,
                None,
                Some(context_id),
            )));
        }
        let run_request = RunRequest {
            task: text,
            model,
            idempotency_key: request.idempotency_key.clone(),
            inputs,
            context_id: Some(context_id),
            message_id: Some(message.message_id.clone()),
            ..RunRequest::default()
        };
        let (run, _) = self
            .runs
            .create(owner, run_request)
            .await
            .map_err(|error| match error {
                RunError::Conflict(message) => A2aError::InvalidParams(message),
                other => run_error(other),
            })?;
        Ok(Submitted::Run {
            run: Box::new(run),
            after: 0,
        })
    }

    /// `GetTask` / `tasks/get`.
    pub async fn get(
        &self,
        owner: &str,
        id: &str,
        history_length: Option<usize>,
    ) -> Result<Task, A2aError> {
        let run = self.run(owner, id).await?;
        Ok(self.task(&run, history_length, true).await?.0)
    }

    /// `CancelTask` / `tasks/cancel`: the task once its run has written `canceled`.
    pub async fn cancel(&self, owner: &str, id: &str) -> Result<Task, A2aError> {
        let run = self.run(owner, id).await?;
        if run.status.is_terminal() {
            return Err(A2aError::TaskNotCancelable(format!(
                "task {id} is {}",
                run.status.as_str()
            )));
        }
        match self.runs.cancel(id, Some(owner)).await {
            Ok(_) => {}
            Err(RunError::Conflict(message)) => return Err(A2aError::TaskNotCancelable(message)),
            Err(error) => return Err(run_error(error)),
        }
        self.get(owner, id, None).await
    }

    /// `ListTasks`: the caller's tasks, the most recently changed first.
    pub async fn list(&self, owner: &str, request: ListRequest) -> Result<TaskPage, A2aError> {
        let page_size = request.page_size.unwrap_or(DEFAULT_PAGE);
        let after = request.page_token.as_deref().map(read_token).transpose()?;
        let status = match request.state {
            None => None,
            Some(state) => match status_for(state) {
                Some(status) => Some(status),
                // No run is ever in it.
                None => {
                    return Ok(TaskPage {
                        tasks: Vec::new(),
                        next_page_token: String::new(),
                        page_size,
                        total_size: 0,
                    });
                }
            },
        };
        let filter = RunFilter {
            owner_key_id: Some(owner.to_string()),
            status,
            context_id: request.context_id.clone(),
            by_update: true,
            after,
            limit: Some(i64::try_from(page_size).unwrap_or(100) + 1),
            updated_after: request.status_timestamp_after,
        };
        let store = self.runs.store();
        let mut runs = store
            .list_runs(&filter)
            .await
            .map_err(|e| run_error(e.into()))?;
        let total_size = store
            .count_runs(&filter)
            .await
            .map_err(|e| run_error(e.into()))?;
        let next_page_token = if runs.len() > page_size {
            runs.truncate(page_size);
            runs.last()
                .map(|last| write_token(last.updated_at, &last.id))
                .unwrap_or_default()
        } else {
            String::new()
        };
        let mut tasks = Vec::with_capacity(runs.len());
        for run in &runs {
            let (task, _) = self
                .task(run, request.history_length, request.include_artifacts)
                .await?;
            if request.state.is_none_or(|state| state == task.status.state) {
                tasks.push(task);
            }
        }
        Ok(TaskPage {
            tasks,
            next_page_token,
            page_size,
            total_size,
        })
    }
}

/// Where a stream ends.
#[derive(Debug, Clone, Copy)]
enum Until {
    /// At a terminal state or when the task asks the client (a send's stream).
    EndsOrAsks,
    /// At a terminal state only (a subscription outlives a question and its answer).
    Ends,
}

impl Until {
    fn ends_at(self, state: TaskState) -> bool {
        match self {
            Until::EndsOrAsks => state.ends_wait(),
            Until::Ends => state.is_terminal(),
        }
    }
}

/// What a message led to.
enum Submitted {
    /// A direct answer; no task was made.
    Direct(Message),
    /// The run it made or answered, and the last seq before the message.
    Run { run: Box<RunRecord>, after: i64 },
}

/// The run status a task state lists by (`None`: no run is in that state).
fn status_for(state: TaskState) -> Option<RunStatus> {
    match state {
        TaskState::Submitted => Some(RunStatus::Queued),
        TaskState::Working => Some(RunStatus::Running),
        TaskState::InputRequired => Some(RunStatus::WaitingForInput),
        TaskState::Completed => Some(RunStatus::Completed),
        TaskState::Failed | TaskState::Rejected => Some(RunStatus::Failed),
        TaskState::Canceled => Some(RunStatus::Canceled),
        TaskState::AuthRequired => Some(RunStatus::AuthRequired),
    }
}

/// Whether a blocking send returns after this event: the run ended or waits for the client.
fn settles(event: &EventRecord) -> bool {
    serde_json::from_str::<agent::RunEvent>(&event.data).is_ok_and(|event| {
        matches!(event, agent::RunEvent::RunStatus { status, .. }
            if status.is_terminal()
                || matches!(status, RunStatus::WaitingForInput | RunStatus::Paused | RunStatus::AuthRequired))
    })
}

/// A task from a message: its text parts and its data parts (as JSON) make the text; file
/// parts sent inline become the run's input files (in the sandbox's `~/inputs`). A backend
/// without a computer (the conformance executor) takes files by naming them in the text.
/// Files by URL are refused: the orchestrator fetches no URL a client names.
fn task_of(message: &Message, conformance: bool) -> Result<(String, Vec<InputFile>), A2aError> {
    let mut lines = Vec::new();
    let mut files = Vec::new();
    for (index, part) in message.parts.iter().enumerate() {
        match &part.body {
            PartBody::Text(text) => lines.push(text.clone()),
            PartBody::Data(data) => lines.push(data.to_string()),
            PartBody::Bytes(_) | PartBody::Url(_) if conformance => lines.push(format!(
                "[a file: {}, {}]",
                part.filename.as_deref().unwrap_or("unnamed"),
                part.media_type.as_deref().unwrap_or("no media type")
            )),
            PartBody::Bytes(bytes) => files.push(InputFile {
                name: file_name(part.filename.as_deref(), index),
                bytes: bytes::Bytes::from(bytes.clone()),
            }),
            PartBody::Url(_) => {
                return Err(A2aError::ContentType(format!(
                    "`message.parts[{index}]`: files by URL are not fetched (the orchestrator \
                     reaches no address a client names); send the file's bytes"
                )));
            }
        }
    }
    let text = lines.join("\n");
    if text.trim().is_empty() {
        return Err(A2aError::InvalidParams(
            "`message.parts` hold no text to make a task of".into(),
        ));
    }
    Ok((text, files))
}

/// A file part's name as an input file's: its own, made safe, or `file-<n>`.
fn file_name(given: Option<&str>, index: usize) -> String {
    let base = given
        .and_then(|name| name.rsplit(['/', '\\']).next())
        .unwrap_or_default();
    let mut clean: String = base
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ' ') {
                c
            } else {
                '_'
            }
        })
        .collect();
    while clean.starts_with('.') {
        clean.replace_range(0..1, "_");
    }
    if clean.trim().is_empty() {
        format!("file-{index}")
    } else {
        clean
    }
}

/// A page token: the last task's change time and id.
fn write_token(updated_at: i64, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{updated_at}:{id}"))
}

fn read_token(token: &str) -> Result<(i64, String), A2aError> {
    let bad = || A2aError::InvalidParams("`pageToken` is not a token this server gave".into());
    let text = URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(bad)?;
    let (time, id) = text.split_once(':').ok_or_else(bad)?;
    Ok((time.parse().map_err(|_| bad())?, id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_strangers_are_refused() {
        let token = write_token(1_700_000_000_123, "run_abc");
        assert_eq!(
            read_token(&token).unwrap(),
            (1_700_000_000_123, "run_abc".to_string())
        );
        assert_eq!(read_token("!!").unwrap_err().code(), -32602);
        assert_eq!(
            read_token(&URL_SAFE_NO_PAD.encode("x")).unwrap_err().code(),
            -32602
        );
    }

    #[test]
    fn a_task_is_made_of_text_data_and_inline_files() {
        let mut message = Message::agent_text("m".into(), "hello", None, None);
        message.role = Role::User;
        message.parts.push(Part {
            body: PartBody::Data(json!({"a": 1})),
            media_type: None,
            filename: None,
        });
        message.parts.push(Part {
            body: PartBody::Bytes(b"x,y".to_vec()),
            media_type: Some("text/csv".into()),
            filename: Some("../../etc/.data.csv".into()),
        });
        let (text, files) = task_of(&message, false).unwrap();
        assert_eq!(text, "hello\n{\"a\":1}");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].name, "_data.csv");
        assert_eq!(&files[0].bytes[..], b"x,y");
        let (named, none) = task_of(&message, true).unwrap();
        assert!(named.ends_with("[a file: ../../etc/.data.csv, text/csv]") && none.is_empty());
        message.parts.push(Part {
            body: PartBody::Url("http://169.254.169.254/".into()),
            media_type: None,
            filename: None,
        });
        assert_eq!(task_of(&message, false).unwrap_err().code(), -32005);
        assert_eq!(file_name(None, 3), "file-3");
    }
}
