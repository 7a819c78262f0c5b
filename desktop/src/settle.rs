//! Waiting for the screen to settle: capture repeatedly and compare frame fingerprints until the
//! screen has not changed for a quiet period, or a timeout passes. Used after an action instead
//! of a fixed sleep.
//!
//! Given the fingerprint of the screen as it was just before the action, the wait knows whether
//! the action's effect is already on screen when it starts (the first frame differs). Then half
//! the quiet period is enough: what is left to rule out is an animation or a follow-up repaint,
//! and those change the screen far more often than every `quiet / 2` (50 ms by default: 20 frames a
//! second). When nothing has changed yet, the application may still be working (a save that
//! updates the title bar when the file is written, 50 ms later), so the whole quiet period
//! applies, counted from the last change.

use std::time::{Duration, Instant};

use crate::Desktop;
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
    /// When the last change was seen, from the start of the wait (None: the screen never
    /// changed while waiting).
    pub last_change: Option<Duration>,
    /// The quiet period applied: `quiet`, or half of it when the screen already differed from
    /// the frame before the action as the wait began.
    pub quiet: Duration,
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
        self.wait_until_settled_after(None, quiet, timeout)
    }

    /// [`Desktop::wait_until_settled`] after an action, given `before`: the
    /// [`Frame::fingerprint`](crate::Frame::fingerprint) of the screen just before the action.
    /// If the first frame already differs from it, the action's effect is on screen and half of
    /// `quiet` suffices (see the module documentation).
    pub fn wait_until_settled_after(
        &self,
        before: Option<u64>,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<SettleReport, DesktopError> {
        let start = Instant::now();
        let mut last = self.capture()?.fingerprint();
        let quiet = match before {
            Some(before) if before != last => quiet / 2,
            _ => quiet,
        };
        let poll = (quiet / 5).clamp(MIN_POLL, MAX_POLL);
        let mut frames = 1;
        let mut last_change = start;
        let mut changed = false;
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
                    last_change: changed.then(|| last_change - start),
                    quiet,
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
                changed = true;
            }
        }
    }
}
