//! The table of code sessions that [`crate::jupyter`] (IPython kernels) and [`crate::nodejs`]
//! (long-lived `node` processes) share: sessions by id, the most that may exist at once, each
//! session's process behind a lock (so executions in one session run one at a time, in order)
//! with its process group readable without that lock (so a delete can stop an execution in
//! flight), last use, idle expiry, and the background task that applies it.
//!
//! A session's kind keeps its own fields in [`CodeSession::meta`] (the kernel's name, the
//! working directory); the process is the kind's own type, [`SessionProcess`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::{Duration, SystemTime};

use supervisor::process::ProcessGroup;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The process a session runs its code in (a kernel, a `node`), leading its own process group.
pub trait SessionProcess: Send + 'static {
    /// Its process group (the process's own pid).
    fn pgid(&self) -> i32;
}

/// One session: what every kind keeps, the kind's own fields and its process.
pub struct CodeSession<M, P> {
    /// The kind's own fields.
    pub meta: M,
    created: (Instant, SystemTime),
    /// Last use, monotonic and wall-clock.
    used: StdMutex<(Instant, SystemTime)>,
    max_idle: StdMutex<Duration>,
    /// The running process (None until started, or once lost), held through an execution.
    pub process: Mutex<Option<P>>,
    /// The running process's group (0: none), readable without the process's lock.
    pgid: AtomicI32,
}

impl<M, P: SessionProcess> CodeSession<M, P> {
    /// A session with no process yet, expired once unused for `max_idle`.
    pub fn new(meta: M, max_idle: Duration) -> Self {
        let now = (Instant::now(), SystemTime::now());
        Self {
            meta,
            created: now,
            used: StdMutex::new(now),
            max_idle: StdMutex::new(max_idle),
            process: Mutex::new(None),
            pgid: AtomicI32::new(0),
        }
    }

    /// Marks the session used now.
    pub fn touch(&self) {
        *lock(&self.used) = (Instant::now(), SystemTime::now());
    }

    /// How long since the last use.
    pub fn idle_for(&self) -> Duration {
        lock(&self.used).0.elapsed()
    }

    /// When it was last used.
    pub fn last_used(&self) -> SystemTime {
        lock(&self.used).1
    }

    /// When it was created.
    pub fn created_at(&self) -> SystemTime {
        self.created.1
    }

    /// How long it has existed.
    pub fn age(&self) -> Duration {
        self.created.0.elapsed()
    }

    /// How long it may stay unused before it expires.
    pub fn max_idle(&self) -> Duration {
        *lock(&self.max_idle)
    }

    pub fn set_max_idle(&self, max_idle: Duration) {
        *lock(&self.max_idle) = max_idle;
    }

    /// Whether an execution (or a start) holds the process.
    pub fn busy(&self) -> bool {
        self.process.try_lock().is_err()
    }

    /// Puts a started process into the session's `slot` (its lock, held by the caller).
    pub fn install<'a>(&self, slot: &'a mut Option<P>, process: P) -> &'a mut P {
        self.pgid.store(process.pgid(), Ordering::Release);
        slot.insert(process)
    }

    /// Drops the process of `slot` (it died or timed out: its state is lost) and kills its
    /// process group; the next execution starts a new one.
    pub fn discard(&self, slot: &mut Option<P>) {
        self.pgid.store(0, Ordering::Release);
        if let Some(process) = slot.take() {
            let group = ProcessGroup::new(process.pgid());
            drop(process);
            group.kill();
        }
    }

    /// Ends the session's process. An execution in flight holds its lock: killing the process
    /// group first makes that execution end (its process died) and let go.
    pub async fn end(&self) {
        let pgid = self.pgid.swap(0, Ordering::AcqRel);
        if pgid > 0 {
            ProcessGroup::new(pgid).kill();
        }
        drop(self.process.lock().await.take());
    }
}

/// The table is full: it holds this many sessions, the most allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full(pub usize);

/// A kind's sessions by id.
pub struct SessionTable<M, P> {
    sessions: StdMutex<HashMap<String, Arc<CodeSession<M, P>>>>,
    max_sessions: usize,
}

