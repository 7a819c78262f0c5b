//! Spare-keycode remapping: keycodes this process mapped to keysyms the layout lacks, and the
//! background restorer that puts them back once no client can still need them.
//!
//! The race: a client translates a keycode with the mapping it fetched after the last
//! MappingNotify it processed. Restoring a keycode before a slow client has processed its key
//! events would make that client read the restored mapping and see nothing. So a remapped keycode
//! keeps its keysym for [`REMAP_LINGER`] after its last key event; then a background thread
//! restores it (typing never waits for that). Until then the next operation that needs the same
//! keysym reuses the keycode, and one that needs a keycode for another keysym waits for the
//! linger time to pass before taking it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use x11rb::protocol::xproto::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use super::{InputShared, InputState};
use crate::error::{DesktopError, StepExt};
use crate::keys::Keysym;
use crate::lock;

/// How long a remapped keycode keeps its temporary keysym after its last key event, so that
/// clients have translated the event before the mapping changes again.
pub const REMAP_LINGER: Duration = Duration::from_millis(500);

/// A keycode whose mapping this process changed, with the row to put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remap {
    pub keycode: u8,
    pub original: Vec<Keysym>,
}

/// A remapped keycode no operation holds any more, waiting for its linger time to pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lingering {
    pub remap: Remap,
    /// After the round trip that followed its last key event.
    pub last_used: Instant,
}

impl Lingering {
    pub fn due(&self) -> Instant {
        self.last_used + REMAP_LINGER
    }
}

/// Maps each keycode to its keysym on both levels, one request per run of consecutive keycodes,
/// waiting for the server to accept each.
pub(crate) fn map_keycodes(
    conn: &RustConnection,
    assignments: &[(u8, Keysym)],
    step: &'static str,
) -> Result<(), DesktopError> {
    let mut sorted = assignments.to_vec();
    sorted.sort_unstable_by_key(|&(keycode, _)| keycode);
    for run in consecutive_runs(&sorted, |&(keycode, _)| keycode) {
        let Some(&(first, _)) = run.first() else {
            continue;
        };
        // A run has at most 248 keycodes (the X keycode range), so it fits in a u8.
        let count = u8::try_from(run.len()).unwrap_or(u8::MAX);
        let rows: Vec<Keysym> = run.iter().flat_map(|&(_, ks)| [ks, ks]).collect();
        conn.change_keyboard_mapping(count, first, 2, &rows)
            .step(step)?
            .check()
            .step(step)?;
    }
    Ok(())
}

/// Puts keycodes back to their original rows, one request per run of consecutive keycodes,
/// waiting for the server to accept each.
pub(crate) fn restore_rows(
    conn: &RustConnection,
    remaps: &[Remap],
    step: &'static str,
) -> Result<(), DesktopError> {
    let mut sorted: Vec<&Remap> = remaps.iter().collect();
    sorted.sort_by_key(|r| r.keycode);
    for run in consecutive_runs(&sorted, |r| r.keycode) {
        let Some(first) = run.first() else {
            continue;
        };
        let width = first.original.len();
        // Every original row comes from one GetKeyboardMapping reply, whose width is a u8,
        // and a run has at most 248 keycodes (the X keycode range).
        let (Ok(width_u8), Ok(count)) = (u8::try_from(width), u8::try_from(run.len())) else {
            continue;
        };
        if width == 0 || run.iter().any(|r| r.original.len() != width) {
            continue;
        }
        let rows: Vec<Keysym> = run
            .iter()
            .flat_map(|r| r.original.iter().copied())
            .collect();
        conn.change_keyboard_mapping(count, first.keycode, width_u8, &rows)
            .step(step)?
            .check()
            .step(step)?;
    }
    Ok(())
}

/// Splits items sorted by keycode into runs of consecutive keycodes.
pub(crate) fn consecutive_runs<T>(items: &[T], keycode: impl Fn(&T) -> u8) -> Vec<&[T]> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=items.len() {
        // `i - 1` and `i` are both in bounds when `i < items.len()` (and `i >= 1`).
        let continues =
            i < items.len() && keycode(&items[i - 1]).checked_add(1) == Some(keycode(&items[i]));
        if !continues {
            runs.push(&items[start..i]);
            start = i;
        }
    }
    runs
}

/// Restores lingering keycodes whose time has come.
fn restore_due(conn: &RustConnection, state: &mut InputState, now: Instant) {
    let (due, waiting): (Vec<Lingering>, Vec<Lingering>) = std::mem::take(&mut state.lingering)
        .into_iter()
        .partition(|l| l.due() <= now);
    state.lingering = waiting;
    let remaps: Vec<Remap> = due.into_iter().map(|l| l.remap).collect();
    if remaps.is_empty() {
        return;
    }
    if let Err(error) = restore_rows(conn, &remaps, "restoring remapped keycodes") {
        tracing::warn!(%error, "could not restore remapped keycodes");
    }
}

/// The restorer thread: sleeps until the next lingering keycode is due, restores it, and ends
/// when the desktop closes.
pub(crate) fn run_restorer(conn: Arc<RustConnection>, input: Arc<InputShared>) {
    let mut state = lock(&input.state);
    while !state.closing {
        let now = Instant::now();
        restore_due(&conn, &mut state, now);
        let next = state.lingering.iter().map(Lingering::due).min();
        state = match next {
            Some(at) => match input
                .wake
                .wait_timeout(state, at.saturating_duration_since(now))
            {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            },
            None => match input.wake.wait(state) {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            },
        };
    }
}

/// Restores every lingering keycode once its linger time has passed, waiting for it: for
/// closing the desktop after the restorer has stopped.
pub(crate) fn restore_all(conn: &RustConnection, state: &mut InputState) {
    if let Some(last) = state.lingering.iter().map(Lingering::due).max() {
        std::thread::sleep(last.saturating_duration_since(Instant::now()));
        restore_due(conn, state, last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_at_gaps() {
        let codes = [3u8, 4, 5, 9, 10, 255];
        let runs = consecutive_runs(&codes, |&k| k);
        assert_eq!(runs, vec![&[3u8, 4, 5][..], &[9, 10], &[255]]);
        assert!(consecutive_runs(&[] as &[u8], |&k| k).is_empty());
    }
}
