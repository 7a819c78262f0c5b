//! Background upkeep while the server runs:
//!
//! - the **reaper** (every `--reaper-interval-ms`) removes sandboxes past their absolute
//!   lifetime or idle longer than their idle timeout (paused or not), pauses those idle for
//!   their `idle_pause_secs`, retries failed deletions, and drops the
//!   records of lost sandboxes after the retention period; once a minute it has the platform
//!   remove what gone containers left behind (their networks);
//! - the **heartbeat** (every `--heartbeat-secs`) calls `GET /v1/activity` on every live
//!   sandbox, which keeps its dead-man switch from firing; work in flight inside the sandbox
//!   (running commands, open terminals) counts as activity; sandboxd's readiness moves the
//!   sandbox between `ready` and `degraded`; a sandbox that does not answer and whose container
//!   is gone is marked lost (or, for a pool member, removed) at once, ending its sessions; of a
//!   paused sandbox only the container is looked at (its sandboxd is frozen);
//! - the **session sweeper** (every second) re-checks the authority of every open proxied
//!   session in the database, so a key, token or sandbox ended by another instance sharing the
//!   database ends this instance's sessions too.
//!
//! Each pass only looks at this instance's sandboxes. With several replicas on one database
//! ([`crate::replicas`]) the reaper and the heartbeat run in the replica holding their duty's
//! lease; the reaper also undoes the creates of replicas that are gone, and leaves deletions a
//! live peer is doing to it. Every replica writes the activity it saw to the database
//! ([`Sandboxes::write_activity_forever`]), where the reaper reads it.
//!
//! Idleness is "no activity for `idle_timeout_secs` and no open session through the proxies".

use std::sync::Arc;

use futures_util::future::join_all;

use std::collections::HashMap;
use std::time::Duration;

use super::{EndReason, Sandboxes};
use crate::db::{SandboxFilter, SandboxRecord, SandboxStatus};
use crate::replicas::Duty;

/// How often the session sweeper re-checks open sessions.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How often the reaper asks the platform to remove what gone containers left behind.
const COLLECT_GARBAGE_EVERY: Duration = Duration::from_secs(60);

/// How often each replica writes the activity it saw to the database.
const ACTIVITY_WRITE_EVERY: Duration = Duration::from_secs(1);

/// How often each replica forgets what it keeps of sandboxes another one removed.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

