//! The A2A conformance executor: a run backend that takes no sandbox and answers
//! deterministically, by the prefix of the A2A message id that created the run, as the
//! official A2A conformance kit (TCK) expects of a system under test. It exists so that the
//! A2A layer can be checked end to end (tasks, streams, cancel, input, artifacts) without a
//! model; a server offers it only with `serve --a2a-conformance`.
//!
//! It drives the run the way the `agent` loop does: through the run's [`RunSink`] (every event
//! in the log, in order, as the lease holder) and its [`agent::Control`] (cancel and answers
//! reach it; a takeover is refused, as there is no desktop to take).

use std::sync::Arc;
use std::time::Duration;

use agent::{ErrorKind, EventSink, InputKind, InputSignal, Phase, RunEvent, RunStatus};
use bytes::Bytes;

use super::ActiveRun;
use super::sink::RunSink;
use crate::db::RunRecord;

/// How long a task asked to stay working (`test-resubscribe-message-id`) works: the TCK
/// resubscribes within twice its streaming timeout (4 s by default).
const LINGER: Duration = Duration::from_millis(4500);

/// The message id prefix of an answer that is asked for input again.
const ASKS_AGAIN: &str = "tck-input-required";

/// One step of a scripted answer.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// A `working` status.
    Work,
    /// An agent message.
    Say(&'static str),
    /// A kept artifact: name, kind (`text`, `data`, `output`, `link`), content type, bytes.
    Keep(&'static str, &'static str, &'static str, &'static [u8]),
    /// Asks for input and waits for the answer.
    Ask(&'static str),
    /// Works for a while (a cancel ends it).
    Linger,
    /// Completed, with this answer (the run's text if `None`).
    Complete(Option<&'static str>),
    /// Declined: failed with a `rejected` error.
    Reject(&'static str),
    /// Failed, with this reason.
    Fail(&'static str),
    /// Needs the client to authenticate (`auth_required`), until a message says it did.
    Auth(&'static str),
    /// Asks again after every answer, until a cancel.
    Converse,
}

/// The script for a run: by its message id's prefix, else by its task's first word (what a
/// client that makes its own message ids, such as Agentbox's, can choose), else a
/// conversation.
fn script_for(message_id: &str, task: &str) -> Vec<Step> {
    let first_word = task.split_whitespace().next().unwrap_or_default();
    scripted(message_id)
        .or_else(|| scripted(first_word))
        // Any other message starts a conversation that goes on until it is canceled: the 0.3
        // kit continues, reads the history of and cancels the task a plain message made.
        .unwrap_or_else(|| vec![Step::Work, Step::Converse])
}

#[cfg(test)]
fn script(message_id: &str) -> Vec<Step> {
    script_for(message_id, "")
}

/// The script a prefix names (longest prefixes first, as `tck-artifact-file-url` starts with
/// `tck-artifact-file`).
fn scripted(message_id: &str) -> Option<Vec<Step>> {
    use Step::*;
    const TEXT: &str = "text/plain";
    let prefixes: &[(&str, &[Step])] = &[
        ("tck-complete-task", &[Complete(Some("Hello from TCK"))]),
        (
            "tck-artifact-text",
            &[
                Keep("a2a/text.txt", "text", TEXT, b"Generated text content"),
                Complete(None),
            ],
        ),
        (
            "tck-artifact-file-url",
            &[
                Keep(
                    "a2a/output.txt",
                    "link",
                    TEXT,
                    b"https://example.com/output.txt",
                ),
                Complete(None),
            ],
        ),
        (
            "tck-artifact-file",
            &[
                Keep("outputs/output.txt", "output", TEXT, b"tck"),
                Complete(None),
            ],
        ),
        (
            "tck-artifact-data",
            &[
                Keep(
                    "a2a/data.json",
                    "data",
                    "application/json",
                    br#"{"key": "value", "count": 42}"#,
                ),
                Complete(None),
            ],
        ),
        (
            "tck-input-required",
            &[Ask("Input required by TCK"), Complete(None)],
        ),
        ("tck-reject-task", &[Reject("rejected")]),
        (
            "tck-stream-artifact-chunked",
            &[
                Work,
                Keep("a2a/chunk-1.txt", "text", TEXT, b"chunk-1 "),
                Keep("a2a/chunk-2.txt", "text", TEXT, b"chunk-2"),
                Complete(None),
            ],
        ),
        (
            "tck-stream-artifact-text",
            &[
                Work,
                Keep("a2a/text.txt", "text", TEXT, b"Streamed text content"),
                Complete(None),
            ],
        ),
        (
            "tck-stream-artifact-file",
            &[
                Work,
                Keep("outputs/output.txt", "output", TEXT, b"tck"),
                Complete(None),
            ],
        ),
        (
            "tck-stream-ordering-001",
            &[
                Work,
                Keep("a2a/text.txt", "text", TEXT, b"Ordered output"),
                Complete(None),
            ],
        ),
        (
            "tck-stream-001",
            &[
                Work,
                Keep("a2a/text.txt", "text", TEXT, b"Stream hello from TCK"),
                Complete(None),
            ],
        ),
        ("tck-stream-002", &[Complete(None)]),
        (
            "tck-stream-003",
            &[
                Work,
                Keep("a2a/text.txt", "text", TEXT, b"Stream task lifecycle"),
                Complete(None),
            ],
        ),
        (
            "test-resubscribe-message-id",
            &[Work, Linger, Complete(None)],
        ),
        (
            "agentbox-say",
            &[Work, Say("Working on it"), Complete(None)],
        ),
        (
            "agentbox-fail",
            &[Work, Fail("the conformance executor was asked to fail")],
        ),
        (
            "agentbox-auth",
            &[
                Auth("Sign in to the conformance executor, then say so"),
                Complete(None),
            ],
        ),
        (
            "agentbox-linger",
            &[Work, Linger, Linger, Linger, Complete(None)],
        ),
    ];
    prefixes
        .iter()
        .find(|(prefix, _)| !message_id.is_empty() && message_id.starts_with(prefix))
        .map(|(_, steps)| steps.to_vec())
}

/// Whether a message with this id (or whose text starts with the same word) is answered with a
/// direct Message rather than a task.
pub fn answers_directly(message_id: &str, text: &str) -> Option<&'static str> {
    const PREFIX: &str = "tck-message-response";
    (message_id.starts_with(PREFIX) || text.trim_start().starts_with(PREFIX))
        .then_some("Direct message response")
}

/// Why the script stopped early.
enum Stop {
    Canceled,
    /// The sink refused (the run ended elsewhere, or its lease moved).
    Sink,
}

/// Drives `run` by its script.
pub(crate) async fn drive(run: &RunRecord, active: &Arc<ActiveRun>, sink: &RunSink) {
    let control = &active.control;
    control.set_phase(Phase::Running);
    let outcome = follow(run, control, sink).await;
    let ended = match outcome {
        Ok(ended) => ended,
        Err(Stop::Canceled) => {
            if sink.emit(status(RunStatus::Canceled)).await.is_err() {
                tracing::warn!("could not record the cancel");
            }
            RunStatus::Canceled
        }
        Err(Stop::Sink) => RunStatus::Failed,
    };
    control.set_phase(Phase::Finished(ended));
}

async fn follow(
    run: &RunRecord,
    control: &agent::Control,
    sink: &RunSink,
) -> Result<RunStatus, Stop> {
    let message_id = run.message_id.as_deref().unwrap_or_default();
    let emit = |event: RunEvent| async move { sink.emit(event).await.map_err(|_| Stop::Sink) };
    let mut answer: Option<String> = None;
    for step in script_for(message_id, &run.task) {
        if cancel_requested(control) {
            return Err(Stop::Canceled);
        }
        match step {
            Step::Work => emit(status(RunStatus::Running)).await?,
            Step::Say(text) => {
                emit(RunEvent::AgentMessage {
                    step: 1,
                    text: text.to_string(),
                })
                .await?;
            }
            Step::Keep(name, kind, content_type, bytes) => {
                sink.keep(name, kind, content_type, Bytes::from_static(bytes))
                    .await
                    .map_err(|_| Stop::Sink)?;
            }
            Step::Ask(question) => loop {
                let (said, message_id) = ask(question, control, &emit).await?;
                answer = Some(said);
                // An answer whose own message id asks for input again (as the kit's multi-turn
                // history tests send) keeps the task waiting.
                if !message_id.is_some_and(|id| id.starts_with(ASKS_AGAIN)) {
                    break;
                }
            },
            Step::Converse => {
                let mut question = "What should I do next? (This task goes on until it is \
                                    canceled.)"
                    .to_string();
                loop {
                    let (said, _) = ask(&question, control, &emit).await?;
                    question = format!("Noted: {said}. Anything else?");
                }
            }
            Step::Linger => {
                tokio::select! {
                    () = tokio::time::sleep(LINGER) => {}
                    () = control.wait_cancel() => return Err(Stop::Canceled),
                }
            }
            Step::Complete(text) => {
                let text = text
                    .map(str::to_string)
                    .or_else(|| answer.take().map(|a| format!("Received: {a}")))
                    .unwrap_or_else(|| format!("Done: {}", run.task));
                emit(RunEvent::RunStatus {
                    status: RunStatus::Completed,
                    reason: None,
                    answer: Some(text),
                })
                .await?;
                return Ok(RunStatus::Completed);
            }
            Step::Fail(reason) => {
                emit(status_because(RunStatus::Failed, reason)).await?;
                return Ok(RunStatus::Failed);
            }
            Step::Auth(message) => {
                emit(status_because(RunStatus::AuthRequired, message)).await?;
                let request_id = crate::secret::new_id("auth");
                control.set_phase(Phase::WaitingForInput { request_id });
                loop {
                    match control.wait_input().await {
                        InputSignal::Cancel => return Err(Stop::Canceled),
                        InputSignal::TakeOver => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        InputSignal::Answer(said) => {
                            emit(status(RunStatus::Running)).await?;
                            control.set_phase(Phase::Running);
                            answer = Some(said);
                            break;
                        }
                    }
                }
            }
            Step::Reject(reason) => {
                emit(RunEvent::Error {
                    step: None,
                    kind: ErrorKind::Rejected,
                    message: reason.to_string(),
                    fatal: true,
                })
                .await?;
                emit(status_because(RunStatus::Failed, reason)).await?;
                return Ok(RunStatus::Failed);
            }
        }
    }
    Ok(RunStatus::Completed)
}

/// A status change with its reason.
fn status_because(status: RunStatus, reason: &str) -> RunEvent {
    RunEvent::RunStatus {
        status,
        reason: Some(reason.to_string()),
        answer: None,
    }
}

/// A status change without a reason or an answer.
fn status(status: RunStatus) -> RunEvent {
    RunEvent::RunStatus {
        status,
        reason: None,
        answer: None,
    }
}

fn cancel_requested(control: &agent::Control) -> bool {
    // A cancel is a request the driver consumes at its safe points; `wait_cancel` resolves at
    // once when one is pending.
    futures_util::FutureExt::now_or_never(control.wait_cancel()).is_some()
}

/// Asks `question` and waits for the answer; a takeover is refused (there is no desktop) and
/// the wait goes on.
async fn ask<F, Fut>(
    question: &str,
    control: &agent::Control,
    emit: &F,
) -> Result<(String, Option<String>), Stop>
where
    F: Fn(RunEvent) -> Fut,
    Fut: std::future::Future<Output = Result<(), Stop>>,
{
    // Each question its own id: an answer resolves when the loop has left *this* question.
    let request_id = crate::secret::new_id("input");
    emit(RunEvent::InputRequested {
        request_id: request_id.clone(),
        kind: InputKind::Question,
        question: question.to_string(),
        safety_checks: Vec::new(),
    })
    .await?;
    emit(status(RunStatus::WaitingForInput)).await?;
    control.set_phase(Phase::WaitingForInput {
        request_id: request_id.clone(),
    });
    loop {
        match control.wait_input().await {
            InputSignal::Cancel => return Err(Stop::Canceled),
            InputSignal::TakeOver => {
                // Nothing to take: the request stays pending until a cancel or an answer.
                tokio::select! {
                    () = control.wait_cancel() => return Err(Stop::Canceled),
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            InputSignal::Answer(text) => {
                let message_id = control.take_answer_message_id();
                emit(RunEvent::InputReceived {
                    request_id,
                    text: text.clone(),
                    approved: None,
                    message_id: message_id.clone(),
                })
                .await?;
                emit(status(RunStatus::Running)).await?;
                control.set_phase(Phase::Running);
                return Ok((text, message_id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_unknown_ids_converse() {
        assert!(matches!(
            script("tck-artifact-file-url-1")[0],
            Step::Keep(_, "link", _, _)
        ));
        assert!(matches!(
            script("tck-artifact-file-1")[0],
            Step::Keep(_, "output", _, _)
        ));
        assert_eq!(script("anything"), vec![Step::Work, Step::Converse]);
        assert_eq!(
            answers_directly("tck-message-response-7", ""),
            Some("Direct message response")
        );
        assert_eq!(
            answers_directly("run_1-task", "tck-message-response please"),
            Some("Direct message response")
        );
        assert_eq!(answers_directly("tck-complete-task", "hello"), None);
        assert!(matches!(
            script_for("run_1-task", "agentbox-fail now")[1],
            Step::Fail(_)
        ));
    }
}
