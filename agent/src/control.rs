//! [`Control`]: the cloneable handle a person's requests reach a running loop through:
//! [`Control::take_over`], [`Control::hand_back`], [`Control::cancel`], [`Control::answer`].
//!
//! Requests are flags the loop reads at its safe points; the loop reports where it is through
//! a [`Phase`] watch. Each request resolves only once the loop has acted on it:
//! - `take_over` when the loop is paused: the in-flight action has finished and no action is
//!   issued until the hand-back (a model call in flight keeps running; its actions are planned
//!   on a screenshot from before the takeover, so the loop refuses them as stale);
//! - `hand_back` when the loop runs again (it then takes a fresh screenshot and tells the model
//!   a person acted before the next model call);
//! - `cancel` when the loop has written its final `canceled` status: nothing is emitted after
//!   it, even when the cancel arrives mid-action or mid-model-call;
//! - `answer` when the loop has taken the answer to its pending question.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, watch};

use crate::event::RunStatus;

/// Where the loop is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Created, not started yet.
    Starting,
    /// The agent drives.
    Running,
    /// A person holds control.
    Paused,
    /// The loop waits for the answer to `request_id`.
    WaitingForInput { request_id: String },
    /// The run is over; nothing more will be emitted.
    Finished(RunStatus),
}

/// A request that cannot be honoured now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("the run has finished")]
    Finished,
    #[error("the run is not paused (take over first)")]
    NotPaused,
    #[error("the run is not waiting for input")]
    NotWaitingForInput,
    /// The driver could not cancel (a remote agent refused), and the run goes on.
    #[error("the cancel was refused: {0}")]
    CancelRefused(String),
}

/// How the driver answered a cancel it could not finish at once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CancelReply {
    /// Sent on (to a remote agent) and not confirmed yet: the run is `canceling`.
    Pending,
    Refused(String),
}

/// What interrupts the loop while it drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Signal {
    Cancel,
    TakeOver,
}

/// What ends a pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Release {
    Cancel,
    HandBack(String),
}

/// What ends a wait for input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSignal {
    Cancel,
    TakeOver,
    Answer(String),
}

#[derive(Debug, Default)]
struct Requests {
    cancel: bool,
    take_over: bool,
    hand_back: Option<String>,
    answer: Option<String>,
    /// The id of the message that carried `answer` (an A2A message), if any.
    answer_message_id: Option<String>,
    /// The id of the message that carried the answer the loop took last.
    taken_message_id: Option<String>,
    cancel_reply: Option<CancelReply>,
}

#[derive(Debug)]
struct Inner {
    requests: Mutex<Requests>,
    /// Wakes the loop when a request arrives (a stored permit covers a request made while the
    /// loop was not waiting).
    wake: Notify,
    phase: watch::Sender<Phase>,
}

/// The handle to one run. Clones control the same run.
#[derive(Debug, Clone)]
pub struct Control {
    inner: Arc<Inner>,
}

impl Default for Control {
    fn default() -> Self {
        Self::new()
    }
}

