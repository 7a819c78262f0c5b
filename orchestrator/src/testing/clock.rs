//! A clock tests move by hand.
//!
//! Wall-clock milliseconds and the monotonic instant move together. Sleeping on it moves it
//! forward by the time slept and yields once, as if the sleeper were the only thing waiting:
//! the readiness wait's polls and its deadline then pass in microseconds. A test that needs
//! time to pass for the reaper or the idle limits calls [`ManualClock::advance`].

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{Clock, Sleep};

/// 2023-11-14T22:13:20Z: a fixed start, so a test's times do not depend on when it runs.
const START_MS: i64 = 1_700_000_000_000;

#[derive(Debug)]
pub(crate) struct ManualClock {
    origin: Instant,
    /// Milliseconds since the start.
    elapsed_ms: AtomicI64,
}

impl ManualClock {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            elapsed_ms: AtomicI64::new(0),
        })
    }

    /// Moves the time forward.
    pub(crate) fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.elapsed_ms.fetch_add(ms, Ordering::SeqCst);
    }

    fn elapsed(&self) -> i64 {
        self.elapsed_ms.load(Ordering::SeqCst)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        START_MS + self.elapsed()
    }

    fn now(&self) -> Instant {
        self.origin + Duration::from_millis(self.elapsed().unsigned_abs())
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        self.advance(duration);
        Box::pin(tokio::task::yield_now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wall_and_monotonic_time_move_together_and_sleeping_moves_both() {
        let clock = ManualClock::new();
        let (ms, instant) = (clock.now_ms(), clock.now());
        assert_eq!(ms, START_MS);
        clock.advance(Duration::from_secs(2));
        clock.sleep(Duration::from_millis(10)).await;
        assert_eq!(clock.now_ms() - ms, 2010);
        assert_eq!(clock.now() - instant, Duration::from_millis(2010));
    }
}
