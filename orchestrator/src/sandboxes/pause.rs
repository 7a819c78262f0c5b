//! Pause and resume (and the entry points a paused or [`hibernate`](super::hibernate)d sandbox
//! shares: a call through the proxies, a run that acts again): a paused sandbox is frozen by the platform (the cgroup freezer, `docker
//! pause`): its processes get no CPU, keep their memory and their open connections, and resume
//! where they were. While paused it is not live: the proxies answer 409 naming the state, or
//! resume it first when its create request asked for `auto_resume`; the heartbeat only checks
//! that its container is still there; the reaper removes it at the end of its lifetime or once
//! idle for its idle timeout, and pauses a live sandbox idle for its `idle_pause_secs`.
//!
//! **Invariants:** a sandbox is paused only while no run drives it (a run that is queued or
//! running: the agent's next action would meet a frozen computer); a run that waits (for an
//! answer, or held by a person) may have its sandbox paused, and anything that makes it act
//! again resumes it first and holds the sandbox's turn until the loop has taken it (see
//! `runs::paused`). Pause, resume and removal of one sandbox take turns (a lock per sandbox):
//! concurrent auto-resumes thaw it once. Each change is published on
//! [`Sandboxes::lifecycle`] for the runs to put in their event logs.

use std::sync::Arc;
use std::time::Duration;

use super::{EndReason, SandboxError, Sandboxes};
use crate::backend::BackendError;
use crate::db::{RunStatus, SandboxRecord, SandboxStatus};
use crate::validate::{self, Invalid};

/// How long a resumed sandboxd may take to answer its heartbeat before the resume fails.
const RESUME_ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// A change of a sandbox's state that the runs report in their logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleChange {
    Paused {
        sandbox_id: String,
        reason: String,
    },
    Resumed {
        sandbox_id: String,
        reason: String,
        /// For a run that acts again (the run writes its own event).
        by_run: bool,
    },
    Hibernated {
        sandbox_id: String,
        reason: String,
    },
    Woken {
        sandbox_id: String,
        reason: String,
        /// For a run that acts again (the run writes its own event).
        by_run: bool,
    },
}

/// Why a pause or resume happens, for logs and run events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A client asked (`POST /v1/sandboxes/{id}/pause|resume`).
    Asked,
    /// The reaper: idle for its `idle_pause_secs`.
    Idle,
    /// A call through the proxies to a sandbox created with `auto_resume`.
    AutoResume,
    /// A run it holds acts again (an answer, a takeover, a hand-back, a restart).
    Run,
}

impl Why {
    fn pause_reason(self) -> &'static str {
        match self {
            Self::Idle => "the sandbox was idle for its idle_pause_secs",
            _ => "paused on request",
        }
    }

    fn resume_reason(self) -> &'static str {
        match self {
            Self::AutoResume => "a call reached it (auto_resume)",
            Self::Run => "its run acts again",
            _ => "resumed on request",
        }
    }
}

/// `idle_pause_secs` of a create request: `Some(0)` is never, absent is the server's default.
pub(crate) fn idle_pause(
    requested: Option<i64>,
    default: Option<i64>,
    cap: i64,
) -> Result<Option<i64>, Invalid> {
    match requested {
        None => Ok(default),
        Some(0) => Ok(None),
        Some(secs) => validate::within("idle_pause_secs", secs, 1..=cap).map(Some),
    }
}

impl Sandboxes {
    /// Lifecycle changes the runs report (pauses and resumes).
    pub fn lifecycle(&self) -> tokio::sync::broadcast::Receiver<LifecycleChange> {
        self.lifecycle.subscribe()
    }

