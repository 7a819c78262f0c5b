//! Where the loop waits for the person: a takeover's pause until the hand-back, and a question
//! (`request_human` or a provider's safety check) until it is answered.

use super::state::State;
use super::turn::{ModelFuture, ModelResult, poll_model};
use super::{Runner, Stop};
use crate::control::{InputSignal, Phase, Release, approves};
use crate::event::{InputKind, RunEvent, RunStatus};
use crate::transcript::SafetyCheck;

impl Runner {
    /// Pauses until the hand-back (or a cancel). A model call in flight keeps running; its
    /// result, if it arrives meanwhile, is returned. After the hand-back a fresh screenshot is
    /// taken and a note for the model is queued.
    pub(super) async fn pause(
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
    pub(super) async fn ask(
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
                        message_id: self.control.take_answer_message_id(),
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
}
