//! The remote A2A agent as a run's backend (`model: "a2a:<agent card URL>"`): the run hands
//! its task to another agent over A2A 1.0 and follows it to the end. No sandbox is taken.
//!
//! Seed 003's semantics table is the rule book:
//!
//! | the remote | the run |
//! |---|---|
//! | answers with a Message | completed with that answer; no task handle is invented |
//! | answers with a Task | its ids kept (`remote.task`, with the checkpoint, in one transaction); accepted is not done |
//! | input-required | `waiting_for_input` with its question; the run's input route answers it |
//! | auth-required | `auth_required` with its message (never a chat question); the input route says "done" |
//! | completed | completed: *the remote says* it completed |
//! | rejected / failed | failed, the remote's state and reason kept in `remote.task` and the error |
//! | a cancel sent | `canceling` until the remote confirms; a refusal keeps the run going (409 to the caller) |
//! | a dropped stream, a restart | the known task is asked for (`GetTask`), then followed again |
//! | a send with no handle back | `unknown`; never sent again |
//!
//! Streams are followed when the card says the agent streams; otherwise the task is polled
//! (0.5 s, growing to 5 s; back to 0.5 s after a change). Everything is bounded by the run's
//! `max_seconds`. Files the remote gives (inline or by URL) are kept as the run's artifacts
//! (`remote/<name>`), a download at most [`MAX_FILE_BYTES`] within [`DOWNLOAD_TIMEOUT`]; one that
//! fails is an `artifact.skipped` with the reason.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use agent::{ErrorKind, EventSink, InputKind, InputSignal, Phase, RunEvent, RunStatus};
use bytes::Bytes;
use reqwest::Url;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::sink::RunSink;
use super::{ActiveRun, Runs};
use crate::a2a::client::{self, A2aClient, ClientError, EventStream, RemoteAgent};
use crate::a2a::codec;
use crate::a2a::model::{
    Artifact, Message, PartBody, Reply, Role, StreamItem, TaskState, TaskStatus, Update,
};
use crate::a2a::rpc::Version;
use crate::db::RunRecord;

/// The `model` prefix that selects this backend.
pub const PREFIX: &str = "a2a:";
/// Largest file downloaded from a remote.
pub const MAX_FILE_BYTES: usize = 64 * 1024 * 1024;
/// How long one download may take.
pub const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Polling bounds.
const POLL_FIRST: Duration = Duration::from_millis(500);
const POLL_MAX: Duration = Duration::from_secs(5);
/// How often an `auth_required` task is asked whether it moved on.
const AUTH_POLL: Duration = Duration::from_secs(3);

/// What a restart resumes from: the run's checkpoint, stored with the event that reveals it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct RemoteCheckpoint {
    /// Set (with `remote.submitted`) before the task is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message_id: Option<String>,
    /// Set (with `remote.task`) when the remote names its task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context_id: Option<String>,
}

/// Why following stopped early.
enum Stop {
    /// The sink refused (the run ended elsewhere, or its lease moved): nothing more is written.
    Sink,
}

/// What to do after an event of the remote.
#[derive(Debug, PartialEq)]
enum Flow {
    Continue,
    Input(String),
    Auth(String),
    Done(RunStatus),
}

/// What woke the follower.
enum Next {
    Item(Box<Result<Option<StreamItem>, ClientError>>),
    Tick,
    Cancel,
    OutOfTime,
}

/// Where the remote's events come from.
enum Source {
    Stream(Box<EventStream>),
    Poll,
}

/// Drives `run` against the agent whose card is at `card_url`.
pub(crate) async fn drive(
    runs: &Arc<Runs>,
    run: &RunRecord,
    active: &Arc<ActiveRun>,
    sink: &RunSink,
    card_url: Url,
    resume: Option<String>,
) {
    let control = &active.control;
    control.set_phase(Phase::Running);
    let deadline = Instant::now() + Duration::from_secs(run.limits.max_seconds.max(1));
    let ended = match prepare(runs, run, &card_url, resume, deadline).await {
        Ok((client, checkpoint, kept)) => {
            let mut remote = Remote {
                runs,
                run,
                control,
                sink,
                client,
                checkpoint,
                remote_state: None,
                status: RunStatus::Queued,
                canceling: false,
                kept,
                last_text: None,
                deadline,
            };
            remote.run().await.unwrap_or(RunStatus::Failed)
        }
        Err((kind, message)) => {
            for event in [
                RunEvent::Error {
                    step: None,
                    kind,
                    message: message.clone(),
                    fatal: true,
                },
                RunEvent::RunStatus {
                    status: RunStatus::Failed,
                    reason: Some(message),
                    answer: None,
                },
            ] {
                if let Err(error) = sink.emit(event).await {
                    tracing::warn!(%error, "could not record the remote run's failure");
                    break;
                }
            }
            RunStatus::Failed
        }
    };
    control.set_phase(Phase::Finished(ended));
}

