//! XTEST injection primitives shared by the pointer and the keyboard: fake events, what this
//! process holds down, and the round trip that makes an effect visible before a call returns.

pub(crate) mod remap;

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    BUTTON_PRESS_EVENT, BUTTON_RELEASE_EVENT, ConnectionExt as _, KEY_PRESS_EVENT,
    KEY_RELEASE_EVENT, MOTION_NOTIFY_EVENT,
};
use x11rb::protocol::xtest::ConnectionExt as _;

use crate::error::{DesktopError, StepExt};
use crate::keys::Keysym;
use crate::{Desktop, lock};
use remap::{Lingering, Remap};

/// The input state and the condition variable that wakes the remap restorer.
#[derive(Debug, Default)]
pub(crate) struct InputShared {
    /// Locked for the duration of one input operation, which serialises input.
    pub state: Mutex<InputState>,
    /// Notified when keycodes start lingering and when the desktop closes.
    pub wake: Condvar,
}

/// What this process holds down or has remapped between input calls.
#[derive(Debug, Default)]
pub(crate) struct InputState {
    /// Keys pressed by `key_down` and not yet released.
    pub held_keys: Vec<HeldKey>,
    /// Buttons pressed by `button_down` and not yet released.
    pub held_buttons: Vec<u8>,
    /// Remapped keycodes of held keys; they start lingering when the key is released.
    pub pinned_remaps: Vec<Remap>,
    /// Remapped keycodes waiting for their linger time before the restorer puts them back.
    pub lingering: Vec<Lingering>,
    /// Set when the desktop closes, to stop the restorer.
    pub closing: bool,
}

/// A key held down by `key_down`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldKey {
    pub keysym: Keysym,
    pub keycode: u8,
    /// The Shift keycode pressed with it because its keysym is on the Shift level.
    pub shift_keycode: Option<u8>,
}

impl Desktop {
    pub(crate) fn input_state(&self) -> MutexGuard<'_, InputState> {
        lock(&self.input.state)
    }

    fn fake(
        &self,
        kind: u8,
        detail: u8,
        x: i16,
        y: i16,
        step: &'static str,
    ) -> Result<(), DesktopError> {
        // Time 0 is "now"; device 0 is the XTEST device.
        self.conn
            .xtest_fake_input(kind, detail, 0, self.root, x, y, 0)
            .step(step)?;
        Ok(())
    }

    pub(crate) fn fake_key(
        &self,
        keycode: u8,
        down: bool,
        step: &'static str,
    ) -> Result<(), DesktopError> {
        let kind = if down {
            KEY_PRESS_EVENT
        } else {
            KEY_RELEASE_EVENT
        };
        self.fake(kind, keycode, 0, 0, step)
    }

    pub(crate) fn fake_button(
        &self,
        button: u8,
        down: bool,
        step: &'static str,
    ) -> Result<(), DesktopError> {
        let kind = if down {
            BUTTON_PRESS_EVENT
        } else {
            BUTTON_RELEASE_EVENT
        };
        self.fake(kind, button, 0, 0, step)
    }

    /// Absolute pointer motion. Callers have checked the point against the screen, which also
    /// bounds it to `i16` (X screens are at most 32767 pixels wide).
    pub(crate) fn fake_motion(
        &self,
        x: i32,
        y: i32,
        step: &'static str,
    ) -> Result<(), DesktopError> {
        let x = i16::try_from(x).unwrap_or(i16::MAX);
        let y = i16::try_from(y).unwrap_or(i16::MAX);
        // Detail 0: absolute coordinates.
        self.fake(MOTION_NOTIFY_EVENT, 0, x, y, step)
    }

    /// Waits until the server has processed every request sent so far (one GetInputFocus round
    /// trip), so injected events have been delivered when this returns. Then reports any error
    /// the server sent for those requests, and discards other queued events (such as
    /// MappingNotify, which every client receives).
    pub(crate) fn sync(&self, step: &'static str) -> Result<(), DesktopError> {
        self.conn.get_input_focus().step(step)?.reply().step(step)?;
        let mut first_error = None;
        while let Some(event) = self.conn.poll_for_event().step(step)? {
            if let Event::Error(error) = event {
                tracing::warn!(?error, step, "X server rejected an input request");
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(DesktopError::Rejected { step, error }),
            None => Ok(()),
        }
    }

    /// Releases every key and button this process holds; their remapped keycodes start
    /// lingering. Best effort, for shutdown: errors are logged, not returned.
    pub(crate) fn release_everything(&self) {
        let mut state = self.input_state();
        let step = "releasing held keys and buttons";
        let mut result = Ok(());
        for button in std::mem::take(&mut state.held_buttons).into_iter().rev() {
            result = result.and(self.fake_button(button, false, step));
        }
        for key in std::mem::take(&mut state.held_keys).into_iter().rev() {
            result = result.and(self.fake_key(key.keycode, false, step));
            if let Some(shift) = key.shift_keycode {
                result = result.and(self.fake_key(shift, false, step));
            }
        }
        result = result.and(self.sync(step));
        let now = Instant::now();
        for remap in std::mem::take(&mut state.pinned_remaps) {
            state.lingering.push(Lingering {
                remap,
                last_used: now,
            });
        }
        if let Err(error) = result {
            tracing::warn!(%error, "could not release everything held on the X display");
        }
    }
}
