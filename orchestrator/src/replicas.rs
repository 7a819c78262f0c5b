//! This orchestrator among its replicas: any number of processes may serve one installation
//! (one `--instance`, one database) side by side (issue 25).
//!
//! - **Identity.** Each process is a replica (`--replica`, default an id kept in the data
//!   directory, so a restart with the same data is the same replica). Its row in the database
//!   is written at start and every [`BEAT`]; a replica not seen for [`GONE_AFTER_MS`] is gone,
//!   and what it was doing (a create, a delete) may be undone or finished by another.
//! - **Duties.** What only one process may do at a time (the reaper, the heartbeat, the warm
//!   pool's refill) is done by the holder of the duty's lease ([`Duties`]); a
//!   lease lasts one heartbeat interval ([`Duties::ttl_for`]), is renewed as the duty runs
//!   (when a third of it is gone), and is taken over by another replica once its holder stops
//!   renewing it (at once when the holder stops cleanly: it gives its leases up). One interval
//!   because a sandbox stops itself after three heartbeats missed (its dead-man switch): the
//!   heartbeat of a replica that died is taken over well within that.
//!
//! Everything else is per request and works on any replica: the state is in the database,
//! and the files (run artifacts, kept homes, snapshots, profiles) in the data directory, which
//! replicas share (a shared volume), each with its own `--replica` then.

use std::collections::HashMap;
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::db::{Store, StoreError};

/// How often a replica says it is alive.
pub const BEAT: Duration = Duration::from_secs(2);
/// A replica not seen for this long is gone.
pub const GONE_AFTER_MS: i64 = 10_000;

/// The file in the data directory that keeps the default replica id.
const REPLICA_ID_FILE: &str = "replica_id";

/// What one replica at a time does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Duty {
    /// Removing expired, idle and deleted sandboxes; undoing creates of gone replicas.
    Reaper,
    /// Asking every live sandbox whether it is alive.
    Heartbeat,
    /// Keeping the warm pool full.
    PoolRefill,
}

impl Duty {
    pub const ALL: [Duty; 3] = [Self::Reaper, Self::Heartbeat, Self::PoolRefill];

    /// The lease's name in the database.
    pub fn lease(self) -> &'static str {
        match self {
            Self::Reaper => "reaper",
            Self::Heartbeat => "heartbeat",
            Self::PoolRefill => "pool_refill",
        }
    }
}

/// Whether `id` may name a replica: letters, digits, `.`, `_`, `-`; 1 to 64 of them.
pub fn is_valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The replica id: `configured`, or the one kept in `data_dir` (made at the first start).
pub fn resolve_id(configured: Option<&str>, data_dir: &Path) -> std::io::Result<String> {
    if let Some(id) = configured {
        return Ok(id.to_string());
    }
    let file = data_dir.join(REPLICA_ID_FILE);
    match std::fs::read_to_string(&file) {
        Ok(kept) if is_valid_id(kept.trim()) => return Ok(kept.trim().to_string()),
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} does not hold a replica id", file.display()),
            ));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let id = crate::secret::new_id("rep");
    std::fs::write(&file, format!("{id}\n"))?;
    Ok(id)
}

/// The duties' leases as this replica holds them.
pub struct Duties {
    store: Store,
    replica: String,
    clock: Arc<dyn Clock>,
    /// How long a lease lasts without renewal.
    ttl: Duration,
    /// Per duty held: until when (this process's clock) it is surely still ours.
    held: Mutex<HashMap<Duty, Instant>>,
}

