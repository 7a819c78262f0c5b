//! The keyboard: keys and chords by name, held keys, and typing any Unicode text on any layout.
//!
//! Each operation reads the current keyboard mapping, so a layout change (setxkbmap) is honoured
//! at once. A keysym the mapping lacks (`é` on a US layout, `世`) is mapped onto a spare keycode
//! (one with no keysyms) with ChangeKeyboardMapping before the first key event that needs it;
//! the `remap` module restores it once no client can still need it. A text's missing keysyms are
//! mapped together, one request per run of consecutive keycodes; a text with more distinct
//! missing keysyms than there are spare keycodes is typed in segments, each waiting for the
//! keycodes of the previous one to stop lingering.

use std::sync::MutexGuard;
use std::time::Instant;

use x11rb::protocol::xproto::{ConnectionExt as _, KeyButMask};

use crate::Desktop;
use crate::error::{DesktopError, StepExt};
use crate::input::remap::{self, Lingering, Remap};
use crate::input::{HeldKey, InputState};
use crate::keymap::{Keymap, Stroke};
use crate::keys::{self, Keysym, sym};

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
    pub fn hotkey(&self, names: &[&str]) -> Result<(), DesktopError> {
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
    /// lacks are typed through remapped spare keycodes (see the module documentation). If Caps
    /// Lock is on, it is switched off for the text and on again after.
    pub fn type_text(&self, text: &str) -> Result<(), DesktopError> {
        const STEP: &str = "typing text";
        if text.is_empty() {
            return Ok(());
        }
        let mut session = KeySession::begin(self, STEP)?;
        let plan = session.plan_text(text)?;
        let caps_lock = if self.caps_lock_on()? {
            session.keymap.find(sym::CAPS_LOCK).filter(|s| !s.shift)
        } else {
            None
        };
        if let Some(caps) = caps_lock {
            session.tap(caps)?;
        }
        let mut start = 0;
        while start < plan.len() {
            let (mut end, mut missing) = session.next_segment(&plan, start, session.capacity());
            if missing.len() > session.spares.len() {
                session.make_room()?;
                (end, missing) = session.next_segment(&plan, start, session.spares.len());
            }
            if end == start {
                // Nothing fits: the next character needs a remap and there is no spare keycode.
                let keysym = match plan.get(start) {
                    Some(Planned::Pool(keysym)) => *keysym,
                    _ => sym::NO_SYMBOL,
                };
                return Err(DesktopError::NoSpareKeycode { keysym });
            }
            session.remap(&missing)?;
            for planned in plan.get(start..end).unwrap_or_default() {
                let stroke = match *planned {
                    Planned::Key(stroke) => stroke,
                    Planned::Pool(keysym) => session
                        .keymap
                        .find(keysym)
                        .ok_or(DesktopError::NoSpareKeycode { keysym })?,
                };
                session.tap(stroke)?;
            }
            start = end;
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
}

/// One character of a text, as planned before typing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planned {
    /// The layout has it.
    Key(Stroke),
    /// It needs a keycode from the remap pool (which may already have it mapped).
    Pool(Keysym),
}

/// Plans each character of a text. Characters on remapped keycodes that may be reclaimed
/// (lingering ones) are planned from the pool, so they are looked up again when typed.
fn plan_text(
    text: &str,
    keymap: &Keymap,
    reclaimable: impl Fn(u8) -> bool,
) -> Result<Vec<Planned>, DesktopError> {
    let mut plan = Vec::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        let keysym = keys::char_keysym(c).ok_or(DesktopError::Untypable(c))?;
        plan.push(match keymap.find_char(c) {
            Some(stroke) if !reclaimable(stroke.keycode) => Planned::Key(stroke),
            _ => Planned::Pool(keysym),
        });
    }
    Ok(plan)
}

