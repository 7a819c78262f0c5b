//! Quiet moments: background work that keeps both cores busy in the kernel (starting warm-pool
//! members; making and removing sandbox networks: namespaces, veth pairs, iptables) waits until
//! warm-pool claims have stopped coming for a moment, so a burst of claims does not wait behind
//! it for a core (issue 28, item 4; `bench/RESULTS.md`). The wait is bounded: work is delayed,
//! never starved, by claims that keep coming.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Background work starts once no claim came for this long ...
pub const QUIET: Duration = Duration::from_millis(150);

/// When latency-sensitive requests last came, and how long background work waits for them to
/// stop.
#[derive(Debug, Default)]
pub struct Lull {
    last_busy: Mutex<Option<Instant>>,
}

impl Lull {
    pub fn new() -> Self {
        Self::default()
    }

    /// A latency-sensitive request (a claim) came now.
    pub fn busy(&self) {
        *self
            .last_busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    fn last_busy(&self) -> Option<Instant> {
        *self
            .last_busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until no request came for [`QUIET`], at most `max_wait` from now.
    pub async fn wait(&self, max_wait: Duration) {
        let waiting_since = Instant::now();
        while let Some(wait) = remaining(Instant::now(), self.last_busy(), waiting_since, max_wait)
        {
            tokio::time::sleep(wait).await;
        }
    }

    /// How much longer a wait that began at `waiting_since` lasts (`None`: no longer).
    pub fn remaining(&self, waiting_since: Instant, max_wait: Duration) -> Option<Duration> {
        remaining(Instant::now(), self.last_busy(), waiting_since, max_wait)
    }
}

/// How much longer to wait at `now`, `None` to go on: until [`QUIET`] after the last busy
/// moment, and never past `waiting_since + max_wait`.
fn remaining(
    now: Instant,
    last_busy: Option<Instant>,
    waiting_since: Instant,
    max_wait: Duration,
) -> Option<Duration> {
    let until = (last_busy? + QUIET).min(waiting_since + max_wait);
    (until > now).then(|| until - now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_waits_for_a_quiet_moment_but_not_for_long() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let max = Duration::from_secs(1);
        // Nothing came yet: at once.
        assert_eq!(remaining(at(0), None, at(0), max), None);
        // A claim 10 ms ago: 140 ms more of quiet.
        assert_eq!(
            remaining(at(10), Some(at(0)), at(5), max),
            Some(Duration::from_millis(140))
        );
        // Quiet for 150 ms: now.
        assert_eq!(remaining(at(150), Some(at(0)), at(5), max), None);
        // Claims keep coming: at most `max_wait` from when the wait began.
        assert_eq!(
            remaining(at(950), Some(at(940)), at(0), max),
            Some(Duration::from_millis(50))
        );
        assert_eq!(remaining(at(1000), Some(at(990)), at(0), max), None);
    }

    #[tokio::test]
    async fn a_wait_ends_after_the_quiet() {
        let lull = Lull::new();
        let began = Instant::now();
        lull.busy();
        lull.wait(Duration::from_secs(5)).await;
        assert!(began.elapsed() >= QUIET);
        assert_eq!(lull.remaining(Instant::now(), Duration::from_secs(5)), None);
    }
}
