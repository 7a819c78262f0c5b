//! The X11 desktop, in-process, for computer-use agents: screen capture (MIT-SHM with a
//! GetImage fallback), PNG/JPEG encoding with optional resizing, waiting for the screen to
//! settle, and input injection through XTEST (pointer, keys by name, typing any Unicode text on
//! any layout, pasting through the clipboard). No process is spawned: no xdotool, no scrot.
//!
//! **Invariant:** this crate knows nothing of HTTP or JSON; sandboxd's API layer calls it.
//!
//! ```no_run
//! use desktop::{Button, Desktop, ImageFormat};
//! use std::time::Duration;
//!
//! let desktop = Desktop::connect(":1")?;
//! desktop.move_to(640, 400)?;
//! desktop.click(Button::Left, 1, &["ctrl"])?;
//! desktop.type_text("héllo 世界\n")?;
//! desktop.wait_until_settled(Duration::from_millis(300), Duration::from_secs(3))?;
//! let png = desktop.screenshot(ImageFormat::Png, Some((1024, 640)))?;
//! let (x, y) = png.to_screen(512.0, 320.0); // a point on the image, back on the screen
//! # Ok::<(), desktop::DesktopError>(())
//! ```
//!
//! # Layout
//! - [`Desktop`] (here): the connection, shared by everything else; `Send + Sync`. The
//!   other modules add their methods to it: `capture` (screenshots), `settle` (waiting for a
//!   still screen), `pointer` (mouse), `keyboard` (keys and typing) and `clipboard` (pasting
//!   through the CLIPBOARD selection).
//! - `frame`: [`Frame`], the captured pixels.
//! - `capture`: [`Desktop::capture`] (MIT-SHM segment reuse, GetImage fallback).
//! - `encode`: [`encode`], [`ImageFormat`], [`EncodedImage`] with the image-to-screen scale.
//! - `scale`: the triangle-filter resizer behind `encode`.
//! - `settle`: [`Desktop::wait_until_settled`] and [`SettleReport`].
//! - `input`: XTEST primitives, the held-keys state, synchronising with the server.
//! - `pointer`: [`Button`], moving, clicking, scrolling (in wheel notches), dragging (along a
//!   path, or in a straight line from the pointer).
//! - `keyboard`: keys and chords by name, held keys, typing any text.
//! - `keymap`: the keyboard mapping snapshot: keysym to keycode and Shift level, spare keycodes.
//! - `input::remap`: spare keycodes mapped to missing keysyms, and the thread that restores
//!   them (part of the input state).
//! - [`keys`]: key names (X keysyms, xdotool, Anthropic, OpenAI CUA, AIO aliases) to keysyms.
//! - `keysym_names`: the generated table of X keysym names.
//! - `clipboard`: the in-process CLIPBOARD owner and [`Desktop::paste_text`].
//! - `error`: [`DesktopError`], naming the step that failed.

mod capture;
mod clipboard;
mod encode;
mod error;
mod frame;
mod input;
mod keyboard;
mod keymap;
pub mod keys;
mod keysym_names;
mod pointer;
mod scale;
mod settle;

pub use encode::{EncodeError, EncodedImage, ImageFormat, MAX_IMAGE_SIDE, encode, fit_within};
pub use error::DesktopError;
pub use frame::Frame;
pub use input::remap::REMAP_LINGER;
pub use keys::{KeyNameError, Keysym};
pub use pointer::{Button, MAX_SCROLL_NOTCHES};
pub use settle::SettleReport;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::xproto::{ConnectionExt as _, Window};
use x11rb::protocol::xtest::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;

use crate::capture::Capturer;
use crate::clipboard::ClipboardOwner;
use crate::error::StepExt;
use crate::input::InputShared;
use crate::input::remap;

