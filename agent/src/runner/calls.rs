//! The tool calls of one turn: each run in order (checkpointed before it starts), the
//! screenshot after the last visual one, repeat detection, image trimming; and what every call
//! shares (the target check, refusals, the started and finished events).

use std::collections::HashSet;

use super::state::State;
use super::{Runner, Stop, Waited};
use crate::action::DesktopAction;
use crate::control::Signal;
use crate::event::{ActionOutcome, ErrorKind, InputKind, RunEvent, Timings};
use crate::model::{ModelTurn, ToolCall, ToolRequest};
use crate::observation::ObservationMeta;
use crate::transcript::{Item, ToolResult, trim_images};

/// What running one call produced.
pub(super) struct CallOutcome {
    pub(super) result: ToolResult,
    /// Its result wants the screenshot taken after the turn.
    pub(super) visual: bool,
    /// It took that screenshot itself.
    pub(super) observed: bool,
    /// Desktop actions it performed, for repeat detection.
    pub(super) performed: Option<Vec<DesktopAction>>,
    /// The run ends with this answer (`Finish`).
    pub(super) finish: Option<String>,
}

impl CallOutcome {
    pub(super) fn plain(result: ToolResult) -> Self {
        Self {
            result,
            visual: false,
            observed: false,
            performed: None,
            finish: None,
        }
    }
}

impl Runner {
    pub(super) async fn run_calls(
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
    pub(super) async fn refuse(
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
    pub(super) fn check_target(
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

    /// Runs one call of the turn, planned on `planned`; `observe_after` when it is the turn's
    /// last visual call (the one that takes the screenshot after the turn).
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
                self.run_screenshot(st, call, planned, timings, observe_after)
                    .await
            }
            ToolRequest::Zoom { region } => {
                self.run_zoom(st, call, *region, planned, timings).await
            }
            ToolRequest::Shell {
                command,
                restart,
                timeout_s,
            } => {
                self.run_shell(st, call, command, *restart, *timeout_s, timings)
                    .await
            }
            ToolRequest::Edit { command } => self.run_edit(st, call, command, timings).await,
            ToolRequest::WriteFile { path, content, .. } => {
                self.run_write_file(st, call, path, content, timings).await
            }
        }
    }

    pub(super) async fn started(
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

    pub(super) async fn finished(
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
}

/// Calls whose result goes back with the screenshot taken after the turn.
fn is_visual(request: &ToolRequest) -> bool {
    matches!(
        request,
        ToolRequest::Desktop { .. } | ToolRequest::Screenshot
    )
}

pub(super) fn result_for(call: &ToolCall, text: String, is_error: bool) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        channel: call.channel.clone(),
        text,
        image: None,
        is_error,
        acknowledged_safety_checks: Vec::new(),
    }
}
