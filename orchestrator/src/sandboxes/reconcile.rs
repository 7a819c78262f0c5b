//! Reconciliation at start: make the database and the platform agree after a crash or a
//! restart.
//!
//! - a running container of ours with a ready, unexpired record is **adopted** (pool members go
//!   back into the pool); a paused one is adopted as paused, and a paused record whose
//!   container runs again becomes ready (the row follows what the container is);
//! - a container of ours with no record, or whose record expired, was still being created, or
//!   is being deleted, is **removed**;
//! - a ready record whose container vanished is marked **lost**; a record that was still being
//!   created or deleted, or was a pool member, is deleted.
//!
//! - a hibernation or a wake a crash interrupted is finished or undone from what is on disk
//!   (`reconcile_asleep`), and kept archives nobody refers to are removed
//!   (`reconcile_kept_homes`).
//!
//! Only this instance's records and containers are considered; rows written before rows named
//! their instance are first given to this instance.
//!
//! Several replicas may share the instance ([`crate::replicas`]): a create or a delete a live
//! peer is doing is its own (left alone here); the creates of a replica that is gone are undone
//! by the reaper ([`Sandboxes::undo_abandoned_creates`]), its deletions finished by it. What the
//! platform holds for a live peer's start (a network, a secret) is left to it too.

use std::collections::HashMap;

use super::{EndReason, SandboxError, Sandboxes};
use crate::db::{SandboxFilter, SandboxStatus};

/// What reconciliation did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    pub adopted: usize,
    pub removed_containers: usize,
    pub lost: usize,
    pub dropped_records: usize,
}

