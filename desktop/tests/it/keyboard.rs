//! Keyboard input against a real Xvfb. A watcher client owns a focused window and translates
//! each key event with the keyboard mapping as it was when the event arrived: it refetches the
//! mapping as soon as a MappingNotify comes, as a real client does.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::Xvfb;
use desktop::{Desktop, DesktopError, KeyNameError, REMAP_LINGER, keys};
use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    AtomEnum, ConnectionExt as _, EventMask, KeyButMask, Mapping, Window,
};
use x11rb::rust_connection::RustConnection;

const TIMEOUT: Duration = Duration::from_secs(5);

/// One key event as the watcher saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    press: bool,
    keycode: u8,
    /// The keysym for the event's Shift state, from the mapping current at the event.
    keysym: u32,
    /// The keycode's unshifted keysym.
    base: u32,
    state: KeyButMask,
}

/// The keyboard mapping as a client holds it.
struct Mapping_ {
    min: u8,
    per: usize,
    syms: Vec<u32>,
}

impl Mapping_ {
    fn fetch(conn: &RustConnection) -> Result<Mapping_> {
        let (min, max) = (conn.setup().min_keycode, conn.setup().max_keycode);
        let reply = conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
        Ok(Mapping_ {
            min,
            per: reply.keysyms_per_keycode.into(),
            syms: reply.keysyms,
        })
    }

    fn row(&self, keycode: u8) -> &[u32] {
        let start = usize::from(keycode - self.min) * self.per;
        &self.syms[start..start + self.per]
    }

    /// Core protocol translation for group 1: the Shift level, or the plain keysym (upper-cased
    /// when it is a Latin-1 letter) when the Shift level is empty.
    fn translate(&self, keycode: u8, shift: bool) -> (u32, u32) {
        let row = self.row(keycode);
        let base = row[0];
        if !shift {
            return (base, base);
        }
        match row.get(1).copied().unwrap_or(0) {
            0 => {
                let upper = char::from_u32(base)
                    .filter(|_| base <= 0xff)
                    .and_then(|c| c.to_uppercase().next())
                    .map_or(base, u32::from);
                (upper, base)
            }
            shifted => (shifted, base),
        }
    }

    fn spare_count(&self) -> usize {
        self.syms
            .chunks(self.per)
            .filter(|row| row.iter().all(|&k| k == 0))
            .count()
    }
}

/// A focused window and a thread that reports its key events.
struct Watcher {
    events: mpsc::Receiver<Key>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Watcher {
    fn start(xvfb: &Xvfb) -> Result<Watcher> {
        let conn = xvfb.client()?;
        let events = EventMask::KEY_PRESS | EventMask::KEY_RELEASE;
        let window = common::window(&conn, (50, 50, 400, 300), 0xeeeeee, events)?;
        common::focus(&conn, window)?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || -> Result<()> {
                let mut mapping = Mapping_::fetch(&conn)?;
                while !stop.load(Ordering::Relaxed) {
                    let Some(event) = conn.poll_for_event()? else {
                        std::thread::sleep(Duration::from_micros(500));
                        continue;
                    };
                    let (press, key) = match event {
                        Event::MappingNotify(m) if m.request == Mapping::KEYBOARD => {
                            mapping = Mapping_::fetch(&conn)?;
                            continue;
                        }
                        Event::KeyPress(k) => (true, k),
                        Event::KeyRelease(k) => (false, k),
                        _ => continue,
                    };
                    let shift = key.state.contains(KeyButMask::SHIFT);
                    let (keysym, base) = mapping.translate(key.detail, shift);
                    let record = Key {
                        press,
                        keycode: key.detail,
                        keysym,
                        base,
                        state: key.state,
                    };
                    if tx.send(record).is_err() {
                        break;
                    }
                }
                Ok(())
            }
        });
        Ok(Watcher {
            events: rx,
            stop,
            thread: Some(thread),
        })
    }

    /// Key events until `done` holds for them (failing after [`TIMEOUT`]), plus any arriving
    /// in the next 150 ms.
    fn until(&self, done: impl Fn(&[Key]) -> bool) -> Result<Vec<Key>> {
        let deadline = Instant::now() + TIMEOUT;
        let mut keys = Vec::new();
        while !done(&keys) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(key) => keys.push(key),
                Err(_) => bail!("key events incomplete after {TIMEOUT:?}: {keys:?}"),
            }
        }
        while let Ok(key) = self.events.recv_timeout(Duration::from_millis(150)) {
            keys.push(key);
        }
        Ok(keys)
    }

    /// Presses, until `count` presses and as many releases arrived.
    fn presses(&self, count: usize) -> Result<Vec<Key>> {
        self.until(|keys| keys.len() >= count * 2)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(error)) => panic!("key watcher failed: {error:#}"),
                Err(_) => panic!("key watcher panicked"),
            }
        }
    }
}