    /// The lock pause and resume of one sandbox take turns on.
    fn transition_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .transitions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        locks.entry(id.to_string()).or_default().clone()
    }

    pub(crate) fn forget_transitions(&self, id: &str) {
        if let Ok(mut locks) = self.transitions.lock() {
            locks.remove(id);
        }
    }

    /// Keeps only the transition locks of `live` sandboxes (and those held now).
    pub(crate) fn retain_transitions(&self, live: &std::collections::HashSet<String>) {
        if let Ok(mut locks) = self.transitions.lock() {
            locks.retain(|id, lock| live.contains(id) || Arc::strong_count(lock) > 1);
        }
    }

    /// Pauses a live sandbox for a client: 409 when it is not live, is run by another
    /// instance, or a run drives it.
    pub async fn pause(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<SandboxRecord, SandboxError> {
        let record = self.get(id, owner).await?;
        self.pause_record(record, Why::Asked).await
    }

    /// Resumes a paused sandbox for a client: 409 when it is not paused.
    pub async fn resume(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<SandboxRecord, SandboxError> {
        let record = self.get(id, owner).await?;
        let lock = self.transition_lock(id);
        let _turn = lock.lock().await;
        let record = self.get(&record.id, owner).await?;
        if record.status != SandboxStatus::Paused {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is {}, not paused",
                record.status.as_str()
            )));
        }
        if !self.is_mine(&record) {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is run by another orchestrator instance; resume it there"
            )));
        }
        self.thaw(record, Why::Asked).await
    }

    /// The sandbox, live: resumed first when it is paused (a run that acts again needs it,
    /// whatever its `auto_resume`).
    pub async fn get_awake(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<SandboxRecord, SandboxError> {
        let turn = self.transition_turn(id).await;
        self.get(id, owner).await?;
        self.awake_in_turn(id, &turn).await
    }

    /// Takes the sandbox's turn for pauses and resumes: while it is held no pause can start.
    /// A run holds it from waking its sandbox until its loop has taken what makes it act.
    pub async fn transition_turn(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.transition_lock(id).lock_owned().await
    }

    /// [`get_awake`](Self::get_awake) for a caller holding the sandbox's turn.
    pub async fn awake_in_turn(
        &self,
        id: &str,
        _turn: &tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<SandboxRecord, SandboxError> {
        let current = self.get(id, None).await?;
        if current.status == SandboxStatus::Paused && self.is_mine(&current) {
            return self.thaw(current, Why::Run).await;
        }
        if current.status == SandboxStatus::Hibernated && self.is_mine(&current) {
            return self.wake_in_turn(current, Why::Run).await;
        }
        not_ready_unless_live(current)
    }

    /// [`get_ready`](Self::get_ready)'s work: a paused sandbox is resumed for `why` when that
    /// is allowed (a run; `auto_resume`), else it is a conflict naming its state.
    pub(crate) async fn ready_or_resume(
        &self,
        id: &str,
        owner: Option<&str>,
        why: Why,
    ) -> Result<SandboxRecord, SandboxError> {
        let record = self.get(id, owner).await?;
        // Asleep, or going to sleep or waking up under another caller's turn: a caller that
        // may wake it waits for that turn and looks again.
        let asleep = matches!(
            record.status,
            SandboxStatus::Paused
                | SandboxStatus::Hibernated
                | SandboxStatus::Hibernating
                | SandboxStatus::Waking
        );
        if asleep && (why == Why::Run || record.auto_resume) && self.is_mine(&record) {
            let lock = self.transition_lock(id);
            let _turn = lock.lock().await;
            let current = self.get(id, owner).await?;
            return match current.status {
                SandboxStatus::Paused => self.thaw(current, why).await,
                SandboxStatus::Hibernated => self.wake_in_turn(current, why).await,
                _ => not_ready_unless_live(current),
            };
        }
        match record.status {
            SandboxStatus::Paused => Err(SandboxError::Conflict(format!(
                "sandbox {id} is paused: resume it with POST /v1/sandboxes/{id}/resume"
            ))),
            SandboxStatus::Hibernated => Err(SandboxError::Conflict(format!(
                "sandbox {id} is hibernated: wake it with POST /v1/sandboxes/{id}/wake"
            ))),
            _ => not_ready_unless_live(record),
        }
    }

    /// Pauses `record` (read before the lock is taken; read again under it).
    pub(crate) async fn pause_record(
        &self,
        record: SandboxRecord,
        why: Why,
    ) -> Result<SandboxRecord, SandboxError> {
        if !self.backend.features().pause {
            return Err(BackendError::Unsupported("pausing a sandbox").into());
        }
        let id = record.id.clone();
        let lock = self.transition_lock(&id);
        let _turn = lock.lock().await;
        let Some(record) = self.store.sandbox(&id).await? else {
            return Err(SandboxError::NotFound(id));
        };
        if record.status == SandboxStatus::Paused {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is already paused"
            )));
        }
        if !record.status.is_live() {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is {}; only a ready or degraded sandbox can be paused",
                record.status.as_str()
            )));
        }
        if !self.is_mine(&record) {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is run by another orchestrator instance; pause it there"
            )));
        }
        if why == Why::Idle && !self.idle_pause_due(&record, self.clock.now_ms()) {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is no longer idle"
            )));
        }
        self.refuse_while_a_run_drives(&id, "pausing").await?;
        let Some(container_id) = record.container_id.clone() else {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} has no container"
            )));
        };
        let now = self.clock.now_ms();
        // The row first: from here the proxies let nothing new through to a container that is
        // about to freeze. The write itself refuses if a run was queued or started meanwhile.
        if !self.store.mark_paused(&id, now).await? {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} changed state, or a run started on it, meanwhile"
            )));
        }
        self.sessions.end_sandbox(&id, "the sandbox was paused");
        if let Err(error) = self.backend.pause(&container_id).await {
            let _ = self
                .store
                .unmark_paused(&id, record.status, record.error.as_deref())
                .await;
            tracing::warn!(sandbox_id = %id, %error, "pausing the sandbox failed; it stays as it was");
            return Err(error.into());
        }
        let reason = why.pause_reason().to_string();
        tracing::info!(sandbox_id = %id, reason, "sandbox paused");
        let _ = self.lifecycle.send(super::LifecycleChange::Paused {
            sandbox_id: id.clone(),
            reason,
        });
        let mut record = record;
        record.status = SandboxStatus::Paused;
        record.paused_at = Some(now);
        Ok(record)
    }

    /// A conflict when a run is queued or running on the sandbox: the agent's next action would
    /// meet a frozen (or missing) computer. `doing` names the refused change ("pausing").
    pub(crate) async fn refuse_while_a_run_drives(
        &self,
        id: &str,
        doing: &str,
    ) -> Result<(), SandboxError> {
        if let Some((run_id, status)) = self.store.active_run_on(id).await?
            && matches!(status, RunStatus::Queued | RunStatus::Running)
        {
            return Err(SandboxError::Conflict(format!(
                "run {run_id} is {} on sandbox {id}: take the run over (or wait until it asks \
                 for input) before {doing}",
                status.as_str()
            )));
        }
        Ok(())
    }

    /// Thaws a paused sandbox (its lock held by the caller) and waits until its sandboxd
    /// answers. A container that is gone marks the sandbox lost.
    async fn thaw(&self, record: SandboxRecord, why: Why) -> Result<SandboxRecord, SandboxError> {
        let id = record.id.clone();
        let (Some(container_id), Some(address)) = (&record.container_id, &record.address) else {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} has no container"
            )));
        };
        match self.backend.inspect(container_id).await? {
            Some(info) if info.running => {}
            _ => {
                // Gone because it is being deleted (a delete does not wait for this turn):
                // that is the delete's to report.
                match self.store.sandbox(&id).await? {
                    Some(now) if now.status == SandboxStatus::Paused => {}
                    _ => return Err(SandboxError::NotFound(id)),
                }
                self.mark_lost(&record, "the container is gone").await;
                return Err(SandboxError::Conflict(format!(
                    "sandbox {id} is lost: its container is gone"
                )));
            }
        }
        self.backend.resume(container_id).await?;
        let key = self.sandbox_key(&record);
        let deadline = self.clock.now() + RESUME_ANSWER_TIMEOUT;
        loop {
            match self.sandboxd.activity(address, &key).await {
                Ok(_) => break,
                Err(error) if self.clock.now() >= deadline => {
                    // Thawed: the row says so, and the heartbeat decides what it is now
                    // (degraded, or lost when its container went away).
                    let _ = self.store.mark_resumed(&id, self.clock.now_ms()).await;
                    self.activity.touch(&id);
                    tracing::warn!(sandbox_id = %id, %error, "a resumed sandbox does not answer");
                    return Err(SandboxError::Unresponsive(format!(
                        "sandbox {id} was resumed, but its sandboxd did not answer within {} s: \
                         {error}",
                        RESUME_ANSWER_TIMEOUT.as_secs()
                    )));
                }
                Err(_) => self.clock.sleep(Duration::from_millis(50)).await,
            }
        }
        let now = self.clock.now_ms();
        if !self.store.mark_resumed(&id, now).await? {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} changed state while it was resumed"
            )));
        }
        self.activity.touch(&id);
        let reason = why.resume_reason().to_string();
        tracing::info!(sandbox_id = %id, reason, "sandbox resumed");
        let _ = self.lifecycle.send(super::LifecycleChange::Resumed {
            sandbox_id: id.clone(),
            reason,
            by_run: why == Why::Run,
        });
        let mut record = record;
        record.status = SandboxStatus::Ready;
        record.paused_at = None;
        record.error = None;
        record.last_active_at = now;
        Ok(record)
    }

    /// Whether the reaper should pause this live sandbox now (idle for its `idle_pause_secs`,
    /// nothing in flight).
    pub(crate) fn idle_pause_due(&self, record: &SandboxRecord, now: i64) -> bool {
        let Some(after) = record.idle_pause_secs else {
            return false;
        };
        if record.pooled || !record.status.is_live() {
            return false;
        }
        let (last, holds) = self
            .activity
            .get(&record.id)
            .unwrap_or((record.last_active_at, 0));
        holds == 0 && now - last.max(record.last_active_at) >= after * 1000
    }

    /// Why a paused sandbox should end now (its lifetime, or idle for its idle timeout).
    pub(crate) fn paused_end_reason(&self, record: &SandboxRecord, now: i64) -> Option<EndReason> {
        if now >= record.expires_at {
            return Some(EndReason::Lifetime);
        }
        let last = self
            .activity
            .get(&record.id)
            .map_or(record.last_active_at, |(last, _)| last)
            .max(record.last_active_at);
        (now - last >= record.idle_timeout_secs * 1000).then_some(EndReason::Idle)
    }

    /// The heartbeat of a paused sandbox: its sandboxd cannot answer, so only its container is
    /// looked at; one that is gone marks the sandbox lost. A sandbox whose transition is under
    /// way (a resume that has thawed the container and waits for sandboxd's answer) is left to
    /// that transition: seen from here, its thawed container looks unpaused behind the
    /// lifecycle's back, and marking it resumed made the resume fail with a conflict (seen in
    /// CI, the pause end-to-end test's `auto_resume` call).
    pub(crate) async fn check_paused(&self, record: &SandboxRecord) {
        let lock = self.transition_lock(&record.id);
        let Ok(_turn) = lock.try_lock() else {
            return;
        };
        // What the reaper listed may be stale by now: only a sandbox still paused is checked.
        let record = match self.store.sandbox(&record.id).await {
            Ok(Some(now)) if now.status == SandboxStatus::Paused => now,
            _ => return,
        };
        let record = &record;
        let gone = match &record.container_id {
            Some(container_id) => match self.backend.inspect(container_id).await {
                Ok(Some(info)) if info.running && !info.paused => {
                    // Thawed behind the lifecycle's back (`docker unpause`): live again, and
                    // heartbeats from now on.
                    if let Ok(true) = self
                        .store
                        .mark_resumed(&record.id, self.clock.now_ms())
                        .await
                    {
                        self.activity.touch(&record.id);
                        tracing::info!(sandbox_id = %record.id, "a paused sandbox's container runs again");
                    }
                    false
                }
                Ok(Some(info)) => !info.running,
                Ok(None) => true,
                Err(_) => false, // the platform is unreachable: decide later
            },
            None => true,
        };
        if gone {
            self.mark_lost(record, "the container of the paused sandbox is gone")
                .await;
        }
    }
}

/// The record when it is live, else a conflict naming its state.
fn not_ready_unless_live(record: SandboxRecord) -> Result<SandboxRecord, SandboxError> {
    if !record.status.is_live() || record.address.is_none() {
        return Err(SandboxError::Conflict(format!(
            "sandbox {} is {}, not ready",
            record.id,
            record.status.as_str()
        )));
    }
    Ok(record)
}
