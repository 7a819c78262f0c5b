//! The warm pool: ready sandboxes of the default image waiting to be claimed.
//!
//! A member is created like any sandbox (same limits, same readiness check) with `pooled = 1`
//! and no owner, and joins the queue only once ready, so a claim never hands out a container
//! that is still starting. A claim pops a member and, in one conditional `UPDATE`, gives it an
//! owner, metadata and timeouts; the refill task then starts a replacement once claims pause
//! for a moment ([`crate::lull`]). Members
//! get heartbeats like every sandbox; one found dead is dropped from the queue, one degraded
//! stays queued (claims skip it) until it recovers.
//!
//! With `--pool-snapshot`, members start from that snapshot instead of the bare image (its
//! image, resolution and home), carry its id in their metadata, and serve only creates that
//! name it (by the key that owns it: a create names only its own snapshots). A member of
//! another source (the flag changed across a restart) is never adopted.
//!
//! With several replicas on one database ([`crate::replicas`]) one of them refills (the
//! [`Duty::PoolRefill`] lease) and every one claims: each keeps its queue in step with the
//! database (every second, and whenever its queue is empty at a claim), and the claim's
//! conditional `UPDATE` lets one replica win a member two of them tried.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::{SandboxError, Sandboxes};
use crate::db::{SandboxRecord, SandboxStatus};
use crate::lull::Lull;
use crate::replicas::Duty;
use crate::secret::new_id;

/// The metadata key naming the snapshot a pool member started from.
pub const POOL_SNAPSHOT_LABEL: &str = "agentbox.pool_snapshot";

/// The snapshot the pool's members start from (`--pool-snapshot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSnapshot {
    pub id: String,
    pub image: String,
    pub resolution: Option<String>,
}

/// Ready members of one image (or one snapshot), and how many are being made.
pub struct Pool {
    image: String,
    /// Set once at start when the members start from a snapshot.
    snapshot: std::sync::OnceLock<PoolSnapshot>,
    target: usize,
    ready: Mutex<VecDeque<SandboxRecord>>,
    filling: AtomicUsize,
    /// Failed creations since the refill loop last looked (for its back-off).
    failures: AtomicUsize,
    wake: Notify,
    /// When claims came (the refill waits for a quiet moment after them).
    claims: Lull,
    /// Members a claim took from the queue lately (and when): a sync with a list read before
    /// the claim was written, which still names them, does not put them back.
    claimed: Mutex<std::collections::HashMap<String, Instant>>,
}

/// How long a claimed member is kept out of syncs (a list read before its claim is older).
const CLAIMED_KEPT_OUT: Duration = Duration::from_secs(5);

/// The refill waits at most this long for a quiet moment.
const REFILL_MAX_WAIT: Duration = Duration::from_secs(1);

/// How often a replica that does not refill reads the members its peer made.
const FOLLOWER_SYNC: Duration = Duration::from_secs(1);