fn is_modifier(keysym: u32) -> bool {
    (0xffe1..=0xffee).contains(&keysym) || keysym == 0xfe03
}

/// The text the key presses spell, ignoring modifiers.
fn text_of(keys: &[Key]) -> String {
    keys.iter()
        .filter(|k| k.press && !is_modifier(k.keysym))
        .map(|k| match k.keysym {
            0xff0d => '\n',
            0xff09 => '\t',
            ks => keys::keysym_char(ks).unwrap_or('\u{fffd}'),
        })
        .collect()
}

/// Waits for the keyboard mapping to be `before` again: remapped keycodes are restored in the
/// background [`REMAP_LINGER`] after their last use.
fn wait_restored(client: &RustConnection, before: &[u32]) -> Result<()> {
    let deadline = Instant::now() + REMAP_LINGER + Duration::from_secs(3);
    while Mapping_::fetch(client)?.syms != before {
        if Instant::now() > deadline {
            bail!("the keyboard mapping was not restored");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Types `text` and checks the watcher read exactly it, and that the mapping is as before.
fn check_typing(xvfb: &Xvfb, desktop: &Desktop, text: &str) -> Result<()> {
    let watcher = Watcher::start(xvfb)?;
    let client = xvfb.client()?;
    let before = Mapping_::fetch(&client)?.syms;
    desktop.type_text(text)?;
    let expected = text.replace("\r\n", "\n");
    let keys = watcher.until(|keys| text_of(keys).chars().count() >= expected.chars().count())?;
    assert_eq!(text_of(&keys), expected);
    let presses = keys.iter().filter(|k| k.press).count();
    let releases = keys.iter().filter(|k| !k.press).count();
    assert_eq!(presses, releases, "every key released: {keys:?}");
    wait_restored(&client, &before)
}

#[test]
fn typing_unicode_arrives_as_exactly_that_text() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    check_typing(&xvfb, &desktop, "héllo 世界\n")
}

#[test]
fn typing_ascii_with_shifted_characters_and_whitespace() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    check_typing(
        &xvfb,
        &desktop,
        "Hello, World! ~`@#$%^&*()_+{}|:\"<>? 0123456789-=[]\\;',./\tend\r\n",
    )
}

#[test]
fn typing_more_distinct_characters_than_spare_keycodes() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let spares = Mapping_::fetch(&xvfb.client()?)?.spare_count();
    assert!(spares > 0, "Xvfb's keymap has spare keycodes");
    // Distinct CJK characters, more than there are spare keycodes, with a repeat at the end.
    let mut text: String = (0..spares as u32 + 12)
        .map(|i| char::from_u32(0x4e00 + i).context("CJK character"))
        .collect::<Result<_>>()?;
    text.push('一');
    let desktop = Desktop::connect(&xvfb.display)?;
    check_typing(&xvfb, &desktop, &text)
}

#[test]
fn typing_with_caps_lock_on_types_the_text_as_given() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let client = xvfb.client()?;
    desktop.press("Caps_Lock")?;
    let lock_on = |client: &RustConnection| -> Result<bool> {
        let pointer = client.query_pointer(common::root(client))?.reply()?;
        Ok(pointer.mask.contains(KeyButMask::LOCK))
    };
    assert!(lock_on(&client)?, "Caps Lock is on");
    check_typing(&xvfb, &desktop, "aB é")?;
    assert!(lock_on(&client)?, "Caps Lock is on again after typing");
    Ok(())
}

