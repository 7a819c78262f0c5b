//! The CLIPBOARD selection, owned in-process, for pasting text instead of typing it.
//!
//! The first use opens a second X connection with a tiny input-only window and a thread that
//! answers `SelectionRequest` events for the targets `TARGETS`, `UTF8_STRING`,
//! `text/plain;charset=utf-8`, `TEXT`, `STRING` and `text/plain` (the last two in Latin-1, other
//! characters as `?`). The text stays on offer until other text replaces it or another client
//! takes the selection. Text must fit in one X request (no INCR transfers): about 256 KiB
//! without BIG-REQUESTS, 16 MiB with it.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConnectionExt as _, CreateWindowAux, EventMask, PropMode,
    SELECTION_NOTIFY_EVENT, SelectionNotifyEvent, SelectionRequestEvent, Window, WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;
use x11rb::{CURRENT_TIME, NONE, atom_manager};

use crate::error::{DesktopError, StepExt};
use crate::{Desktop, lock};

atom_manager! {
    /// Atoms the clipboard owner uses.
    Atoms: AtomsCookie {
        CLIPBOARD,
        TARGETS,
        UTF8_STRING,
        TEXT,
        TEXT_PLAIN_UTF8: b"text/plain;charset=utf-8",
        TEXT_PLAIN: b"text/plain",
        STOP: b"_AGENTBOX_CLIPBOARD_STOP",
    }
}

/// Room left in a request for the ChangeProperty header.
const REQUEST_HEADER: usize = 64;

/// The clipboard connection, window and serving thread.
pub(crate) struct ClipboardOwner {
    conn: Arc<RustConnection>,
    window: Window,
    atoms: Atoms,
    /// The UTF-8 text on offer, shared with the serving thread.
    text: Arc<Mutex<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl ClipboardOwner {
    fn start(display: &str) -> Result<ClipboardOwner, DesktopError> {
        const STEP: &str = "starting the clipboard owner";
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
        let window = conn.generate_id().step(STEP)?;
        conn.create_window(
            0,
            window,
            root,
            -1,
            -1,
            1,
            1,
            0,
            WindowClass::INPUT_ONLY,
            0,
            &CreateWindowAux::new(),
        )
        .step(STEP)?
        .check()
        .step(STEP)?;
        let atoms = Atoms::new(&conn).step(STEP)?.reply().step(STEP)?;
        let conn = Arc::new(conn);
        let text = Arc::new(Mutex::new(Vec::new()));
        let thread = std::thread::Builder::new()
            .name("desktop-clipboard".into())
            .spawn({
                let (conn, text) = (Arc::clone(&conn), Arc::clone(&text));
                move || serve(&conn, window, atoms, &text)
            })
            .map_err(|source| DesktopError::Thread {
                name: "clipboard",
                source,
            })?;
        Ok(ClipboardOwner {
            conn,
            window,
            atoms,
            text,
            thread: Some(thread),
        })
    }

    /// Offers `text` and takes ownership of CLIPBOARD.
    fn set(&self, text: &str) -> Result<(), DesktopError> {
        const STEP: &str = "taking the CLIPBOARD selection";
        let max = self
            .conn
            .maximum_request_bytes()
            .saturating_sub(REQUEST_HEADER);
        if text.len() > max {
            return Err(DesktopError::ClipboardTooLarge {
                len: text.len(),
                max,
            });
        }
        *lock(&self.text) = text.as_bytes().to_vec();
        // CurrentTime: the server stamps the ownership with its own time, which is never earlier
        // than a previous owner's.
        self.conn
            .set_selection_owner(self.window, self.atoms.CLIPBOARD, CURRENT_TIME)
            .step(STEP)?;
        let owner = self
            .conn
            .get_selection_owner(self.atoms.CLIPBOARD)
            .step(STEP)?
            .reply()
            .step(STEP)?
            .owner;
        if owner != self.window {
            return Err(DesktopError::ClipboardNotOwned);
        }
        Ok(())
    }
}

impl Drop for ClipboardOwner {
    /// Wakes the serving thread with a message to its own window and waits for it to end.
    fn drop(&mut self) {
        let stop = ClientMessageEvent::new(32, self.window, self.atoms.STOP, [0u32; 5]);
        let sent = self
            .conn
            .send_event(false, self.window, EventMask::NO_EVENT, stop)
            .and_then(|_| self.conn.flush());
        match (sent, self.thread.take()) {
            (Ok(()), Some(thread)) => {
                if thread.join().is_err() {
                    tracing::warn!("the clipboard thread panicked");
                }
            }
            (Err(error), _) => tracing::warn!(%error, "could not stop the clipboard thread"),
            (Ok(()), None) => {}
        }
    }
}

/// The serving loop: answers selection requests until told to stop or the connection fails.
fn serve(conn: &RustConnection, window: Window, atoms: Atoms, text: &Mutex<Vec<u8>>) {
    loop {
        let event = match conn.wait_for_event() {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, "the clipboard connection failed");
                return;
            }
        };
        match event {
            Event::SelectionRequest(request) => {
                if let Err(error) = answer(conn, &atoms, text, &request) {
                    tracing::debug!(%error, "could not answer a selection request");
                }
            }
            Event::ClientMessage(message)
                if message.window == window && message.type_ == atoms.STOP =>
            {
                return;
            }
            Event::Error(error) => {
                // Typically a requestor window that went away before we answered.
                tracing::debug!(?error, "X error on the clipboard connection");
            }
            _ => {}
        }
    }
}

