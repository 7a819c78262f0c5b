//! Reconciliation at start: make the database and the platform agree after a crash or a
//! restart.
//!
//! - a running container of ours with a ready, unexpired record is **adopted** (pool members go
//!   back into the pool);
//! - a container of ours with no record, or whose record expired, was still being created, or
//!   is being deleted, is **removed**;
//! - a ready record whose container vanished is marked **lost**; a record that was still being
//!   created or deleted, or was a pool member, is deleted.
//!
//! Only this instance's records and containers are considered; rows written before rows named
//! their instance are first given to this instance.

use std::collections::HashMap;

use super::{EndReason, SandboxError, Sandboxes};
use crate::db::{SandboxFilter, SandboxStatus};
use crate::secret::now_ms;

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
        let now = now_ms();
        for mut record in records {
            let container = by_sandbox.remove(&record.id);
            match (record.status, container) {
                (SandboxStatus::Ready | SandboxStatus::Degraded, Some(container))
                    if container.running && (record.pooled || record.expires_at > now) =>
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
                    self.activity.seed(&record.id, record.last_active_at);
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
                (_, container) => {
                    // Expired, half-created, being deleted, or a dead pool member.
                    if let Some(container) = container {
                        self.backend.remove(&container.container_id).await?;
                        report.removed_containers += 1;
                    }
                    let reason = if record.status.is_live() && record.expires_at <= now {
                        EndReason::Lifetime
                    } else {
                        EndReason::Failed
                    };
                    self.store.delete_sandbox(&record.id).await?;
                    self.metrics.sandbox_ended(reason);
                    report.dropped_records += 1;
                }
            }
        }
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