/// The client (card read, credential opened), the stored checkpoint and the artifacts already
/// kept; or why the run fails before anything is sent.
async fn prepare(
    runs: &Runs,
    run: &RunRecord,
    card_url: &Url,
    resume: Option<String>,
    deadline: Instant,
) -> Result<(A2aClient, RemoteCheckpoint, HashSet<String>), (ErrorKind, String)> {
    let checkpoint = match resume.filter(|j| !j.trim().is_empty()) {
        None => RemoteCheckpoint::default(),
        Some(json) => serde_json::from_str(&json)
            .map_err(|e| (ErrorKind::Internal, format!("stored checkpoint: {e}")))?,
    };
    let kept = runs
        .store
        .artifacts(&run.id)
        .await
        .map_err(|e| {
            (
                ErrorKind::Internal,
                format!("reading the run's artifacts: {e}"),
            )
        })?
        .into_iter()
        .map(|r| r.name)
        .collect();
    let client = connect(runs, run, card_url, deadline)
        .await
        .map_err(|message| (ErrorKind::RemoteError, message))?;
    Ok((client, checkpoint, kept))
}

/// Reads the card (waiting out a remote that is down, within the run's time) and opens the
/// stored credential for its origin.
async fn connect(
    runs: &Runs,
    run: &RunRecord,
    card_url: &Url,
    deadline: Instant,
) -> Result<A2aClient, String> {
    let origin = client::origin(card_url);
    let bearer = match runs.store.a2a_credential(&run.owner_key_id, &origin).await {
        Ok(None) => None,
        Ok(Some(record)) => Some(
            runs.sandboxes
                .keyring
                .open(
                    &credential_context(&run.owner_key_id, &origin),
                    &record.sealed,
                )
                .ok_or_else(|| {
                    format!(
                        "the credential stored for {origin} does not open (another master key?)"
                    )
                })?,
        ),
        Err(error) => return Err(format!("reading the credential for {origin}: {error}")),
    };
    runs.reach.check_url(card_url)?;
    let http = runs.http.clone()?;
    let mut wait = POLL_FIRST;
    loop {
        match RemoteAgent::discover(&http, card_url, bearer.as_deref()).await {
            Ok(agent) => return Ok(A2aClient::new(http, agent, bearer, runs.reach.clone())),
            Err(ClientError::Unreachable(error)) | Err(ClientError::Transport(error))
                if Instant::now() + wait < deadline =>
            {
                tracing::info!(%error, "the remote agent's card is out of reach; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(POLL_MAX);
            }
            Err(error) => return Err(error.to_string()),
        }
    }
}

struct Remote<'a> {
    runs: &'a Arc<Runs>,
    run: &'a RunRecord,
    control: &'a agent::Control,
    sink: &'a RunSink,
    client: A2aClient,
    checkpoint: RemoteCheckpoint,
    /// The remote's last state and message, as told in `remote.task`.
    remote_state: Option<(TaskState, Option<String>)>,
    /// The run's status as last written.
    status: RunStatus,
    /// A cancel was sent and not confirmed.
    canceling: bool,
    /// Artifact names already kept.
    kept: HashSet<String>,
    /// The last text the remote gave (an answer when its completion says nothing).
    last_text: Option<String>,
    deadline: Instant,
}

