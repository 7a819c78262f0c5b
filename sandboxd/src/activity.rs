//! API activity and the dead-man switch.
//!
//! Every API request (except liveness) marks activity and holds an [`ActivityGuard`] while it
//! runs; long-lived work such as a terminal WebSocket holds one for its whole life. With an idle
//! limit set, [`Activity::idle_watchdog`] resolves once nothing is in flight and no request has
//! arrived for that long, so a container outlives a crashed orchestrator only briefly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Shared activity counters.
#[derive(Debug)]
pub struct Activity {
    origin: Instant,
    /// Milliseconds after `origin` of the last activity.
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

/// Keeps the sandbox "active" while alive.
#[derive(Debug)]
pub struct ActivityGuard(Arc<Activity>);

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Records activity now.
    pub fn touch(&self) {
        let now = self.origin.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::AcqRel);
    }

    /// Marks activity and holds it until the guard is dropped.
    pub fn hold(self: &Arc<Self>) -> ActivityGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        ActivityGuard(self.clone())
    }

    /// Requests and sessions in progress.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// How long since the last activity, or zero while something is in flight.
    pub fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
        self.origin.elapsed().saturating_sub(last)
    }

    /// Resolves once the sandbox has been idle for `limit`.
    pub async fn idle_watchdog(self: Arc<Self>, limit: Duration) {
        let tick = (limit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            let idle = self.idle_for();
            if idle >= limit {
                return;
            }
            tokio::time::sleep((limit - idle).min(tick).max(Duration::from_millis(10))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_waits_for_idleness_and_in_flight_work() {
        let activity = Activity::new();
        let guard = activity.hold();
        let watchdog = tokio::spawn(activity.clone().idle_watchdog(Duration::from_secs(10)));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            !watchdog.is_finished(),
            "in-flight work keeps the sandbox alive"
        );
        drop(guard);
        tokio::time::sleep(Duration::from_secs(5)).await;
        activity.touch();
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(
            !watchdog.is_finished(),
            "a new request restarts the idle clock"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(watchdog.is_finished());
    }
}
