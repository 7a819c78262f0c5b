//! The keyboard: keys and chords by name, held keys, and typing any Unicode text on any layout.
//!
//! Each operation reads the current keyboard mapping, so a layout change (setxkbmap) is honoured
//! at once. A keysym the mapping lacks (`é` on a US layout, `世`) is mapped onto a spare keycode
//! (one with no keysyms) with ChangeKeyboardMapping, pressed, and the keycode is put back to
//! nothing at the end of the operation.
//!
//! The remapping race: a client translates a keycode with the mapping it fetched after the last
//! MappingNotify it processed. If the mapping were restored before a slow client had processed
//! the key event, the client would read the restored mapping and see nothing. So a text's
//! missing keysyms are mapped together before its first key event, and the restore waits for a
//! round trip plus [`REMAP_GRACE`] after the last one. A keycode is never given a second keysym
//! within one text without the same wait; when a text needs more distinct missing keysyms than
//! there are spare keycodes, it is typed in segments separated by that wait.

use std::sync::MutexGuard;
use std::time::Duration;

use x11rb::protocol::xproto::{ConnectionExt as _, KeyButMask};

use crate::desktop::Desktop;
use crate::error::{DesktopError, StepExt};
use crate::input::{HeldKey, InputState, Remap};
use crate::keymap::{Keymap, Stroke};
use crate::keys::{self, Keysym, sym};

/// How long a remapped keycode keeps its temporary keysym after its last key event (and a round
/// trip), so clients have processed the event before the mapping is restored.
pub const REMAP_GRACE: Duration = Duration::from_millis(100);

impl Desktop {
    /// Presses and releases keys given as xdotool's `key` takes them: one chord (`Return`,
    /// `ctrl+shift+t`, `CTRL+C`, `é`) or several separated by whitespace (`ctrl+a BackSpace`),
    /// one after the other. See [`crate::keys`] for the accepted names.
    pub fn press(&self, keys: &str) -> Result<(), DesktopError> {
        let chords = keys::parse_sequence(keys)?;
        let mut session = KeySession::begin(self, "pressing keys")?;
        for chord in &chords {
            let pressed = session.press_chord(chord)?;
            session.release_chord(pressed)?;
        }
        session.finish()
    }

    /// Presses a list of keys together and releases them in reverse order (OpenAI CUA
    /// `keypress`, AIO `HOTKEY`): `["ctrl", "shift", "t"]`.
    pub fn hotkey<S: AsRef<str>>(&self, names: &[S]) -> Result<(), DesktopError> {
        let chord = keys::parse_hotkey(names)?;
        let mut session = KeySession::begin(self, "pressing a hotkey")?;
        let pressed = session.press_chord(&chord)?;
        session.release_chord(pressed)?;
        session.finish()
    }

    /// Presses a key (or a chord, in order) and keeps it down until [`Desktop::key_up`].
    pub fn key_down(&self, name: &str) -> Result<(), DesktopError> {
        let chord = keys::parse_chord(name)?;
        let mut session = KeySession::begin(self, "holding a key down")?;
        let pressed = session.press_chord(&chord)?;
        session.hold(pressed);
        session.finish()
    }

    /// Releases a key (or a chord, in reverse) pressed by [`Desktop::key_down`]. A key this
    /// process does not hold is released anyway if the keyboard has it, which frees a key left
    /// down by someone else.
    pub fn key_up(&self, name: &str) -> Result<(), DesktopError> {
        let chord = keys::parse_chord(name)?;
        let mut session = KeySession::begin(self, "releasing a held key")?;
        for &keysym in chord.iter().rev() {
            session.release_held(keysym)?;
        }
        session.finish()
    }

    /// Types text: every printable Unicode character on whatever layout the keyboard has,
    /// newline as Return and tab as Tab (`\r\n` counts as one Return). Characters the layout
    /// lacks are typed through temporarily remapped spare keycodes (see the module
    /// documentation); then this call takes about [`REMAP_GRACE`] longer. If Caps Lock is on,
    /// it is switched off for the text and on again after.
    pub fn type_text(&self, text: &str) -> Result<(), DesktopError> {
        const STEP: &str = "typing text";
        if text.is_empty() {
            return Ok(());
        }
        let mut session = KeySession::begin(self, STEP)?;
        let plan = plan_text(text, &session.keymap)?;
        let caps_lock = if self.caps_lock_on()? {
            session.keymap.find(sym::CAPS_LOCK).filter(|s| !s.shift)
        } else {
            None
        };
        if let Some(caps) = caps_lock {
            session.tap(caps)?;
        }
        let capacity = session.spares.len();
        let mut start = 0;
        while start < plan.len() {
            let (end, missing) = next_segment(&plan, start, capacity);
            if end == start {
                // Nothing fits: the next character needs a remap and there is no spare keycode.
                let keysym = match plan.get(start) {
                    Some(Planned::Missing(keysym)) => *keysym,
                    _ => sym::NO_SYMBOL,
                };
                return Err(DesktopError::NoSpareKeycode { keysym });
            }
            session.remap(&missing)?;
            for planned in &plan[start..end] {
                let stroke = match *planned {
                    Planned::Key(stroke) => stroke,
                    Planned::Missing(keysym) => session
                        .keymap
                        .find(keysym)
                        .ok_or(DesktopError::NoSpareKeycode { keysym })?,
                };
                session.tap(stroke)?;
            }
            start = end;
            if start < plan.len() {
                session.restore()?;
            }
        }
        if let Some(caps) = caps_lock {
            session.tap(caps)?;
        }
        session.finish()
    }