/// Writes the requested conversion to the requestor's property and notifies it, or refuses.
fn answer(
    conn: &RustConnection,
    atoms: &Atoms,
    text: &Mutex<Vec<u8>>,
    request: &SelectionRequestEvent,
) -> Result<(), x11rb::errors::ConnectionError> {
    // Obsolete clients pass no property; ICCCM says to use the target atom then.
    let property = if request.property == NONE {
        request.target
    } else {
        request.property
    };
    let requestor = request.requestor;
    let target = request.target;
    let served = if request.selection != atoms.CLIPBOARD {
        false
    } else if target == atoms.TARGETS {
        let targets = [
            atoms.TARGETS,
            atoms.UTF8_STRING,
            atoms.TEXT_PLAIN_UTF8,
            atoms.TEXT,
            AtomEnum::STRING.into(),
            atoms.TEXT_PLAIN,
        ];
        conn.change_property32(
            PropMode::REPLACE,
            requestor,
            property,
            AtomEnum::ATOM,
            &targets,
        )?;
        true
    } else if target == atoms.UTF8_STRING || target == atoms.TEXT {
        let bytes = lock(text).clone();
        conn.change_property8(
            PropMode::REPLACE,
            requestor,
            property,
            atoms.UTF8_STRING,
            &bytes,
        )?;
        true
    } else if target == atoms.TEXT_PLAIN_UTF8 {
        let bytes = lock(text).clone();
        conn.change_property8(PropMode::REPLACE, requestor, property, target, &bytes)?;
        true
    } else if target == u32::from(AtomEnum::STRING) || target == atoms.TEXT_PLAIN {
        let latin1: Vec<u8> = String::from_utf8_lossy(&lock(text))
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
            .collect();
        conn.change_property8(
            PropMode::REPLACE,
            requestor,
            property,
            AtomEnum::STRING,
            &latin1,
        )?;
        true
    } else {
        false
    };
    let notify = SelectionNotifyEvent {
        response_type: SELECTION_NOTIFY_EVENT,
        sequence: 0,
        time: request.time,
        requestor,
        selection: request.selection,
        target,
        property: if served { property } else { NONE },
    };
    conn.send_event(false, requestor, EventMask::NO_EVENT, notify)?;
    conn.flush()
}

impl Desktop {
    /// Puts text on the CLIPBOARD selection, served from this process until replaced.
    pub fn set_clipboard(&self, text: &str) -> Result<(), DesktopError> {
        let mut clipboard = lock(&self.clipboard);
        if clipboard.is_none() {
            *clipboard = Some(ClipboardOwner::start(&self.display)?);
        }
        match clipboard.as_ref() {
            Some(owner) => owner.set(text),
            // Just set above.
            None => Err(DesktopError::ClipboardNotOwned),
        }
    }

    /// Pastes text: puts it on the clipboard and presses ctrl+v, an alternative to
    /// [`Desktop::type_text`] for long texts. The focused application fetches the text after
    /// this returns. Terminals paste with ctrl+shift+v: for them, call
    /// [`Desktop::set_clipboard`] and press that chord.
    pub fn paste_text(&self, text: &str) -> Result<(), DesktopError> {
        self.set_clipboard(text)?;
        self.press("ctrl+v")
    }
}