impl Control {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                requests: Mutex::new(Requests::default()),
                wake: Notify::new(),
                phase: watch::Sender::new(Phase::Starting),
            }),
        }
    }

    /// Where the loop is now.
    pub fn phase(&self) -> Phase {
        self.inner.phase.borrow().clone()
    }

    /// A receiver that sees every phase change.
    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.inner.phase.subscribe()
    }

    fn requests(&self) -> MutexGuard<'_, Requests> {
        // The lock guards plain flags; a panic while holding it cannot leave them inconsistent.
        self.inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    async fn wait_phase(&self, done: impl Fn(&Phase) -> bool) -> Phase {
        let mut receiver = self.inner.phase.subscribe();
        match receiver.wait_for(|p| done(p)).await {
            Ok(phase) => phase.clone(),
            // The sender lives as long as `self`; this is not reached.
            Err(_) => self.phase(),
        }
    }

    /// Stops the agent: resolves once the in-flight action has finished and the loop is paused.
    /// Resolves at once if already paused.
    pub async fn take_over(&self) -> Result<(), ControlError> {
        match self.phase() {
            Phase::Finished(_) => return Err(ControlError::Finished),
            Phase::Paused => return Ok(()),
            _ => {}
        }
        self.requests().take_over = true;
        self.inner.wake.notify_one();
        match self
            .wait_phase(|p| matches!(p, Phase::Paused | Phase::Finished(_)))
            .await
        {
            Phase::Paused => Ok(()),
            _ => Err(ControlError::Finished),
        }
    }

    /// Gives control back; resolves once the loop runs again. `note` is passed to the model.
    pub async fn hand_back(&self, note: Option<String>) -> Result<(), ControlError> {
        match self.phase() {
            Phase::Finished(_) => return Err(ControlError::Finished),
            Phase::Paused => {}
            _ => return Err(ControlError::NotPaused),
        }
        self.requests().hand_back = Some(note.unwrap_or_default());
        self.inner.wake.notify_one();
        match self.wait_phase(|p| !matches!(p, Phase::Paused)).await {
            Phase::Finished(_) => Err(ControlError::Finished),
            _ => Ok(()),
        }
    }

    /// Cancels the run; resolves once the final `canceled` status has been emitted.
    ///
    /// A driver that cannot finish a cancel at once answers it instead: refused (the run goes
    /// on: `Err(CancelRefused)`) or pending (sent on to a remote agent that has not confirmed
    /// it: `Ok` while the run is still `canceling`).
    pub async fn cancel(&self) -> Result<(), ControlError> {
        if matches!(self.phase(), Phase::Finished(_)) {
            return Err(ControlError::Finished);
        }
        {
            let mut requests = self.requests();
            requests.cancel = true;
            requests.cancel_reply = None;
        }
        self.inner.wake.notify_one();
        let mut receiver = self.inner.phase.subscribe();
        loop {
            if matches!(&*receiver.borrow_and_update(), Phase::Finished(_)) {
                return Ok(());
            }
            match self.requests().cancel_reply.take() {
                Some(CancelReply::Pending) => return Ok(()),
                Some(CancelReply::Refused(reason)) => {
                    return Err(ControlError::CancelRefused(reason));
                }
                None => {}
            }
            if receiver.changed().await.is_err() {
                // The sender lives as long as `self`; this is not reached.
                return Ok(());
            }
        }
    }

    /// Answers the pending question (`request_human`) or safety check. For a safety check,
    /// the answer approves it only if it is `yes`, `approve`, `approved`, `ok`, `allow` or
    /// `acknowledge` (any case); anything else declines it and is passed to the model.
    pub async fn answer(&self, text: impl Into<String>) -> Result<(), ControlError> {
        self.answer_with_id(text, None).await
    }

    /// [`answer`](Self::answer), naming the message that carried it (an A2A message id): the
    /// loop finds it with [`take_answer_message_id`](Self::take_answer_message_id).
    pub async fn answer_with_id(
        &self,
        text: impl Into<String>,
        message_id: Option<String>,
    ) -> Result<(), ControlError> {
        let request_id = match self.phase() {
            Phase::Finished(_) => return Err(ControlError::Finished),
            Phase::WaitingForInput { request_id } => request_id,
            _ => return Err(ControlError::NotWaitingForInput),
        };
        {
            let mut requests = self.requests();
            requests.answer = Some(text.into());
            requests.answer_message_id = message_id;
        }
        self.inner.wake.notify_one();
        self.wait_phase(
            |p| !matches!(p, Phase::WaitingForInput { request_id: id } if *id == request_id),
        )
        .await;
        Ok(())
    }

    // --- The loop's side (the `Runner`'s, or another driver's: a run backend that does not
    // drive a computer, such as the orchestrator's A2A conformance executor). ---

    /// Says where the driver is; requests waiting on a phase resolve by it.
    pub fn set_phase(&self, phase: Phase) {
        self.inner.phase.send_replace(phase);
    }

    /// Answers the pending cancel: refused, the run goes on (the request is consumed).
    pub fn refuse_cancel(&self, reason: impl Into<String>) {
        {
            let mut requests = self.requests();
            requests.cancel = false;
            requests.cancel_reply = Some(CancelReply::Refused(reason.into()));
        }
        self.inner.phase.send_modify(|_| {});
    }

    /// Answers the pending cancel: passed on and not confirmed yet (the request is consumed;
    /// the driver ends the run when the confirmation comes).
    pub fn cancel_pending(&self) {
        {
            let mut requests = self.requests();
            requests.cancel = false;
            requests.cancel_reply = Some(CancelReply::Pending);
        }
        self.inner.phase.send_modify(|_| {});
    }

    /// Whether a cancel is pending, without consuming it.
    pub fn cancel_requested(&self) -> bool {
        self.requests().cancel
    }

    /// The most urgent pending request, without consuming it.
    pub(crate) fn pending_signal(&self) -> Option<Signal> {
        let requests = self.requests();
        if requests.cancel {
            Some(Signal::Cancel)
        } else if requests.take_over {
            Some(Signal::TakeOver)
        } else {
            None
        }
    }

    /// Marks the takeover as done (the loop is paused).
    pub(crate) fn clear_take_over(&self) {
        self.requests().take_over = false;
    }

    /// Waits for a cancel or a takeover request.
    pub(crate) async fn wait_signal(&self) -> Signal {
        loop {
            if let Some(signal) = self.pending_signal() {
                return signal;
            }
            self.inner.wake.notified().await;
        }
    }

    /// Waits for a cancel request only.
    pub async fn wait_cancel(&self) {
        loop {
            if self.requests().cancel {
                return;
            }
            self.inner.wake.notified().await;
        }
    }

    /// Waits, while paused, for a cancel or a hand-back (consumed).
    pub(crate) async fn wait_release(&self) -> Release {
        loop {
            {
                let mut requests = self.requests();
                if requests.cancel {
                    return Release::Cancel;
                }
                if let Some(note) = requests.hand_back.take() {
                    requests.take_over = false;
                    return Release::HandBack(note);
                }
            }
            self.inner.wake.notified().await;
        }
    }

    /// Waits, while waiting for input, for a cancel, a takeover or an answer (consumed).
    pub async fn wait_input(&self) -> InputSignal {
        loop {
            {
                let mut requests = self.requests();
                if requests.cancel {
                    return InputSignal::Cancel;
                }
                if requests.take_over {
                    return InputSignal::TakeOver;
                }
                if let Some(answer) = requests.answer.take() {
                    requests.taken_message_id = requests.answer_message_id.take();
                    return InputSignal::Answer(answer);
                }
            }
            self.inner.wake.notified().await;
        }
    }

    /// Forgets a stale answer (one given for an earlier question).
    pub(crate) fn clear_answer(&self) {
        let mut requests = self.requests();
        requests.answer = None;
        requests.answer_message_id = None;
    }

    /// The id of the message that carried the answer [`wait_input`](Self::wait_input) gave
    /// last, if it had one (taken: a second call answers `None`).
    pub fn take_answer_message_id(&self) -> Option<String> {
        self.requests().taken_message_id.take()
    }
}

