//! Waiting for the screen to settle: capture repeatedly and compare frame fingerprints until the
//! screen has not changed for a quiet period, or a timeout passes. Used after an action instead
//! of a fixed sleep.

use std::time::{Duration, Instant};

use crate::desktop::Desktop;
use crate::error::DesktopError;

/// Shortest and longest pause between two captures.
const MIN_POLL: Duration = Duration::from_millis(5);
const MAX_POLL: Duration = Duration::from_millis(50);

/// The outcome of [`Desktop::wait_until_settled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleReport {
    /// Whether the screen stayed unchanged for the quiet period before the timeout.
    pub settled: bool,
    /// How long the call took.
    pub waited: Duration,
    /// How many frames were captured.
    pub frames: u32,
}

impl Desktop {
    /// Returns once the screen has not changed for `quiet` (confirmed by at least two
    /// captures), or when `timeout` has passed, whichever comes first. The screen is captured
    /// every `quiet / 5` (between 5 and 50 ms). Blocks the calling thread: from async code, call
    /// it through `spawn_blocking`.
    pub fn wait_until_settled(
        &self,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<SettleReport, DesktopError> {
        let poll = (quiet / 5).clamp(MIN_POLL, MAX_POLL);
        let start = Instant::now();
        let mut last = self.capture()?.fingerprint();
        let mut frames = 1;
        let mut last_change = start;
        loop {
            let now = Instant::now();
            let quiet_at = last_change + quiet;
            let timeout_at = start + timeout;
            // Settled needs a second frame that matches, however slow the first capture was.
            let settled = frames >= 2 && now >= quiet_at;
            if settled || now >= timeout_at {
                return Ok(SettleReport {
                    settled,
                    waited: now - start,
                    frames,
                });
            }
            let until = quiet_at.min(timeout_at);
            std::thread::sleep(poll.min(until.saturating_duration_since(now)));
            let captured_at = Instant::now();
            let fingerprint = self.capture()?.fingerprint();
            frames += 1;
            if fingerprint != last {
                last = fingerprint;
                last_change = captured_at;
            }
        }
    }
}