impl Sandboxes {
    pub async fn reconcile(&self) -> Result<ReconcileReport, SandboxError> {
        let mut report = ReconcileReport::default();
        let peers = self.duties.live_peers().await?;
        if !peers.is_empty() {
            tracing::info!(peers = ?peers, "other replicas are running; their work in progress is theirs");
        }
        let adopted = self.store.adopt_unassigned(&self.instance).await?;
        if adopted > 0 {
            tracing::info!(adopted, instance = %self.instance, "rows without an instance now belong to this one");
        }
        let containers = self.backend.list().await?;
        let filter = SandboxFilter {
            include_pooled: true,
            instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let records = self.store.list_sandboxes(&filter).await?;
        let mut by_sandbox: HashMap<String, _> = HashMap::new();
        for container in containers {
            match &container.sandbox_id {
                Some(id) if records.iter().any(|r| &r.id == id) => {
                    by_sandbox.insert(id.clone(), container);
                }
                _ => {
                    tracing::info!(container_id = %container.container_id, "removing a container of ours with no record");
                    self.backend.remove(&container.container_id).await?;
                    self.metrics.sandbox_ended(EndReason::Orphan);
                    report.removed_containers += 1;
                }
            }
        }
        if let Err(error) = self.backend.collect_garbage(&peers).await {
            tracing::warn!(%error, "collecting what gone containers left failed");
        }
        let now = self.clock.now_ms();
        for mut record in records {
            let container = by_sandbox.remove(&record.id);
            if matches!(
                record.status,
                SandboxStatus::Creating | SandboxStatus::Deleting
            ) && self
                .duties
                .in_progress_elsewhere(record.replica.as_deref(), &peers)
            {
                continue;
            }
            match (record.status, container) {
                // Frozen or thawed behind the lifecycle's back (or a pause whose row was not
                // written): the row follows the container.
                (SandboxStatus::Ready | SandboxStatus::Degraded, Some(container))
                    if container.paused && !record.pooled && record.expires_at > now =>
                {
                    self.store.mark_paused(&record.id, now).await?;
                    tracing::info!(sandbox_id = %record.id, "adopted a paused sandbox (its container was paused)");
                    report.adopted += 1;
                }
                (SandboxStatus::Paused, Some(container))
                    if container.running && record.expires_at > now =>
                {
                    if !container.paused {
                        self.store.mark_resumed(&record.id, now).await?;
                    }
                    self.activity.adopt(&record.id, record.last_active_at);
                    tracing::info!(sandbox_id = %record.id, paused = container.paused, "adopted a paused sandbox");
                    report.adopted += 1;
                }
                (SandboxStatus::Paused, None) => {
                    self.mark_lost(
                        &record,
                        "the container vanished while the orchestrator was down",
                    )
                    .await;
                    report.lost += 1;
                }
                (SandboxStatus::Ready | SandboxStatus::Degraded, Some(container))
                    if container.running
                        && !container.paused
                        && if record.pooled {
                            // Of this pool's making (not of an image or snapshot it no
                            // longer uses).
                            self.pool.made(&record)
                        } else {
                            record.expires_at > now
                        } =>
                {
                    if let Some(address) = &container.address
                        && record.address.as_ref() != Some(address)
                    {
                        self.store
                            .set_container(&record.id, &container.container_id, address)
                            .await?;
                        record.address = Some(address.clone());
                    }
                    record.container_id = Some(container.container_id.clone());
                    self.activity.adopt(&record.id, record.last_active_at);
                    tracing::info!(sandbox_id = %record.id, pooled = record.pooled, "adopted a running sandbox");
                    if record.pooled {
                        self.pool.push(record);
                    }
                    report.adopted += 1;
                }
                (SandboxStatus::Ready | SandboxStatus::Degraded, None) if !record.pooled => {
                    self.mark_lost(
                        &record,
                        "the container vanished while the orchestrator was down",
                    )
                    .await;
                    report.lost += 1;
                }
                (SandboxStatus::Lost, None) => {}
                (
                    SandboxStatus::Hibernated | SandboxStatus::Hibernating | SandboxStatus::Waking,
                    container,
                ) if record.expires_at > now => {
                    if self.reconcile_asleep(&record, container).await? {
                        report.adopted += 1;
                    } else {
                        report.lost += 1;
                    }
                }
                (_, container) => {
                    // Expired, half-created, being deleted, or a dead pool member.
                    if let Some(container) = container {
                        self.backend.remove(&container.container_id).await?;
                        report.removed_containers += 1;
                    }
                    let reason = if (record.status.is_live()
                        || matches!(
                            record.status,
                            SandboxStatus::Paused
                                | SandboxStatus::Hibernated
                                | SandboxStatus::Hibernating
                                | SandboxStatus::Waking
                        ))
                        && record.expires_at <= now
                    {
                        EndReason::Lifetime
                    } else {
                        EndReason::Failed
                    };
                    self.store.delete_sandbox(&record.id).await?;
                    let _ = self
                        .homes
                        .remove(crate::homes::Kind::Hibernated, &record.id)
                        .await;
                    self.metrics.sandbox_ended(reason);
                    report.dropped_records += 1;
                }
            }
        }
        self.reconcile_kept_homes().await?;
        tracing::info!(
            adopted = report.adopted,
            removed_containers = report.removed_containers,
            lost = report.lost,
            dropped_records = report.dropped_records,
            "reconciled with the container platform"
        );
        Ok(report)
    }
}

impl Sandboxes {
    /// Undoes the creates a replica that is gone left unfinished: their containers (found by
    /// their sandbox label: the row may not name the container yet) and their rows.
    pub(crate) async fn undo_abandoned_creates(
        &self,
        records: Vec<crate::db::SandboxRecord>,
    ) -> Result<(), SandboxError> {
        let containers = self.backend.list().await?;
        for record in records {
            tracing::warn!(sandbox_id = %record.id, replica = record.replica.as_deref().unwrap_or(""), "undoing a create whose replica is gone");
            for container in containers
                .iter()
                .filter(|c| c.sandbox_id.as_deref() == Some(record.id.as_str()))
            {
                self.backend.remove(&container.container_id).await?;
            }
            if self.store.delete_sandbox(&record.id).await? {
                let _ = self.store.release_profile(&record.id).await;
                self.metrics.sandbox_ended(EndReason::Failed);
            }
        }
        Ok(())
    }

