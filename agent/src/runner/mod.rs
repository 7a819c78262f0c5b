//! The loop: observe -> model -> act -> wait until the screen settles -> observe, for one run.
//!
//! [`Runner::run`] drives a run from its task; [`Runner::resume`] from a [`Checkpoint`]. The
//! loop runs in the caller's task and is the only emitter of events, so they arrive in order.
//!
//! Rules it keeps:
//! - **Observations.** Screenshots are taken at the size the model's adapter asks for
//!   ([`crate::ModelInfo::observation_bounds`], through sandboxd's `max_width`/`max_height`,
//!   which keeps the aspect ratio). Every screenshot has an id; the sink gets its bytes first.
//! - **Planned on an observation.** Every tool call of a turn is planned on the latest
//!   screenshot the model saw when it was asked. Its coordinates are pixels of that image:
//!   a point outside the image, or an action planned on a screenshot that is no longer the
//!   latest (a person acted, the run restarted), is refused before anything is sent, with an
//!   `error` event and a tool error for the model; nothing is clamped or guessed. The computer
//!   maps accepted coordinates to the screen through that observation's scale (sandboxd does it
//!   from the `screenshot_id`, with the transform it recorded).
//! - **Settling.** After an action that can change the screen the loop waits for it to settle
//!   (`WAIT_SETTLED`, never a fixed sleep); after the turn's last visual call it takes the next
//!   screenshot, which goes back to the model with that call's result.
//! - **Strokes.** Adapters turn drags into one `DRAG_PATH` each (seed 003).
//! - **Limits.** `max_steps` model calls; `max_seconds` of driving time (time paused or waiting
//!   for the person is not counted); `max_images` screenshots kept in the conversation, oldest
//!   dropped first, the text of those turns kept.
//! - **Repeats.** The same desktop action repeated with no change on the screen: at
//!   `warn_after` repetitions the model is warned (in the tool result, plus an `error` event);
//!   at `fail_after` the run fails with the reason.
//! - **The end.** A turn without tool calls is the final answer: the run completes. A turn cut
//!   by the output limit with no call fails the run.
//! - **Control** ([`Control`]): takeover waits for the in-flight action, pauses (no action
//!   until hand-back); hand-back takes a fresh screenshot and tells the model a person acted;
//!   cancel ends the run with a final `canceled` status and nothing after it;
//!   `request_human` and provider safety checks wait for the person's answer (safety checks
//!   are acknowledged only when the person approves).
//!
//! # Layout
//! This file holds [`Runner`], its entry points and the loop ([`Runner::run`], the step loop,
//! the limits, the end of a run); each phase of a step has its own file:
//! - `config`: [`RunConfig`], [`Limits`], the settle and repeat policies, validation.
//! - `state`: the loop's state between steps.
//! - `turn`: one model call, from the request to the recorded turn.
//! - `calls`: the tool calls of a turn, and what every call shares.
//! - `desktop`: a desktop call (safety checks, target checks, actions, settling).
//! - `tools`: the other calls (screenshot, zoom, shell, edit, write file).
//! - `observe`: screenshots and waiting for the screen to settle.
//! - `person`: pausing for a takeover, waiting for an answer.
//! - `checkpointing`: checkpoints, and [`Runner::resume`] from one.

mod calls;
mod checkpointing;
mod config;
mod desktop;
mod observe;
mod person;
mod state;
mod tools;
mod turn;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoint;
use crate::computer::Computer;
use crate::control::{Control, Phase, Signal};
use crate::event::{ErrorKind, EventSink, RunEvent, RunStatus, SinkError};
use crate::model::{Model, StopReason, Usage};
use crate::transcript::Item;
use state::State;

pub use config::{
    ConfigError, Limits, MAX_SHELL_WAIT, MAX_TASK_CHARS, RepeatPolicy, RunConfig, SettlePolicy,
};

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOutcome {
    pub status: RunStatus,
    pub answer: Option<String>,
    pub reason: Option<String>,
    pub steps: u32,
    pub usage: Usage,
}

/// A run that could not report its own end through events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("the checkpoint cannot be resumed: {0}")]
    Checkpoint(String),
}

/// Why the loop stops.
#[derive(Debug)]
enum Stop {
    Completed(String),
    Failed { kind: ErrorKind, reason: String },
    Canceled,
    Sink(SinkError),
}

impl From<SinkError> for Stop {
    fn from(error: SinkError) -> Self {
        Stop::Sink(error)
    }
}

/// How an interruptible wait ended.
enum Waited<T> {
    Done(T),
    /// A person asked to take control. The wait was dropped; the caller reports what it
    /// finished, then pauses.
    TakeOver,
}

/// Drives one run.
pub struct Runner {
    computer: Arc<dyn Computer>,
    model: Arc<dyn Model>,
    sink: Arc<dyn EventSink>,
    config: RunConfig,
    control: Control,
    /// A checkpoint to store with the next event (see [`Runner::defer_checkpoint`]).
    deferred: std::sync::Mutex<Option<Checkpoint>>,
}

impl Runner {
    pub fn new(
        computer: Arc<dyn Computer>,
        model: Arc<dyn Model>,
        sink: Arc<dyn EventSink>,
        config: RunConfig,
    ) -> Self {
        Self {
            computer,
            model,
            sink,
            config,
            control: Control::new(),
            deferred: std::sync::Mutex::new(None),
        }
    }

    /// Uses `control` (made beforehand, so requests can reach the run from its start).
    pub fn with_control(mut self, control: Control) -> Self {
        self.control = control;
        self
    }