/// Whether an answer approves a safety check.
pub fn approves(answer: &str) -> bool {
    matches!(
        answer
            .trim()
            .trim_end_matches(['.', '!'])
            .to_ascii_lowercase()
            .as_str(),
        "yes"
            | "y"
            | "approve"
            | "approved"
            | "ok"
            | "okay"
            | "allow"
            | "acknowledge"
            | "acknowledged"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_on_a_finished_run_are_refused() {
        let control = Control::new();
        control.set_phase(Phase::Finished(RunStatus::Completed));
        assert_eq!(control.take_over().await, Err(ControlError::Finished));
        assert_eq!(control.cancel().await, Err(ControlError::Finished));
        assert_eq!(control.answer("x").await, Err(ControlError::Finished));
        assert_eq!(control.hand_back(None).await, Err(ControlError::Finished));
    }

    #[tokio::test]
    async fn hand_back_and_answer_need_the_right_phase() {
        let control = Control::new();
        control.set_phase(Phase::Running);
        assert_eq!(control.hand_back(None).await, Err(ControlError::NotPaused));
        assert_eq!(
            control.answer("x").await,
            Err(ControlError::NotWaitingForInput)
        );
        control.set_phase(Phase::Paused);
        assert_eq!(control.take_over().await, Ok(()));
    }

    #[tokio::test]
    async fn a_driver_may_refuse_a_cancel_or_leave_it_pending() {
        let control = Control::new();
        control.set_phase(Phase::Running);
        let driver = control.clone();
        let refusing = tokio::spawn(async move {
            driver.wait_cancel().await;
            driver.refuse_cancel("the remote agent refused");
        });
        assert_eq!(
            control.cancel().await,
            Err(ControlError::CancelRefused(
                "the remote agent refused".into()
            ))
        );
        refusing.await.unwrap();
        assert!(!control.cancel_requested(), "a refused cancel is consumed");
        let driver = control.clone();
        let passing_on = tokio::spawn(async move {
            driver.wait_cancel().await;
            driver.cancel_pending();
        });
        assert_eq!(control.cancel().await, Ok(()));
        passing_on.await.unwrap();
        assert_eq!(control.phase(), Phase::Running, "pending: not finished yet");
    }

    #[test]
    fn approval_words() {
        for yes in ["yes", "Approve.", " OK ", "acknowledge"] {
            assert!(approves(yes), "{yes}");
        }
        for no in ["no", "yes but not that", "", "stop"] {
            assert!(!approves(no), "{no}");
        }
    }
}
