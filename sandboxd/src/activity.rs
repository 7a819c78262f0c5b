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

/// A wake-up this much later than planned is time the process did not run (see
/// [`Activity::idle_watchdog`]).
const LATE_WAKE_UP: Duration = Duration::from_millis(500);

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
    ///
    /// A wake-up later than the nap asked for means the process did not run meanwhile: the
    /// whole sandbox was frozen (a paused container; the monotonic clock runs on while no
    /// process does) or, far less, the machine was overloaded. Nobody could reach the sandbox
    /// in that time, so it is not idleness: the idle clock is moved on by the delay, and a
    /// resumed sandbox has the idle time it had when it was frozen, whatever the freeze's
    /// length. (A delay on a busy machine only postpones the shutdown by as much.)
    pub async fn idle_watchdog(self: Arc<Self>, limit: Duration) {
        let tick = (limit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            let idle = self.idle_for();
            if idle >= limit {
                return;
            }
            let nap = (limit - idle).min(tick).max(Duration::from_millis(10));
            let before = Instant::now();
            tokio::time::sleep(nap).await;
            let late = before.elapsed().saturating_sub(nap);
            if late > LATE_WAKE_UP {
                tracing::info!(
                    late_ms = late.as_millis() as u64,
                    "woke up late (the sandbox was frozen or starved); that time is not idleness"
                );
                self.forgive(late);
            }
        }
    }

    /// Moves the last activity on by `span` (never past now).
    fn forgive(&self, span: Duration) {
        let now = self.origin.elapsed().as_millis() as u64;
        let span = span.as_millis() as u64;
        let _ = self
            .last_ms
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(last.saturating_add(span).min(now))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_freeze_is_not_idleness() {
        let activity = Activity::new();
        let watchdog = tokio::spawn(activity.clone().idle_watchdog(Duration::from_secs(10)));
        tokio::time::sleep(Duration::from_secs(4)).await;
        // The clock jumps a minute at once, with nothing run in between: what a thawed
        // container's processes see. Idle 4 s when frozen, it has about 6 s left after.
        tokio::time::advance(Duration::from_secs(60)).await;
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            !watchdog.is_finished(),
            "a sandbox frozen for a minute is not shut down the moment it thaws"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            watchdog.is_finished(),
            "idle for its limit, frozen time aside, it is shut down"
        );
    }

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