    /// Removes what a crash left of kept archives: half-written ones, snapshots that were being
    /// taken, and whole ones no sandbox, snapshot or profile refers to; frees the profiles of
    /// sandboxes that are gone.
    async fn reconcile_kept_homes(&self) -> Result<(), SandboxError> {
        use crate::db::SnapshotStatus;
        use crate::homes::Kind;
        let parts = self.homes.collect_parts();
        let mut snapshots = std::collections::HashSet::new();
        for snapshot in self.store.snapshots(None).await? {
            if snapshot.instance.as_deref() != Some(self.instance.as_str()) {
                snapshots.insert(snapshot.id);
                continue;
            }
            if snapshot.status == SnapshotStatus::Taking || snapshot.transient {
                tracing::info!(snapshot_id = %snapshot.id, transient = snapshot.transient, "removing a snapshot a crash left half taken, or a fork's a crash interrupted");
                self.store.delete_snapshot(&snapshot.id).await?;
                let _ = self.homes.remove(Kind::Snapshot, &snapshot.id).await;
            } else {
                snapshots.insert(snapshot.id);
            }
        }
        let mut stray = 0;
        for id in self.homes.ids(Kind::Snapshot) {
            if !snapshots.contains(&id) {
                let _ = self.homes.remove(Kind::Snapshot, &id).await;
                stray += 1;
            }
        }
        let profiles: std::collections::HashSet<String> = self
            .store
            .profiles(None)
            .await?
            .into_iter()
            .map(|p| p.id)
            .collect();
        for id in self.homes.ids(Kind::Profile) {
            if !profiles.contains(&id) {
                let _ = self.homes.remove(Kind::Profile, &id).await;
                stray += 1;
            }
        }
        let freed = self.store.release_orphaned_profiles().await?;
        if freed > 0 {
            tracing::info!(
                freed,
                "freed browser profiles held by sandboxes that are gone"
            );
        }
        for id in self.homes.ids(Kind::Hibernated) {
            let kept = matches!(
                self.store.sandbox(&id).await?,
                Some(record) if matches!(
                    record.status,
                    SandboxStatus::Hibernated | SandboxStatus::Hibernating | SandboxStatus::Waking
                )
            );
            if !kept {
                let _ = self.homes.remove(Kind::Hibernated, &id).await;
                stray += 1;
            }
        }
        if parts + stray > 0 {
            tracing::info!(
                partial = parts,
                unreferenced = stray,
                "removed kept archives a crash left"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::testing::harness::INSTANCE;
    use crate::testing::{Harness, Step};

    #[tokio::test]
    async fn reconcile_adopts_live_sandboxes_removes_orphans_and_ends_rows_without_containers() {
        let mut h = Harness::new().await;
        let kept = h.create().await;
        let vanished = h.create().await;
        let short = h
            .sandboxes
            .create(
                crate::testing::harness::OWNER,
                crate::sandboxes::CreateSpec {
                    max_lifetime_secs: Some(60),
                    ..Default::default()
                },
            )
            .await
            .expect("a short-lived sandbox")
            .0;
        // While the orchestrator is down: a container vanishes, the short one expires, an
        // orphan of ours and a container without a sandbox label appear, and rows are left
        // half created and half deleted with their containers.
        h.platform.vanish(&vanished.id);
        h.clock.advance(Duration::from_secs(61));
        let orphan = h.platform.add_container(INSTANCE, Some("sbx-orphan"));
        let unlabelled = h.platform.add_container(INSTANCE, None);
        let mut creating = h.record("sbx-creating", None);
        creating.status = SandboxStatus::Creating;
        let creating_container = h.platform.add_container(INSTANCE, Some("sbx-creating"));
        creating.container_id = Some(creating_container.clone());
        h.store.insert_sandbox(&creating).await.unwrap();
        let deleting_container = h.platform.add_container(INSTANCE, Some("sbx-deleting"));
        let mut deleting = h.record("sbx-deleting", Some(&deleting_container));
        deleting.status = SandboxStatus::Deleting;
        h.store.insert_sandbox(&deleting).await.unwrap();

        h.restart();
        let report = h.sandboxes.reconcile().await.expect("reconcile");

        assert_eq!(
            report,
            ReconcileReport {
                adopted: 1,
                removed_containers: 5,
                lost: 1,
                dropped_records: 3,
            }
        );
        let kept_row = h.row(&kept.id).await.expect("the live sandbox is kept");
        assert_eq!(kept_row.status, SandboxStatus::Ready);
        assert!(h.platform.container_of(&kept.id).is_some());
        let lost = h.row(&vanished.id).await.expect("the lost row stays");
        assert_eq!(lost.status, SandboxStatus::Lost);
        assert_eq!(
            lost.error.as_deref(),
            Some("the container vanished while the orchestrator was down")
        );
        assert_eq!(lost.ended_at, Some(h.clock.now_ms()));
        for gone in [&short.id, "sbx-creating", "sbx-deleting"] {
            assert!(h.row(gone).await.is_none(), "{gone} is dropped");
        }
        let removed = h.platform.removed();
        for container in [
            &orphan,
            &unlabelled,
            &creating_container,
            &deleting_container,
        ] {
            assert!(removed.contains(container), "{container} is removed");
        }
        assert_eq!(h.ended(EndReason::Orphan), 2);
        assert_eq!(h.ended(EndReason::Lost), 1);
        assert_eq!(h.ended(EndReason::Lifetime), 1);
        assert_eq!(h.ended(EndReason::Failed), 2);
        // The adopted sandbox's idle clock carries on from its row.
        assert_eq!(
            h.sandboxes.activity.get(&kept.id).map(|(last, _)| last),
            Some(kept_row.last_active_at)
        );
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn reconcile_and_the_background_passes_leave_other_instances_alone() {
        let mut h = Harness::new().await;
        let theirs = h
            .platform
            .add_container("other-instance", Some("sbx-theirs"));
        let mut their_row = h.record("sbx-theirs", Some(&theirs));
        their_row.instance = Some("other-instance".into());
        h.store.insert_sandbox(&their_row).await.unwrap();
        // Another instance's row whose container runs elsewhere, and one that expired.
        let mut remote = h.record("sbx-remote", Some("ctr-elsewhere"));
        remote.instance = Some("other-instance".into());
        remote.expires_at = h.clock.now_ms() + 1000;
        h.store.insert_sandbox(&remote).await.unwrap();

        h.restart();
        let report = h.sandboxes.reconcile().await.expect("reconcile");
        h.clock.advance(Duration::from_secs(7200));
        h.sandboxes.heartbeat_once().await.unwrap();
        h.sandboxes.reap_once().await.unwrap();

        assert_eq!(report, ReconcileReport::default());
        assert_eq!(h.row("sbx-theirs").await, Some(their_row));
        assert_eq!(h.row("sbx-remote").await, Some(remote));
        assert!(h.platform.container_of("sbx-theirs").is_some());
        assert!(h.platform.removed().is_empty());
        assert_eq!(h.platform.calls(Step::Activity), 0);
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn reconcile_gives_rows_without_an_instance_to_this_one() {
        let mut h = Harness::new().await;
        let container = h.platform.add_container(INSTANCE, Some("sbx-old"));
        let mut old = h.record("sbx-old", Some(&container));
        old.instance = None;
        h.store.insert_sandbox(&old).await.unwrap();

        h.restart();
        let report = h.sandboxes.reconcile().await.expect("reconcile");

        assert_eq!(report.adopted, 1);
        let row = h.row("sbx-old").await.expect("the row is kept");
        assert_eq!(row.instance.as_deref(), Some(INSTANCE));
        assert_eq!(
            row.address,
            h.platform.container_of("sbx-old").map(|c| c.address)
        );
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn reconcile_puts_live_pool_members_back_and_drops_dead_ones() {
        let mut h = Harness::with_flags(&["--pool-size", "2"]).await;
        let members = h.fill_pool(2).await;
        h.platform.vanish(&members[1].id);

        h.restart();
        let report = h.sandboxes.reconcile().await.expect("reconcile");

        assert_eq!((report.adopted, report.dropped_records), (1, 1));
        assert_eq!(h.sandboxes.pool.ready_ids(), vec![members[0].id.clone()]);
        assert!(h.row(&members[1].id).await.is_none(), "not kept as lost");
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn reconcile_changes_nothing_when_the_platform_does_not_answer() {
        let mut h = Harness::new().await;
        let sandbox = h.create().await;
        h.platform.vanish(&sandbox.id);
        h.platform
            .fail_next(Step::List, "the Docker socket is gone");

        h.restart();
        let error = h.sandboxes.reconcile().await.expect_err("reconcile fails");

        assert!(
            error.to_string().contains("the Docker socket is gone"),
            "{error}"
        );
        assert_eq!(
            h.row(&sandbox.id).await.map(|r| r.status),
            Some(SandboxStatus::Ready)
        );
    }
}