impl Pool {
    pub fn new(image: String, target: usize) -> Self {
        Self {
            image,
            snapshot: std::sync::OnceLock::new(),
            target,
            ready: Mutex::new(VecDeque::new()),
            filling: AtomicUsize::new(0),
            failures: AtomicUsize::new(0),
            wake: Notify::new(),
            claims: Lull::new(),
            claimed: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The image of the members: the snapshot's, when they start from one.
    pub fn image(&self) -> &str {
        self.snapshot.get().map_or(&self.image, |s| &s.image)
    }

    /// The snapshot the members start from, if any.
    pub fn snapshot(&self) -> Option<&PoolSnapshot> {
        self.snapshot.get()
    }

    /// The members' screen size (`None`: the default).
    pub fn resolution(&self) -> Option<&str> {
        self.snapshot.get().and_then(|s| s.resolution.as_deref())
    }

    /// Whether a pool member's row is of this pool's making (image and source), so it may be
    /// adopted at start.
    pub fn made(&self, member: &SandboxRecord) -> bool {
        member.image == self.image()
            && member.metadata.get(POOL_SNAPSHOT_LABEL).map(String::as_str)
                == self.snapshot().map(|s| s.id.as_str())
    }

    pub fn target(&self) -> usize {
        self.target
    }

    /// Ready members now.
    pub fn ready_count(&self) -> usize {
        self.ready.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Adds a ready member (after creation, or adopted at start).
    pub fn push(&self, record: SandboxRecord) {
        if let Ok(mut ready) = self.ready.lock()
            && !ready.iter().any(|r| r.id == record.id)
        {
            ready.push_back(record);
        }
    }

    /// The ids of the queued members, in claim order.
    #[cfg(test)]
    pub(crate) fn ready_ids(&self) -> Vec<String> {
        self.ready
            .lock()
            .map(|r| r.iter().map(|m| m.id.clone()).collect())
            .unwrap_or_default()
    }

    /// Makes the queue what the database holds (`members`: every live member of this
    /// instance, oldest first): members a peer made join it, members claimed or removed
    /// elsewhere leave it; the queued ones keep their order. Members of another source are not
    /// this pool's.
    pub fn sync(&self, members: Vec<SandboxRecord>) {
        let claimed: std::collections::HashSet<String> = match self.claimed.lock() {
            Ok(mut claimed) => {
                claimed.retain(|_, at| at.elapsed() < CLAIMED_KEPT_OUT);
                claimed.keys().cloned().collect()
            }
            Err(_) => std::collections::HashSet::new(),
        };
        let members: Vec<SandboxRecord> = members
            .into_iter()
            .filter(|m| self.made(m) && !claimed.contains(&m.id))
            .collect();
        let Ok(mut ready) = self.ready.lock() else {
            return;
        };
        let present: std::collections::HashSet<&str> =
            members.iter().map(|m| m.id.as_str()).collect();
        // A member a claim could not take went back to the queue: it stays.
        ready.retain(|r| present.contains(r.id.as_str()) || claimed.contains(&r.id));
        let queued: std::collections::HashSet<String> =
            ready.iter().map(|r| r.id.clone()).collect();
        for member in members {
            if !queued.contains(&member.id) {
                ready.push_back(member);
            }
        }
    }

    /// Reads the members from the database into the queue ([`Pool::sync`]).
    async fn sync_from(&self, service: &Sandboxes) -> Result<(), SandboxError> {
        let members = service.store.pool_members(&service.instance).await?;
        self.sync(members);
        Ok(())
    }

    /// Drops a member that went away.
    pub fn forget(&self, id: &str) {
        if let Ok(mut ready) = self.ready.lock() {
            ready.retain(|r| r.id != id);
        }
    }

    /// Takes a ready member for a client: `make(id)` builds the claimed record (owner,
    /// metadata, timeouts). `None` when no member is ready. With a `limit`, the owner's live
    /// sandboxes are counted by the claim's own write ([`SandboxError::Quota`] when it has
    /// `limit` already), so a claim is one round trip to the database.
    ///
    /// A member that cannot be claimed now but is still a live member (degraded: sandboxd
    /// reported a program not ready) goes back to the end of the queue, to be claimed once it
    /// recovers; one that is gone is dropped. A member whose claim could not be written stays
    /// first in the queue.
    pub async fn claim(
        &self,
        service: &Sandboxes,
        limit: Option<usize>,
        make: impl Fn(String) -> SandboxRecord,
    ) -> Result<Option<SandboxRecord>, SandboxError> {
        let sql_limit = limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        if self.ready_count() == 0 && self.target > 0 {
            // Another replica may have made members since this one last looked.
            self.sync_from(service).await?;
        }
        // Each member queued now is tried at most once.
        let mut tries = self.ready_count();
        while tries > 0 {
            tries -= 1;
            let member = self.ready.lock().ok().and_then(|mut r| r.pop_front());
            self.claims.busy();
            service.backend.busy();
            // The refill task looks again (after the pop, so it sees the gap).
            self.wake.notify_one();
            let Some(member) = member else {
                break;
            };
            if let Ok(mut claimed) = self.claimed.lock() {
                claimed.insert(member.id.clone(), Instant::now());
            }
            let mut claimed = make(member.id.clone());
            match service.store.claim_pooled(&claimed, sql_limit).await {
                Ok(true) => {
                    claimed.container_id = member.container_id;
                    claimed.address = member.address;
                    claimed.legacy_key = member.legacy_key;
                    claimed.ready_at = member.ready_at;
                    return Ok(Some(claimed));
                }
                Ok(false) => {
                    let row = match service.store.sandbox(&member.id).await {
                        Ok(row) => row,
                        Err(error) => {
                            self.push_front(member);
                            return Err(error.into());
                        }
                    };
                    match row {
                        Some(r) if r.pooled && r.status == SandboxStatus::Ready => {
                            // The member was there to take: the key's quota refused the claim.
                            self.push_front(member);
                            if let (Some(limit), Some(owner)) =
                                (limit, claimed.owner_key_id.as_deref())
                            {
                                let live = service.store.count_live_sandboxes(owner).await?;
                                if live >= limit as i64 {
                                    return Err(SandboxError::Quota { live, limit });
                                }
                            }
                        }
                        Some(r) if r.pooled && r.status.is_live() => self.push(member),
                        // Gone meanwhile (removed as dead): try the next one.
                        _ => {}
                    }
                }
                Err(error) => {
                    self.push_front(member);
                    return Err(error.into());
                }
            }
        }
        self.wake.notify_one();
        Ok(None)
    }

    /// Puts a member back at the head of the queue.
    fn push_front(&self, record: SandboxRecord) {
        if let Ok(mut ready) = self.ready.lock() {
            ready.push_front(record);
        }
    }

    /// Keeps the pool full until the process ends. A failed creation backs off, so a broken
    /// image does not turn into a tight loop.
    pub async fn refill_forever(service: Arc<Sandboxes>) {
        let pool = &service.pool;
        if pool.target == 0 {
            return;
        }
        let mut backoff = Duration::from_secs(1);
        let missing_now = || {
            pool.target
                .saturating_sub(pool.ready_count() + pool.filling.load(Ordering::Acquire))
        };
        loop {
            // One replica refills (the duty's holder); every replica claims, from a queue
            // kept in step with the database.
            if let Err(error) = pool.sync_from(&service).await {
                tracing::warn!(%error, "warm pool: reading the members failed");
            }
            if !service.duties.mine(Duty::PoolRefill).await {
                service.metrics.pool_ready.set(pool.ready_count() as i64);
                let _ = tokio::time::timeout(FOLLOWER_SYNC, pool.wake.notified()).await;
                continue;
            }
            // Starting a member is kernel work on every core (namespaces, a veth pair, iptables
            // rules, the container's processes), and claims that come in a burst would wait
            // behind it for a core: each claim used to set off its member's start at once, and
            // the burst's later claims took up to 100 ms (`bench/RESULTS.md`). So while the pool
            // still has members to hand out, the refill waits for a quiet moment (bounded);
            // an empty pool is refilled at once (its claims start cold anyway).
            if missing_now() > 0 {
                let waiting_since = Instant::now();
                while pool.ready_count() > 0 {
                    match pool.claims.remaining(waiting_since, REFILL_MAX_WAIT) {
                        Some(wait) => tokio::time::sleep(wait).await,
                        None => break,
                    }
                }
            }
            // Members a peer is still making count too (the duty may just have changed hands).
            let missing = match service.store.count_pool_members(&service.instance).await {
                Ok(members) => {
                    let members = usize::try_from(members).unwrap_or(usize::MAX);
                    missing_now().min(pool.target.saturating_sub(members))
                }
                Err(error) => {
                    tracing::warn!(%error, "warm pool: counting the members failed");
                    0
                }
            };
            for _ in 0..missing {
                pool.filling.fetch_add(1, Ordering::AcqRel);
                let service = service.clone();
                tokio::spawn(async move {
                    let result = service.create_pool_member().await;
                    service.pool.filling.fetch_sub(1, Ordering::AcqRel);
                    match result {
                        Ok(record) => {
                            service.pool.push(record);
                            service
                                .metrics
                                .pool_ready
                                .set(service.pool.ready_count() as i64);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "warm pool: creating a member failed");
                            service.pool.failures.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                    service.pool.wake.notify_one();
                });
            }
            service.metrics.pool_ready.set(pool.ready_count() as i64);
            if pool.failures.swap(0, Ordering::AcqRel) > 0 {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            } else if missing == 0 {
                backoff = Duration::from_secs(1);
            }
            // Woken by a claim here, or after a while to see claims made by peers.
            let _ = tokio::time::timeout(FOLLOWER_SYNC, pool.wake.notified()).await;
        }
    }
}

impl Sandboxes {
    /// Makes the pool's members start from `--pool-snapshot`, when it is given: a whole
    /// snapshot kept by this instance (an error naming the flag otherwise). Called once at
    /// start, before reconcile adopts members.
    pub async fn use_pool_snapshot(&self) -> Result<(), SandboxError> {
        use crate::db::SnapshotStatus;
        let Some(id) = self.settings.pool_snapshot.as_deref() else {
            return Ok(());
        };
        let refuse =
            |why: String| SandboxError::Invalid(crate::validate::invalid("--pool-snapshot", why));
        let snapshot = self
            .store
            .snapshot(id)
            .await?
            .ok_or_else(|| refuse(format!("no snapshot {id}")))?;
        if snapshot.status != SnapshotStatus::Ready || snapshot.transient {
            return Err(refuse(format!(
                "snapshot {id} is not a whole, kept snapshot"
            )));
        }
        if snapshot.instance.as_deref() != Some(self.instance.as_str()) {
            return Err(refuse(format!(
                "snapshot {id} is kept by another orchestrator instance"
            )));
        }
        let _ = self.pool.snapshot.set(PoolSnapshot {
            id: snapshot.id,
            image: snapshot.image,
            resolution: snapshot.resolution,
        });
        Ok(())
    }

    /// Creates one ready, unowned pool member.
    pub(crate) async fn create_pool_member(&self) -> Result<SandboxRecord, SandboxError> {
        let mut restore = super::StartWith::default();
        let mut metadata = std::collections::BTreeMap::new();
        if let Some(snapshot) = self.pool.snapshot() {
            restore.home = Some(
                self.homes
                    .path(crate::homes::Kind::Snapshot, &snapshot.id)
                    .map_err(|e| SandboxError::Task(e.to_string()))?,
            );
            metadata.insert(POOL_SNAPSHOT_LABEL.to_string(), snapshot.id.clone());
        }
        let now = self.clock.now_ms();
        let far = now + self.settings.lifetime_cap_secs * 1000;
        let record = SandboxRecord {
            id: new_id("sbx-"),
            owner_key_id: None,
            image: self.pool.image().to_string(),
            status: SandboxStatus::Creating,
            pooled: true,
            container_id: None,
            address: None,
            instance: Some(self.instance.clone()),
            legacy_key: None,
            resolution: self.pool.resolution().map(str::to_string),
            env: Default::default(),
            metadata,
            idle_timeout_secs: self.settings.idle_timeout_secs,
            max_lifetime_secs: self.settings.lifetime_cap_secs,
            created_at: now,
            ready_at: None,
            expires_at: far,
            last_active_at: now,
            ended_at: None,
            error: None,
            paused_at: None,
            auto_resume: false,
            idle_pause_secs: self.settings.idle_pause_secs,
            hibernated_at: None,
            idle_hibernate_secs: self.settings.idle_hibernate_secs,
            replica: Some(self.replica.clone()),
            control_open: true,
            control_seq: 0,
        };
        self.start(record, restore).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    use crate::sandboxes::{CreateSpec, Source};
    use crate::testing::Harness;
    use crate::testing::harness::{INSTANCE, OWNER};

    /// What `create` builds for a claim (owner, timeouts), for claims made directly.
    fn claimed(h: &Harness, id: String) -> SandboxRecord {
        let mut record = h.record(&id, None);
        record.metadata = BTreeMap::from([("claimed".to_string(), "yes".to_string())]);
        record
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_concurrent_claims_never_get_the_same_member() {
        let h = Harness::with_flags(&["--pool-size", "2"]).await;
        let members = h.fill_pool(2).await;

        let (first, second) = tokio::join!(
            h.sandboxes.create(OWNER, CreateSpec::default()),
            h.sandboxes.create(OWNER, CreateSpec::default()),
        );
        let (first, second) = (first.unwrap(), second.unwrap());

        assert_eq!((first.1, second.1), (Source::Pool, Source::Pool));
        assert_ne!(first.0.id, second.0.id);
        let mut got = vec![first.0.id.clone(), second.0.id.clone()];
        got.sort();
        let mut expected: Vec<_> = members.iter().map(|m| m.id.clone()).collect();
        expected.sort();
        assert_eq!(got, expected);
        for claimed in [&first.0, &second.0] {
            let row = h.row(&claimed.id).await.unwrap();
            assert!(!row.pooled);
            assert_eq!(row.owner_key_id.as_deref(), Some(OWNER));
            assert_eq!(claimed.container_id, row.container_id);
            assert!(claimed.container_id.is_some());
        }
        // The pool is empty now: the next create starts a container.
        let (cold, source) = h
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .unwrap();
        assert_eq!(source, Source::Cold);
        assert!(!members.iter().any(|m| m.id == cold.id));
        h.assert_nothing_leaks().await;
    }

    /// The key's quota is counted by the claim's own write (issue 28 §4: one round trip): at
    /// the limit, a claim is refused with the quota error and the member stays in the pool,
    /// still a member, for the next caller.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_over_the_keys_quota_leaves_the_member_in_the_pool() {
        let h = Harness::with_flags(&["--pool-size", "3", "--max-sandboxes-per-key", "2"]).await;
        let members = h.fill_pool(3).await;
        for _ in 0..2 {
            let (_, source) = h
                .sandboxes
                .create(OWNER, CreateSpec::default())
                .await
                .unwrap();
            assert_eq!(source, Source::Pool);
        }
        let refused = h.sandboxes.create(OWNER, CreateSpec::default()).await;
        assert!(
            matches!(refused, Err(SandboxError::Quota { live: 2, limit: 2 })),
            "{refused:?}"
        );
        let queued: Vec<String> = h
            .sandboxes
            .pool
            .ready
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.id.clone())
            .collect();
        assert_eq!(queued.len(), 1);
        assert!(members.iter().any(|m| m.id == queued[0]));
        let row = h.row(&queued[0]).await.unwrap();
        assert!(row.pooled && row.owner_key_id.is_none(), "{row:?}");
        // Another key still gets it.
        let (other, source) = h
            .sandboxes
            .create("another-key", CreateSpec::default())
            .await
            .unwrap();
        assert_eq!(source, Source::Pool);
        assert_eq!(other.id, queued[0]);
    }

    /// A replica's queue follows the database, but a list read before a claim was written
    /// (which still names the member) does not put the claimed member back, and a member the
    /// database no longer lists leaves the queue.
    #[tokio::test]
    async fn a_sync_with_an_older_list_does_not_bring_a_claimed_member_back() {
        let h = Harness::with_flags(&["--pool-size", "2"]).await;
        let members = h.fill_pool(2).await;
        let stale = h.store.pool_members(INSTANCE).await.unwrap();
        assert_eq!(stale.len(), 2);
        let pool = &h.sandboxes.pool;
        let won = pool
            .claim(&h.sandboxes, None, |id| claimed(&h, id))
            .await
            .unwrap()
            .expect("a member");
        pool.sync(stale);
        let left = pool.ready_ids();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_ne!(left[0], won.id);
        // Claimed through another replica meanwhile: gone from the database, gone from here.
        pool.sync(Vec::new());
        assert!(pool.ready_ids().is_empty());
        pool.sync(h.store.pool_members(INSTANCE).await.unwrap());
        assert_eq!(pool.ready_ids(), vec![left[0].clone()]);
        assert!(members.iter().any(|m| m.id == won.id));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_queued_twice_is_still_claimed_once() {
        let h = Harness::with_flags(&["--pool-size", "1"]).await;
        let member = h.fill_pool(1).await.remove(0);
        h.sandboxes.pool.push(member.clone());

        let pool = &h.sandboxes.pool;
        let (first, second) = tokio::join!(
            pool.claim(&h.sandboxes, None, |id| claimed(&h, id)),
            pool.claim(&h.sandboxes, None, |id| claimed(&h, id)),
        );

        let winners: Vec<_> = [first.unwrap(), second.unwrap()]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(winners.len(), 1, "{winners:?}");
        assert_eq!(winners[0].id, member.id);
        assert!(pool.ready_ids().is_empty());
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn a_claim_from_an_empty_pool_or_one_the_pool_cannot_serve_starts_a_container() {
        let h = Harness::with_flags(&["--pool-size", "1"]).await;
        let (record, source) = h
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .unwrap();
        assert_eq!(source, Source::Cold);
        assert!(h.platform.container_of(&record.id).is_some());
        // With a member ready, a request the pool cannot serve still starts its own.
        let member = h.fill_pool(1).await.remove(0);
        let custom = h.create_cold().await;
        assert_ne!(custom.id, member.id);
        assert_eq!(h.sandboxes.pool.ready_ids(), vec![member.id]);
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn a_degraded_member_is_skipped_and_stays_in_the_pool_until_it_recovers() {
        let h = Harness::with_flags(&["--pool-size", "1"]).await;
        let member = h.fill_pool(1).await.remove(0);
        h.platform
            .set_not_ready(&member.id, &["chromium (starting)"]);
        h.sandboxes.heartbeat_once().await.unwrap();

        let (skipped, source) = h
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .unwrap();
        assert_eq!(source, Source::Cold, "a degraded member is not handed out");
        assert_ne!(skipped.id, member.id);
        assert_eq!(h.sandboxes.pool.ready_ids(), vec![member.id.clone()]);

        h.platform.set_not_ready(&member.id, &[]);
        h.sandboxes.heartbeat_once().await.unwrap();
        h.assert_nothing_leaks().await;
        let (claimed, source) = h
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .unwrap();
        assert_eq!((claimed.id, source), (member.id, Source::Pool));
        h.assert_nothing_leaks().await;
    }

    #[tokio::test]
    async fn a_member_removed_while_queued_is_skipped() {
        let h = Harness::with_flags(&["--pool-size", "2"]).await;
        let members = h.fill_pool(2).await;
        // Its row goes (as if another pass removed it) but it is still queued.
        h.store.delete_sandbox(&members[0].id).await.unwrap();
        let (claimed, source) = h
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .unwrap();
        assert_eq!((claimed.id, source), (members[1].id.clone(), Source::Pool));
        assert!(h.sandboxes.pool.ready_ids().is_empty());
    }

    #[tokio::test]
    async fn a_claim_that_cannot_be_written_leaves_the_member_in_the_pool() {
        use sqlx::Connection;
        let h = Harness::with_flags(&["--pool-size", "1"]).await;
        let member = h.fill_pool(1).await.remove(0);
        let mut sqlite = sqlx::SqliteConnection::connect(&h.database_url())
            .await
            .unwrap();
        sqlx::query(
            "CREATE TRIGGER refuse_claims BEFORE UPDATE OF owner_key_id ON sandboxes \
             BEGIN SELECT RAISE(ABORT, 'injected: the disk is full'); END",
        )
        .execute(&mut sqlite)
        .await
        .unwrap();

        let error = h
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .expect_err("the claim fails");

        assert!(error.to_string().contains("injected"), "{error}");
        assert_eq!(h.sandboxes.pool.ready_ids(), vec![member.id.clone()]);
        h.assert_nothing_leaks().await;
        sqlx::query("DROP TRIGGER refuse_claims")
            .execute(&mut sqlite)
            .await
            .unwrap();
        let (claimed, source) = h
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .unwrap();
        assert_eq!((claimed.id, source), (member.id, Source::Pool));
    }
}