/// An X display, in-process: screen capture and input injection.
///
/// `Desktop` is `Send + Sync`; share it (for example in an `Arc`) between threads and tokio
/// tasks. Captures may run concurrently with input; input operations are serialised so that a
/// click with modifiers or a typed text is never interleaved with another input operation.
///
/// Every method blocks on round trips to the X server. Most take microseconds to a few
/// milliseconds (a capture of 1280x800 takes a few milliseconds), so async callers may call them
/// directly; [`Desktop::wait_until_settled`] sleeps up to its timeout, and typing text that needs
/// keyboard remapping may wait up to [`crate::REMAP_LINGER`] when it runs out of spare keycodes,
/// so call those through `tokio::task::spawn_blocking` (or `block_in_place`).
///
/// Dropping a `Desktop` releases the keys and buttons it holds and restores remapped keycodes,
/// waiting for their linger time if needed.
pub struct Desktop {
    /// Shared with the remap restorer thread.
    pub(crate) conn: Arc<RustConnection>,
    pub(crate) root: Window,
    /// The display name, for the clipboard thread's own connection.
    pub(crate) display: String,
    /// The MIT-SHM segment reused between captures; locked for the duration of one capture.
    pub(crate) capturer: Mutex<Capturer>,
    /// What this process holds down or has remapped, shared with the remap restorer thread.
    pub(crate) input: Arc<InputShared>,
    /// The thread restoring remapped keycodes once they stop lingering.
    restorer: Option<JoinHandle<()>>,
    /// The CLIPBOARD owner, started by the first paste.
    pub(crate) clipboard: Mutex<Option<ClipboardOwner>>,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop")
            .field("display", &self.display)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Desktop {
    /// Connects to an X display such as `":1"` and checks that it has the XTEST extension.
    pub fn connect(display: &str) -> Result<Desktop, DesktopError> {
        let (conn, screen) =
            RustConnection::connect(Some(display)).map_err(|source| DesktopError::Connect {
                display: display.to_owned(),
                source,
            })?;
        let root = conn
            .setup()
            .roots
            .get(screen)
            .ok_or_else(|| DesktopError::NoScreen {
                display: display.to_owned(),
                screen,
            })?
            .root;
        const STEP: &str = "checking for the XTEST extension";
        if conn
            .extension_information(xtest::X11_EXTENSION_NAME)
            .step(STEP)?
            .is_none()
        {
            return Err(DesktopError::MissingExtension("XTEST"));
        }
        conn.xtest_get_version(2, 2)
            .step(STEP)?
            .reply()
            .step(STEP)?;
        let conn = Arc::new(conn);
        let input = Arc::new(InputShared::default());
        let restorer = std::thread::Builder::new()
            .name("desktop-remap-restorer".into())
            .spawn({
                let (conn, input) = (Arc::clone(&conn), Arc::clone(&input));
                move || remap::run_restorer(conn, input)
            })
            .map_err(|source| DesktopError::Thread {
                name: "remap restorer",
                source,
            })?;
        Ok(Desktop {
            conn,
            root,
            display: display.to_owned(),
            capturer: Mutex::new(Capturer::default()),
            input,
            restorer: Some(restorer),
            clipboard: Mutex::new(None),
        })
    }

    /// The display name this desktop is connected to.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The current size of the screen (the root window), which RandR may change at any time.
    pub fn screen_size(&self) -> Result<(u32, u32), DesktopError> {
        const STEP: &str = "reading the screen size";
        let geometry = self
            .conn
            .get_geometry(self.root)
            .step(STEP)?
            .reply()
            .step(STEP)?;
        Ok((u32::from(geometry.width), u32::from(geometry.height)))
    }
}

/// Locks a mutex, recovering the data if a thread panicked while holding it: the states guarded
/// here stay consistent between individual field updates.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Desktop {
    fn drop(&mut self) {
        self.release_everything();
        lock(&self.input.state).closing = true;
        self.input.wake.notify_all();
        if let Some(restorer) = self.restorer.take()
            && restorer.join().is_err()
        {
            tracing::warn!("the remap restorer thread panicked");
        }
        remap::restore_all(&self.conn, &mut lock(&self.input.state));
        // Stops the clipboard thread.
        drop(lock(&self.clipboard).take());
        // The server frees the MIT-SHM segment when the connection closes.
    }
}

impl Desktop {
    /// Captures the screen and encodes it: [`Desktop::capture`] then [`encode`].
    pub fn screenshot(
        &self,
        format: ImageFormat,
        target: Option<(u32, u32)>,
    ) -> Result<EncodedImage, DesktopError> {
        let frame = self.capture()?;
        Ok(encode(&frame, format, target)?)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn desktop_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::Desktop>();
    }
}
