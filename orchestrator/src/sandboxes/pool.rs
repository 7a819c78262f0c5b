//! The warm pool: ready sandboxes of the default image waiting to be claimed.
//!
//! A member is created like any sandbox (same limits, same readiness check) with `pooled = 1`
//! and no owner, and joins the queue only once ready, so a claim never hands out a container
//! that is still starting. A claim pops a member and, in one conditional `UPDATE`, gives it an
//! owner, metadata and timeouts; the refill task then starts a replacement at once. Members
//! get heartbeats like every sandbox; one found dead is dropped from the queue.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::{SandboxError, Sandboxes};
use crate::db::{SandboxRecord, SandboxStatus};
use crate::secret::{new_id, now_ms};

/// Ready members of one image, and how many are being made.
pub struct Pool {
    image: String,
    target: usize,
    ready: Mutex<VecDeque<SandboxRecord>>,
    filling: AtomicUsize,
    /// Failed creations since the refill loop last looked (for its back-off).
    failures: AtomicUsize,
    wake: Notify,
}

impl Pool {
    pub fn new(image: String, target: usize) -> Self {
        Self {
            image,
            target,
            ready: Mutex::new(VecDeque::new()),
            filling: AtomicUsize::new(0),
            failures: AtomicUsize::new(0),
            wake: Notify::new(),
        }
    }

    pub fn image(&self) -> &str {
        &self.image
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
        if let Ok(mut ready) = self.ready.lock() {
            ready.push_back(record);
        }
    }

    /// Drops a member that went away.
    pub fn forget(&self, id: &str) {
        if let Ok(mut ready) = self.ready.lock() {
            ready.retain(|r| r.id != id);
        }
    }

    /// Takes a ready member for a client: `make(id)` builds the claimed record (owner,
    /// metadata, timeouts). `None` when the pool is empty.
    pub async fn claim(
        &self,
        service: &Sandboxes,
        make: impl Fn(String) -> SandboxRecord,
    ) -> Result<Option<SandboxRecord>, SandboxError> {
        loop {
            let member = self.ready.lock().ok().and_then(|mut r| r.pop_front());
            let Some(member) = member else {
                self.wake.notify_one();
                return Ok(None);
            };
            self.wake.notify_one();
            let mut claimed = make(member.id.clone());
            if service.store.claim_pooled(&claimed).await? {
                claimed.container_id = member.container_id;
                claimed.address = member.address;
                claimed.legacy_key = member.legacy_key;
                claimed.ready_at = member.ready_at;
                return Ok(Some(claimed));
            }
            // Gone meanwhile (reaped as dead): try the next one.
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
        loop {
            let missing = pool
                .target
                .saturating_sub(pool.ready_count() + pool.filling.load(Ordering::Acquire));
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
            let _ = tokio::time::timeout(Duration::from_secs(5), pool.wake.notified()).await;
        }
    }
}

impl Sandboxes {
    /// Creates one ready, unowned pool member.
    async fn create_pool_member(&self) -> Result<SandboxRecord, SandboxError> {
        let now = now_ms();
        let far = now + self.settings.lifetime_cap_secs * 1000;
        let record = SandboxRecord {
            id: new_id("sbx-"),
            owner_key_id: None,
            image: self.pool.image.clone(),
            status: SandboxStatus::Creating,
            pooled: true,
            container_id: None,
            address: None,
            instance: Some(self.instance.clone()),
            legacy_key: None,
            resolution: None,
            env: Default::default(),
            metadata: Default::default(),
            idle_timeout_secs: self.settings.idle_timeout_secs,
            max_lifetime_secs: self.settings.lifetime_cap_secs,
            created_at: now,
            ready_at: None,
            expires_at: far,
            last_active_at: now,
            ended_at: None,
            error: None,
        };
        self.start(record).await
    }
}
