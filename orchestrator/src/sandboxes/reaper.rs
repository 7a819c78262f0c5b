//! Background upkeep while the server runs:
//!
//! - the **reaper** (every `--reaper-interval-ms`) removes sandboxes past their absolute
//!   lifetime or idle longer than their idle timeout, retries failed deletions, and drops the
//!   records of lost sandboxes after the retention period;
//! - the **heartbeat** (every `--heartbeat-secs`) calls `GET /v1/activity` on every live
//!   sandbox, which keeps its dead-man switch from firing; work in flight inside the sandbox
//!   (running commands, open terminals) counts as activity; a sandbox that does not answer and
//!   whose container is gone is marked lost (or, for a pool member, removed).
//!
//! Idleness is "no activity for `idle_timeout_secs` and no open session through the proxies".

use std::sync::Arc;

use futures_util::future::join_all;

use super::{EndReason, Sandboxes};
use crate::db::{SandboxFilter, SandboxRecord, SandboxStatus};
use crate::secret::now_ms;

impl Sandboxes {
    /// Runs the reaper until the process ends.
    pub async fn reap_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.reaper_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(error) = self.reap_once().await {
                tracing::warn!(%error, "reaper pass failed");
            }
        }
    }

    /// Runs the heartbeat until the process ends.
    pub async fn heartbeat_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(error) = self.heartbeat_once().await {
                tracing::warn!(%error, "heartbeat pass failed");
            }
        }
    }

    /// Why a ready sandbox should end now, if it should.
    fn end_reason(&self, record: &SandboxRecord, now: i64) -> Option<EndReason> {
        if record.pooled || record.status != SandboxStatus::Ready {
            return None;
        }
        if now >= record.expires_at {
            return Some(EndReason::Lifetime);
        }
        let (last, holds) = self
            .activity
            .get(&record.id)
            .unwrap_or((record.last_active_at, 0));
        let last = last.max(record.last_active_at);
        if holds == 0 && now - last >= record.idle_timeout_secs * 1000 {
            return Some(EndReason::Idle);
        }
        None
    }

    /// One reaper pass.
    pub async fn reap_once(&self) -> Result<(), super::SandboxError> {
        let filter = SandboxFilter {
            include_pooled: true,
            ..Default::default()
        };
        let records = self.store.list_sandboxes(&filter).await?;
        let now = now_ms();
        let mut live = 0;
        let mut removals = Vec::new();
        for record in records {
            match record.status {
                SandboxStatus::Ready => {
                    if !record.pooled {
                        live += 1;
                    }
                    if let Some(reason) = self.end_reason(&record, now) {
                        tracing::info!(sandbox_id = %record.id, reason = reason.as_str(), "reaping sandbox");
                        removals.push((record, reason));
                    }
                }
                SandboxStatus::Deleting => removals.push((record, EndReason::Deleted)),
                SandboxStatus::Lost => {
                    let ended = record.ended_at.unwrap_or(record.last_active_at);
                    if now - ended >= self.settings.lost_retention.as_millis() as i64 {
                        removals.push((record, EndReason::Lost));
                    }
                }
                SandboxStatus::Creating => {}
            }
        }
        self.metrics.sandboxes_live.set(live);
        join_all(
            removals
                .iter()
                .map(|(record, reason)| self.remove(record, *reason)),
        )
        .await;
        Ok(())
    }

    /// One heartbeat pass over every ready sandbox.
    pub async fn heartbeat_once(&self) -> Result<(), super::SandboxError> {
        let filter = SandboxFilter {
            include_pooled: true,
            status: Some(SandboxStatus::Ready),
            ..Default::default()
        };
        let records = self.store.list_sandboxes(&filter).await?;
        join_all(records.iter().map(|record| self.heartbeat(record))).await;
        let _ = self
            .store
            .purge_expired_tokens(now_ms() - 3600 * 1000)
            .await;
        Ok(())
    }

    async fn heartbeat(&self, record: &SandboxRecord) {
        let Some(address) = &record.address else {
            return;
        };
        match self.sandboxd.activity(address, &record.api_key).await {
            Ok(report) => {
                if report.in_flight > 0 {
                    self.activity.touch(&record.id);
                }
                // Persist the idle clock so a restarted orchestrator keeps it.
                if let Some((last, _)) = self.activity.get(&record.id)
                    && last > record.last_active_at
                {
                    let _ = self.store.touch(&record.id, last).await;
                }
            }
            Err(error) => {
                let gone = match &record.container_id {
                    Some(container_id) => match self.backend.inspect(container_id).await {
                        Ok(Some(info)) => !info.running,
                        Ok(None) => true,
                        Err(_) => false, // the platform is unreachable: decide later
                    },
                    None => true,
                };
                if !gone {
                    tracing::warn!(sandbox_id = %record.id, %error, "heartbeat failed; the container is still there");
                    return;
                }
                if record.pooled {
                    let _ = self.remove(record, EndReason::Lost).await;
                } else {
                    self.mark_lost(record, "the container is gone").await;
                }
            }
        }
    }

    /// Records that a sandbox's container vanished; the record stays for the retention period
    /// so its owner can see what happened.
    pub(crate) async fn mark_lost(&self, record: &SandboxRecord, why: &str) {
        tracing::warn!(sandbox_id = %record.id, why, "sandbox lost");
        if let Some(container_id) = &record.container_id {
            let _ = self.backend.remove(container_id).await;
        }
        let _ = self
            .store
            .set_status(&record.id, SandboxStatus::Lost, Some(why), Some(now_ms()))
            .await;
        self.activity.forget(&record.id);
        self.pool.forget(&record.id);
        self.metrics.sandbox_ended(EndReason::Lost);
    }
}
