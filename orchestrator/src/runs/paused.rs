//! A run whose sandbox is paused or hibernated: the run's log says so (`sandbox.paused`,
//! `sandbox.resumed`, `sandbox.hibernated`, `sandbox.woken`),
//! and whatever makes the run act again (an answer, a takeover, a hand-back, a cancel, whose
//! last copy of `~/outputs` needs the sandbox) resumes the sandbox first, so the agent never
//! meets a frozen computer.
//!
//! A sandbox is only paused while its run waits (`sandboxes::pause` refuses while a run is
//! queued or running), so these events never interleave with an action's.

use std::sync::Arc;

use agent::RunEvent;
use tokio::sync::broadcast::error::RecvError;

use super::{ActiveRun, RunError, Runs};
use crate::db::{EventRecord, RunRecord, SandboxStatus};
use crate::sandboxes::LifecycleChange;

impl Runs {
    /// Writes the pauses and resumes of sandboxes into the logs of the runs that wait on them,
    /// until the process ends. Resumes a run asks for itself are written by [`Runs::wake`].
    pub async fn report_sandbox_changes_forever(self: Arc<Self>) {
        let mut changes = self.sandboxes.lifecycle();
        loop {
            match changes.recv().await {
                Ok(change) => self.report_sandbox_change(change).await,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "sandbox pauses or resumes were not written to run logs"
                    );
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    async fn report_sandbox_change(&self, change: LifecycleChange) {
        let (sandbox_id, event) = match change {
            LifecycleChange::Paused { sandbox_id, reason } => (
                sandbox_id.clone(),
                RunEvent::SandboxPaused { sandbox_id, reason },
            ),
            LifecycleChange::Resumed {
                sandbox_id,
                reason,
                by_run: false,
            } => (
                sandbox_id.clone(),
                RunEvent::SandboxResumed { sandbox_id, reason },
            ),
            LifecycleChange::Hibernated { sandbox_id, reason } => (
                sandbox_id.clone(),
                RunEvent::SandboxHibernated { sandbox_id, reason },
            ),
            LifecycleChange::Woken {
                sandbox_id,
                reason,
                by_run: false,
            } => (
                sandbox_id.clone(),
                RunEvent::SandboxWoken { sandbox_id, reason },
            ),
            LifecycleChange::Resumed { by_run: true, .. }
            | LifecycleChange::Woken { by_run: true, .. } => return,
        };
        let run_id = match self.store.active_run_on(&sandbox_id).await {
            Ok(Some((run_id, _))) => run_id,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(sandbox_id, %error, "finding the run of a paused sandbox failed");
                return;
            }
        };
        // Only the process that drives the run writes its log.
        if let Some(active) = self.active(&run_id) {
            self.append_outside_loop(&run_id, &active, &event).await;
        }
    }

    /// Resumes the run's sandbox when it is paused (the run is about to act), says so in its
    /// log, and returns the sandbox's turn: no pause can start until it is dropped, which the
    /// caller does once the loop has taken what makes it act (then the run is running, which
    /// refuses a pause by itself).
    pub(crate) async fn wake(
        &self,
        run: &RunRecord,
    ) -> Result<Option<tokio::sync::OwnedMutexGuard<()>>, RunError> {
        let Some(sandbox_id) = &run.sandbox_id else {
            return Ok(None);
        };
        let turn = self.sandboxes.transition_turn(sandbox_id).await;
        let asleep = self
            .store
            .sandbox(sandbox_id)
            .await?
            .map(|sandbox| sandbox.status)
            .filter(|s| matches!(s, SandboxStatus::Paused | SandboxStatus::Hibernated));
        let Some(asleep) = asleep else {
            return Ok(Some(turn));
        };
        self.sandboxes.awake_in_turn(sandbox_id, &turn).await?;
        if let Some(active) = self.active(&run.id) {
            let (sandbox_id, reason) = (sandbox_id.clone(), "the run acts again".to_string());
            let event = match asleep {
                SandboxStatus::Hibernated => RunEvent::SandboxWoken { sandbox_id, reason },
                _ => RunEvent::SandboxResumed { sandbox_id, reason },
            };
            self.append_outside_loop(&run.id, &active, &event).await;
        }
        Ok(Some(turn))
    }

    /// Appends an event to a run this process drives, from outside its loop (which is waiting:
    /// the store gives the event the next seq either way).
    async fn append_outside_loop(&self, run_id: &str, active: &ActiveRun, event: &RunEvent) {
        let kind = event.kind();
        let Ok(data) = serde_json::to_string(event) else {
            return;
        };
        let at = self.clock.now_ms();
        match self
            .store
            .append_event(run_id, &self.lease_owner, kind, &data, at, None)
            .await
        {
            Ok(Some(seq)) => {
                let _ = active.events.send(EventRecord {
                    seq,
                    kind: kind.to_string(),
                    data,
                    at,
                });
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(run_id, %error, kind, "writing a sandbox change to the run's log failed");
            }
        }
    }
}