impl Remote<'_> {
    fn client(&self) -> &A2aClient {
        &self.client
    }

    async fn emit(&self, event: RunEvent) -> Result<(), Stop> {
        self.sink.emit(event).await.map_err(|error| {
            tracing::warn!(%error, "the remote run's event was not written");
            Stop::Sink
        })
    }

    async fn emit_checkpointed(&self, event: RunEvent) -> Result<(), Stop> {
        let checkpoint = serde_json::to_string(&self.checkpoint).map_err(|_| Stop::Sink)?;
        self.sink
            .append_checkpointed(&event, &checkpoint)
            .await
            .map(drop)
            .map_err(|error| {
                tracing::warn!(%error, "the remote run's checkpoint was not written");
                Stop::Sink
            })
    }

    async fn set_status(&mut self, status: RunStatus, reason: Option<String>) -> Result<(), Stop> {
        if self.status == status && reason.is_none() {
            return Ok(());
        }
        self.status = status;
        self.emit(RunEvent::RunStatus {
            status,
            reason,
            answer: None,
        })
        .await
    }

    async fn fail(&mut self, kind: ErrorKind, message: String) -> Result<RunStatus, Stop> {
        self.emit(RunEvent::Error {
            step: None,
            kind,
            message: message.clone(),
            fatal: true,
        })
        .await?;
        self.end(RunStatus::Failed, Some(message), None).await
    }

    async fn end(
        &mut self,
        status: RunStatus,
        reason: Option<String>,
        answer: Option<String>,
    ) -> Result<RunStatus, Stop> {
        self.status = status;
        self.emit(RunEvent::RunStatus {
            status,
            reason,
            answer,
        })
        .await?;
        Ok(status)
    }

    async fn run(&mut self) -> Result<RunStatus, Stop> {
        if let Some(task_id) = self.checkpoint.task_id.clone() {
            // A restart: the task is known; ask for it and follow it again.
            tracing::info!(%task_id, "following the remote task again after a restart");
            self.set_status(RunStatus::Running, None).await?;
            return self.follow_known(&task_id).await;
        }
        if let Some(message_id) = self.checkpoint.message_id.clone() {
            let reason = format!(
                "the task was sent to {} (message {message_id}) before a restart and no task \
                 handle came back; it is not sent again",
                self.client().agent().name
            );
            return self.end(RunStatus::Unknown, Some(reason), None).await;
        }
        self.submit().await
    }

    /// The first message: the task's text and its input files.
    async fn first_message(&self, message_id: &str) -> Result<Message, String> {
        let mut parts = vec![crate::a2a::model::Part::text(self.run.task.clone())];
        let records = self
            .runs
            .store
            .artifacts(&self.run.id)
            .await
            .map_err(|e| format!("reading the run's input files: {e}"))?;
        for record in records.iter().filter(|r| r.kind == "input") {
            let Some(name) = record.name.strip_prefix("inputs/") else {
                continue;
            };
            let bytes = self
                .runs
                .artifacts
                .get(&self.run.id, &record.name)
                .await
                .map_err(|e| format!("reading input {name}: {e}"))?
                .ok_or_else(|| format!("input {name} is missing from the artifact store"))?;
            parts.push(crate::a2a::model::Part {
                body: PartBody::Bytes(bytes.to_vec()),
                media_type: Some(record.content_type.clone()),
                filename: Some(name.to_string()),
            });
        }
        Ok(Message {
            message_id: message_id.to_string(),
            role: Role::User,
            parts,
            context_id: None,
            task_id: None,
            metadata: None,
        })
    }

    async fn submit(&mut self) -> Result<RunStatus, Stop> {
        let message_id = format!("{}-task", self.run.id);
        let message = match self.first_message(&message_id).await {
            Ok(message) => message,
            Err(error) => return self.fail(ErrorKind::Internal, error).await,
        };
        if self.control.cancel_requested() {
            return self.end(RunStatus::Canceled, None, None).await;
        }
        // From here on the task may reach the remote: it is never sent again.
        self.checkpoint.message_id = Some(message_id.clone());
        self.emit_checkpointed(RunEvent::RemoteSubmitted {
            agent: self.client().agent().card_url.to_string(),
            message_id,
        })
        .await?;
        self.set_status(RunStatus::Running, None).await?;
        let source = if self.client().agent().streaming {
            match self.client().send_streaming(&message).await {
                Ok(mut stream) => {
                    // The first event says what the remote made of the message.
                    match stream.next().await {
                        Ok(Some(item)) => {
                            let flow = self.on_item(item).await?;
                            if let Some(status) = self.settle(flow).await? {
                                return Ok(status);
                            }
                            Source::Stream(Box::new(stream))
                        }
                        Ok(None) => {
                            return self
                                .no_handle("the stream ended before the first event")
                                .await;
                        }
                        Err(error) => return self.submit_failed(error).await,
                    }
                }
                Err(error) => return self.submit_failed(error).await,
            }
        } else {
            match self.client().send(&message).await {
                Ok(Reply::Message(message)) => {
                    let flow = self.on_item(StreamItem::Message(message)).await?;
                    if let Some(status) = self.settle(flow).await? {
                        return Ok(status);
                    }
                    Source::Poll
                }
                Ok(Reply::Task(task)) => {
                    let flow = self.on_item(StreamItem::Task(task)).await?;
                    if let Some(status) = self.settle(flow).await? {
                        return Ok(status);
                    }
                    Source::Poll
                }
                Err(error) => return self.submit_failed(error).await,
            }
        };
        self.follow(source).await
    }

    /// A send that failed: if it cannot have reached the remote, the run failed; otherwise the
    /// outcome is unknown.
    async fn submit_failed(&mut self, error: ClientError) -> Result<RunStatus, Stop> {
        match error {
            ClientError::Unauthorized(status) => {
                let origin = client::origin(&self.client().agent().card_url);
                self.fail(
                    ErrorKind::RemoteError,
                    format!(
                        "the remote agent refused the credential (HTTP {status}); store one for \
                         {origin} with POST /v1/a2a/credentials"
                    ),
                )
                .await
            }
            ClientError::Rpc { code, message } => {
                self.fail(
                    ErrorKind::RemoteError,
                    format!("the remote agent refused the task (error {code}): {message}"),
                )
                .await
            }
            error if !error.reached() => {
                self.fail(
                    ErrorKind::RemoteError,
                    format!("the task was not sent: {error}"),
                )
                .await
            }
            error => self.no_handle(&error.to_string()).await,
        }
    }

    async fn no_handle(&mut self, why: &str) -> Result<RunStatus, Stop> {
        let reason = format!(
            "the task may have reached {} but no task handle came back ({why}); it is not sent \
             again",
            self.client().agent().name
        );
        self.end(RunStatus::Unknown, Some(reason), None).await
    }

    /// Follows a task known by its id: asks for it, then streams or polls.
    async fn follow_known(&mut self, task_id: &str) -> Result<RunStatus, Stop> {
        let flow = self.refresh_task(task_id).await?;
        if let Some(status) = self.settle(flow).await? {
            return Ok(status);
        }
        let source = self.reopen().await?;
        self.follow(source).await
    }

    /// A stream on the known task, or polling.
    async fn reopen(&mut self) -> Result<Source, Stop> {
        let Some(task_id) = self.checkpoint.task_id.clone() else {
            return Ok(Source::Poll);
        };
        if !self.client().agent().streaming {
            return Ok(Source::Poll);
        }
        match self.client().subscribe(&task_id).await {
            Ok(stream) => Ok(Source::Stream(Box::new(stream))),
            Err(error) => {
                tracing::info!(%error, "no stream on the remote task; polling it");
                Ok(Source::Poll)
            }
        }
    }

    /// Handles what a flow asks for until the task goes on (`None`) or the run ends.
    async fn settle(&mut self, mut flow: Flow) -> Result<Option<RunStatus>, Stop> {
        loop {
            flow = match flow {
                Flow::Continue => return Ok(None),
                Flow::Done(status) => return Ok(Some(status)),
                Flow::Input(question) => self.ask(&question).await?,
                Flow::Auth(message) => self.wait_for_auth(&message).await?,
            }
        }
    }

    async fn follow(&mut self, mut source: Source) -> Result<RunStatus, Stop> {
        let control = self.control;
        let deadline = self.deadline;
        let mut poll = POLL_FIRST;
        loop {
            let next = match &mut source {
                Source::Stream(stream) => tokio::select! {
                    item = stream.next() => Next::Item(Box::new(item)),
                    () = control.wait_cancel() => Next::Cancel,
                    () = tokio::time::sleep_until(deadline) => Next::OutOfTime,
                },
                Source::Poll => tokio::select! {
                    () = tokio::time::sleep(poll) => Next::Tick,
                    () = control.wait_cancel() => Next::Cancel,
                    () = tokio::time::sleep_until(deadline) => Next::OutOfTime,
                },
            };
            let flow = match next {
                Next::Item(item) => match *item {
                    Ok(Some(item)) => self.on_item(item).await?,
                    ended => {
                        if let Err(error) = &ended {
                            tracing::info!(%error, "the remote stream broke");
                        }
                        // Dropped (or closed): ask for the task, then follow it again.
                        let flow = self.refresh().await?;
                        if flow == Flow::Continue {
                            source = self.reopen().await?;
                        }
                        flow
                    }
                },
                Next::Tick => {
                    let before = self.remote_state.clone();
                    let flow = self.refresh().await?;
                    poll = if self.remote_state == before {
                        (poll * 3 / 2).min(POLL_MAX)
                    } else {
                        POLL_FIRST
                    };
                    flow
                }
                Next::Cancel => self.cancel().await?,
                Next::OutOfTime => return self.out_of_time().await,
            };
            let continued_by_message = matches!(flow, Flow::Input(_) | Flow::Auth(_));
            if let Some(status) = self.settle(flow).await? {
                return Ok(status);
            }
            if continued_by_message {
                // The answer went with a new send: follow the task afresh.
                source = self.reopen().await?;
                poll = POLL_FIRST;
            }
        }
    }

    async fn out_of_time(&mut self) -> Result<RunStatus, Stop> {
        let seconds = self.run.limits.max_seconds;
        self.fail(
            ErrorKind::Limit,
            format!(
                "the remote task did not end within the run's {seconds} s (it may still be \
                 going on at the remote)"
            ),
        )
        .await
    }

    /// Asks for the known task (waiting out a remote that is down, within the run's time).
    async fn refresh(&mut self) -> Result<Flow, Stop> {
        match self.checkpoint.task_id.clone() {
            Some(task_id) => self.refresh_task(&task_id).await,
            None => Ok(Flow::Continue),
        }
    }

    async fn refresh_task(&mut self, task_id: &str) -> Result<Flow, Stop> {
        let mut wait = POLL_FIRST;
        loop {
            match self.client().get(task_id).await {
                Ok(task) => return self.on_item(StreamItem::Task(task)).await,
                Err(error) if error.is_task_not_found() => {
                    let status = self
                        .fail(
                            ErrorKind::RemoteError,
                            format!(
                                "the remote agent no longer knows task {task_id} ({error}); it \
                                 is not sent again"
                            ),
                        )
                        .await?;
                    return Ok(Flow::Done(status));
                }
                Err(error @ (ClientError::Unreachable(_) | ClientError::Transport(_))) => {
                    if Instant::now() + wait >= self.deadline {
                        let status = self.out_of_time().await?;
                        return Ok(Flow::Done(status));
                    }
                    tracing::info!(%error, "the remote agent is out of reach; asking again");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.control.wait_cancel(), if !self.canceling => {
                            let flow = self.cancel().await?;
                            if flow != Flow::Continue {
                                return Ok(flow);
                            }
                        }
                    }
                    wait = (wait * 2).min(POLL_MAX);
                }
                Err(error) => {
                    let status = self
                        .fail(
                            ErrorKind::RemoteError,
                            format!("asking for task {task_id}: {error}"),
                        )
                        .await?;
                    return Ok(Flow::Done(status));
                }
            }
        }
    }

    /// One thing the remote said.
    async fn on_item(&mut self, item: StreamItem) -> Result<Flow, Stop> {
        match item {
            StreamItem::Message(message) => {
                let text = message.text();
                if self.checkpoint.task_id.is_none() {
                    // A direct answer: no task exists at the remote, none is made up here.
                    self.emit(RunEvent::RemoteTask {
                        task_id: None,
                        context_id: message.context_id.clone(),
                        state: "message".into(),
                        message: Some(text.clone()),
                    })
                    .await?;
                    self.keep_parts("message", &message.parts, false).await?;
                    let status = self.end(RunStatus::Completed, None, Some(text)).await?;
                    return Ok(Flow::Done(status));
                }
                if !text.is_empty() {
                    self.last_text = Some(text.clone());
                    self.emit(RunEvent::AgentMessage { step: 0, text }).await?;
                }
                Ok(Flow::Continue)
            }
            StreamItem::Task(task) => {
                self.reveal(&task.id, &task.context_id).await?;
                for artifact in &task.artifacts {
                    self.keep_artifact(artifact).await?;
                }
                self.on_status(task.status).await
            }
            StreamItem::Update(Update::Status {
                task_id,
                context_id,
                status,
            }) => {
                self.reveal(&task_id, &context_id).await?;
                self.on_status(status).await
            }
            StreamItem::Update(Update::Artifact {
                task_id,
                context_id,
                artifact,
            }) => {
                self.reveal(&task_id, &context_id).await?;
                self.keep_artifact(&artifact).await?;
                Ok(Flow::Continue)
            }
        }
    }

    /// Stores the remote's task handle the first time it is seen, with the event that says so.
    async fn reveal(&mut self, task_id: &str, context_id: &str) -> Result<(), Stop> {
        if self.checkpoint.task_id.is_some() {
            return Ok(());
        }
        self.checkpoint.task_id = Some(task_id.to_string());
        self.checkpoint.context_id = Some(context_id.to_string()).filter(|c| !c.is_empty());
        self.remote_state = Some((TaskState::Submitted, None));
        self.emit_checkpointed(RunEvent::RemoteTask {
            task_id: Some(task_id.to_string()),
            context_id: self.checkpoint.context_id.clone(),
            state: codec::state_wire_name(Version::V10, TaskState::Submitted).into(),
            message: None,
        })
        .await
    }

    async fn on_status(&mut self, status: TaskStatus) -> Result<Flow, Stop> {
        let said = status
            .message
            .as_ref()
            .map(Message::text)
            .filter(|t| !t.is_empty());
        let now = (status.state, said.clone());
        if self.remote_state.as_ref() != Some(&now) {
            self.remote_state = Some(now);
            self.emit(RunEvent::RemoteTask {
                task_id: self.checkpoint.task_id.clone(),
                context_id: self.checkpoint.context_id.clone(),
                state: codec::state_wire_name(Version::V10, status.state).into(),
                message: said.clone(),
            })
            .await?;
        } else if !status.state.is_terminal() {
            return Ok(Flow::Continue);
        }
        if let Some(text) = &said {
            self.last_text = Some(text.clone());
        }
        Ok(match status.state {
            TaskState::Submitted | TaskState::Working => {
                if !self.canceling {
                    self.set_status(RunStatus::Running, None).await?;
                }
                Flow::Continue
            }
            TaskState::InputRequired => {
                Flow::Input(said.unwrap_or_else(|| "The remote agent asks for input.".to_string()))
            }
            TaskState::AuthRequired => Flow::Auth(
                said.unwrap_or_else(|| "The remote agent needs you to authenticate.".to_string()),
            ),
            TaskState::Completed => {
                let answer = said.or_else(|| self.last_text.clone());
                Flow::Done(self.end(RunStatus::Completed, None, answer).await?)
            }
            TaskState::Canceled => Flow::Done(self.end(RunStatus::Canceled, None, None).await?),
            TaskState::Failed => {
                let reason = format!(
                    "the remote agent failed the task: {}",
                    said.unwrap_or_else(|| "(no reason given)".into())
                );
                Flow::Done(self.fail(ErrorKind::RemoteError, reason).await?)
            }
            TaskState::Rejected => {
                let reason = format!(
                    "the remote agent rejected the task: {}",
                    said.unwrap_or_else(|| "(no reason given)".into())
                );
                Flow::Done(self.fail(ErrorKind::Rejected, reason).await?)
            }
        })
    }

    /// Sends a cancel; the run is `canceling` until the remote confirms it.
    async fn cancel(&mut self) -> Result<Flow, Stop> {
        let Some(task_id) = self.checkpoint.task_id.clone() else {
            let status = self.end(RunStatus::Canceled, None, None).await?;
            return Ok(Flow::Done(status));
        };
        let before = self.status;
        self.set_status(RunStatus::Canceling, None).await?;
        self.canceling = true;
        match self.client().cancel(&task_id).await {
            Ok(task) => {
                let flow = self.on_item(StreamItem::Task(task)).await?;
                if !matches!(flow, Flow::Done(_)) {
                    // Sent; the remote confirms later (the caller sees `canceling`).
                    self.control.cancel_pending();
                }
                Ok(flow)
            }
            Err(error) => {
                let reason = if error.is_not_cancelable() {
                    format!("the remote agent refused the cancel: {error}")
                } else {
                    format!("the cancel could not be sent: {error}")
                };
                self.canceling = false;
                self.emit(RunEvent::Error {
                    step: None,
                    kind: ErrorKind::RemoteError,
                    message: reason.clone(),
                    fatal: false,
                })
                .await?;
                self.set_status(before, None).await?;
                self.control.refuse_cancel(reason);
                Ok(Flow::Continue)
            }
        }
    }

    /// `input-required`: the question goes to the person; the answer goes to the remote.
    async fn ask(&mut self, question: &str) -> Result<Flow, Stop> {
        let request_id = crate::secret::new_id("input");
        self.emit(RunEvent::InputRequested {
            request_id: request_id.clone(),
            kind: InputKind::Question,
            question: question.to_string(),
            safety_checks: Vec::new(),
        })
        .await?;
        self.set_status(RunStatus::WaitingForInput, None).await?;
        self.control.set_phase(Phase::WaitingForInput {
            request_id: request_id.clone(),
        });
        loop {
            match self.control.wait_input().await {
                InputSignal::Answer(text) => {
                    self.emit(RunEvent::InputReceived {
                        request_id,
                        text: text.clone(),
                        approved: None,
                        message_id: self.control.take_answer_message_id(),
                    })
                    .await?;
                    self.control.set_phase(Phase::Running);
                    self.set_status(RunStatus::Running, None).await?;
                    return self.reply(&text).await;
                }
                InputSignal::Cancel => {
                    let flow = self.cancel().await?;
                    if flow != Flow::Continue || self.canceling {
                        // Confirmed, or sent and awaiting confirmation: follow the task.
                        self.control.set_phase(Phase::Running);
                        return Ok(flow);
                    }
                    // Refused: the question still stands (`cancel` put the status back).
                    self.control.set_phase(Phase::WaitingForInput {
                        request_id: request_id.clone(),
                    });
                }
                // No desktop to take: the question stays.
                InputSignal::TakeOver => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// `auth-required`: its own state (never a chat question). The person authenticates with
    /// the remote out of band and says so on the run's input route; meanwhile the task is
    /// asked for now and then, as the remote may move on by itself.
    async fn wait_for_auth(&mut self, message: &str) -> Result<Flow, Stop> {
        self.set_status(RunStatus::AuthRequired, Some(message.to_string()))
            .await?;
        let request_id = crate::secret::new_id("auth");
        self.control.set_phase(Phase::WaitingForInput {
            request_id: request_id.clone(),
        });
        let flow = loop {
            tokio::select! {
                signal = self.control.wait_input() => match signal {
                    InputSignal::Answer(text) => {
                        self.control.set_phase(Phase::Running);
                        self.set_status(RunStatus::Running, None).await?;
                        break self.reply(&text).await?;
                    }
                    InputSignal::Cancel => {
                        let flow = self.cancel().await?;
                        if flow != Flow::Continue || self.canceling {
                            break flow;
                        }
                        self.control.set_phase(Phase::WaitingForInput { request_id: request_id.clone() });
                    }
                    InputSignal::TakeOver => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                () = tokio::time::sleep(AUTH_POLL) => {
                    let flow = self.refresh().await?;
                    let still_waiting = self
                        .remote_state
                        .as_ref()
                        .is_some_and(|(state, _)| *state == TaskState::AuthRequired);
                    if flow != Flow::Continue || !still_waiting {
                        // It moved on by itself (or ended).
                        break flow;
                    }
                }
                () = tokio::time::sleep_until(self.deadline) => {
                    break Flow::Done(self.out_of_time().await?);
                }
            }
        };
        self.control.set_phase(Phase::Running);
        Ok(flow)
    }

    /// Sends the person's words on the task; what the remote makes of them follows.
    async fn reply(&mut self, text: &str) -> Result<Flow, Stop> {
        let message = Message {
            message_id: crate::secret::new_id("msg"),
            role: Role::User,
            parts: vec![crate::a2a::model::Part::text(text)],
            context_id: self.checkpoint.context_id.clone(),
            task_id: self.checkpoint.task_id.clone(),
            metadata: None,
        };
        // The answer reaches the remote with a send that answers at once; the task is then
        // followed as before (a stream or polling: `follow` reopens it).
        match self.client().send(&message).await {
            Ok(Reply::Task(task)) => self.on_item(StreamItem::Task(task)).await,
            Ok(Reply::Message(message)) => self.on_item(StreamItem::Message(message)).await,
            Err(ClientError::Rpc { code, message }) => {
                self.emit(RunEvent::Error {
                    step: None,
                    kind: ErrorKind::RemoteError,
                    message: format!(
                        "the remote agent refused the answer (error {code}): {message}"
                    ),
                    fatal: false,
                })
                .await?;
                self.refresh().await
            }
            Err(error) => {
                // It may or may not have arrived: ask rather than send it again.
                tracing::info!(%error, "the answer's send failed; asking for the task");
                self.refresh().await
            }
        }
    }

    async fn keep_artifact(&mut self, artifact: &Artifact) -> Result<(), Stop> {
        let base = artifact
            .name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| artifact.artifact_id.clone());
        self.keep_parts(&base, &artifact.parts, true).await
    }

    /// Keeps each part as `remote/<name>`: text as text (unless `keep_text` is false: a direct
    /// answer's text is the run's answer, not a file), data as JSON, files as outputs
    /// (downloaded when given by URL).
    async fn keep_parts(
        &mut self,
        base: &str,
        parts: &[crate::a2a::model::Part],
        keep_text: bool,
    ) -> Result<(), Stop> {
        let many = parts.len() > 1;
        for (index, part) in parts.iter().enumerate() {
            let stem = part
                .filename
                .clone()
                .filter(|f| !f.trim().is_empty())
                .unwrap_or_else(|| {
                    if many {
                        format!("{base}-{index}")
                    } else {
                        base.to_string()
                    }
                });
            let (kind, content_type, extension, bytes) = match &part.body {
                PartBody::Text(text) => {
                    if !keep_text {
                        continue;
                    }
                    self.last_text = Some(text.clone());
                    ("text", "text/plain", ".txt", Ok(text.clone().into_bytes()))
                }
                PartBody::Data(data) => (
                    "data",
                    "application/json",
                    ".json",
                    Ok(serde_json::to_vec(data).unwrap_or_default()),
                ),
                PartBody::Bytes(bytes) => ("output", "", "", Ok(bytes.clone())),
                PartBody::Url(url) => (
                    "output",
                    "",
                    "",
                    self.client()
                        .download(url, MAX_FILE_BYTES, DOWNLOAD_TIMEOUT)
                        .await
                        .map_err(|e| format!("downloading {url}: {e}")),
                ),
            };
            let mut name = format!("remote/{}", stem.replace('/', "_"));
            if !extension.is_empty() && !stem.contains('.') {
                name.push_str(extension);
            }
            let Some(name) = crate::runs::artifacts::artifact_name(&name) else {
                continue;
            };
            if !self.kept.insert(name.clone()) {
                continue;
            }
            let content_type = part
                .media_type
                .clone()
                .filter(|_| content_type.is_empty())
                .unwrap_or_else(|| content_type.to_string());
            match bytes {
                Ok(bytes) => {
                    self.sink
                        .keep(&name, kind, &content_type, Bytes::from(bytes))
                        .await
                        .map_err(|_| Stop::Sink)?;
                }
                Err(reason) => {
                    self.sink
                        .skip(&name, 0, &reason)
                        .await
                        .map_err(|_| Stop::Sink)?;
                }
            }
        }
        Ok(())
    }
}

/// What a stored credential is sealed to: its owner and the remote's origin.
pub(crate) fn credential_context(owner_key_id: &str, origin: &str) -> String {
    format!("a2a-credential|{owner_key_id}|{origin}")
}

/// The card URL of an `a2a:` model.
pub fn parse_model(model: &str) -> Option<Result<Url, String>> {
    model.trim().strip_prefix(PREFIX).map(client::card_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_models_name_an_http_card_url() {
        assert!(parse_model("anthropic:claude").is_none());
        let url = parse_model("a2a:http://127.0.0.1:8000/.well-known/agent-card.json")
            .unwrap()
            .unwrap();
        assert_eq!(url.port(), Some(8000));
        assert!(parse_model("a2a:file:///etc/passwd").unwrap().is_err());
        assert!(parse_model("a2a:").unwrap().is_err());
    }

    #[test]
    fn the_checkpoint_round_trips_and_starts_empty() {
        let empty: RemoteCheckpoint = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, RemoteCheckpoint::default());
        let full = RemoteCheckpoint {
            message_id: Some("run_1-task".into()),
            task_id: Some("t".into()),
            context_id: Some("c".into()),
        };
        let back: RemoteCheckpoint =
            serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
        assert_eq!(back, full);
    }
}
