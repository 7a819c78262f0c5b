//! The time as the sandbox lifecycle and the runs read it, behind a trait so tests can move it.
//!
//! Every lifecycle decision that depends on the time goes through a [`Clock`]: expiry, idle
//! limits, the retention of lost records, token expiry, and the readiness wait (its deadline,
//! how often it looks at the container, the pause between polls). [`SystemClock`] is the one
//! the server runs with; the tests' manual clock lives in `crate::testing`. The runs read it
//! too: lease expiry times and the timestamps of runs, events and artifacts.
//!
//! The periodic loops (`reap_forever`, `heartbeat_forever`, the pool's refill back-off, a run's
//! lease renewal, `resume_forever`, `retain_forever`) keep tokio's timers: tests call one pass
//! at a time instead, or use a short lease.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// A future that completes after a pause.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where the lifecycle gets the time from.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch: what the database stores and compares.
    fn now_ms(&self) -> i64;
    /// A monotonic instant, for deadlines inside this process.
    fn now(&self) -> Instant;
    /// Completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// The real time: the system's wall clock, the monotonic clock and tokio's timers.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::secret::now_ms()
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}
