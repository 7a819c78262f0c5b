//! [`Desktop`]: one connection to an X display, shared by capture and input.
//!
//! The other modules add their methods to [`Desktop`]: `capture` (screenshots), `settle`
//! (waiting for a still screen), `pointer` (mouse), `keyboard` (keys and typing) and `clipboard`
//! (pasting through the CLIPBOARD selection).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::xproto::{ConnectionExt as _, Window};
use x11rb::protocol::xtest::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;

use crate::capture::Capturer;
use crate::clipboard::ClipboardOwner;
use crate::error::{DesktopError, StepExt};
use crate::input::InputShared;
use crate::remap;

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

#[cfg(test)]
mod tests {
    #[test]
    fn desktop_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::Desktop>();
    }
}