    fn caps_lock_on(&self) -> Result<bool, DesktopError> {
        const STEP: &str = "reading the Caps Lock state";
        let pointer = self
            .conn
            .query_pointer(self.root)
            .step(STEP)?
            .reply()
            .step(STEP)?;
        Ok(pointer.mask.contains(KeyButMask::LOCK))
    }

    /// Puts remapped keycodes back to their original rows, one request per run of consecutive
    /// keycodes, and waits for the server to accept each.
    pub(crate) fn restore_rows(
        &self,
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
            self.conn
                .change_keyboard_mapping(count, first.keycode, width_u8, &rows)
                .step(step)?
                .check()
                .step(step)?;
        }
        Ok(())
    }
}

/// One character of a text, as planned before typing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planned {
    /// The keyboard has it.
    Key(Stroke),
    /// It needs a spare keycode mapped to this keysym.
    Missing(Keysym),
}

fn plan_text(text: &str, keymap: &Keymap) -> Result<Vec<Planned>, DesktopError> {
    let mut plan = Vec::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        let keysym = keys::char_keysym(c).ok_or(DesktopError::Untypable(c))?;
        plan.push(match keymap.find_char(c) {
            Some(stroke) => Planned::Key(stroke),
            None => Planned::Missing(keysym),
        });
    }
    Ok(plan)
}

/// The end of the segment starting at `start` whose distinct missing keysyms fit in `capacity`
/// spare keycodes, and those keysyms in order of first use.
fn next_segment(plan: &[Planned], start: usize, capacity: usize) -> (usize, Vec<Keysym>) {
    let mut missing = Vec::new();
    let mut end = start;
    while let Some(planned) = plan.get(end) {
        if let Planned::Missing(keysym) = *planned
            && !missing.contains(&keysym)
        {
            if missing.len() == capacity {
                break;
            }
            missing.push(keysym);
        }
        end += 1;
    }
    (end, missing)
}

/// Splits items sorted by keycode into runs of consecutive keycodes.
fn consecutive_runs<T>(items: &[T], keycode: impl Fn(&T) -> u8) -> Vec<&[T]> {
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

/// A key pressed as part of a chord.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pressed {
    keysym: Keysym,
    keycode: u8,
    /// The Shift keycode pressed just before it, because its keysym is on the Shift level.
    shift: Option<u8>,
}

/// One keyboard operation: the input lock, a fresh keyboard mapping, the keycodes remapped and
/// the keys pressed so far. Dropping it (on an error path) releases the keys it pressed and
/// restores what it remapped; [`KeySession::finish`] does the same and reports errors.
pub(crate) struct KeySession<'a> {
    desktop: &'a Desktop,
    state: MutexGuard<'a, InputState>,
    keymap: Keymap,
    /// Keycodes with no keysyms that this session may remap, ascending.
    spares: Vec<u8>,
    /// Keycodes this session remapped, to restore at the end.
    remaps: Vec<Remap>,
    /// Keycodes this session pressed and has not released.
    down: Vec<u8>,
    step: &'static str,
    finished: bool,
}

