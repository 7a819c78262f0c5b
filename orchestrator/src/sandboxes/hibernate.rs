//! Hibernate and wake: a hibernated sandbox has no container and uses no memory or CPU; its
//! home (files, Chromium's profile with its cookies and its last session's tabs) is kept as an
//! archive in the data directory ([`crate::homes`]). Waking starts a new container of the same
//! image and settings with that home put back before sandboxd starts anything; Chromium reopens
//! the saved tabs. The sandbox keeps its id, its (derived) key, its tokens and its URLs; its
//! address changes, which nobody outside the orchestrator sees.
//!
//! Hibernating: the sandbox is marked `hibernating` (the proxies let nothing new through),
//! sandboxd stops Chromium (which saves its session), freezes the agent's processes and streams
//! the home; once the archive is whole on disk the container is removed and the sandbox marked
//! `hibernated`. Lost: running processes, open connections (terminals, viewers, CDP clients),
//! what is in memory only (a page's JavaScript state, Jupyter kernels' variables, the
//! clipboard), /tmp, caches and shell histories (see `sandboxd::home_archive`).
//!
//! **Invariants:** the transitions take the sandbox's turn, as pause and resume do; a
//! sandbox is hibernated only while no run drives it; the kept archive is removed only once the
//! woken sandbox is ready (a wake that fails leaves it hibernated, as it was) or the sandbox is
//! removed. After a crash, `reconcile` finishes or undoes what was under way from what is on
//! disk: a whole archive means the hibernation happened.

use std::time::Duration;

use super::pause::Why;
use super::sandboxd::HomeArchiveRequest;
use super::{LifecycleChange, SandboxError, Sandboxes};
use crate::backend::BackendError;
use crate::db::{SandboxRecord, SandboxStatus, WakeMark};
use crate::homes::Kind;
use crate::validate::{self, Invalid};

/// How long a sandboxd that was thawed to be archived may take to answer.
const THAW_ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// `idle_hibernate_secs` of a create request: `Some(0)` is never, absent is the server's
/// default.
pub(crate) fn idle_hibernate(
    requested: Option<i64>,
    default: Option<i64>,
    cap: i64,
) -> Result<Option<i64>, Invalid> {
    match requested {
        None => Ok(default),
        Some(0) => Ok(None),
        Some(secs) => validate::within("idle_hibernate_secs", secs, 1..=cap).map(Some),
    }
}

impl Why {
    fn hibernate_reason(self) -> &'static str {
        match self {
            Self::Idle => "the sandbox was idle for its idle_hibernate_secs",
            _ => "hibernated on request",
        }
    }

    fn wake_reason(self) -> &'static str {
        match self {
            Self::AutoResume => "a call reached it (auto_resume)",
            Self::Run => "its run acts again",
            _ => "woken on request",
        }
    }
}

