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
use crate::transcript::{SafetyCheck, ToolResult};

/// A desktop call under way: where it aims, and what its actions did so far.
struct DesktopRun {
    /// The observation it was planned on (the latest one).
    planned: ObservationMeta,
    /// Its points, on the screen.
    screen_points: Vec<(i32, i32)>,
    /// The safety checks the person approved.
    acknowledged: Vec<SafetyCheck>,
    timings: Timings,
    /// The actions performed, for repeat detection.
    performed: Vec<DesktopAction>,
    /// Lines for the model.
    notes: Vec<String>,
    /// How an action failed (the rest was not performed).
    error: Option<String>,
    /// A person asked to take control, between actions or while the screen settled: this
    /// call's finished event goes out first, then the loop pauses.
    take_over: bool,
    /// What that takeover left undone.
    interrupted: Option<String>,
}

impl Runner {
    pub(super) async fn run_desktop(
        &self,
        st: &mut State,
        call: &ToolCall,
        actions: &[DesktopAction],
        planned: Option<&ObservationMeta>,
        timings: Timings,
        observe_after: bool,
    ) -> Result<CallOutcome, Stop> {
        // Safety checks first: nothing runs unless the person approves.
        let acknowledged = match self.approve_safety_checks(st, call, actions).await? {
            Ok(acknowledged) => acknowledged,
            Err(message) => return self.refuse(st, call, message).await,
        };
        let names = action_names(actions);
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
        let mut run = DesktopRun {
            planned,
            screen_points,
            acknowledged,
            timings,
            performed: Vec::new(),
            notes: Vec::new(),
            error: None,
            take_over: false,
            interrupted: None,
        };
        self.perform(actions, &mut run).await?;
        self.report_desktop(st, call, run, observe_after).await
    }

    /// Asks the person about the call's safety checks, if it has any: the checks to
    /// acknowledge when they approve (none when there are none), else the refusal for the
    /// model.
    async fn approve_safety_checks(
        &self,
        st: &mut State,
        call: &ToolCall,
        actions: &[DesktopAction],
    ) -> Result<Result<Vec<SafetyCheck>, String>, Stop> {
        if call.safety_checks.is_empty() {
            return Ok(Ok(Vec::new()));
        }
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
        let names = action_names(actions);
        let question = format!(
            "The model's next action ({names}) raised safety checks: {listed}. Answer \"approve\" to let it run; any other answer refuses it and is passed to the model."
        );
        let (answer, approved) = self
            .ask(st, InputKind::SafetyCheck, &question, &call.safety_checks)
            .await?;
        if !approved {
            return Ok(Err(format!(
                "Not performed: the person did not approve the safety checks of this action. Their answer: {answer}"
            )));
        }
        Ok(Ok(call.safety_checks.clone()))
    }

    /// Performs the actions in order, waiting for the screen to settle after each that can
    /// change it; stops at a failure, a takeover request (between actions or while the screen
    /// settles) or a cancel.
    async fn perform(&self, actions: &[DesktopAction], run: &mut DesktopRun) -> Result<(), Stop> {
        for (index, action) in actions.iter().enumerate() {
            if index > 0 {
                match self.control.pending_signal() {
                    Some(Signal::Cancel) => return Err(Stop::Canceled),
                    Some(Signal::TakeOver) => {
                        run.take_over = true;
                        run.interrupted = Some(format!(
                            "A person took control after {index} of {} actions; the rest was not performed.",
                            actions.len()
                        ));
                        break;
                    }
                    None => {}
                }
            }
            if !self.act(action, run).await? {
                break;
            }
            if action.changes_screen() {
                let begun = Instant::now();
                let waited = self.settle().await?;
                run.timings.settle_ms += millis(begun.elapsed());
                if let Waited::TakeOver = waited {
                    run.take_over = true;
                    if index + 1 < actions.len() {
                        run.interrupted = Some(format!(
                            "A person took control after {} of {} actions; the rest was not performed.",
                            index + 1,
                            actions.len()
                        ));
                    }
                    break;
                }
            }
        }
        Ok(())
    }

    /// Performs one action; `false` when it failed (the failure is in `run.error`).
    async fn act(&self, action: &DesktopAction, run: &mut DesktopRun) -> Result<bool, Stop> {
        let begun = Instant::now();
        // A takeover waits for the action; only a cancel interrupts it.
        let result = tokio::select! {
            result = self.computer.act(action, Some(&run.planned.id)) => result,
            _ = self.control.wait_cancel() => return Err(Stop::Canceled),
        };
        run.timings.action_ms += millis(begun.elapsed());
        match result {
            Ok(report) => {
                run.performed.push(action.clone());
                if matches!(action, DesktopAction::CursorPosition {})
                    && let Some((x, y)) = report.cursor
                {
                    let (ix, iy) = run.planned.from_screen(x, y);
                    run.notes.push(format!("The pointer is at ({ix}, {iy})."));
                }
                Ok(true)
            }
            Err(failure) => {
                run.error = Some(if failure.is_refusal() {
                    format!("{} was refused by the computer: {failure}", action.name())
                } else {
                    format!(
                        "{} failed: {failure}. Its effect is unknown; check the screenshot.",
                        action.name()
                    )
                });
                Ok(false)
            }
        }
    }

    /// Reports the call: the screenshot after it (when it is the turn's last visual call and no
    /// takeover is waiting), an `error` event for a failed action, the finished event; then
    /// the pause a takeover asked for.
    async fn report_desktop(
        &self,
        st: &mut State,
        call: &ToolCall,
        run: DesktopRun,
        observe_after: bool,
    ) -> Result<CallOutcome, Stop> {
        let DesktopRun {
            planned,
            screen_points,
            acknowledged,
            timings,
            performed,
            mut notes,
            error,
            mut take_over,
            interrupted,
        } = run;
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

/// The actions' names, for messages.
fn action_names(actions: &[DesktopAction]) -> String {
    actions
        .iter()
        .map(|a| a.name())
        .collect::<Vec<_>>()
        .join(", ")
}
