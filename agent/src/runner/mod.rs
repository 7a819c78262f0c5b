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

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::action::DesktopAction;
use crate::checkpoint::{CHECKPOINT_VERSION, Checkpoint, PendingCall};
use crate::computer::{Computer, ComputerError};
use crate::control::{Control, InputSignal, Phase, Release, Signal, approves};
use crate::event::{
    ActionOutcome, ErrorKind, EventSink, InputKind, RunEvent, RunStatus, SinkError, Timings,
};
use crate::model::{
    Model, ModelError, ModelTurn, StopReason, ToolCall, ToolRequest, TurnRequest, Usage,
};
use crate::observation::{ImageFormat, Observation, ObservationMeta, ObserveRequest};
use crate::transcript::{ImageRef, Item, SafetyCheck, ToolResult, trim_images};

/// Longest task text, in characters.
pub const MAX_TASK_CHARS: usize = 100_000;
/// Longest wait a shell call may ask for.
pub const MAX_SHELL_WAIT: Duration = Duration::from_secs(600);
/// Screenshot attempts before the run fails (transport errors are retried).
const OBSERVE_ATTEMPTS: u32 = 3;

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

type ModelResult = Result<ModelTurn, ModelError>;
type ModelFuture = Pin<Box<dyn Future<Output = ModelResult> + Send>>;

/// How an interruptible wait ended.
enum Waited<T> {
    Done(T),
    /// A person asked to take control. The wait was dropped; the caller reports what it
    /// finished, then pauses.
    TakeOver,
}

/// Consecutive identical actions without a change on the screen.
#[derive(Debug, Default)]
struct RepeatTracker {
    signature: Option<String>,
    count: u32,
}

/// The loop's state.
struct State {
    transcript: Vec<Item>,
    images: HashMap<String, Bytes>,
    /// The latest observation shown (or about to be shown) to the model.
    latest: Option<ObservationMeta>,
    latest_hash: u64,
    /// How long taking `latest` took.
    capture_ms: u64,
    step: u32,
    usage: Usage,
    active_before: Duration,
    active_since: Option<Instant>,
    images_dropped: u64,
    repeat: RepeatTracker,
    /// A note for the model, sent with the latest screenshot after the current results.
    note: Option<String>,
    input_seq: u32,
    /// Hand-backs so far (to know whether one happened during a step).
    handbacks: u32,
}

impl State {
    fn new() -> Self {
        Self {
            transcript: Vec::new(),
            images: HashMap::new(),
            latest: None,
            latest_hash: 0,
            capture_ms: 0,
            step: 0,
            usage: Usage::default(),
            active_before: Duration::ZERO,
            active_since: Some(Instant::now()),
            images_dropped: 0,
            repeat: RepeatTracker::default(),
            note: None,
            input_seq: 0,
            handbacks: 0,
        }
    }

    fn active(&self) -> Duration {
        self.active_before + self.active_since.map(|s| s.elapsed()).unwrap_or_default()
    }

    fn stop_clock(&mut self) {
        if let Some(since) = self.active_since.take() {
            self.active_before += since.elapsed();
        }
    }

    fn start_clock(&mut self) {
        if self.active_since.is_none() {
            self.active_since = Some(Instant::now());
        }
    }

    fn latest_image(&self) -> Option<ImageRef> {
        self.latest.as_ref().map(image_ref)
    }
}