    /// The handle to this run.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// The model string checkpoints are tied to.
    fn model_name(&self) -> String {
        let info = self.model.info();
        format!("{}:{}", info.provider, info.model)
    }

    /// Runs the task to its end.
    pub async fn run(self) -> Result<RunOutcome, RunError> {
        self.config.validate()?;
        let mut st = State::new();
        let stop = match self.start(&mut st).await {
            Err(stop) => stop,
            Ok(never) => match never {},
        };
        self.finish(&mut st, stop).await
    }

    /// Emits `event`, with the deferred checkpoint if there is one.
    async fn emit(&self, event: RunEvent) -> Result<(), Stop> {
        let deferred = self.take_deferred();
        match deferred {
            Some(checkpoint) => self.sink.emit_checkpointed(event, &checkpoint).await,
            None => self.sink.emit(event).await,
        }
        .map_err(Stop::Sink)
    }

    async fn status(&self, status: RunStatus) -> Result<(), Stop> {
        self.emit(RunEvent::RunStatus {
            status,
            reason: None,
            answer: None,
        })
        .await
    }

    async fn error_event(&self, st: &State, kind: ErrorKind, message: &str) -> Result<(), Stop> {
        self.emit(RunEvent::Error {
            step: Some(st.step),
            kind,
            message: message.to_string(),
            fatal: false,
        })
        .await
    }

    async fn start(&self, st: &mut State) -> Result<Infallible, Stop> {
        self.status(RunStatus::Running).await?;
        self.control.set_phase(Phase::Running);
        if let Waited::TakeOver = self.observe(st).await? {
            // A person took control before the first screenshot; the hand-back takes one,
            // and the model has seen nothing older, so no note is needed.
            self.pause(st, None).await?;
            st.note = None;
        }
        st.transcript.push(Item::User {
            text: format!("Task: {}", self.config.task),
            image: st.latest_image(),
        });
        self.checkpoint(st, &[], &[], None).await?;
        self.drive(st).await
    }

    async fn finish(&self, st: &mut State, stop: Stop) -> Result<RunOutcome, RunError> {
        let (status, answer, reason) = match stop {
            Stop::Completed(answer) => (RunStatus::Completed, Some(answer), None),
            Stop::Failed { kind, reason } => {
                let event = RunEvent::Error {
                    step: Some(st.step),
                    kind,
                    message: reason.clone(),
                    fatal: true,
                };
                if let Err(error) = self.sink.emit(event).await {
                    self.control.set_phase(Phase::Finished(RunStatus::Failed));
                    return Err(RunError::Sink(error));
                }
                (RunStatus::Failed, None, Some(reason))
            }
            Stop::Canceled => (RunStatus::Canceled, None, None),
            Stop::Sink(error) => {
                self.control.set_phase(Phase::Finished(RunStatus::Failed));
                return Err(RunError::Sink(error));
            }
        };
        let event = RunEvent::RunStatus {
            status,
            reason: reason.clone(),
            answer: answer.clone(),
        };
        let emitted = self.sink.emit(event).await;
        // Nothing is emitted after this point.
        self.control.set_phase(Phase::Finished(status));
        emitted?;
        tracing::info!(status = ?status, steps = st.step, "run finished");
        Ok(RunOutcome {
            status,
            answer,
            reason,
            steps: st.step,
            usage: st.usage,
        })
    }

    fn check_limits(&self, st: &State) -> Result<(), Stop> {
        let limits = self.config.limits;
        if st.step >= limits.max_steps {
            return Err(Stop::Failed {
                kind: ErrorKind::Limit,
                reason: format!(
                    "the step limit of {} model calls was reached",
                    limits.max_steps
                ),
            });
        }
        if st.active() >= Duration::from_secs(limits.max_seconds) {
            return Err(self.time_limit());
        }
        Ok(())
    }

    fn time_limit(&self) -> Stop {
        Stop::Failed {
            kind: ErrorKind::Limit,
            reason: format!(
                "the time limit of {} seconds was reached",
                self.config.limits.max_seconds
            ),
        }
    }

    async fn drive(&self, st: &mut State) -> Result<Infallible, Stop> {
        loop {
            self.check_limits(st)?;
            if let Some(signal) = self.control.pending_signal() {
                match signal {
                    Signal::Cancel => return Err(Stop::Canceled),
                    Signal::TakeOver => {
                        self.pause(st, None).await?;
                    }
                }
            }
            self.flush_note(st);
            st.step += 1;
            let planned = st.latest.clone();
            let planned_hash = st.latest_hash;
            let handbacks = st.handbacks;
            let (turn, model_ms) = self.call_model(st).await?;
            self.record_turn(st, &turn, model_ms).await?;
            if turn.calls.is_empty() && st.handbacks != handbacks {
                // The answer was written before a person used the computer: ask again, from
                // the screenshot taken after the hand-back.
                self.checkpoint(st, &[], &[], None).await?;
                continue;
            }
            if turn.calls.is_empty() {
                self.checkpoint(st, &[], &[], None).await?;
                if turn.stop == StopReason::MaxTokens {
                    return Err(Stop::Failed {
                        kind: ErrorKind::ModelError,
                        reason: "the model's reply was cut at its output token limit".into(),
                    });
                }
                return Err(Stop::Completed(turn.text.unwrap_or_else(|| {
                    "The model ended its turn without a message.".into()
                })));
            }
            self.run_calls(st, &turn, planned, planned_hash, model_ms)
                .await?;
        }
    }
}