#[test]
fn chords_press_in_order_and_release_in_reverse() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let watcher = Watcher::start(&xvfb)?;
    desktop.press("ctrl+shift+t")?;
    let keys = watcher.presses(3)?;
    let sequence: Vec<(bool, u32)> = keys.iter().map(|k| (k.press, k.base)).collect();
    assert_eq!(
        sequence,
        vec![
            (true, 0xffe3),
            (true, 0xffe1),
            (true, 0x74),
            (false, 0x74),
            (false, 0xffe1),
            (false, 0xffe3),
        ]
    );
    let t = &keys[2];
    assert!(
        t.state.contains(KeyButMask::CONTROL | KeyButMask::SHIFT),
        "{t:?}"
    );

    // An upper-case letter alone is typed with Shift...
    desktop.press("A")?;
    let keys = watcher.presses(2)?;
    let pressed: Vec<u32> = keys.iter().filter(|k| k.press).map(|k| k.keysym).collect();
    assert_eq!(pressed, vec![0xffe1, 0x41]);

    // ...but with a command modifier it means the plain key, as models mean CTRL+C.
    desktop.hotkey(&["CTRL", "C"])?;
    let keys = watcher.presses(2)?;
    let pressed: Vec<(u32, bool)> = keys
        .iter()
        .filter(|k| k.press)
        .map(|k| (k.keysym, k.state.contains(KeyButMask::SHIFT)))
        .collect();
    assert_eq!(pressed, vec![(0xffe3, false), (0x63, false)]);
    assert!(keys[1].state.contains(KeyButMask::CONTROL));

    // Several chords, one after the other, as xdotool's key takes them.
    desktop.press("ctrl+a BackSpace")?;
    let keys = watcher.presses(3)?;
    let sequence: Vec<(bool, u32)> = keys.iter().map(|k| (k.press, k.base)).collect();
    assert_eq!(
        sequence,
        vec![
            (true, 0xffe3),
            (true, 0x61),
            (false, 0x61),
            (false, 0xffe3),
            (true, 0xff08),
            (false, 0xff08),
        ]
    );

    // Model and AIO aliases.
    for (name, keysym) in [
        ("ENTER", 0xff0d),
        ("esc", 0xff1b),
        ("pagedown", 0xff56),
        ("ARROWLEFT", 0xff51),
        ("F5", 0xffc2),
        ("space", 0x20),
    ] {
        desktop.press(name)?;
        let keys = watcher.presses(1)?;
        assert_eq!(keys[0].keysym, keysym, "{name}");
    }
    Ok(())
}

#[test]
fn a_key_missing_from_the_layout_is_pressed_through_a_remap() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let client = xvfb.client()?;
    let before = Mapping_::fetch(&client)?.syms;
    let watcher = Watcher::start(&xvfb)?;
    let pressed_at = Instant::now();
    desktop.press("ctrl+é")?;
    // The remap lingers, for clients slower than this watcher...
    if pressed_at.elapsed() < REMAP_LINGER / 2 {
        assert_ne!(Mapping_::fetch(&client)?.syms, before, "the remap lingers");
    }
    let keys = watcher.presses(2)?;
    let pressed: Vec<u32> = keys.iter().filter(|k| k.press).map(|k| k.keysym).collect();
    assert_eq!(pressed, vec![0xffe3, 0xe9]);
    // ...and is then restored in the background.
    wait_restored(&client, &before)?;

    // Held with key_down, the remap stays until key_up, however long that takes.
    desktop.key_down("世")?;
    let keys = watcher.until(|keys| !keys.is_empty())?;
    assert_eq!((keys[0].press, keys[0].keysym), (true, 0x0100_4e16));
    std::thread::sleep(REMAP_LINGER + Duration::from_millis(300));
    assert_ne!(
        Mapping_::fetch(&client)?.syms,
        before,
        "still mapped while held"
    );
    desktop.key_up("世")?;
    let keys = watcher.until(|keys| !keys.is_empty())?;
    assert_eq!((keys[0].press, keys[0].keysym), (false, 0x0100_4e16));
    wait_restored(&client, &before)
}

#[test]
fn dropping_the_desktop_restores_the_mapping() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let client = xvfb.client()?;
    let before = Mapping_::fetch(&client)?.syms;
    let desktop = Desktop::connect(&xvfb.display)?;
    desktop.type_text("ÿ")?;
    desktop.key_down("Ω")?;
    drop(desktop);
    assert_eq!(Mapping_::fetch(&client)?.syms, before);
    Ok(())
}

