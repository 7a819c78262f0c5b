//! A snapshot of the core keyboard mapping: which keycode, with or without Shift, produces a
//! keysym, and which keycodes are spare (produce nothing) so a missing keysym can be mapped there.
//!
//! Only the first group's first two levels are used (plain and Shift). A keysym reachable only
//! through AltGr or another group counts as missing and is typed through a spare keycode instead.

use x11rb::connection::Connection;
use x11rb::protocol::xproto::ConnectionExt as _;

use crate::error::{DesktopError, StepExt};
use crate::keys::{Keysym, char_keysym, sym};

/// A key to press, and whether Shift must be held for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stroke {
    pub keycode: u8,
    pub shift: bool,
}

/// The keyboard mapping as the server had it when fetched, plus this process's own changes.
#[derive(Debug, Clone)]
pub(crate) struct Keymap {
    min_keycode: u8,
    /// Keysyms per keycode in `keysyms` (the server's width, at least 1).
    per_keycode: usize,
    /// Row-major: keycode `min_keycode + i` owns `keysyms[i * per_keycode..][..per_keycode]`.
    keysyms: Vec<Keysym>,
}

impl Keymap {
    /// Reads the whole mapping from the server.
    pub fn fetch(conn: &impl Connection) -> Result<Keymap, DesktopError> {
        const STEP: &str = "reading the keyboard mapping";
        let setup = conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let count = max.saturating_sub(min).saturating_add(1);
        let reply = conn
            .get_keyboard_mapping(min, count)
            .step(STEP)?
            .reply()
            .step(STEP)?;
        Ok(Keymap::from_parts(
            min,
            usize::from(reply.keysyms_per_keycode),
            reply.keysyms,
        ))
    }

    pub fn from_parts(min_keycode: u8, per_keycode: usize, keysyms: Vec<Keysym>) -> Keymap {
        Keymap {
            min_keycode,
            per_keycode: per_keycode.max(1),
            keysyms,
        }
    }

    /// The keysyms of one keycode (empty for a keycode outside the mapping).
    pub fn row(&self, keycode: u8) -> &[Keysym] {
        let Some(index) = keycode.checked_sub(self.min_keycode) else {
            return &[];
        };
        let start = usize::from(index) * self.per_keycode;
        self.keysyms
            .get(start..start + self.per_keycode)
            .unwrap_or(&[])
    }

    /// Replaces the first keysyms of a keycode's row (the rest become NoSymbol), mirroring a
    /// change this process made on the server.
    pub fn set_row(&mut self, keycode: u8, keysyms: &[Keysym]) {
        let Some(index) = keycode.checked_sub(self.min_keycode) else {
            return;
        };
        let start = usize::from(index) * self.per_keycode;
        if let Some(row) = self.keysyms.get_mut(start..start + self.per_keycode) {
            for (i, slot) in row.iter_mut().enumerate() {
                *slot = keysyms.get(i).copied().unwrap_or(sym::NO_SYMBOL);
            }
        }
    }

    fn keycodes(&self) -> impl Iterator<Item = u8> + '_ {
        let rows = self.keysyms.len() / self.per_keycode;
        (0..rows).filter_map(|i| u8::try_from(i).ok()?.checked_add(self.min_keycode))
    }

    /// The key producing `keysym`, preferring one that needs no Shift, then the lowest keycode.
    pub fn find(&self, keysym: Keysym) -> Option<Stroke> {
        if keysym == sym::NO_SYMBOL {
            return None;
        }
        let plain = self.keycodes().find(|&kc| self.level(kc, 0) == keysym);
        if let Some(keycode) = plain {
            return Some(Stroke {
                keycode,
                shift: false,
            });
        }
        self.keycodes()
            .find(|&kc| self.level(kc, 1) == keysym)
            .map(|keycode| Stroke {
                keycode,
                shift: true,
            })
    }

    /// The key typing `c`, under its Latin-1 or its Unicode keysym.
    pub fn find_char(&self, c: char) -> Option<Stroke> {
        let keysym = char_keysym(c)?;
        self.find(keysym).or_else(|| {
            let cp = u32::from(c);
            (cp <= 0xff)
                .then(|| self.find(sym::UNICODE_OFFSET | cp))
                .flatten()
        })
    }

    /// The keysym at `level` (0 plain, 1 Shift) of a keycode, applying the core protocol's rule
    /// that a letter listed alone has its upper case on the Shift level.
    fn level(&self, keycode: u8, level: usize) -> Keysym {
        let row = self.row(keycode);
        let plain = row.first().copied().unwrap_or(sym::NO_SYMBOL);
        if level == 0 {
            return plain;
        }
        match row.get(1).copied().unwrap_or(sym::NO_SYMBOL) {
            sym::NO_SYMBOL => latin1_upper(plain).unwrap_or(sym::NO_SYMBOL),
            shifted => shifted,
        }
    }

    /// Keycodes whose whole row is NoSymbol, in ascending order.
    pub fn spare_keycodes(&self) -> Vec<u8> {
        self.keycodes()
            .filter(|&kc| self.row(kc).iter().all(|&ks| ks == sym::NO_SYMBOL))
            .collect()
    }
}

/// The upper case of a lower-case Latin-1 letter keysym, when it is also Latin-1.
fn latin1_upper(keysym: Keysym) -> Option<Keysym> {
    let c = char::from_u32(keysym).filter(|_| keysym <= 0xff)?;
    if !c.is_lowercase() {
        return None;
    }
    let mut upper = c.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(u), None) if u32::from(u) <= 0xff => Some(u32::from(u)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keycodes 8..=12: a/A, 1/!, e alone, empty, space.
    fn sample() -> Keymap {
        Keymap::from_parts(8, 2, vec![0x61, 0x41, 0x31, 0x21, 0x65, 0, 0, 0, 0x20, 0])
    }

    #[test]
    fn finds_plain_and_shifted_keysyms() {
        let map = sample();
        let stroke = |keycode, shift| Some(Stroke { keycode, shift });
        assert_eq!(map.find(0x61), stroke(8, false));
        assert_eq!(map.find(0x41), stroke(8, true));
        assert_eq!(map.find(0x21), stroke(9, true));
        assert_eq!(map.find(0x20), stroke(12, false));
        // A letter listed alone gets its upper case on the Shift level.
        assert_eq!(map.find(0x45), stroke(10, true));
        assert_eq!(map.find(0xe9), None);
        assert_eq!(map.find_char('A'), stroke(8, true));
    }

    #[test]
    fn spare_keycodes_are_the_empty_rows() {
        let mut map = sample();
        assert_eq!(map.spare_keycodes(), vec![11]);
        map.set_row(11, &[0x0100_4e16, 0x0100_4e16]);
        assert!(map.spare_keycodes().is_empty());
        assert_eq!(
            map.find_char('世'),
            Some(Stroke {
                keycode: 11,
                shift: false
            })
        );
        assert_eq!(map.row(7), &[] as &[Keysym]);
        assert_eq!(map.row(13), &[] as &[Keysym]);
    }
}
