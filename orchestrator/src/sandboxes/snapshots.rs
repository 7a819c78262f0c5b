//! Snapshots and forks: a snapshot is a sandbox's home taken as an archive
//! ([`crate::homes`]) while the sandbox is held still for a moment (its browser stopped, which
//! saves its session and cookies, its other processes frozen: never a half-written state); a
//! new sandbox can start from it (`snapshot` in the create request: the snapshot's image,
//! resolution and home, its own id, key and tokens); a fork takes a snapshot and starts N
//! sandboxes from it at once.
//!
//! What a snapshot keeps and leaves is what hibernation does (see [`super::hibernate`]): the
//! home's files and the browser's profile, no processes, no memory, no /tmp, no caches, no
//! shell histories. Nothing secret of the sandbox is in it: its key never touches a file, and
//! the VNC passwords and tickets live outside the home.
//!
//! **Invariants:** a snapshot belongs to the key that took it (another key gets 404); a
//! snapshot row is `taking` until its archive is whole, and a crash's half-taken snapshot is
//! removed at start (`reconcile`), as is a fork's own (`transient`) snapshot whose fork a crash
//! interrupted; a key holds at most `--max-snapshots-per-key`.

use std::sync::Arc;

use super::sandboxd::HomeArchiveRequest;
use super::{CreateSpec, SandboxError, Sandboxes, Source};
use crate::backend::BackendError;
use crate::db::{SandboxRecord, SandboxStatus, SnapshotRecord, SnapshotStatus};
use crate::homes::Kind;
use crate::secret::new_id;
use crate::validate;

/// The most sandboxes one fork makes.
pub const MAX_FORK: i64 = 20;

impl Sandboxes {
    /// Takes a snapshot of a ready or degraded sandbox of `owner`'s.
    pub async fn take_snapshot(
        &self,
        sandbox_id: &str,
        owner: &str,
    ) -> Result<SnapshotRecord, SandboxError> {
        self.take_snapshot_for(sandbox_id, owner, false).await
    }

    /// [`take_snapshot`](Self::take_snapshot); a `transient` one is a fork's own, removed at
    /// start if a crash left it.
    async fn take_snapshot_for(
        &self,
        sandbox_id: &str,
        owner: &str,
        transient: bool,
    ) -> Result<SnapshotRecord, SandboxError> {
        let record = self.get(sandbox_id, Some(owner)).await?;
        if !record.status.is_live() {
            return Err(SandboxError::Conflict(format!(
                "sandbox {sandbox_id} is {}; only a ready or degraded sandbox can be snapshotted{}",
                record.status.as_str(),
                match record.status {
                    SandboxStatus::Paused => " (resume it first)",
                    SandboxStatus::Hibernated => " (wake it first)",
                    _ => "",
                }
            )));
        }
        if !self.is_mine(&record) {
            return Err(SandboxError::Conflict(format!(
                "sandbox {sandbox_id} is run by another orchestrator instance; snapshot it there"
            )));
        }
        let snapshot = {
            let _quota = self.quota.lock().await;
            let (count, _) = self.store.snapshot_usage(owner).await?;
            let limit = self.settings.max_snapshots_per_key;
            if count >= limit as i64 {
                return Err(SandboxError::Conflict(format!(
                    "this API key already has {count} snapshots (the limit is {limit}): delete \
                     one first"
                )));
            }
            let snapshot = SnapshotRecord {
                id: new_id("snp-"),
                owner_key_id: owner.to_string(),
                parent_sandbox_id: Some(record.id.clone()),
                image: record.image.clone(),
                resolution: record.resolution.clone(),
                status: SnapshotStatus::Taking,
                size_bytes: 0,
                instance: Some(self.instance.clone()),
                created_at: self.clock.now_ms(),
                transient,
            };
            self.store.insert_snapshot(&snapshot).await?;
            snapshot
        };
        match self.write_snapshot(&record, &snapshot).await {
            Ok(size) => {
                let mut snapshot = snapshot;
                snapshot.status = SnapshotStatus::Ready;
                snapshot.size_bytes = size as i64;
                Ok(snapshot)
            }
            Err(error) => {
                let _ = self.store.delete_snapshot(&snapshot.id).await;
                let _ = self.homes.remove(Kind::Snapshot, &snapshot.id).await;
                tracing::warn!(sandbox_id, snapshot_id = %snapshot.id, %error, "taking a snapshot failed");
                Err(error)
            }
        }
    }

    /// Writes the snapshot's archive (the sandbox's turn held, so no pause or hibernation
    /// starts meanwhile) and marks it ready.
    async fn write_snapshot(
        &self,
        record: &SandboxRecord,
        snapshot: &SnapshotRecord,
    ) -> Result<u64, SandboxError> {
        let _turn = self.transition_turn(&record.id).await;
        let current = self.get(&record.id, None).await?;
        let Some(address) = current.address.clone().filter(|_| current.status.is_live()) else {
            return Err(SandboxError::Conflict(format!(
                "sandbox {} is {}, not ready",
                record.id,
                current.status.as_str()
            )));
        };
        let started = std::time::Instant::now();
        let request = HomeArchiveRequest {
            path: None,
            keep_held: false,
        };
        let part = self
            .archive_into(
                &record.id,
                &address,
                &self.sandbox_key(&current),
                &request,
                (Kind::Snapshot, &snapshot.id),
            )
            .await?;
        let size = part
            .commit()
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?;
        if !self
            .store
            .mark_snapshot_ready(&snapshot.id, size as i64)
            .await?
        {
            return Err(SandboxError::Task(format!(
                "snapshot {} was removed while it was taken",
                snapshot.id
            )));
        }
        self.activity.touch(&record.id);
        tracing::info!(
            sandbox_id = %record.id,
            snapshot_id = %snapshot.id,
            bytes = size,
            took_ms = started.elapsed().as_millis() as u64,
            "snapshot taken"
        );
        Ok(size)
    }