impl<M, P> SessionTable<M, P>
where
    M: Send + Sync + 'static,
    P: SessionProcess,
{
    /// An empty table holding at most `max_sessions`.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            sessions: StdMutex::new(HashMap::new()),
            max_sessions,
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<CodeSession<M, P>>>> {
        // Every update of the map is one insert or remove: a poisoned lock still holds a
        // consistent map.
        lock(&self.sessions)
    }

    pub fn get(&self, id: &str) -> Option<Arc<CodeSession<M, P>>> {
        self.map().get(id).cloned()
    }

    /// Every session with its id, in no order.
    pub fn list(&self) -> Vec<(String, Arc<CodeSession<M, P>>)> {
        self.map()
            .iter()
            .map(|(id, session)| (id.clone(), session.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// The session `id`, or a new one made by `make` when there is none and the table has
    /// room; true when it is new.
    pub fn get_or_insert(
        &self,
        id: &str,
        make: impl FnOnce() -> CodeSession<M, P>,
    ) -> Result<(Arc<CodeSession<M, P>>, bool), Full> {
        let mut map = self.map();
        if let Some(existing) = map.get(id) {
            return Ok((existing.clone(), false));
        }
        if map.len() >= self.max_sessions {
            return Err(Full(self.max_sessions));
        }
        let session = Arc::new(make());
        map.insert(id.to_string(), session.clone());
        Ok((session, true))
    }

    /// Starts the process of the new session `id` (so that its first execution is fast); a
    /// process that fails to start takes its session with it.
    pub async fn start<E>(
        &self,
        id: &str,
        session: &CodeSession<M, P>,
        start: impl Future<Output = Result<P, E>>,
    ) -> Result<(), E> {
        let mut slot = session.process.lock().await;
        match start.await {
            Ok(process) => {
                session.install(&mut slot, process);
                Ok(())
            }
            Err(error) => {
                drop(slot);
                self.map().remove(id);
                Err(error)
            }
        }
    }

    /// Removes session `id` and ends its process; false when there is no such session.
    pub async fn delete(&self, id: &str) -> bool {
        let Some(session) = self.map().remove(id) else {
            return false;
        };
        session.end().await;
        true
    }

    /// Removes every session; returns how many there were.
    pub async fn delete_all(&self) -> usize {
        let all: Vec<_> = self.map().drain().map(|(_, session)| session).collect();
        for session in &all {
            session.end().await;
        }
        all.len()
    }

    /// Removes the sessions not executing and unused for longer than their idle time.
    pub async fn expire_idle(&self) -> usize {
        let expired: Vec<_> = {
            let mut map = self.map();
            let ids: Vec<String> = map
                .iter()
                .filter(|(_, s)| !s.busy() && s.idle_for() > s.max_idle())
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for session in &expired {
            session.end().await;
        }
        expired.len()
    }

    /// Expires idle sessions every `period` for as long as the table lives; `kind` names them
    /// in the log.
    pub fn spawn_reaper(self: &Arc<Self>, period: Duration, kind: &'static str) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(table) = weak.upgrade() else {
                    return;
                };
                let n = table.expire_idle().await;
                if n > 0 {
                    tracing::info!(sessions = n, "idle {kind} sessions expired");
                }
            }
        });
    }
}

/// Locks a mutex whose every update is a single assignment, insert or remove, so that a panic
/// elsewhere while it was held cannot have left it inconsistent.
fn lock<T>(mutex: &StdMutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;

    impl SessionProcess for Fake {
        fn pgid(&self) -> i32 {
            0
        }
    }

    fn session(max_idle: Duration) -> CodeSession<&'static str, Fake> {
        CodeSession::new("meta", max_idle)
    }

    #[tokio::test]
    async fn the_table_is_bounded_and_finds_what_it_holds() {
        let table = SessionTable::new(2);
        let (_, new) = table
            .get_or_insert("a", || session(Duration::ZERO))
            .unwrap();
        assert!(new);
        let (a, new) = table
            .get_or_insert("a", || session(Duration::ZERO))
            .unwrap();
        assert!(!new);
        assert_eq!(a.meta, "meta");
        table
            .get_or_insert("b", || session(Duration::ZERO))
            .unwrap();
        assert_eq!(
            table.get_or_insert("c", || session(Duration::ZERO)).err(),
            Some(Full(2))
        );
        assert!(table.delete("a").await);
        assert!(!table.delete("a").await);
        assert_eq!(table.len(), 1);
        assert_eq!(table.delete_all().await, 1);
        assert!(table.is_empty());
    }

    #[tokio::test]
    async fn a_failed_start_removes_the_session() {
        let table = SessionTable::new(4);
        let (s, _) = table
            .get_or_insert("a", || session(Duration::ZERO))
            .unwrap();
        let started = table.start("a", &s, async { Err::<Fake, _>("no") }).await;
        assert_eq!(started, Err("no"));
        assert!(table.get("a").is_none());
        let (s, _) = table
            .get_or_insert("b", || session(Duration::ZERO))
            .unwrap();
        table
            .start("b", &s, async { Ok::<_, ()>(Fake) })
            .await
            .unwrap();
        assert!(s.process.lock().await.is_some());
    }

    #[tokio::test]
    async fn only_idle_sessions_not_executing_expire() {
        let table = SessionTable::new(4);
        let (busy, _) = table
            .get_or_insert("busy", || session(Duration::ZERO))
            .unwrap();
        table
            .get_or_insert("idle", || session(Duration::ZERO))
            .unwrap();
        table
            .get_or_insert("fresh", || session(Duration::from_secs(3600)))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let held = busy.process.lock().await;
        assert_eq!(table.expire_idle().await, 1);
        assert!(table.get("idle").is_none());
        drop(held);
        assert_eq!(table.expire_idle().await, 1);
        assert!(table.get("fresh").is_some());
    }
}