impl<'a> KeySession<'a> {
    pub fn begin(desktop: &'a Desktop, step: &'static str) -> Result<KeySession<'a>, DesktopError> {
        let state = desktop.input_state();
        let keymap = Keymap::fetch(&desktop.conn)?;
        let spares = keymap.spare_keycodes();
        Ok(KeySession {
            desktop,
            state,
            keymap,
            spares,
            remaps: Vec::new(),
            down: Vec::new(),
            step,
            finished: false,
        })
    }

    fn shift_keycode(&self) -> Result<u8, DesktopError> {
        [sym::SHIFT_L, sym::SHIFT_R]
            .into_iter()
            .filter_map(|ks| self.keymap.find(ks))
            .find(|stroke| !stroke.shift)
            .map(|stroke| stroke.keycode)
            .ok_or(DesktopError::MissingKey("Shift_L"))
    }

    /// The key for a keysym, remapping a spare keycode when the keyboard lacks it.
    fn stroke(&mut self, keysym: Keysym) -> Result<Stroke, DesktopError> {
        if let Some(stroke) = self.keymap.find(keysym) {
            return Ok(stroke);
        }
        self.remap(&[keysym])?;
        self.keymap
            .find(keysym)
            .ok_or(DesktopError::NoSpareKeycode { keysym })
    }

    /// Maps each keysym onto its own spare keycode (on both levels), with one request per run
    /// of consecutive keycodes.
    fn remap(&mut self, keysyms: &[Keysym]) -> Result<(), DesktopError> {
        if keysyms.is_empty() {
            return Ok(());
        }
        if let Some(&keysym) = keysyms.get(self.spares.len()) {
            return Err(DesktopError::NoSpareKeycode { keysym });
        }
        let chosen: Vec<(u8, Keysym)> = self
            .spares
            .drain(..keysyms.len())
            .zip(keysyms.iter().copied())
            .collect();
        // Record before sending, so a failure part way still restores every keycode touched.
        for &(keycode, keysym) in &chosen {
            self.remaps.push(Remap {
                keycode,
                original: self.keymap.row(keycode).to_vec(),
            });
            self.keymap.set_row(keycode, &[keysym, keysym]);
        }
        for run in consecutive_runs(&chosen, |&(keycode, _)| keycode) {
            let Some(&(first, _)) = run.first() else {
                continue;
            };
            // A run has at most 248 keycodes (the X keycode range), so it fits in a u8.
            let count = u8::try_from(run.len()).unwrap_or(u8::MAX);
            let rows: Vec<Keysym> = run.iter().flat_map(|&(_, ks)| [ks, ks]).collect();
            self.desktop
                .conn
                .change_keyboard_mapping(count, first, 2, &rows)
                .step(self.step)?
                .check()
                .step(self.step)?;
        }
        Ok(())
    }

    /// Waits until clients have had the chance to translate every key event sent so far, then
    /// restores the keycodes this session remapped.
    fn restore(&mut self) -> Result<(), DesktopError> {
        if self.remaps.is_empty() {
            return Ok(());
        }
        self.desktop.sync(self.step)?;
        std::thread::sleep(REMAP_GRACE);
        self.desktop.restore_rows(&self.remaps, self.step)?;
        for remap in self.remaps.drain(..) {
            self.keymap.set_row(remap.keycode, &remap.original);
            self.spares.push(remap.keycode);
        }
        self.spares.sort_unstable();
        Ok(())
    }

    fn key(&mut self, keycode: u8, down: bool) -> Result<(), DesktopError> {
        self.desktop.fake_key(keycode, down, self.step)?;
        if down {
            self.down.push(keycode);
        } else if let Some(i) = self.down.iter().rposition(|&k| k == keycode) {
            self.down.remove(i);
        }
        Ok(())
    }

    /// Presses and releases one key, with Shift around it when it needs Shift.
    fn tap(&mut self, stroke: Stroke) -> Result<(), DesktopError> {
        let shift = if stroke.shift {
            Some(self.shift_keycode()?)
        } else {
            None
        };
        if let Some(shift) = shift {
            self.key(shift, true)?;
        }
        self.key(stroke.keycode, true)?;
        self.key(stroke.keycode, false)?;
        if let Some(shift) = shift {
            self.key(shift, false)?;
        }
        Ok(())
    }

    /// Presses the keys of a chord in order. A key on the Shift level gets Shift pressed before
    /// it, unless the chord already holds Shift.
    pub fn press_chord(&mut self, chord: &[Keysym]) -> Result<Vec<Pressed>, DesktopError> {
        let mut shift_down = chord.iter().any(|&ks| keys::is_shift(ks));
        let mut pressed = Vec::with_capacity(chord.len());
        for &keysym in chord {
            let stroke = self.stroke(keysym)?;
            let shift = if stroke.shift && !shift_down {
                let shift = self.shift_keycode()?;
                self.key(shift, true)?;
                shift_down = true;
                Some(shift)
            } else {
                None
            };
            self.key(stroke.keycode, true)?;
            pressed.push(Pressed {
                keysym,
                keycode: stroke.keycode,
                shift,
            });
        }
        Ok(pressed)
    }

    /// Releases the keys of a chord in reverse order.
    pub fn release_chord(&mut self, pressed: Vec<Pressed>) -> Result<(), DesktopError> {
        for key in pressed.into_iter().rev() {
            self.key(key.keycode, false)?;
            if let Some(shift) = key.shift {
                self.key(shift, false)?;
            }
        }
        Ok(())
    }

    /// Hands pressed keys over to the input state, to stay down after this session; their
    /// remapped keycodes stay mapped until they are released.
    fn hold(&mut self, pressed: Vec<Pressed>) {
        for key in pressed {
            for keycode in std::iter::once(key.keycode).chain(key.shift) {
                if let Some(i) = self.down.iter().rposition(|&k| k == keycode) {
                    self.down.remove(i);
                }
            }
            if let Some(i) = self.remaps.iter().position(|r| r.keycode == key.keycode) {
                let remap = self.remaps.remove(i);
                self.state.pinned_remaps.push(remap);
            }
            self.state.held_keys.push(HeldKey {
                keysym: key.keysym,
                keycode: key.keycode,
                shift_keycode: key.shift,
            });
        }
    }

    /// Releases a key held by `key_down`, or else the keyboard's key for that keysym.
    fn release_held(&mut self, keysym: Keysym) -> Result<(), DesktopError> {
        let held = self
            .state
            .held_keys
            .iter()
            .rposition(|h| h.keysym == keysym);
        let Some(index) = held else {
            if let Some(stroke) = self.keymap.find(keysym) {
                self.desktop.fake_key(stroke.keycode, false, self.step)?;
            }
            return Ok(());
        };
        let key = self.state.held_keys.remove(index);
        self.desktop.fake_key(key.keycode, false, self.step)?;
        if let Some(shift) = key.shift_keycode {
            self.desktop.fake_key(shift, false, self.step)?;
        }
        let still_held = self
            .state
            .held_keys
            .iter()
            .any(|h| h.keycode == key.keycode);
        let pinned = self
            .state
            .pinned_remaps
            .iter()
            .position(|r| r.keycode == key.keycode);
        if let (false, Some(i)) = (still_held, pinned) {
            let remap = self.state.pinned_remaps.remove(i);
            self.remaps.push(remap);
        }
        Ok(())
    }

    fn cleanup(&mut self) -> Result<(), DesktopError> {
        self.finished = true;
        let mut result = Ok(());
        for keycode in std::mem::take(&mut self.down).into_iter().rev() {
            result = result.and(self.desktop.fake_key(keycode, false, self.step));
        }
        result = result.and(self.desktop.sync(self.step));
        result.and(self.restore())
    }

    /// Releases what is still pressed, restores remapped keycodes, and waits until the server
    /// has processed everything.
    pub fn finish(mut self) -> Result<(), DesktopError> {
        self.cleanup()
    }
}