impl Duties {
    pub fn new(store: Store, replica: String, clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Self {
            store,
            replica,
            clock,
            ttl,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// A lease's life for a heartbeat interval: the interval, within 2 to 15 seconds.
    pub fn ttl_for(heartbeat: Duration) -> Duration {
        heartbeat.clamp(Duration::from_secs(2), Duration::from_secs(15))
    }

    /// How often a replica that does not hold a duty looks whether it is free.
    pub fn retry_every(&self) -> Duration {
        self.ttl / 3
    }

    fn held_until(&self, duty: Duty) -> Option<Instant> {
        self.held.lock().ok()?.get(&duty).copied()
    }

    fn set_held(&self, duty: Duty, until: Option<Instant>) {
        if let Ok(mut held) = self.held.lock() {
            match until {
                Some(until) => held.insert(duty, until),
                None => held.remove(&duty),
            };
        }
    }

    /// Whether this replica should do `duty` now: it holds the lease (renewed when due) or has
    /// just taken it. A database error counts as "not now" once the lease may have run out.
    pub async fn mine(&self, duty: Duty) -> bool {
        let now = self.clock.now();
        let held = self.held_until(duty);
        if let Some(until) = held
            && until.saturating_duration_since(now) > self.ttl * 2 / 3
        {
            return true;
        }
        let now_ms = self.clock.now_ms();
        let ttl_ms = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        match self
            .store
            .hold_lease(duty.lease(), &self.replica, now_ms, now_ms + ttl_ms)
            .await
        {
            Ok(true) => {
                if held.is_none() {
                    tracing::info!(duty = duty.lease(), replica = %self.replica, "took the duty");
                }
                self.set_held(duty, Some(now + self.ttl));
                true
            }
            Ok(false) => {
                if held.is_some() {
                    tracing::warn!(duty = duty.lease(), replica = %self.replica, "another replica took the duty");
                }
                self.set_held(duty, None);
                false
            }
            Err(error) => {
                let still =
                    held.is_some_and(|until| until.saturating_duration_since(now) > self.ttl / 3);
                tracing::warn!(duty = duty.lease(), %error, still, "renewing the duty's lease failed");
                if !still {
                    self.set_held(duty, None);
                }
                still
            }
        }
    }

    /// Gives up every duty this replica holds, so a peer takes them at once (a clean stop).
    pub async fn release_all(&self) {
        for duty in Duty::ALL {
            if self.held_until(duty).is_some() {
                let _ = self.store.release_lease(duty.lease(), &self.replica).await;
                self.set_held(duty, None);
            }
        }
    }

    /// The other replicas seen lately (alive, as far as the database knows).
    pub async fn live_peers(&self) -> Result<HashSet<String>, StoreError> {
        let since = self.clock.now_ms() - GONE_AFTER_MS;
        Ok(self
            .store
            .replicas()
            .await?
            .into_iter()
            .filter(|r| r.seen_at >= since && r.id != self.replica)
            .map(|r| r.id)
            .collect())
    }

    /// Every replica seen lately, by id, with the duties each holds now (`GET /v1/cluster`).
    pub async fn roster(&self) -> Result<Vec<ReplicaStatus>, StoreError> {
        let now = self.clock.now_ms();
        let mut holders: HashMap<String, Vec<&'static str>> = HashMap::new();
        for duty in Duty::ALL {
            if let Some(holder) = self.store.lease_holder(duty.lease(), now).await? {
                holders.entry(holder).or_default().push(duty.lease());
            }
        }
        Ok(self
            .store
            .replicas()
            .await?
            .into_iter()
            .filter(|r| r.seen_at >= now - GONE_AFTER_MS)
            .map(|r| ReplicaStatus {
                duties: holders.remove(&r.id).unwrap_or_default(),
                this: r.id == self.replica,
                id: r.id,
                started_at: r.started_at,
                seen_at: r.seen_at,
            })
            .collect())
    }

    /// Whether work recorded as `replica`'s is someone else's in progress: that replica is
    /// another one, and alive. Work of this replica (an earlier life's, at start) or of a gone
    /// one, or unattributed, is for this replica to finish or undo.
    pub fn in_progress_elsewhere(&self, replica: Option<&str>, peers: &HashSet<String>) -> bool {
        replica.is_some_and(|r| r != self.replica && peers.contains(r))
    }
}

/// A live replica and what it does for all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    pub id: String,
    /// When it started and was last seen (Unix ms).
    pub started_at: i64,
    pub seen_at: i64,
    /// The leases it holds ([`Duty::lease`]), in [`Duty::ALL`]'s order.
    pub duties: Vec<&'static str>,
    /// Whether it is this process.
    pub this: bool,
}

/// Registers this replica, then says it is alive every [`BEAT`] until the process ends. A
/// second process started with the same replica id displaces this one: logged as an error at
/// every beat (the two would undo each other's work).
pub async fn beat_forever(store: Store, replica: String, boot: String, clock: Arc<dyn Clock>) {
    let mut tick = tokio::time::interval(BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut beats = 0u32;
    loop {
        tick.tick().await;
        beats = beats.wrapping_add(1);
        match store.beat_replica(&replica, &boot, clock.now_ms()).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::error!(%replica, "another process started as this replica (same --replica or data directory); stop one of them");
            }
            Err(error) => tracing::warn!(%replica, %error, "the replica's beat failed"),
        }
        // Rows of replicas gone for a day are only clutter (looked for once a minute).
        if beats % 30 == 1 {
            let _ = store.forget_replicas(clock.now_ms() - 86_400_000).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ids_are_short_plain_names() {
        assert!(is_valid_id("orchestrator-1"));
        assert!(is_valid_id("a.b_c"));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id("a b"));
        assert!(!is_valid_id(&"x".repeat(65)));
    }

    #[test]
    fn the_default_replica_id_is_kept_in_the_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let first = resolve_id(None, dir.path()).unwrap();
        assert!(is_valid_id(&first));
        assert_eq!(resolve_id(None, dir.path()).unwrap(), first);
        assert_eq!(resolve_id(Some("named"), dir.path()).unwrap(), "named");
        std::fs::write(dir.path().join(REPLICA_ID_FILE), "not/valid").unwrap();
        assert!(resolve_id(None, dir.path()).is_err());
    }
}