impl Sandboxes {
    /// Hibernates a ready, degraded or paused sandbox for a client: 409 when it is in another
    /// state, is run by another instance, or a run drives it.
    pub async fn hibernate(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<SandboxRecord, SandboxError> {
        let record = self.get(id, owner).await?;
        self.hibernate_record(record, Why::Asked).await
    }

    /// Wakes a hibernated sandbox for a client: 409 when it is not hibernated.
    pub async fn wake(&self, id: &str, owner: Option<&str>) -> Result<SandboxRecord, SandboxError> {
        self.get(id, owner).await?;
        let _turn = self.transition_turn(id).await;
        let record = self.get(id, owner).await?;
        if record.status != SandboxStatus::Hibernated {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is {}, not hibernated",
                record.status.as_str()
            )));
        }
        if !self.is_mine(&record) {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is run by another orchestrator instance; wake it there"
            )));
        }
        self.wake_in_turn(record, Why::Asked).await
    }

    /// Hibernates `record` (read before the turn is taken; read again under it).
    pub(crate) async fn hibernate_record(
        &self,
        record: SandboxRecord,
        why: Why,
    ) -> Result<SandboxRecord, SandboxError> {
        if !self.backend.features().home_archives {
            return Err(BackendError::Unsupported("hibernating a sandbox").into());
        }
        let id = record.id.clone();
        let _turn = self.transition_turn(&id).await;
        let Some(record) = self.store.sandbox(&id).await? else {
            return Err(SandboxError::NotFound(id));
        };
        match record.status {
            SandboxStatus::Ready | SandboxStatus::Degraded | SandboxStatus::Paused => {}
            SandboxStatus::Hibernated => {
                return Err(SandboxError::Conflict(format!(
                    "sandbox {id} is already hibernated"
                )));
            }
            other => {
                return Err(SandboxError::Conflict(format!(
                    "sandbox {id} is {}; only a ready, degraded or paused sandbox can be \
                     hibernated",
                    other.as_str()
                )));
            }
        }
        if record.pooled || !self.is_mine(&record) {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is run by another orchestrator instance; hibernate it there"
            )));
        }
        if why == Why::Idle && !self.idle_hibernate_due(&record, self.clock.now_ms()) {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is no longer idle"
            )));
        }
        self.refuse_while_a_run_drives(&id, "hibernating").await?;
        let (Some(container_id), Some(address)) =
            (record.container_id.clone(), record.address.clone())
        else {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} has no container"
            )));
        };
        // The row first: from here the proxies let nothing new through. The write refuses if
        // a run was queued or started meanwhile.
        if !self.store.mark_hibernating(&id).await? {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} changed state, or a run started on it, meanwhile"
            )));
        }
        self.sessions.end_sandbox(&id, "the sandbox is hibernating");
        let started = std::time::Instant::now();
        let kept = match self.keep_home(&record, &container_id, &address).await {
            Ok(bytes) => bytes,
            Err(error) => {
                // Back as it was: a paused one was thawed to be archived and is frozen again.
                if record.status == SandboxStatus::Paused {
                    let _ = self.backend.pause(&container_id).await;
                }
                let _ = self
                    .store
                    .unmark_hibernating(&id, record.status, record.error.as_deref())
                    .await;
                tracing::warn!(sandbox_id = %id, %error, "hibernating the sandbox failed; it stays as it was");
                return Err(error);
            }
        };
        let now = self.clock.now_ms();
        if !self.store.mark_hibernated(&id, now).await? {
            // Deleted meanwhile (a delete does not wait for this turn): the delete's to report.
            let _ = self.homes.remove(Kind::Hibernated, &id).await;
            return Err(SandboxError::NotFound(id));
        }
        let reason = why.hibernate_reason().to_string();
        tracing::info!(
            sandbox_id = %id,
            reason,
            home_bytes = kept,
            took_ms = started.elapsed().as_millis() as u64,
            "sandbox hibernated"
        );
        let _ = self.lifecycle.send(LifecycleChange::Hibernated {
            sandbox_id: id.clone(),
            reason,
        });
        let mut record = record;
        record.status = SandboxStatus::Hibernated;
        record.hibernated_at = Some(now);
        record.paused_at = None;
        record.container_id = None;
        record.address = None;
        Ok(record)
    }

    /// Archives the home of a hibernating sandbox into the data directory, then removes its
    /// container. On failure the container is still there, given back (thawed, its browser
    /// started again), and no archive is kept.
    async fn keep_home(
        &self,
        record: &SandboxRecord,
        container_id: &str,
        address: &str,
    ) -> Result<u64, SandboxError> {
        let key = self.sandbox_key(record);
        self.thaw_to_archive(record, container_id, address, &key)
            .await?;
        let request = HomeArchiveRequest {
            path: None,
            keep_held: true,
        };
        let archived = self
            .archive_into(
                &record.id,
                address,
                &key,
                &request,
                (Kind::Hibernated, &record.id),
            )
            .await;
        let part = match archived {
            Ok(part) => part,
            Err(error) => {
                let _ = self.sandboxd.release_home(address, &key).await;
                return Err(error);
            }
        };
        let size = match part.commit().await {
            Ok(size) => size,
            Err(error) => {
                let _ = self.sandboxd.release_home(address, &key).await;
                return Err(SandboxError::Task(error.to_string()));
            }
        };
        if let Err(error) = self.backend.remove(container_id).await {
            let _ = self.homes.remove(Kind::Hibernated, &record.id).await;
            let _ = self.sandboxd.release_home(address, &key).await;
            return Err(error.into());
        }
        Ok(size)
    }

    /// Thaws a paused sandbox so its sandboxd can archive its home, and waits until it
    /// answers; a sandbox that is not paused is left as it is.
    pub(crate) async fn thaw_to_archive(
        &self,
        record: &SandboxRecord,
        container_id: &str,
        address: &str,
        key: &str,
    ) -> Result<(), SandboxError> {
        if record.status == SandboxStatus::Paused {
            self.backend.resume(container_id).await?;
            self.wait_answering(address, key).await?;
        }
        Ok(())
    }

    /// Streams sandboxd's archive of the home (or of the folder `request.path` alone) into
    /// the new archive `to`, returned unfinished: its caller commits it, or drops it and it is
    /// gone. sandboxd's failure is a conflict naming the sandbox; a file that cannot be made
    /// is the orchestrator's own.
    pub(crate) async fn archive_into(
        &self,
        sandbox_id: &str,
        address: &str,
        key: &str,
        request: &HomeArchiveRequest,
        to: (Kind, &str),
    ) -> Result<crate::homes::PartFile, SandboxError> {
        let mut part = self
            .homes
            .create(to.0, to.1)
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?;
        self.sandboxd
            .archive_home(address, key, request, &mut part.file, self.archive_limit())
            .await
            .map_err(|error| {
                let what = match request.path {
                    Some(_) => "its browser profile",
                    None => "its home",
                };
                SandboxError::Conflict(format!(
                    "sandbox {sandbox_id}: {what} could not be archived: {error}"
                ))
            })?;
        Ok(part)
    }

    /// Waits until a thawed sandboxd answers its heartbeat.
    pub(crate) async fn wait_answering(
        &self,
        address: &str,
        key: &str,
    ) -> Result<(), SandboxError> {
        let deadline = self.clock.now() + THAW_ANSWER_TIMEOUT;
        loop {
            match self.sandboxd.activity(address, key).await {
                Ok(_) => return Ok(()),
                Err(error) if self.clock.now() >= deadline => {
                    return Err(SandboxError::Unresponsive(format!(
                        "the sandbox's sandboxd did not answer within {} s: {error}",
                        THAW_ANSWER_TIMEOUT.as_secs()
                    )));
                }
                Err(_) => self.clock.sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The most a home archive may weigh: the home's tmpfs, plus a tar header per inode it can
    /// hold (its `nr_inodes` is 256 per MiB), plus a margin.
    pub(crate) fn archive_limit(&self) -> u64 {
        let mib = self.settings.limits.disk_mib;
        mib * 1024 * 1024 + mib * 256 * 1024 + 16 * 1024 * 1024
    }

    /// Wakes a hibernated sandbox, its turn held by the caller: a new container with its kept
    /// home, ready before this returns. On failure it stays hibernated, as it was.
    pub(crate) async fn wake_in_turn(
        &self,
        record: SandboxRecord,
        why: Why,
    ) -> Result<SandboxRecord, SandboxError> {
        let id = record.id.clone();
        let archive = self
            .homes
            .path(Kind::Hibernated, &id)
            .map_err(|e| SandboxError::Task(e.to_string()))?;
        if self
            .homes
            .size(Kind::Hibernated, &id)
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?
            .is_none()
        {
            self.mark_lost(&record, "its kept home is gone").await;
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is lost: its kept home is gone"
            )));
        }
        {
            // A woken sandbox counts against its key's sandboxes again: counted and marked in
            // one transaction, under the key's lock in the database (every replica's) as well
            // as this process's.
            let _quota = self.quota.lock().await;
            let limit = self.settings.max_sandboxes_per_key;
            match self
                .store
                .mark_waking_within_quota(&id, record.owner_key_id.as_deref(), limit as i64)
                .await?
            {
                WakeMark::Marked => {}
                WakeMark::Full { live } => return Err(SandboxError::Quota { live, limit }),
                WakeMark::Changed => {
                    return Err(SandboxError::Conflict(format!(
                        "sandbox {id} changed state meanwhile"
                    )));
                }
            }
        }
        let started_at = std::time::Instant::now();
        let permit = self.starts.acquire().await;
        let woken = self.start_woken(&record, archive).await;
        drop(permit);
        let (container_id, address) = match woken {
            Ok(started) => started,
            Err(error) => {
                let _ = self
                    .store
                    .unmark_waking(&id, Some(&error.to_string()))
                    .await;
                tracing::warn!(sandbox_id = %id, %error, "waking the sandbox failed; it stays hibernated");
                return Err(error);
            }
        };
        let now = self.clock.now_ms();
        if !self.store.mark_woken(&id, now).await? {
            // Deleted meanwhile: the delete's to report; its container goes with it.
            let _ = self.backend.remove(&container_id).await;
            return Err(SandboxError::NotFound(id));
        }
        if let Err(error) = self.homes.remove(Kind::Hibernated, &id).await {
            tracing::warn!(sandbox_id = %id, %error, "removing the woken sandbox's kept home failed");
        }
        self.activity.seed(&id, now);
        let reason = why.wake_reason().to_string();
        tracing::info!(
            sandbox_id = %id,
            reason,
            container_id = %container_id,
            took_ms = started_at.elapsed().as_millis() as u64,
            "sandbox woken"
        );
        let _ = self.lifecycle.send(LifecycleChange::Woken {
            sandbox_id: id.clone(),
            reason,
            by_run: why == Why::Run,
        });
        let mut record = record;
        record.status = SandboxStatus::Ready;
        record.hibernated_at = None;
        record.container_id = Some(container_id);
        record.address = Some(address);
        record.error = None;
        record.last_active_at = now;
        Ok(record)
    }

    /// Starts the container of a waking sandbox with its kept home and waits until it is
    /// ready; on failure nothing of it is left.
    async fn start_woken(
        &self,
        record: &SandboxRecord,
        archive: std::path::PathBuf,
    ) -> Result<(String, String), SandboxError> {
        let restore = super::StartWith {
            home: Some(archive),
            ..Default::default()
        };
        let spec = self.container_spec(record, restore)?;
        let started = self.backend.start(&spec).await?;
        if let Err(error) = self
            .store
            .set_container(&record.id, &started.container_id, &started.address)
            .await
        {
            let _ = self.backend.remove(&started.container_id).await;
            return Err(error.into());
        }
        if let Err(reason) = self
            .wait_ready(&started.container_id, &started.address, &spec.api_key)
            .await
        {
            let logs = self.remove_unready(&started.container_id).await;
            return Err(SandboxError::NotReady { reason, logs });
        }
        Ok((started.container_id, started.address))
    }

    /// Whether the reaper should hibernate this live or paused sandbox now (idle for its
    /// `idle_hibernate_secs`, nothing in flight).
    pub(crate) fn idle_hibernate_due(&self, record: &SandboxRecord, now: i64) -> bool {
        let Some(after) = record.idle_hibernate_secs else {
            return false;
        };
        if record.pooled
            || !matches!(
                record.status,
                SandboxStatus::Ready | SandboxStatus::Degraded | SandboxStatus::Paused
            )
        {
            return false;
        }
        let (last, holds) = self
            .activity
            .get(&record.id)
            .unwrap_or((record.last_active_at, 0));
        holds == 0 && now - last.max(record.last_active_at) >= after * 1000
    }

    /// Reconcile of a sandbox that was hibernated, hibernating or waking when the orchestrator
    /// stopped (its lifetime not over); `container` is its container, if one exists. A whole
    /// kept home means the hibernation happened: any container goes and it stays (or becomes)
    /// hibernated. Without one, a hibernation that did not finish leaves the sandbox running
    /// (given back), or lost when its container is gone too. Returns whether it was kept.
    pub(crate) async fn reconcile_asleep(
        &self,
        record: &SandboxRecord,
        container: Option<crate::backend::ContainerInfo>,
    ) -> Result<bool, SandboxError> {
        let id = &record.id;
        let kept_home = self
            .homes
            .size(Kind::Hibernated, id)
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?
            .is_some();
        if !kept_home {
            let running = container.as_ref().filter(|c| c.running);
            if record.status == SandboxStatus::Hibernating
                && let Some(container) = running
            {
                if container.paused {
                    self.backend.resume(&container.container_id).await?;
                }
                if let Some(address) = &container.address {
                    let _ = self
                        .sandboxd
                        .release_home(address, &self.sandbox_key(record))
                        .await;
                }
                self.store
                    .unmark_hibernating(id, SandboxStatus::Ready, None)
                    .await?;
                self.activity.adopt(id, record.last_active_at);
                tracing::info!(sandbox_id = %id, "a hibernation a crash interrupted was undone");
                return Ok(true);
            }
            let mut record = record.clone();
            record.container_id = container.map(|c| c.container_id);
            self.mark_lost(&record, "its kept home is gone").await;
            return Ok(false);
        }
        if let Some(container) = container {
            self.backend.remove(&container.container_id).await?;
        }
        match record.status {
            SandboxStatus::Hibernating => {
                self.store.mark_hibernated(id, self.clock.now_ms()).await?;
                tracing::info!(sandbox_id = %id, "a hibernation a crash interrupted was finished");
            }
            SandboxStatus::Waking => {
                self.store
                    .unmark_waking(id, Some("a wake was interrupted by a restart"))
                    .await?;
                tracing::info!(sandbox_id = %id, "a wake a crash interrupted was undone; still hibernated");
            }
            _ => {}
        }
        Ok(true)
    }
}