impl Sandboxes {
    /// Runs the reaper until the process ends.
    pub async fn reap_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.reaper_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_collection = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            if !self.duties.mine(Duty::Reaper).await {
                continue;
            }
            if let Err(error) = self.reap_once().await {
                tracing::warn!(%error, "reaper pass failed");
            }
            if last_collection.elapsed() >= COLLECT_GARBAGE_EVERY {
                last_collection = tokio::time::Instant::now();
                let collected = match self.duties.live_peers().await {
                    Ok(peers) => self
                        .backend
                        .collect_garbage(&peers)
                        .await
                        .map_err(|e| e.to_string()),
                    Err(error) => Err(error.to_string()),
                };
                if let Err(error) = collected {
                    tracing::warn!(%error, "collecting what gone containers left failed");
                }
            }
        }
    }

    /// Writes the activity this replica saw to the database every [`ACTIVITY_WRITE_EVERY`],
    /// until the process ends (the reaper may be another replica's).
    pub async fn write_activity_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(ACTIVITY_WRITE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pruned = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            self.write_activity_once().await;
            if pruned.elapsed() >= PRUNE_EVERY {
                pruned = tokio::time::Instant::now();
                if let Err(error) = self.prune_removed().await {
                    tracing::warn!(%error, "pruning what removed sandboxes left in memory failed");
                }
            }
        }
    }

    /// Forgets what this process keeps of sandboxes another replica removed (their activity
    /// clock, control gate and transition lock).
    pub async fn prune_removed(&self) -> Result<(), super::SandboxError> {
        let live: std::collections::HashSet<String> = self
            .store
            .list_sandboxes(&self.mine(None))
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect();
        self.activity.retain(&live);
        self.control_gates.retain(&live);
        self.retain_transitions(&live);
        Ok(())
    }

    /// Writes the activity seen since the last write.
    pub async fn write_activity_once(&self) {
        for (id, at) in self.activity.unwritten() {
            if let Err(error) = self.store.touch(&id, at).await {
                tracing::warn!(sandbox_id = %id, %error, "writing the sandbox's activity failed");
            }
        }
    }

    /// Runs the heartbeat until the process ends.
    pub async fn heartbeat_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Another replica's: look again soon, so a dead holder's sandboxes hear from this
            // one before their dead-man switch fires (three heartbeats).
            while !self.duties.mine(Duty::Heartbeat).await {
                tokio::time::sleep(self.duties.retry_every()).await;
            }
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
        let mut consoles: HashMap<String, bool> = HashMap::new();
        for authority in &authorities {
            if let Some(console) = &authority.console_session
                && !consoles.contains_key(console)
            {
                let live = self
                    .store
                    .console_session(console)
                    .await?
                    .is_some_and(|c| c.is_live(self.clock.now_ms()));
                consoles.insert(console.clone(), live);
            }
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
                let record = self.store.sandbox(&authority.sandbox_id).await?;
                if let Some(record) = &record {
                    // The driving replica may be another one.
                    self.control_gates.apply_stored(
                        &record.id,
                        record.control_open,
                        record.control_seq,
                    );
                }
                let live = record.is_some_and(|s| s.status.is_live());
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
        for (console, live) in consoles {
            if !live {
                self.sessions.end_console_session(&console);
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
        let peers = self.duties.live_peers().await?;
        let now = self.clock.now_ms();
        let mut abandoned = Vec::new();
        let mut live = 0;
        let mut paused = 0;
        let mut hibernated = 0;
        let mut removals = Vec::new();
        let mut pauses = Vec::new();
        let mut hibernations = Vec::new();
        for record in records {
            match record.status {
                SandboxStatus::Ready | SandboxStatus::Degraded => {
                    if !record.pooled {
                        live += 1;
                    }
                    if let Some(reason) = self.end_reason(&record, now) {
                        tracing::info!(sandbox_id = %record.id, reason = reason.as_str(), "reaping sandbox");
                        removals.push((record, reason));
                    } else if self.idle_hibernate_due(&record, now) {
                        hibernations.push(record);
                    } else if self.idle_pause_due(&record, now) {
                        pauses.push(record);
                    }
                }
                SandboxStatus::Paused => {
                    paused += 1;
                    if let Some(reason) = self.paused_end_reason(&record, now) {
                        tracing::info!(sandbox_id = %record.id, reason = reason.as_str(), "reaping paused sandbox");
                        removals.push((record, reason));
                    } else if self.idle_hibernate_due(&record, now) {
                        hibernations.push(record);
                    }
                }
                // Asleep without a container: only its lifetime and idle timeout end it.
                SandboxStatus::Hibernated => {
                    hibernated += 1;
                    if let Some(reason) = self.paused_end_reason(&record, now) {
                        tracing::info!(sandbox_id = %record.id, reason = reason.as_str(), "reaping hibernated sandbox");
                        removals.push((record, reason));
                    }
                }
                // Under way in this process (or finished by reconcile after a crash).
                SandboxStatus::Hibernating | SandboxStatus::Waking => {}
                SandboxStatus::Deleting
                    if self
                        .duties
                        .in_progress_elsewhere(record.replica.as_deref(), &peers) => {}
                SandboxStatus::Deleting => removals.push((record, EndReason::Deleted)),
                SandboxStatus::Lost => {
                    let ended = record.ended_at.unwrap_or(record.last_active_at);
                    if now - ended >= self.settings.lost_retention.as_millis() as i64 {
                        removals.push((record, EndReason::Lost));
                    }
                }
                // Being created here or by a live peer; a gone replica's is undone.
                SandboxStatus::Creating => {
                    if record.replica.as_deref().is_some_and(|r| r != self.replica)
                        && !self
                            .duties
                            .in_progress_elsewhere(record.replica.as_deref(), &peers)
                    {
                        abandoned.push(record);
                    }
                }
            }
        }
        if !abandoned.is_empty()
            && let Err(error) = self.undo_abandoned_creates(abandoned).await
        {
            // The rest of the pass goes on; the next one tries again.
            tracing::warn!(%error, "undoing a gone replica's creates failed");
        }
        self.metrics.sandboxes_live.set(live);
        self.metrics.sandboxes_paused.set(paused);
        self.metrics.sandboxes_hibernated.set(hibernated);
        join_all(
            removals
                .iter()
                .map(|(record, reason)| self.remove(record, *reason)),
        )
        .await;
        for record in hibernations {
            let id = record.id.clone();
            match self.hibernate_record(record, super::Why::Idle).await {
                Ok(_) => {}
                Err(error @ super::SandboxError::Conflict(_)) => {
                    tracing::debug!(sandbox_id = %id, %error, "idle sandbox not hibernated");
                }
                Err(error) => {
                    tracing::warn!(sandbox_id = %id, %error, "hibernating an idle sandbox failed");
                }
            }
        }
        for record in pauses {
            let id = record.id.clone();
            // A run that drives it, or a change meanwhile, refuses the pause: tried again on
            // the next pass while it stays idle.
            match self.pause_record(record, super::Why::Idle).await {
                Ok(_) => {}
                Err(error @ super::SandboxError::Conflict(_)) => {
                    tracing::debug!(sandbox_id = %id, %error, "idle sandbox not paused");
                }
                Err(error) => {
                    tracing::warn!(sandbox_id = %id, %error, "pausing an idle sandbox failed");
                }
            }
        }
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
        let paused = self
            .store
            .list_sandboxes(&self.mine(Some(SandboxStatus::Paused)))
            .await?;
        join_all(paused.iter().map(|record| self.check_paused(record))).await;
        let _ = self
            .store
            .purge_expired_tokens(self.clock.now_ms() - 3600 * 1000)
            .await;
        let _ = self
            .store
            .purge_console_sessions(self.clock.now_ms() - 3600 * 1000)
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
                    if let Some(container_id) = &record.container_id
                        && let Ok(Some(info)) = self.backend.inspect(container_id).await
                        && info.paused
                        && !record.pooled
                        && let Ok(true) = self
                            .store
                            .mark_paused(&record.id, self.clock.now_ms())
                            .await
                    {
                        // Frozen behind the lifecycle's back (`docker pause`): the row says so.
                        tracing::warn!(sandbox_id = %record.id, "the sandbox's container was paused; marked paused");
                        return;
                    }
                    tracing::warn!(sandbox_id = %record.id, %error, "heartbeat failed; the container is still there");
                    return;
                }
                if record.pooled {
                    let _ = self.remove(record, EndReason::Lost).await;
                } else {
                    let why = match &record.container_id {
                        Some(container_id) => self.backend.lost_reason(container_id).await,
                        None => None,
                    };
                    let why = why.unwrap_or_else(|| "the container is gone".to_string());
                    self.mark_lost(record, &why).await;
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
            .set_status(
                &record.id,
                SandboxStatus::Lost,
                Some(why),
                Some(self.clock.now_ms()),
            )
            .await;
        self.activity.forget(&record.id);
        self.pool.forget(&record.id);
        self.metrics.sandbox_ended(EndReason::Lost);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::sandboxes::CreateSpec;
    use crate::sessions::Authority;
    use crate::testing::harness::OWNER;
    use crate::testing::{Harness, Step};

    fn timeouts(idle: i64, lifetime: i64) -> CreateSpec {
        CreateSpec {
            idle_timeout_secs: Some(idle),
            max_lifetime_secs: Some(lifetime),
            ..CreateSpec::default()
        }
    }

    async fn create(h: &Harness, spec: CreateSpec) -> SandboxRecord {
        h.sandboxes.create(OWNER, spec).await.expect("create").0
    }

    #[tokio::test]
    async fn expired_and_idle_sandboxes_are_reaped_exactly_once() {
        let h = Harness::new().await;
        let idle = create(&h, timeouts(30, 3600)).await;
        let short = create(&h, timeouts(600, 60)).await;
        let kept = create(&h, timeouts(600, 3600)).await;

        h.clock.advance(Duration::from_secs(29));
        h.sandboxes.reap_once().await.unwrap();
        assert_eq!(h.rows().await.len(), 3, "nothing is due yet");

        h.clock.advance(Duration::from_secs(1));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(&idle.id).await.is_none());
        assert_eq!(h.ended(EndReason::Idle), 1);

        h.clock.advance(Duration::from_secs(30));
        h.sandboxes.reap_once().await.unwrap();
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(&short.id).await.is_none());
        assert_eq!(h.ended(EndReason::Lifetime), 1);
        assert_eq!(h.ended(EndReason::Idle), 1);

        assert!(h.row(&kept.id).await.is_some());
        assert_eq!(h.platform.calls(Step::Remove), 2);
        assert_eq!(
            h.platform.removed(),
            vec![idle.container_id.unwrap(), short.container_id.unwrap()]
        );
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn activity_open_sessions_and_work_in_flight_hold_off_idle_reaping() {
        let h = Harness::new().await;
        let sandbox = create(&h, timeouts(30, 3600)).await;
        let id = sandbox.id.as_str();

        // A proxied call restarts the idle clock.
        h.clock.advance(Duration::from_secs(20));
        h.sandboxes.activity.touch(id);
        h.clock.advance(Duration::from_secs(20));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(id).await.is_some(), "20 s idle of 30");

        // An open session holds it however long it stays open, and counts until it closes.
        let hold = h.sandboxes.activity.hold(id);
        h.clock.advance(Duration::from_secs(300));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(id).await.is_some(), "a session is open");
        drop(hold);
        h.clock.advance(Duration::from_secs(29));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(id).await.is_some(), "29 s since the session closed");

        // Work in flight inside the sandbox, reported by the heartbeat, is activity, and the
        // idle clock is written to the row (so a restart keeps it).
        h.platform.set_in_flight(id, 1);
        h.sandboxes.heartbeat_once().await.unwrap();
        // Written by the activity writer, as every replica's activity is.
        h.sandboxes.write_activity_once().await;
        let touched = h.clock.now_ms();
        assert_eq!(h.row(id).await.map(|r| r.last_active_at), Some(touched));
        h.platform.set_in_flight(id, 0);
        h.clock.advance(Duration::from_secs(29));
        // The heartbeat itself is not activity.
        h.sandboxes.heartbeat_once().await.unwrap();
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(id).await.is_some(), "29 s since the work in flight");

        h.clock.advance(Duration::from_secs(1));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(id).await.is_none(), "idle for 30 s");
        assert_eq!(h.ended(EndReason::Idle), 1);
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn the_lifetime_ends_a_sandbox_even_with_a_session_open() {
        let h = Harness::new().await;
        let sandbox = create(&h, timeouts(30, 60)).await;
        let _hold = h.sandboxes.activity.hold(&sandbox.id);
        h.clock.advance(Duration::from_secs(60));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(&sandbox.id).await.is_none());
        assert_eq!(h.ended(EndReason::Lifetime), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_reapers_at_once_remove_each_sandbox_once_without_error() {
        let h = Harness::new().await;
        let mut containers = BTreeSet::new();
        for round in 1..=4 {
            for _ in 0..6 {
                let sandbox = create(&h, timeouts(30, 3600)).await;
                containers.insert(sandbox.container_id.unwrap());
            }
            h.clock.advance(Duration::from_secs(30));
            let (first, second) = tokio::join!(
                tokio::spawn({
                    let sandboxes = h.sandboxes.clone();
                    async move { sandboxes.reap_once().await }
                }),
                tokio::spawn({
                    let sandboxes = h.sandboxes.clone();
                    async move { sandboxes.reap_once().await }
                }),
            );
            first.unwrap().unwrap();
            second.unwrap().unwrap();
            assert_eq!(h.ended(EndReason::Idle), 6 * round);
        }
        let removed = h.platform.removed();
        assert_eq!(removed.len(), containers.len(), "{removed:?}");
        assert_eq!(removed.into_iter().collect::<BTreeSet<_>>(), containers);
        assert_eq!(h.platform.calls(Step::Remove), containers.len());
        assert!(h.rows().await.is_empty());
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn removing_with_a_record_read_before_the_sandbox_was_removed_does_nothing() {
        // What a reaper pass that listed the sandboxes before another pass (or a client's
        // delete) removed one of them does with its stale record.
        let h = Harness::new().await;
        let sandbox = h.create().await;
        h.sandboxes.remove(&sandbox, EndReason::Idle).await.unwrap();
        h.sandboxes.remove(&sandbox, EndReason::Idle).await.unwrap();
        assert_eq!(h.platform.calls(Step::Remove), 1);
        assert_eq!(h.ended(EndReason::Idle), 1);
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn a_failed_deletion_is_retried_by_the_reaper() {
        let h = Harness::new().await;
        let sandbox = h.create().await;
        h.platform
            .fail_next(Step::Remove, "the Docker daemon is restarting");

        let error = h
            .sandboxes
            .delete(&sandbox.id, Some(OWNER))
            .await
            .expect_err("the removal fails");

        assert!(error.to_string().contains("restarting"), "{error}");
        assert_eq!(
            h.row(&sandbox.id).await.map(|r| r.status),
            Some(SandboxStatus::Deleting)
        );
        assert!(h.platform.container_of(&sandbox.id).is_some());
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(&sandbox.id).await.is_none());
        assert!(h.platform.container_of(&sandbox.id).is_none());
        assert_eq!(h.ended(EndReason::Deleted), 1);
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn the_heartbeat_moves_a_sandbox_between_ready_and_degraded() {
        let h = Harness::new().await;
        let sandbox = h.create().await;
        h.platform
            .set_not_ready(&sandbox.id, &["chromium (starting)", "socat (backoff)"]);

        h.sandboxes.heartbeat_once().await.unwrap();
        let degraded = h.row(&sandbox.id).await.unwrap();
        assert_eq!(degraded.status, SandboxStatus::Degraded);
        assert_eq!(
            degraded.error.as_deref(),
            Some("not ready: chromium (starting), socat (backoff)")
        );
        // Still reachable through the proxies, so it can be inspected and repaired.
        h.sandboxes
            .get_ready(&sandbox.id, Some(OWNER))
            .await
            .unwrap();

        h.platform.set_not_ready(&sandbox.id, &[]);
        h.sandboxes.heartbeat_once().await.unwrap();
        let recovered = h.row(&sandbox.id).await.unwrap();
        assert_eq!(
            (recovered.status, recovered.error),
            (SandboxStatus::Ready, None)
        );
        h.assert_nothing_leaks().await;
    }

    /// A desktop session opened by a web console sign-in ends at the next sweep once that
    /// sign-in ended (another instance signed it out, or it expired); the others stay.
    #[tokio::test]
    async fn the_sweeper_ends_sessions_of_an_ended_console_sign_in() {
        let h = Harness::new().await;
        let sandbox = h.create().await;
        let now = h.clock.now_ms();
        for (id, ended_at) in [("con-live", None), ("con-out", Some(now))] {
            h.store
                .insert_console_session(&crate::db::ConsoleSessionRecord {
                    id: id.into(),
                    secret_hash: format!("hash-{id}"),
                    key_id: OWNER.into(),
                    created_at: now,
                    expires_at: now + 3_600_000,
                    ended_at,
                })
                .await
                .unwrap();
        }
        let open = |console: &str| {
            h.sandboxes.sessions().open(Authority {
                sandbox_id: sandbox.id.clone(),
                key_id: None,
                token_id: None,
                expires_at: None,
                console_session: Some(console.into()),
                kind: "vnc",
            })
        };
        let mut live = open("con-live");
        let mut signed_out = open("con-out");
        h.sandboxes.sweep_sessions_once().await.unwrap();
        assert_eq!(signed_out.ended().await, "signed out of the console");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), live.ended())
                .await
                .is_err(),
            "the live sign-in's session stays"
        );
        h.clock.advance(Duration::from_secs(3601));
        h.sandboxes.sweep_sessions_once().await.unwrap();
        assert_eq!(live.ended().await, "signed out of the console");
    }

    #[tokio::test]
    async fn a_failed_heartbeat_marks_a_sandbox_lost_only_once_its_container_is_gone() {
        let h = Harness::new().await;
        let sandbox = h.create().await;
        let mut session = h.sandboxes.sessions().open(Authority {
            sandbox_id: sandbox.id.clone(),
            key_id: Some(OWNER.into()),
            token_id: None,
            expires_at: None,
            console_session: None,
            kind: "api",
        });

        // No answer, but the container still runs: nothing changes.
        h.platform.fail_next(Step::Activity, "timed out");
        h.sandboxes.heartbeat_once().await.unwrap();
        assert_eq!(
            h.row(&sandbox.id).await.unwrap().status,
            SandboxStatus::Ready
        );

        // The container stopped, but the platform does not answer: decided later.
        h.platform.kill(&sandbox.id);
        h.platform
            .fail_next(Step::Inspect, "the Docker socket is gone");
        h.sandboxes.heartbeat_once().await.unwrap();
        assert_eq!(
            h.row(&sandbox.id).await.unwrap().status,
            SandboxStatus::Ready
        );

        // The platform says the container stopped: lost, its container removed, its sessions
        // ended.
        h.sandboxes.heartbeat_once().await.unwrap();
        let lost = h.row(&sandbox.id).await.unwrap();
        assert_eq!(lost.status, SandboxStatus::Lost);
        assert_eq!(lost.error.as_deref(), Some("the container is gone"));
        assert_eq!(lost.ended_at, Some(h.clock.now_ms()));
        assert!(h.platform.container_of(&sandbox.id).is_none());
        let why = tokio::time::timeout(Duration::from_secs(5), session.ended())
            .await
            .expect("the session ends");
        assert_eq!(why, "the sandbox was lost");
        assert_eq!(h.ended(EndReason::Lost), 1);
        h.assert_nothing_leaks().await;

        // The record stays for the retention period, then goes, counted once.
        h.clock.advance(Duration::from_secs(3599));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(&sandbox.id).await.is_some());
        h.clock.advance(Duration::from_secs(1));
        h.sandboxes.reap_once().await.unwrap();
        assert!(h.row(&sandbox.id).await.is_none());
        assert_eq!(h.ended(EndReason::Lost), 1);
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn a_pool_member_whose_container_vanished_is_removed_not_kept_as_lost() {
        let h = Harness::with_flags(&["--pool-size", "1"]).await;
        let member = h.fill_pool(1).await.remove(0);
        h.platform.vanish(&member.id);
        h.sandboxes.heartbeat_once().await.unwrap();
        assert!(h.row(&member.id).await.is_none());
        assert!(h.sandboxes.pool.ready_ids().is_empty());
        h.assert_nothing_leaks().await;
    }
}