/// The end of the segment starting at `start` whose distinct keysyms needing a new mapping
/// (`is_mapped` false) fit in `capacity` keycodes, and those keysyms in order of first use.
fn next_segment(
    plan: &[Planned],
    start: usize,
    capacity: usize,
    is_mapped: impl Fn(Keysym) -> bool,
) -> (usize, Vec<Keysym>) {
    let mut missing = Vec::new();
    let mut end = start;
    while let Some(planned) = plan.get(end) {
        if let Planned::Pool(keysym) = *planned
            && !is_mapped(keysym)
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
/// hands its remaps to the restorer; [`KeySession::finish`] does the same and reports errors.
pub(crate) struct KeySession<'a> {
    desktop: &'a Desktop,
    state: MutexGuard<'a, InputState>,
    keymap: Keymap,
    /// Keycodes with no keysyms that this session may remap, ascending.
    spares: Vec<u8>,
    /// Keycodes this session remapped; they linger when it ends.
    remaps: Vec<Remap>,
    /// Keycodes this session pressed, to renew the linger time of remapped ones.
    used: Vec<u8>,
    /// Keycodes this session pressed and has not released.
    down: Vec<u8>,
    step: &'static str,
    finished: bool,
}

impl<'a> KeySession<'a> {
    pub fn begin(desktop: &'a Desktop, step: &'static str) -> Result<KeySession<'a>, DesktopError> {
        let state = desktop.input_state();
        let keymap = Keymap::fetch(&*desktop.conn)?;
        let spares = keymap.spare_keycodes();
        Ok(KeySession {
            desktop,
            state,
            keymap,
            spares,
            remaps: Vec::new(),
            used: Vec::new(),
            down: Vec::new(),
            step,
            finished: false,
        })
    }

    /// Whether a keycode is a remapped one that `make_room` may take back.
    fn reclaimable(&self, keycode: u8) -> bool {
        self.state
            .lingering
            .iter()
            .any(|l| l.remap.keycode == keycode)
            || self.remaps.iter().any(|r| r.keycode == keycode)
    }

    fn plan_text(&self, text: &str) -> Result<Vec<Planned>, DesktopError> {
        plan_text(text, &self.keymap, |keycode| self.reclaimable(keycode))
    }

    fn next_segment(
        &self,
        plan: &[Planned],
        start: usize,
        capacity: usize,
    ) -> (usize, Vec<Keysym>) {
        next_segment(plan, start, capacity, |keysym| {
            self.keymap.find(keysym).is_some()
        })
    }

    /// How many keycodes a remap could use: the spare ones, plus the remapped ones `make_room`
    /// can take back.
    fn capacity(&self) -> usize {
        self.spares.len() + self.state.lingering.len() + self.remaps.len()
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

    /// Maps each keysym onto its own spare keycode (on both levels), taking back remapped
    /// keycodes first when there are not enough spare ones.
    fn remap(&mut self, keysyms: &[Keysym]) -> Result<(), DesktopError> {
        if keysyms.is_empty() {
            return Ok(());
        }
        if keysyms.len() > self.spares.len() {
            self.make_room()?;
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
        remap::map_keycodes(&self.desktop.conn, &chosen, self.step)
    }

    /// Takes back every remapped keycode not pressed right now (lingering ones and this
    /// session's own), once [`remap::REMAP_LINGER`] has passed since its last use, so it can
    /// be mapped to another keysym.
    fn make_room(&mut self) -> Result<(), DesktopError> {
        self.desktop.sync(self.step)?;
        let now = Instant::now();
        let down = std::mem::take(&mut self.down);
        let mut reclaimed: Vec<Remap> = Vec::new();
        let mut last_used = None;
        let lingering = std::mem::take(&mut self.state.lingering);
        for entry in lingering {
            if down.contains(&entry.remap.keycode) {
                self.state.lingering.push(entry);
            } else {
                last_used = last_used.max(Some(entry.last_used));
                reclaimed.push(entry.remap);
            }
        }
        let (own, kept): (Vec<Remap>, Vec<Remap>) = std::mem::take(&mut self.remaps)
            .into_iter()
            .partition(|r| !down.contains(&r.keycode));
        self.remaps = kept;
        if !own.is_empty() {
            // This session may have pressed them up to now.
            last_used = Some(now);
        }
        reclaimed.extend(own);
        self.down = down;
        if let Some(last_used) = last_used {
            std::thread::sleep((last_used + remap::REMAP_LINGER).saturating_duration_since(now));
        }
        remap::restore_rows(&self.desktop.conn, &reclaimed, self.step)?;
        for remap in reclaimed {
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
            self.used.push(keycode);
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
            let lingering = self
                .state
                .lingering
                .iter()
                .position(|l| l.remap.keycode == key.keycode);
            if let Some(i) = lingering {
                let entry = self.state.lingering.remove(i);
                self.state.pinned_remaps.push(entry.remap);
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
        self.used.push(key.keycode);
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

    /// Releases what is still pressed, waits until the server has processed everything, and
    /// hands remapped keycodes to the restorer (renewing the linger time of those used).
    fn cleanup(&mut self) -> Result<(), DesktopError> {
        self.finished = true;
        let mut result = Ok(());
        for keycode in std::mem::take(&mut self.down).into_iter().rev() {
            result = result.and(self.desktop.fake_key(keycode, false, self.step));
        }
        result = result.and(self.desktop.sync(self.step));
        let now = Instant::now();
        let used = std::mem::take(&mut self.used);
        for entry in &mut self.state.lingering {
            if used.contains(&entry.remap.keycode) {
                entry.last_used = now;
            }
        }
        for remap in std::mem::take(&mut self.remaps) {
            self.state.lingering.push(Lingering {
                remap,
                last_used: now,
            });
        }
        if !self.state.lingering.is_empty() {
            self.desktop.input.wake.notify_all();
        }
        result
    }

    /// Releases what is still pressed and waits until the server has processed everything.
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
    fn segments_hold_at_most_capacity_distinct_unmapped_keysyms() {
        let plan = [
            Planned::Pool(1),
            key(9),
            Planned::Pool(2),
            Planned::Pool(1),
            Planned::Pool(3),
            key(9),
            Planned::Pool(4),
        ];
        let unmapped = |_| false;
        assert_eq!(next_segment(&plan, 0, 2, unmapped), (4, vec![1, 2]));
        assert_eq!(next_segment(&plan, 4, 2, unmapped), (7, vec![3, 4]));
        assert_eq!(next_segment(&plan, 0, 0, unmapped), (0, vec![]));
        assert_eq!(next_segment(&plan[1..2], 0, 0, unmapped), (1, vec![]));
        // Keysyms already mapped need no room.
        assert_eq!(next_segment(&plan, 0, 1, |ks| ks != 3), (7, vec![3]));
    }

    #[test]
    fn plans_crlf_as_one_return_and_rejects_control_characters() {
        let keymap = Keymap::from_parts(8, 2, vec![sym::RETURN, 0, 0x61, 0x41, 0xe9, 0xe9]);
        let none = |_| false;
        assert_eq!(
            plan_text("a\r\n", &keymap, none).ok(),
            Some(vec![key(9), key(8)])
        );
        assert_eq!(
            plan_text("ü", &keymap, none).ok(),
            Some(vec![Planned::Pool(0xfc)])
        );
        // A character on a reclaimable remapped keycode is looked up again when typed.
        assert_eq!(plan_text("é", &keymap, none).ok(), Some(vec![key(10)]));
        assert_eq!(
            plan_text("é", &keymap, |k| k == 10).ok(),
            Some(vec![Planned::Pool(0xe9)])
        );
        assert!(matches!(
            plan_text("a\u{7}", &keymap, none),
            Err(DesktopError::Untypable('\u{7}'))
        ));
    }
}
