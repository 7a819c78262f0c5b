//! A desktop call: its safety checks put to the person, its actions validated and aimed at the
//! observation they were planned on, performed one by one (each screen change waited out),
//! and reported with the screenshot that follows.

use std::time::Instant;

use super::calls::CallOutcome;
use super::state::{State, millis};
use super::{Runner, Stop, Waited};
use crate::action::DesktopAction;
use crate::control::Signal;
use crate::event::{ActionOutcome, ErrorKind, InputKind, RunEvent, Timings};
use crate::model::ToolCall;
use crate::observation::ObservationMeta;
use crate::transcript::ToolResult;

impl Runner {
    pub(super) async fn run_desktop(
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
