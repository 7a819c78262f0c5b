//! One model turn: the request built from the conversation, the call (responsive to takeover,
//! cancel and the time limit while it runs), and the turn recorded as events and transcript.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use super::state::{State, millis};
use super::{Runner, Stop};
use crate::control::Signal;
use crate::event::{ErrorKind, RunEvent};
use crate::model::{ModelError, ModelTurn, TurnRequest};
use crate::transcript::Item;

pub(super) type ModelResult = Result<ModelTurn, ModelError>;
pub(super) type ModelFuture = Pin<Box<dyn Future<Output = ModelResult> + Send>>;

impl Runner {
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
    pub(super) async fn call_model(&self, st: &mut State) -> Result<(ModelTurn, u64), Stop> {
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

    pub(super) async fn record_turn(
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
    pub(super) fn flush_note(&self, st: &mut State) {
        if let Some(note) = st.note.take() {
            let image = st.latest_image();
            st.transcript.push(Item::User { text: note, image });
        }
    }
}

pub(super) async fn poll_model(call: &mut Option<&mut ModelFuture>) -> ModelResult {
    match call {
        Some(call) => call.as_mut().await,
        None => std::future::pending().await,
    }
}