    /// `owner`'s snapshots (everyone's for an admin: `None`), oldest first.
    pub async fn snapshots(
        &self,
        owner: Option<&str>,
    ) -> Result<Vec<SnapshotRecord>, SandboxError> {
        Ok(self.store.snapshots(owner).await?)
    }

    /// One snapshot, as `owner` sees it (another key's is not found).
    pub async fn snapshot(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<SnapshotRecord, SandboxError> {
        match self.store.snapshot(id).await? {
            Some(snapshot) if owner.is_none_or(|o| snapshot.owner_key_id == o) => Ok(snapshot),
            _ => Err(SandboxError::SnapshotNotFound(id.to_string())),
        }
    }

    /// Deletes a snapshot and its archive. Sandboxes started from it keep their files.
    pub async fn delete_snapshot(&self, id: &str, owner: Option<&str>) -> Result<(), SandboxError> {
        let snapshot = self.snapshot(id, owner).await?;
        if snapshot.status == SnapshotStatus::Taking {
            return Err(SandboxError::Conflict(format!(
                "snapshot {id} is still being taken"
            )));
        }
        if snapshot.instance.as_deref() != Some(self.instance.as_str()) {
            return Err(SandboxError::Conflict(format!(
                "snapshot {id} is kept by another orchestrator instance; delete it there"
            )));
        }
        if self.pool.snapshot().is_some_and(|s| s.id == id) {
            return Err(SandboxError::Conflict(format!(
                "snapshot {id} fills the warm pool (--pool-snapshot); restart without it first"
            )));
        }
        self.store.delete_snapshot(id).await?;
        self.homes
            .remove(Kind::Snapshot, id)
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?;
        tracing::info!(snapshot_id = %id, "snapshot deleted");
        Ok(())
    }

    /// The snapshot a create request names, checked: the caller's, whole, kept here, and of
    /// the image the request asks for (if it asks).
    pub(crate) async fn snapshot_to_start_from(
        &self,
        id: &str,
        owner: &str,
        image: Option<&str>,
    ) -> Result<SnapshotRecord, SandboxError> {
        let snapshot = self.snapshot(id, Some(owner)).await?;
        if snapshot.status != SnapshotStatus::Ready {
            return Err(SandboxError::Conflict(format!(
                "snapshot {id} is still being taken"
            )));
        }
        if snapshot.instance.as_deref() != Some(self.instance.as_str()) {
            return Err(SandboxError::Conflict(format!(
                "snapshot {id} is kept by another orchestrator instance"
            )));
        }
        if let Some(image) = image
            && image != snapshot.image
        {
            return Err(validate::invalid(
                "image",
                format!(
                    "snapshot {id} was taken from image {}; leave `image` out or give that one",
                    snapshot.image
                ),
            )
            .into());
        }
        Ok(snapshot)
    }

    /// Forks a sandbox: takes a snapshot of it and starts `count` sandboxes from it at once,
    /// each with its own id, key and tokens, with `spec`'s settings. All or nothing: if one
    /// cannot be made, those made are removed. The snapshot is removed afterwards unless
    /// `keep_snapshot`.
    pub async fn fork_sandbox(
        self: &Arc<Self>,
        sandbox_id: &str,
        owner: &str,
        count: i64,
        spec: CreateSpec,
        keep_snapshot: bool,
    ) -> Result<(Vec<SandboxRecord>, SnapshotRecord), SandboxError> {
        if !self.backend.features().home_archives {
            return Err(BackendError::Unsupported("forking a sandbox").into());
        }
        let count = validate::within("count", count, 1..=MAX_FORK)?;
        if spec.snapshot.is_some() {
            return Err(validate::invalid(
                "snapshot",
                "a fork starts from a snapshot of the sandbox it forks; leave `snapshot` out",
            )
            .into());
        }
        self.validate(&spec)?;
        let snapshot = self
            .take_snapshot_for(sandbox_id, owner, !keep_snapshot)
            .await?;
        let creates = (0..count).map(|_| {
            let spec = CreateSpec {
                snapshot: Some(snapshot.id.clone()),
                ..spec.clone()
            };
            self.create(owner, spec)
        });
        let results = futures_util::future::join_all(creates).await;
        let mut made = Vec::new();
        let mut failure = None;
        for result in results {
            match result {
                Ok((record, Source::Cold | Source::Pool)) => made.push(record),
                Err(error) => failure = failure.or(Some(error)),
            }
        }
        if let Some(error) = failure {
            for record in &made {
                let _ = self.remove(record, super::EndReason::Failed).await;
            }
            let _ = self.delete_snapshot(&snapshot.id, Some(owner)).await;
            return Err(error);
        }
        if !keep_snapshot {
            let _ = self.delete_snapshot(&snapshot.id, Some(owner)).await;
        }
        tracing::info!(sandbox_id, count, snapshot_id = %snapshot.id, "sandbox forked");
        Ok((made, snapshot))
    }
}
