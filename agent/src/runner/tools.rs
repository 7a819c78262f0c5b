//! The calls that are not desktop actions: a screenshot, a zoom into the latest observation, a
//! shell command, a file edit, a file write. Each announces itself, runs (a takeover waits for
//! it; only a cancel interrupts it) and reports its timings and outcome.

use std::time::{Duration, Instant};

use super::calls::{CallOutcome, result_for};
use super::config::MAX_SHELL_WAIT;
use super::state::{State, image_ref, millis};
use super::{Runner, Stop, Waited};
use crate::computer::{EditCommand, ShellOutcome};
use crate::event::{ActionOutcome, RunEvent, Timings};
use crate::model::ToolCall;
use crate::observation::ObservationMeta;

impl Runner {
    /// A new screenshot, taken here when this is the turn's last visual call.
    pub(super) async fn run_screenshot(
        &self,
        st: &mut State,
        call: &ToolCall,
        planned: Option<&ObservationMeta>,
        timings: Timings,
        observe_after: bool,
    ) -> Result<CallOutcome, Stop> {
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

    /// An image of a region of the latest observation, at most the model's observation size.
    pub(super) async fn run_zoom(
        &self,
        st: &mut State,
        call: &ToolCall,
        region: [f64; 4],
        planned: Option<&ObservationMeta>,
        timings: Timings,
    ) -> Result<CallOutcome, Stop> {
        let [x0, y0, x1, y1] = region;
        let corner = (x1 - 1.0).max(x0);
        let bottom = (y1 - 1.0).max(y0);
        let planned = match self.check_target(st, planned, &[(x0, y0), (corner, bottom)], "zoom") {
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
            result = self.computer.zoom(&planned, region, bounds) => result,
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

    /// A shell command, waited for up to the call's timeout (or the run's), at most
    /// [`MAX_SHELL_WAIT`]; it goes on in the background after that.
    pub(super) async fn run_shell(
        &self,
        st: &State,
        call: &ToolCall,
        command: &str,
        restart: bool,
        timeout_s: Option<f64>,
        timings: Timings,
    ) -> Result<CallOutcome, Stop> {
        self.started(st, call, None).await?;
        let wait = timeout_s
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| Duration::from_secs_f64(s.min(MAX_SHELL_WAIT.as_secs_f64())))
            .unwrap_or(self.config.shell_timeout)
            .min(MAX_SHELL_WAIT);
        let command = if command.trim().is_empty() {
            "true"
        } else {
            command
        };
        let begun = Instant::now();
        let result = tokio::select! {
            result = self.computer.run_shell(command, wait, restart) => result,
            _ = self.control.wait_cancel() => return Err(Stop::Canceled),
        };
        let timings = Timings {
            action_ms: millis(begun.elapsed()),
            ..timings
        };
        let (text, is_error) = match result {
            Ok(outcome) => shell_text(&outcome, wait),
            Err(error) => (format!("The command could not be run: {error}"), true),
        };
        self.report_plain(st, call, timings, text, is_error).await
    }

    /// A text-editor command on a file (view, create, str_replace, insert, undo_edit).
    pub(super) async fn run_edit(
        &self,
        st: &State,
        call: &ToolCall,
        command: &EditCommand,
        timings: Timings,
    ) -> Result<CallOutcome, Stop> {
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
        self.report_plain(st, call, timings, text, is_error).await
    }

    /// A file written whole (script steps only).
    pub(super) async fn run_write_file(
        &self,
        st: &State,
        call: &ToolCall,
        path: &str,
        content: &[u8],
        timings: Timings,
    ) -> Result<CallOutcome, Stop> {
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
        self.report_plain(st, call, timings, text, is_error).await
    }

    /// Ends a call without a screenshot: its finished event (with the error text when it
    /// failed), and its result for the model.
    async fn report_plain(
        &self,
        st: &State,
        call: &ToolCall,
        timings: Timings,
        text: String,
        is_error: bool,
    ) -> Result<CallOutcome, Stop> {
        let error = is_error.then(|| text.clone());
        self.finished(st, call, None, error.as_deref(), timings, None)
            .await?;
        Ok(CallOutcome::plain(result_for(call, text, is_error)))
    }
}

/// A shell call's result for the model: the output, then how the command ended; and whether
/// that counts as an error (it ended, and not with exit code 0).
fn shell_text(outcome: &ShellOutcome, wait: Duration) -> (String, bool) {
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
