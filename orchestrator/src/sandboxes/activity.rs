//! Activity per sandbox, for the idle reaper: the last time something real happened (a proxied
//! API call, a VNC or CDP session, work reported in flight by sandboxd) and how many sessions
//! are open right now. The orchestrator's own heartbeat is not activity.
//!
//! The reaper may run in another replica ([`crate::replicas`]), so what happens here is written
//! to the database now and then ([`ActivityTracker::unwritten`]); an open session counts as
//! activity at each write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::clock::Clock;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    last_ms: i64,
    holds: usize,
    /// The last activity written to the database.
    written_ms: i64,
}

/// Activity of every live sandbox.
#[derive(Debug)]
pub struct ActivityTracker {
    entries: Mutex<HashMap<String, Entry>>,
    clock: Arc<dyn Clock>,
}

/// Keeps a sandbox active while alive (an open proxied request or session).
#[derive(Debug)]
pub struct ActivityHold {
    tracker: Arc<ActivityTracker>,
    id: String,
}

impl Drop for ActivityHold {
    fn drop(&mut self) {
        if let Ok(mut entries) = self.tracker.entries.lock()
            && let Some(entry) = entries.get_mut(&self.id)
        {
            entry.holds = entry.holds.saturating_sub(1);
            entry.last_ms = entry.last_ms.max(self.tracker.clock.now_ms());
        }
    }
}

impl ActivityTracker {
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            entries: Mutex::default(),
            clock,
        })
    }

    /// Starts tracking a sandbox whose last activity was at `last_ms`.
    pub fn seed(&self, id: &str, last_ms: i64) {
        if let Ok(mut entries) = self.entries.lock() {
            let entry = entries.entry(id.to_string()).or_default();
            entry.last_ms = entry.last_ms.max(last_ms);
        }
    }

    /// Starts tracking a sandbox whose last activity, as the database has it, was at
    /// `last_ms` (nothing to write back).
    pub fn adopt(&self, id: &str, last_ms: i64) {
        if let Ok(mut entries) = self.entries.lock() {
            let entry = entries.entry(id.to_string()).or_default();
            entry.last_ms = entry.last_ms.max(last_ms);
            entry.written_ms = entry.written_ms.max(last_ms);
        }
    }

    /// Records activity now.
    pub fn touch(&self, id: &str) {
        self.seed(id, self.clock.now_ms());
    }

    /// Marks activity and holds the sandbox active until the guard drops.
    pub fn hold(self: &Arc<Self>, id: &str) -> ActivityHold {
        if let Ok(mut entries) = self.entries.lock() {
            let entry = entries.entry(id.to_string()).or_default();
            entry.holds += 1;
            entry.last_ms = entry.last_ms.max(self.clock.now_ms());
        }
        ActivityHold {
            tracker: self.clone(),
            id: id.to_string(),
        }
    }

    /// (last activity in ms, open sessions), if tracked.
    pub fn get(&self, id: &str) -> Option<(i64, usize)> {
        let entries = self.entries.lock().ok()?;
        entries.get(id).map(|e| (e.last_ms, e.holds))
    }

    /// What to write to the database: per sandbox with activity since the last write, or a
    /// session open now (activity now), the time to write; each counts as written.
    pub fn unwritten(&self) -> Vec<(String, i64)> {
        let now = self.clock.now_ms();
        let Ok(mut entries) = self.entries.lock() else {
            return Vec::new();
        };
        let mut due = Vec::new();
        for (id, entry) in entries.iter_mut() {
            let at = if entry.holds > 0 { now } else { entry.last_ms };
            if at > entry.written_ms {
                entry.written_ms = at;
                due.push((id.clone(), at));
            }
        }
        due
    }

    /// The sandboxes tracked now.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> Vec<String> {
        self.entries
            .lock()
            .map(|e| e.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn forget(&self, id: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(id);
        }
    }

    /// Keeps only the sandboxes in `live` (those removed by another replica go).
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|id, entry| live.contains(id) || entry.holds > 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_count_and_release() {
        let tracker = ActivityTracker::new(Arc::new(crate::clock::SystemClock));
        tracker.seed("a", 5);
        assert_eq!(tracker.get("a"), Some((5, 0)));
        let hold = tracker.hold("a");
        let (last, holds) = tracker.get("a").unwrap();
        assert!(last > 5);
        assert_eq!(holds, 1);
        drop(hold);
        assert_eq!(tracker.get("a").unwrap().1, 0);
        tracker.forget("a");
        assert_eq!(tracker.get("a"), None);
    }

    #[test]
    fn activity_is_written_once_and_open_sessions_count_at_every_write() {
        let tracker = ActivityTracker::new(Arc::new(crate::clock::SystemClock));
        tracker.seed("a", 5);
        assert_eq!(tracker.unwritten(), vec![("a".to_string(), 5)]);
        assert!(tracker.unwritten().is_empty(), "written already");
        let _hold = tracker.hold("b");
        let first = tracker.unwritten();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0, "b");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = tracker.unwritten();
        assert!(second[0].1 > first[0].1, "an open session is activity now");
    }
}
