//! Checkpoints: the state to resume from, stored as the run goes (alone, or deferred to go out
//! with the next event in one write), and [`Runner::resume`], which restarts a run from one.

use std::convert::Infallible;
use std::time::Duration;

use super::state::{State, millis};
use super::{RunError, RunOutcome, Runner, Stop, Waited};
use crate::checkpoint::{CHECKPOINT_VERSION, Checkpoint, PendingCall};
use crate::control::Phase;
use crate::event::{ActionOutcome, RunEvent, RunStatus, Timings};
use crate::model::{ToolCall, ToolRequest};
use crate::transcript::{Item, ToolResult, trim_images};

impl Runner {
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

    pub(super) fn take_deferred(&self) -> Option<Checkpoint> {
        self.deferred
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    /// Stores the state to resume from now (a deferred one is superseded).
    pub(super) async fn checkpoint(
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
    pub(super) fn defer_checkpoint(
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
}