fn image_ref(meta: &ObservationMeta) -> ImageRef {
    ImageRef {
        observation_id: meta.id.clone(),
        mime: meta.mime.clone(),
        width: meta.image_width,
        height: meta.image_height,
        dropped: false,
    }
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// What running one call produced.
struct CallOutcome {
    result: ToolResult,
    /// Its result wants the screenshot taken after the turn.
    visual: bool,
    /// It took that screenshot itself.
    observed: bool,
    /// Desktop actions it performed, for repeat detection.
    performed: Option<Vec<DesktopAction>>,
    /// The run ends with this answer (`Finish`).
    finish: Option<String>,
}

impl CallOutcome {
    fn plain(result: ToolResult) -> Self {
        Self {
            result,
            visual: false,
            observed: false,
            performed: None,
            finish: None,
        }
    }
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

    /// Goes on from `checkpoint` with a fresh screenshot. The call in flight when it was taken
    /// is reported to the model as "outcome unknown" and not run again.
    pub async fn resume(self, checkpoint: Checkpoint) -> Result<RunOutcome, RunError> {
        self.config.validate()?;
        if checkpoint.version != CHECKPOINT_VERSION {
            return Err(RunError::Checkpoint(format!(
                "version {} is not {CHECKPOINT_VERSION}",
                checkpoint.version
            )));
        }
        let model = self.model_name();
        if checkpoint.model != model {
            return Err(RunError::Checkpoint(format!(
                "it belongs to {} but this run uses {model}",
                checkpoint.model
            )));
        }
        let mut st = State::new();
        st.transcript = checkpoint.transcript;
        st.step = checkpoint.step;
        st.usage = checkpoint.usage;
        st.active_before = Duration::from_millis(checkpoint.active_ms);
        st.images_dropped = checkpoint.images_dropped;
        // The images themselves are not in the checkpoint: every old one counts as dropped.
        let total = st.transcript.len();
        st.images_dropped += trim_images(&mut st.transcript[..total], 0) as u64;
        st.latest = checkpoint.latest_observation;
        let stop = match self
            .restart(
                &mut st,
                checkpoint.partial_results,
                checkpoint.pending_calls,
                checkpoint.in_flight,
            )
            .await
        {
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

    fn take_deferred(&self) -> Option<Checkpoint> {
        self.deferred
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
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

    async fn restart(
        &self,
        st: &mut State,
        partial: Vec<ToolResult>,
        pending: Vec<PendingCall>,
        in_flight: Option<String>,
    ) -> Result<Infallible, Stop> {
        self.status(RunStatus::Running).await?;
        self.control.set_phase(Phase::Running);
        let mut results = partial;
        for call in pending {
            if let ToolRequest::RequestHuman { .. } = call.request {
                results.push(ToolResult {
                    call_id: call.id,
                    channel: call.channel,
                    text: "Not answered: the run was restarted before the person answered. Ask again if you still need the answer.".into(),
                    image: None,
                    is_error: false,
                    acknowledged_safety_checks: Vec::new(),
                });
            } else if in_flight.as_deref() == Some(call.id.as_str()) {
                let message = "the run was interrupted while this action was in progress; its outcome is unknown and it was not repeated";
                self.emit(RunEvent::ActionFinished {
                    step: st.step,
                    call_id: call.id.clone(),
                    action: call.request.clone(),
                    observation_id: st.latest.as_ref().map(|l| l.id.clone()),
                    outcome: ActionOutcome::Unknown,
                    error: Some(message.into()),
                    screen_points: Vec::new(),
                    timings: Timings::default(),
                    screenshot: None,
                })
                .await?;
                results.push(ToolResult {
                    call_id: call.id,
                    channel: call.channel,
                    text: "Outcome unknown: the run was interrupted (its controller restarted) while this action was in progress. It was not repeated. Look at the new screenshot to see whether it took effect.".into(),
                    image: None,
                    is_error: false,
                    acknowledged_safety_checks: Vec::new(),
                });
            } else {
                results.push(ToolResult {
                    call_id: call.id,
                    channel: call.channel,
                    text: "Not executed: the run was interrupted (its controller restarted) before this action started.".into(),
                    image: None,
                    is_error: true,
                    acknowledged_safety_checks: Vec::new(),
                });
            }
        }
        st.transcript
            .extend(results.into_iter().map(Item::ToolResult));
        match self.observe(st).await? {
            Waited::Done(()) => {
                st.note = Some(
                    "The run was restarted. The screenshot below was taken after the restart; plan your next actions from it.".into(),
                );
            }
            Waited::TakeOver => {
                self.pause(st, None).await?;
            }
        }
        self.flush_note(st);
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

    fn system_prompt(&self, display: (u32, u32)) -> String {
        let mut prompt = format!(
            "You control a Linux desktop (X11 with the openbox window manager) in a sandbox, through screenshots and mouse and keyboard actions. Screenshots are {}x{} pixels; give every coordinate in pixels of the latest screenshot. After your actions you get a new screenshot once the screen has stopped changing. Right-clicking the empty desktop opens a menu with Terminal, Paint (mtPaint) and a browser window; a shell tool is available too (start GUI programs in the background). Draw a whole stroke (a line, a curve, the outline of a shape) as one drag through all its points. Save the files the user should get under ~/outputs. A person may watch and take control of the computer; when they hand it back you get a note and a fresh screenshot: plan from that screenshot, not from earlier ones. If you need information or a decision only the person can give, use the request_human tool. When the task is done, reply with a short summary and no tool call.",
            display.0, display.1
        );
        if let Some(extra) = &self.config.instructions {
            prompt.push_str("\n\n");
            prompt.push_str(extra);
        }
        prompt
    }

    fn turn_request(&self, st: &State) -> TurnRequest {
        let display = st
            .latest
            .as_ref()
            .map(|l| (l.image_width, l.image_height))
            .unwrap_or((1280, 800));
        TurnRequest {
            system: self.system_prompt(display),
            items: st.transcript.clone(),
            images: st.images.clone(),
            display,
            step: st.step,
        }
    }

    /// Asks the model, staying responsive: a takeover pauses the loop while the call goes on
    /// (its answer is then planned on a screenshot from before the takeover, so its actions are
    /// refused as stale); a cancel drops the call.
    async fn call_model(&self, st: &mut State) -> Result<(ModelTurn, u64), Stop> {
        let request = self.turn_request(st);
        let model = self.model.clone();
        let mut call: ModelFuture = Box::pin(async move { model.next_turn(request).await });
        let started = Instant::now();
        loop {
            let remaining =
                Duration::from_secs(self.config.limits.max_seconds).saturating_sub(st.active());
            let result = tokio::select! {
                result = call.as_mut() => result,
                signal = self.control.wait_signal() => match signal {
                    Signal::Cancel => return Err(Stop::Canceled),
                    Signal::TakeOver => match self.pause(st, Some(&mut call)).await? {
                        Some(result) => result,
                        None => continue,
                    },
                },
                _ = tokio::time::sleep(remaining) => return Err(self.time_limit()),
            };
            let model_ms = millis(started.elapsed());
            return match result {
                Ok(turn) => Ok((turn, model_ms)),
                Err(ModelError::Script(message)) => Err(Stop::Failed {
                    kind: ErrorKind::ScriptError,
                    reason: message,
                }),
                Err(ModelError::Gateway(error)) => Err(Stop::Failed {
                    kind: ErrorKind::ModelError,
                    reason: format!("the model call failed: {error}"),
                }),
            };
        }
    }

    async fn record_turn(
        &self,
        st: &mut State,
        turn: &ModelTurn,
        model_ms: u64,
    ) -> Result<(), Stop> {
        st.usage.add(&turn.usage);
        for text in &turn.reasoning {
            self.emit(RunEvent::AgentReasoning {
                step: st.step,
                text: text.clone(),
            })
            .await?;
        }
        if let Some(text) = &turn.text {
            self.emit(RunEvent::AgentMessage {
                step: st.step,
                text: text.clone(),
            })
            .await?;
        }
        if self.model.info().provider != "script" {
            self.emit(RunEvent::Usage {
                step: st.step,
                usage: turn.usage,
                total: st.usage,
                attempts: turn.attempts,
                model_ms,
            })
            .await?;
        }
        st.transcript.push(Item::Assistant {
            provider: self.model.info().provider.to_string(),
            raw: turn.raw.clone(),
            text: turn.text.clone(),
            call_ids: turn.calls.iter().map(|c| c.id.clone()).collect(),
        });
        Ok(())
    }

    /// Appends the pending note with the latest screenshot.
    fn flush_note(&self, st: &mut State) {
        if let Some(note) = st.note.take() {
            let image = st.latest_image();
            st.transcript.push(Item::User { text: note, image });
        }
    }

    /// Stores the state to resume from now (a deferred one is superseded).
    async fn checkpoint(
        &self,
        st: &State,
        partial: &[ToolResult],
        pending: &[ToolCall],
        in_flight: Option<&str>,
    ) -> Result<(), Stop> {
        self.take_deferred();
        let checkpoint = self.checkpoint_of(st, partial, pending, in_flight);
        self.sink.checkpoint(&checkpoint).await.map_err(Stop::Sink)
    }

    /// Keeps the state to resume from and stores it with the next event, in one write. Used
    /// before a call: every call announces itself (`action.started`, or the error event of a
    /// refusal, or `input.requested`) before it touches the computer or waits, so the
    /// checkpoint naming it in flight is stored before anything it does, with one write less
    /// per step.
    fn defer_checkpoint(
        &self,
        st: &State,
        partial: &[ToolResult],
        pending: &[ToolCall],
        in_flight: Option<&str>,
    ) {
        let checkpoint = self.checkpoint_of(st, partial, pending, in_flight);
        *self
            .deferred
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(checkpoint);
    }

    fn checkpoint_of(
        &self,
        st: &State,
        partial: &[ToolResult],
        pending: &[ToolCall],
        in_flight: Option<&str>,
    ) -> Checkpoint {
        Checkpoint {
            version: CHECKPOINT_VERSION,
            model: self.model_name(),
            step: st.step,
            transcript: st.transcript.clone(),
            partial_results: partial.to_vec(),
            pending_calls: pending
                .iter()
                .map(|c| PendingCall {
                    id: c.id.clone(),
                    channel: c.channel.clone(),
                    request: c.request.clone(),
                })
                .collect(),
            in_flight: in_flight.map(str::to_string),
            latest_observation: st.latest.clone(),
            usage: st.usage,
            active_ms: millis(st.active()),
            images_dropped: st.images_dropped,
        }
    }

    // --- Observing. ---

    fn observe_request(&self) -> ObserveRequest {
        ObserveRequest::within(
            self.model.info().observation_bounds,
            self.config.image_format,
        )
    }

    /// Takes the next screenshot; a takeover request meanwhile drops it.
    async fn observe(&self, st: &mut State) -> Result<Waited<()>, Stop> {
        let request = self.observe_request();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = tokio::select! {
                result = self.computer.observe(&request) => result,
                signal = self.control.wait_signal() => match signal {
                    Signal::Cancel => return Err(Stop::Canceled),
                    Signal::TakeOver => return Ok(Waited::TakeOver),
                },
            };
            match self
                .accept_observation(st, result, started, attempt)
                .await?
            {
                Some(()) => return Ok(Waited::Done(())),
                None => continue,
            }
        }
    }

    /// Takes a screenshot; only a cancel interrupts it (used right after a hand-back).
    async fn observe_now(&self, st: &mut State) -> Result<(), Stop> {
        let request = self.observe_request();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = tokio::select! {
                result = self.computer.observe(&request) => result,
                _ = self.control.wait_cancel() => return Err(Stop::Canceled),
            };
            if self
                .accept_observation(st, result, started, attempt)
                .await?
                .is_some()
            {
                return Ok(());
            }
        }
    }

    /// Stores a new observation; `None` to try again after a transient failure.
    async fn accept_observation(
        &self,
        st: &mut State,
        result: Result<Observation, ComputerError>,
        started: Instant,
        attempt: u32,
    ) -> Result<Option<()>, Stop> {
        let observation = match result {
            Ok(observation) => observation,
            Err(error) if attempt < OBSERVE_ATTEMPTS && !error.is_refusal() => {
                tracing::warn!(%error, attempt, "screenshot failed; retrying");
                tokio::time::sleep(Duration::from_millis(300 * u64::from(attempt))).await;
                return Ok(None);
            }
            Err(error) => {
                return Err(Stop::Failed {
                    kind: ErrorKind::SandboxError,
                    reason: format!("cannot take a screenshot: {error}"),
                });
            }
        };
        let meta = observation.meta();
        self.sink.screenshot(&meta, &observation.image).await?;
        st.latest_hash = hash_bytes(&observation.image);
        st.images.insert(meta.id.clone(), observation.image);
        st.capture_ms = millis(started.elapsed());
        st.latest = Some(meta);
        Ok(Some(()))
    }

    // --- Control. ---

    /// Pauses until the hand-back (or a cancel). A model call in flight keeps running; its
    /// result, if it arrives meanwhile, is returned. After the hand-back a fresh screenshot is
    /// taken and a note for the model is queued.
    async fn pause(
        &self,
        st: &mut State,
        mut model_call: Option<&mut ModelFuture>,
    ) -> Result<Option<ModelResult>, Stop> {
        self.control.clear_take_over();
        st.stop_clock();
        self.emit(RunEvent::ControlTaken {}).await?;
        self.status(RunStatus::Paused).await?;
        self.control.set_phase(Phase::Paused);
        tracing::info!(step = st.step, "a person took control");
        let mut stash: Option<ModelResult> = None;
        let note = loop {
            let waiting = stash.is_none() && model_call.is_some();
            tokio::select! {
                result = poll_model(&mut model_call), if waiting => stash = Some(result),
                release = self.control.wait_release() => match release {
                    Release::Cancel => return Err(Stop::Canceled),
                    Release::HandBack(note) => break note,
                },
            }
        };
        let note = note.trim().to_string();
        self.emit(RunEvent::ControlReturned {
            note: (!note.is_empty()).then(|| note.clone()),
        })
        .await?;
        self.status(RunStatus::Running).await?;
        self.control.set_phase(Phase::Running);
        st.start_clock();
        st.handbacks += 1;
        self.observe_now(st).await?;
        let mut text = "A person took control of the computer and has now handed it back. The screen may have changed: the screenshot below was taken after the hand-back; plan your next actions from it, not from earlier screenshots.".to_string();
        if !note.is_empty() {
            text.push_str(&format!(" Their note: {note}"));
        }
        st.note = Some(text);
        Ok(stash)
    }

    /// Asks the person and waits for the answer; returns it and whether it approves.
    async fn ask(
        &self,
        st: &mut State,
        kind: InputKind,
        question: &str,
        checks: &[SafetyCheck],
    ) -> Result<(String, bool), Stop> {
        self.control.clear_answer();
        st.input_seq += 1;
        let request_id = format!("input-{}-{}", st.step, st.input_seq);
        self.emit(RunEvent::InputRequested {
            request_id: request_id.clone(),
            kind,
            question: question.to_string(),
            safety_checks: checks.to_vec(),
        })
        .await?;
        loop {
            self.status(RunStatus::WaitingForInput).await?;
            self.control.set_phase(Phase::WaitingForInput {
                request_id: request_id.clone(),
            });
            st.stop_clock();
            match self.control.wait_input().await {
                InputSignal::Cancel => return Err(Stop::Canceled),
                InputSignal::TakeOver => {
                    self.pause(st, None).await?;
                }
                InputSignal::Answer(text) => {
                    let approved = approves(&text);
                    self.emit(RunEvent::InputReceived {
                        request_id,
                        text: text.clone(),
                        approved: (kind == InputKind::SafetyCheck).then_some(approved),
                    })
                    .await?;
                    self.status(RunStatus::Running).await?;
                    self.control.set_phase(Phase::Running);
                    st.start_clock();
                    return Ok((text, approved));
                }
            }
        }
    }

    /// Waits for the screen to settle; a takeover request meanwhile ends the wait.
    async fn settle(&self) -> Result<Waited<()>, Stop> {
        let policy = self.config.settle;
        tokio::select! {
            result = self.computer.wait_settled(policy.quiet, policy.timeout) => {
                match result {
                    Ok(report) => tracing::debug!(
                        settled = report.settled,
                        waited_ms = report.waited_ms,
                        frames = report.frames,
                        last_change_ms = report.last_change_ms,
                        quiet_ms = report.quiet_ms,
                        "waited for the screen to settle"
                    ),
                    Err(error) => tracing::warn!(%error, "waiting for the screen to settle failed"),
                }
                Ok(Waited::Done(()))
            }
            signal = self.control.wait_signal() => match signal {
                Signal::Cancel => Err(Stop::Canceled),
                Signal::TakeOver => Ok(Waited::TakeOver),
            },
        }
    }

    // --- Acting. ---

    async fn run_calls(
        &self,
        st: &mut State,
        turn: &ModelTurn,
        planned: Option<ObservationMeta>,
        planned_hash: u64,
        model_ms: u64,
    ) -> Result<(), Stop> {
        let calls = &turn.calls;
        let last_visual = calls.iter().rposition(|c| is_visual(&c.request));
        let handbacks_before = st.handbacks;
        let mut results: Vec<ToolResult> = Vec::new();
        let mut visual_results: Vec<usize> = Vec::new();
        let mut observed = false;
        let mut needs_observation = false;
        let mut performed: Vec<DesktopAction> = Vec::new();
        let mut finish = None;
        for (index, call) in calls.iter().enumerate() {
            if let Some(signal) = self.control.pending_signal() {
                match signal {
                    Signal::Cancel => return Err(Stop::Canceled),
                    Signal::TakeOver => {
                        self.pause(st, None).await?;
                    }
                }
            }
            self.defer_checkpoint(st, &results, &calls[index..], Some(&call.id));
            let observe_after = Some(index) == last_visual;
            let outcome = self
                .run_call(st, call, planned.as_ref(), model_ms, observe_after)
                .await?;
            if outcome.visual {
                visual_results.push(results.len());
                needs_observation = true;
            }
            observed |= outcome.observed;
            if let Some(actions) = outcome.performed {
                performed.extend(actions);
            }
            if outcome.finish.is_some() {
                finish = outcome.finish;
            }
            results.push(outcome.result);
        }
        let mut handed_back = st.handbacks != handbacks_before;
        if needs_observation && !observed && !handed_back {
            match self.observe(st).await? {
                Waited::Done(()) => {
                    if let Some(&last) = visual_results.last() {
                        results[last].image = st.latest_image();
                        observed = true;
                    }
                }
                Waited::TakeOver => {
                    self.pause(st, None).await?;
                    handed_back = true;
                }
            }
        }
        if observed && !handed_back && !performed.is_empty() {
            self.track_repeats(st, &performed, planned_hash, &mut results, &visual_results)
                .await?;
        }
        st.transcript
            .extend(results.into_iter().map(Item::ToolResult));
        self.flush_note(st);
        self.trim(st);
        self.checkpoint(st, &[], &[], None).await?;
        if let Some(answer) = finish {
            return Err(Stop::Completed(answer));
        }
        Ok(())
    }

    async fn track_repeats(
        &self,
        st: &mut State,
        performed: &[DesktopAction],
        planned_hash: u64,
        results: &mut [ToolResult],
        visual_results: &[usize],
    ) -> Result<(), Stop> {
        let signature = serde_json::to_string(performed).unwrap_or_default();
        let unchanged = st.latest_hash == planned_hash;
        let tracker = &mut st.repeat;
        if !unchanged {
            tracker.signature = None;
            tracker.count = 0;
            return Ok(());
        }
        if tracker.signature.as_deref() == Some(signature.as_str()) {
            tracker.count += 1;
        } else {
            tracker.signature = Some(signature);
            tracker.count = 1;
        }
        let count = tracker.count;
        let policy = self.config.repeat;
        let summary = performed
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ");
        if count >= policy.fail_after {
            return Err(Stop::Failed {
                kind: ErrorKind::RepeatedAction,
                reason: format!(
                    "the same action ({summary}) was repeated {count} times in a row without any change on the screen"
                ),
            });
        }
        if count >= policy.warn_after {
            let message = format!(
                "You have repeated the same action ({summary}) {count} times and the screen did not change. It is not working: try something different."
            );
            self.error_event(st, ErrorKind::RepeatedAction, &message)
                .await?;
            if let Some(&last) = visual_results.last() {
                let result = &mut results[last];
                if !result.text.is_empty() {
                    result.text.push('\n');
                }
                result.text.push_str(&message);
            }
        }
        Ok(())
    }

    fn trim(&self, st: &mut State) {
        st.images_dropped += trim_images(&mut st.transcript, self.config.limits.max_images) as u64;
        let mut live: HashSet<String> = st
            .transcript
            .iter()
            .filter_map(|item| match item {
                Item::User { image, .. } => image.as_ref(),
                Item::ToolResult(result) => result.image.as_ref(),
                Item::Assistant { .. } => None,
            })
            .filter(|image| !image.dropped)
            .map(|image| image.observation_id.clone())
            .collect();
        if let Some(latest) = &st.latest {
            live.insert(latest.id.clone());
        }
        st.images.retain(|id, _| live.contains(id));
    }

    /// Refuses a call before it runs: an `error` event and a tool error for the model.
    async fn refuse(
        &self,
        st: &State,
        call: &ToolCall,
        message: String,
    ) -> Result<CallOutcome, Stop> {
        tracing::info!(call = %call.id, %message, "action refused");
        self.error_event(st, ErrorKind::ActionRefused, &message)
            .await?;
        Ok(CallOutcome::plain(result_for(call, message, true)))
    }

    /// Checks that `points` may be aimed at: planned on the latest observation, inside it.
    fn check_target(
        &self,
        st: &State,
        planned: Option<&ObservationMeta>,
        points: &[(f64, f64)],
        what: &str,
    ) -> Result<ObservationMeta, String> {
        let Some(planned) = planned else {
            return Err(format!(
                "Not performed: {what} was planned before any screenshot was taken."
            ));
        };
        let latest = st.latest.as_ref().map(|l| l.id.as_str());
        if latest != Some(planned.id.as_str()) {
            return Err(format!(
                "Not performed: {what} was planned on screenshot {} but the screen may have changed since (a person used the computer or the run restarted); screenshot {} is newer. Look at the newest screenshot and plan again.",
                planned.id,
                latest.unwrap_or("?")
            ));
        }
        for &(x, y) in points {
            if !planned.contains(x, y) {
                return Err(format!(
                    "Not performed: {what} aims at ({x}, {y}), which is outside the {}x{} screenshot. Coordinates must be pixels of the screenshot: x from 0 to {}, y from 0 to {}.",
                    planned.image_width,
                    planned.image_height,
                    planned.image_width.saturating_sub(1),
                    planned.image_height.saturating_sub(1)
                ));
            }
        }
        Ok(planned.clone())
    }

    async fn run_call(
        &self,
        st: &mut State,
        call: &ToolCall,
        planned: Option<&ObservationMeta>,
        model_ms: u64,
        observe_after: bool,
    ) -> Result<CallOutcome, Stop> {
        let timings = Timings {
            capture_ms: st.capture_ms,
            model_ms,
            ..Timings::default()
        };
        match &call.request {
            ToolRequest::Invalid { tool, message } => {
                let message = format!("{tool}: {message}");
                self.error_event(st, ErrorKind::InvalidToolCall, &message)
                    .await?;
                Ok(CallOutcome::plain(result_for(call, message, true)))
            }
            ToolRequest::Finish { answer } => Ok(CallOutcome {
                finish: Some(answer.clone()),
                ..CallOutcome::plain(result_for(call, "The run is finished.".into(), false))
            }),
            ToolRequest::RequestHuman { question } => {
                let (answer, _) = self.ask(st, InputKind::Question, question, &[]).await?;
                Ok(CallOutcome::plain(result_for(
                    call,
                    format!("The person answered: {answer}"),
                    false,
                )))
            }
            ToolRequest::Desktop { actions } => {
                self.run_desktop(st, call, actions, planned, timings, observe_after)
                    .await
            }
            ToolRequest::Screenshot => {
                self.emit(RunEvent::ActionStarted {
                    step: st.step,
                    call_id: call.id.clone(),
                    action: call.request.clone(),
                    observation_id: planned.map(|p| p.id.clone()),
                })
                .await?;
                let mut outcome = CallOutcome::plain(result_for(call, String::new(), false));
                outcome.visual = true;
                let mut screenshot = None;
                let mut take_over = false;
                if observe_after {
                    match self.observe(st).await? {
                        Waited::Done(()) => {
                            outcome.result.image = st.latest_image();
                            outcome.observed = true;
                            screenshot = st.latest.as_ref().map(|l| l.id.clone());
                        }
                        Waited::TakeOver => take_over = true,
                    }
                }
                self.emit(RunEvent::ActionFinished {
                    step: st.step,
                    call_id: call.id.clone(),
                    action: call.request.clone(),
                    observation_id: planned.map(|p| p.id.clone()),
                    outcome: ActionOutcome::Ok,
                    error: None,
                    screen_points: Vec::new(),
                    timings,
                    screenshot,
                })
                .await?;
                if take_over {
                    self.pause(st, None).await?;
                }
                Ok(outcome)
            }
            ToolRequest::Zoom { region } => {
                let [x0, y0, x1, y1] = *region;
                let corner = (x1 - 1.0).max(x0);
                let bottom = (y1 - 1.0).max(y0);
                let planned =
                    match self.check_target(st, planned, &[(x0, y0), (corner, bottom)], "zoom") {
                        Ok(planned) => planned,
                        Err(message) => return self.refuse(st, call, message).await,
                    };
                let bounds = self
                    .model
                    .info()
                    .observation_bounds
                    .unwrap_or((planned.image_width, planned.image_height));
                self.started(st, call, Some(&planned)).await?;
                let begun = Instant::now();
                let result = tokio::select! {
                    result = self.computer.zoom(&planned, *region, bounds) => result,
                    _ = self.control.wait_cancel() => return Err(Stop::Canceled),
                };
                let timings = Timings {
                    action_ms: millis(begun.elapsed()),
                    ..timings
                };
                match result {
                    Ok(zoomed) => {
                        let meta = zoomed.meta();
                        self.sink.screenshot(&meta, &zoomed.image).await?;
                        st.images.insert(meta.id.clone(), zoomed.image);
                        self.finished(
                            st,
                            call,
                            Some(&planned),
                            None,
                            timings,
                            Some(meta.id.clone()),
                        )
                        .await?;
                        let mut result = result_for(
                            call,
                            format!("Zoomed into [{x0}, {y0}, {x1}, {y1}]."),
                            false,
                        );
                        result.image = Some(image_ref(&meta));
                        Ok(CallOutcome::plain(result))
                    }
                    Err(error) => {
                        let message = format!("The zoom failed: {error}");
                        self.finished(st, call, Some(&planned), Some(&message), timings, None)
                            .await?;
                        Ok(CallOutcome::plain(result_for(call, message, true)))
                    }
                }
            }
            ToolRequest::Shell {
                command,
                restart,
                timeout_s,
            } => {
                self.started(st, call, None).await?;
                let wait = timeout_s
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .map(|s| Duration::from_secs_f64(s.min(MAX_SHELL_WAIT.as_secs_f64())))
                    .unwrap_or(self.config.shell_timeout)
                    .min(MAX_SHELL_WAIT);
                let command = if command.trim().is_empty() {
                    "true"
                } else {
                    command.as_str()
                };
                let begun = Instant::now();
                let result = tokio::select! {
                    result = self.computer.run_shell(command, wait, *restart) => result,
                    _ = self.control.wait_cancel() => return Err(Stop::Canceled),
                };
                let timings = Timings {
                    action_ms: millis(begun.elapsed()),
                    ..timings
                };
                let (text, is_error) = match result {
                    Ok(outcome) => {
                        let mut text = outcome.output.trim_end().to_string();
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        match outcome.exit_code {
                            _ if outcome.still_running => text.push_str(&format!(
                                "[still running after {} s; it goes on in the background]",
                                wait.as_secs_f64()
                            )),
                            Some(code) => text.push_str(&format!("[exit code {code}]")),
                            None => text.push_str("[ended without an exit code]"),
                        }
                        let failed = !outcome.still_running && outcome.exit_code != Some(0);
                        (text, failed)
                    }
                    Err(error) => (format!("The command could not be run: {error}"), true),
                };
                let error = is_error.then(|| text.clone());
                self.finished(st, call, None, error.as_deref(), timings, None)
                    .await?;
                Ok(CallOutcome::plain(result_for(call, text, is_error)))
            }
            ToolRequest::Edit { command } => {
                self.started(st, call, None).await?;
                let begun = Instant::now();
                let result = tokio::select! {
                    result = self.computer.edit(command) => result,
                    _ = self.control.wait_cancel() => return Err(Stop::Canceled),
                };
                let timings = Timings {
                    action_ms: millis(begun.elapsed()),
                    ..timings
                };
                let (text, is_error) = match result {
                    Ok(outcome) => (outcome.output, false),
                    Err(error) => (format!("Error: {error}"), true),
                };
                let error = is_error.then(|| text.clone());
                self.finished(st, call, None, error.as_deref(), timings, None)
                    .await?;
                Ok(CallOutcome::plain(result_for(call, text, is_error)))
            }
            ToolRequest::WriteFile { path, content, .. } => {
                self.started(st, call, None).await?;
                let begun = Instant::now();
                let result = tokio::select! {
                    result = self.computer.write_file(path, content) => result,
                    _ = self.control.wait_cancel() => return Err(Stop::Canceled),
                };
                let timings = Timings {
                    action_ms: millis(begun.elapsed()),
                    ..timings
                };
                let (text, is_error) = match result {
                    Ok(()) => (format!("Wrote {} bytes to {path}.", content.len()), false),
                    Err(error) => (format!("Cannot write {path}: {error}"), true),
                };
                let error = is_error.then(|| text.clone());
                self.finished(st, call, None, error.as_deref(), timings, None)
                    .await?;
                Ok(CallOutcome::plain(result_for(call, text, is_error)))
            }
        }
    }

    async fn started(
        &self,
        st: &State,
        call: &ToolCall,
        planned: Option<&ObservationMeta>,
    ) -> Result<(), Stop> {
        self.emit(RunEvent::ActionStarted {
            step: st.step,
            call_id: call.id.clone(),
            action: call.request.clone(),
            observation_id: planned.map(|p| p.id.clone()),
        })
        .await
    }

    async fn finished(
        &self,
        st: &State,
        call: &ToolCall,
        planned: Option<&ObservationMeta>,
        error: Option<&str>,
        timings: Timings,
        screenshot: Option<String>,
    ) -> Result<(), Stop> {
        self.emit(RunEvent::ActionFinished {
            step: st.step,
            call_id: call.id.clone(),
            action: call.request.clone(),
            observation_id: planned.map(|p| p.id.clone()),
            outcome: if error.is_some() {
                ActionOutcome::Error
            } else {
                ActionOutcome::Ok
            },
            error: error.map(str::to_string),
            screen_points: Vec::new(),
            timings,
            screenshot,
        })
        .await
    }

    async fn run_desktop(
        &self,
        st: &mut State,
        call: &ToolCall,
        actions: &[DesktopAction],
        planned: Option<&ObservationMeta>,
        mut timings: Timings,
        observe_after: bool,
    ) -> Result<CallOutcome, Stop> {
        // Safety checks first: nothing runs unless the person approves.
        let mut acknowledged = Vec::new();
        if !call.safety_checks.is_empty() {
            let listed = call
                .safety_checks
                .iter()
                .map(|c| {
                    format!(
                        "{} ({})",
                        c.message.as_deref().unwrap_or("no message"),
                        c.code.as_deref().unwrap_or(&c.id)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let names = actions
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", ");
            let question = format!(
                "The model's next action ({names}) raised safety checks: {listed}. Answer \"approve\" to let it run; any other answer refuses it and is passed to the model."
            );
            let (answer, approved) = self
                .ask(st, InputKind::SafetyCheck, &question, &call.safety_checks)
                .await?;
            if !approved {
                let message = format!(
                    "Not performed: the person did not approve the safety checks of this action. Their answer: {answer}"
                );
                return self.refuse(st, call, message).await;
            }
            acknowledged = call.safety_checks.clone();
        }
        let names = actions
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ");
        for action in actions {
            if let Err(error) = action.validate() {
                return self
                    .refuse(
                        st,
                        call,
                        format!("Not performed: {} {error}", action.name()),
                    )
                    .await;
            }
        }
        let points: Vec<(f64, f64)> = actions.iter().flat_map(|a| a.points()).collect();
        let planned = match self.check_target(st, planned, &points, &names) {
            Ok(planned) => planned,
            Err(message) => return self.refuse(st, call, message).await,
        };
        let screen_points: Vec<(i32, i32)> = points
            .iter()
            .map(|&(x, y)| planned.to_screen(x, y))
            .collect();
        self.started(st, call, Some(&planned)).await?;
        let mut error: Option<String> = None;
        let mut notes: Vec<String> = Vec::new();
        let mut performed = Vec::new();
        // A takeover request between actions, or while the screen settles, stops the call:
        // this call's finished event goes out first, then the loop pauses.
        let mut take_over = false;
        let mut interrupted: Option<String> = None;
        for (index, action) in actions.iter().enumerate() {
            if index > 0 {
                match self.control.pending_signal() {
                    Some(Signal::Cancel) => return Err(Stop::Canceled),
                    Some(Signal::TakeOver) => {
                        take_over = true;
                        interrupted = Some(format!(
                            "A person took control after {index} of {} actions; the rest was not performed.",
                            actions.len()
                        ));
                        break;
                    }
                    None => {}
                }
            }
            let begun = Instant::now();
            // A takeover waits for the action; only a cancel interrupts it.
            let result = tokio::select! {
                result = self.computer.act(action, Some(&planned.id)) => result,
                _ = self.control.wait_cancel() => return Err(Stop::Canceled),
            };
            timings.action_ms += millis(begun.elapsed());
            match result {
                Ok(report) => {
                    performed.push(action.clone());
                    if matches!(action, DesktopAction::CursorPosition {})
                        && let Some((x, y)) = report.cursor
                    {
                        let (ix, iy) = planned.from_screen(x, y);
                        notes.push(format!("The pointer is at ({ix}, {iy})."));
                    }
                }
                Err(failure) => {
                    error = Some(if failure.is_refusal() {
                        format!("{} was refused by the computer: {failure}", action.name())
                    } else {
                        format!(
                            "{} failed: {failure}. Its effect is unknown; check the screenshot.",
                            action.name()
                        )
                    });
                    break;
                }
            }
            if action.changes_screen() {
                let begun = Instant::now();
                let waited = self.settle().await?;
                timings.settle_ms += millis(begun.elapsed());
                if let Waited::TakeOver = waited {
                    take_over = true;
                    if index + 1 < actions.len() {
                        interrupted = Some(format!(
                            "A person took control after {} of {} actions; the rest was not performed.",
                            index + 1,
                            actions.len()
                        ));
                    }
                    break;
                }
            }
        }
        let mut result = ToolResult {
            call_id: call.id.clone(),
            channel: call.channel.clone(),
            text: String::new(),
            image: None,
            is_error: error.is_some() || interrupted.is_some(),
            acknowledged_safety_checks: acknowledged,
        };
        let mut observed = false;
        let mut screenshot = None;
        if observe_after && !take_over {
            match self.observe(st).await? {
                Waited::Done(()) => {
                    result.image = st.latest_image();
                    observed = true;
                    screenshot = st.latest.as_ref().map(|l| l.id.clone());
                }
                Waited::TakeOver => take_over = true,
            }
        }
        if let Some(message) = &error {
            self.error_event(st, ErrorKind::ActionFailed, message)
                .await?;
            notes.push(message.clone());
        }
        if let Some(message) = &interrupted {
            notes.push(message.clone());
        }
        result.text = notes.join("\n");
        self.emit(RunEvent::ActionFinished {
            step: st.step,
            call_id: call.id.clone(),
            action: call.request.clone(),
            observation_id: Some(planned.id.clone()),
            outcome: if error.is_some() || interrupted.is_some() {
                ActionOutcome::Error
            } else {
                ActionOutcome::Ok
            },
            error: error.or(interrupted),
            screen_points,
            timings,
            screenshot,
        })
        .await?;
        if take_over {
            self.pause(st, None).await?;
        }
        Ok(CallOutcome {
            result,
            visual: true,
            observed,
            performed: (!performed.is_empty()).then_some(performed),
            finish: None,
        })
    }
}

async fn poll_model(call: &mut Option<&mut ModelFuture>) -> ModelResult {
    match call {
        Some(call) => call.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Calls whose result goes back with the screenshot taken after the turn.
fn is_visual(request: &ToolRequest) -> bool {
    matches!(
        request,
        ToolRequest::Desktop { .. } | ToolRequest::Screenshot
    )
}

fn result_for(call: &ToolCall, text: String, is_error: bool) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        channel: call.channel.clone(),
        text,
        image: None,
        is_error,
        acknowledged_safety_checks: Vec::new(),
    }
}