impl Drop for KeySession<'_> {
    fn drop(&mut self) {
        if !self.finished
            && let Err(error) = self.cleanup()
        {
            tracing::warn!(%error, "could not clean up after a failed keyboard operation");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(keycode: u8) -> Planned {
        Planned::Key(Stroke {
            keycode,
            shift: false,
        })
    }

    #[test]
    fn segments_hold_at_most_capacity_distinct_missing_keysyms() {
        let plan = [
            Planned::Missing(1),
            key(9),
            Planned::Missing(2),
            Planned::Missing(1),
            Planned::Missing(3),
            key(9),
        ];
        assert_eq!(next_segment(&plan, 0, 2), (4, vec![1, 2]));
        assert_eq!(next_segment(&plan, 4, 2), (6, vec![3]));
        assert_eq!(next_segment(&plan, 0, 0), (0, vec![]));
        assert_eq!(next_segment(&plan[1..2], 0, 0), (1, vec![]));
    }

    #[test]
    fn runs_split_at_gaps() {
        let codes = [3u8, 4, 5, 9, 10, 255];
        let runs = consecutive_runs(&codes, |&k| k);
        assert_eq!(runs, vec![&[3u8, 4, 5][..], &[9, 10], &[255]]);
        assert!(consecutive_runs(&[] as &[u8], |&k| k).is_empty());
    }

    #[test]
    fn plans_crlf_as_one_return_and_rejects_control_characters() {
        let keymap = Keymap::from_parts(8, 2, vec![sym::RETURN, 0, 0x61, 0x41]);
        assert_eq!(plan_text("a\r\n", &keymap).ok(), Some(vec![key(9), key(8)]));
        assert_eq!(
            plan_text("é", &keymap).ok(),
            Some(vec![Planned::Missing(0xe9)])
        );
        assert!(matches!(
            plan_text("a\u{7}", &keymap),
            Err(DesktopError::Untypable('\u{7}'))
        ));
    }
}