#[test]
fn key_down_holds_until_key_up() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let watcher = Watcher::start(&xvfb)?;
    desktop.key_down("shift")?;
    desktop.press("a")?;
    desktop.key_up("shift")?;
    let keys = watcher.presses(2)?;
    let sequence: Vec<(bool, u32)> = keys.iter().map(|k| (k.press, k.keysym)).collect();
    assert_eq!(
        sequence,
        vec![(true, 0xffe1), (true, 0x41), (false, 0x41), (false, 0xffe1)],
        "a typed while Shift is held is A"
    );
    Ok(())
}

#[test]
fn unknown_keys_and_untypable_characters_are_errors_naming_them() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    match desktop.press("ctrl+bogus") {
        Err(DesktopError::KeyName(KeyNameError::Unknown(name))) => assert_eq!(name, "bogus"),
        other => panic!("expected an unknown key error, got {other:?}"),
    }
    let message = desktop
        .hotkey(&["ctrl", "nokey"])
        .map_err(|e| e.to_string());
    assert_eq!(message, Err("unknown key name \"nokey\"".into()));
    assert!(matches!(
        desktop.type_text("ok\u{7}"),
        Err(DesktopError::Untypable('\u{7}'))
    ));
    Ok(())
}

/// Asks for the CLIPBOARD as `target` and returns the property's type and bytes.
fn read_clipboard(conn: &RustConnection, window: Window, target: u32) -> Result<(u32, Vec<u8>)> {
    let property = conn
        .intern_atom(false, b"DESKTOP_TEST_PASTE")?
        .reply()?
        .atom;
    let clipboard = conn.intern_atom(false, b"CLIPBOARD")?.reply()?.atom;
    conn.convert_selection(window, clipboard, target, property, x11rb::CURRENT_TIME)?;
    let event = common::wait_for(conn, TIMEOUT, |e| matches!(e, Event::SelectionNotify(_)))?;
    let Event::SelectionNotify(notify) = event else {
        bail!("expected SelectionNotify");
    };
    if notify.property == x11rb::NONE {
        bail!("the clipboard owner refused target {target}");
    }
    let reply = conn
        .get_property(true, window, property, AtomEnum::ANY, 0, u32::MAX)?
        .reply()?;
    Ok((reply.type_, reply.value))
}

#[test]
fn pasting_serves_the_text_on_the_clipboard_and_presses_ctrl_v() -> Result<()> {
    let xvfb = Xvfb::start()?;
    let desktop = Desktop::connect(&xvfb.display)?;
    let watcher = Watcher::start(&xvfb)?;
    let text = "héllo 世界, pasted\nsecond line";
    desktop.paste_text(text)?;
    let keys = watcher.presses(2)?;
    let pressed: Vec<u32> = keys.iter().filter(|k| k.press).map(|k| k.keysym).collect();
    assert_eq!(pressed, vec![0xffe3, 0x76], "ctrl+v");

    let client = xvfb.client()?;
    let window = common::window(&client, (0, 0, 10, 10), 0, EventMask::PROPERTY_CHANGE)?;
    let utf8 = client.intern_atom(false, b"UTF8_STRING")?.reply()?.atom;
    let (kind, bytes) = read_clipboard(&client, window, utf8)?;
    assert_eq!((kind, String::from_utf8(bytes)?), (utf8, text.to_owned()));

    let (kind, bytes) = read_clipboard(&client, window, AtomEnum::STRING.into())?;
    assert_eq!(kind, u32::from(AtomEnum::STRING));
    assert_eq!(bytes, b"h\xe9llo ??, pasted\nsecond line");

    let targets = client.intern_atom(false, b"TARGETS")?.reply()?.atom;
    let (kind, bytes) = read_clipboard(&client, window, targets)?;
    assert_eq!(kind, u32::from(AtomEnum::ATOM));
    let offered: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert!(offered.contains(&utf8), "{offered:?}");

    // New text replaces the old.
    desktop.set_clipboard("second")?;
    let (_, bytes) = read_clipboard(&client, window, utf8)?;
    assert_eq!(bytes, b"second");
    Ok(())
}
