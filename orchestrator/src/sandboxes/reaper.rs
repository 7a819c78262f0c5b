//! Background upkeep while the server runs:
//!
//! - the **reaper** (every `--reaper-interval-ms`) removes sandboxes past their absolute
//!   lifetime or idle longer than their idle timeout, retries failed deletions, and drops the
//!   records of lost sandboxes after the retention period;
//! - the **heartbeat** (every `--heartbeat-secs`) calls `GET /v1/activity` on every live
//!   sandbox, which keeps its dead-man switch from firing; work in flight inside the sandbox
//!   (running commands, open terminals) counts as activity; sandboxd's readiness moves the
//!   sandbox between `ready` and `degraded`; a sandbox that does not answer and whose container
//!   is gone is marked lost (or, for a pool member, removed) at once, ending its sessions;
//! - the **session sweeper** (every second) re-checks the authority of every open proxied
//!   session in the database, so a key, token or sandbox ended by another instance sharing the
//!   database ends this instance's sessions too.
//!
//! Each pass only looks at this instance's sandboxes.
//!
//! Idleness is "no activity for `idle_timeout_secs` and no open session through the proxies".

use std::sync::Arc;

use futures_util::future::join_all;

use std::collections::HashMap;
use std::time::Duration;

use super::{EndReason, Sandboxes};
use crate::db::{SandboxFilter, SandboxRecord, SandboxStatus};
use crate::secret::now_ms;

/// How often the session sweeper re-checks open sessions.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

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

    /// Runs the session sweeper until the process ends.
    pub async fn sweep_sessions_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(error) = self.sweep_sessions_once().await {
                tracing::warn!(%error, "session sweep failed");
            }
        }
    }

    /// Ends the open sessions whose key, token or sandbox ended (in this instance or another).
    pub async fn sweep_sessions_once(&self) -> Result<(), super::SandboxError> {
        let authorities = self.sessions.authorities();
        if authorities.is_empty() {
            return Ok(());
        }
        let mut keys: HashMap<String, bool> = HashMap::new();
        let mut tokens: HashMap<String, bool> = HashMap::new();
        let mut sandboxes: HashMap<String, bool> = HashMap::new();
        for authority in &authorities {
            if let Some(key) = &authority.key_id
                && !keys.contains_key(key)
            {
                let live = self
                    .store
                    .key(key)
                    .await?
                    .is_some_and(|k| k.revoked_at.is_none());
                keys.insert(key.clone(), live);
            }
            if let Some(token) = &authority.token_id
                && !tokens.contains_key(token)
            {
                let live = self
                    .store
                    .token(token)
                    .await?
                    .is_some_and(|t| t.revoked_at.is_none());
                tokens.insert(token.clone(), live);
            }
            if !sandboxes.contains_key(&authority.sandbox_id) {
                let live = self
                    .store
                    .sandbox(&authority.sandbox_id)
                    .await?
                    .is_some_and(|s| s.status.is_live());
                sandboxes.insert(authority.sandbox_id.clone(), live);
            }
        }
        for (key, live) in keys {
            if !live {
                self.sessions.end_key(&key);
            }
        }
        for (token, live) in tokens {
            if !live {
                self.sessions.end_token(&token);
            }
        }
        for (sandbox, live) in sandboxes {
            if !live {
                self.sessions
                    .end_sandbox(&sandbox, "the sandbox is no longer ready");
            }
        }
        Ok(())
    }

    /// This instance's sandboxes.
    fn mine(&self, status: Option<SandboxStatus>) -> SandboxFilter {
        SandboxFilter {
            include_pooled: true,
            status,
            instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }

    /// Why a live sandbox should end now, if it should.
    fn end_reason(&self, record: &SandboxRecord, now: i64) -> Option<EndReason> {
        if record.pooled || !record.status.is_live() {
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
        let records = self.store.list_sandboxes(&self.mine(None)).await?;
        let now = now_ms();
        let mut live = 0;
        let mut removals = Vec::new();
        for record in records {
            match record.status {
                SandboxStatus::Ready | SandboxStatus::Degraded => {
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

    /// One heartbeat pass over every live sandbox of this instance.
    pub async fn heartbeat_once(&self) -> Result<(), super::SandboxError> {
        let mut records = self
            .store
            .list_sandboxes(&self.mine(Some(SandboxStatus::Ready)))
            .await?;
        records.extend(
            self.store
                .list_sandboxes(&self.mine(Some(SandboxStatus::Degraded)))
                .await?,
        );
        join_all(records.iter().map(|record| self.heartbeat(record))).await;
        let _ = self
            .store
            .purge_expired_tokens(now_ms() - 3600 * 1000)
            .await;
        Ok(())
    }

    /// Runs the heartbeat for one sandbox now (a proxy saw something wrong with it).
    pub async fn check_now(&self, id: &str) {
        match self.store.sandbox(id).await {
            Ok(Some(record)) if self.is_mine(&record) && record.status.is_live() => {
                self.heartbeat(&record).await;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(sandbox_id = %id, %error, "checking the sandbox failed"),
        }
    }

    async fn heartbeat(&self, record: &SandboxRecord) {
        let Some(address) = &record.address else {
            return;
        };
        match self
            .sandboxd
            .activity(address, &self.sandbox_key(record))
            .await
        {
            Ok(report) => {
                if report.in_flight > 0 {
                    self.activity.touch(&record.id);
                }
                let reason =
                    (!report.ready).then(|| format!("not ready: {}", report.not_ready.join(", ")));
                match self
                    .store
                    .set_health(&record.id, report.ready, reason.as_deref())
                    .await
                {
                    Ok(true) if report.ready => {
                        tracing::info!(sandbox_id = %record.id, "sandbox recovered");
                    }
                    Ok(true) => {
                        tracing::warn!(sandbox_id = %record.id, reason = reason.as_deref().unwrap_or(""), "sandbox degraded");
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(sandbox_id = %record.id, %error, "recording the sandbox's health failed");
                    }
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
        self.sessions
            .end_sandbox(&record.id, "the sandbox was lost");
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
