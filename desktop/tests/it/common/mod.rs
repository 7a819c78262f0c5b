//! Test harness: a real Xvfb per test on a display it picks itself, removed on drop, and a
//! second X client that creates windows and watches the events the desktop's input produces.
//! Tests fail (never skip) when Xvfb is missing.

#![allow(dead_code)] // Each test binary uses a different part of the harness.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    ConnectionExt as _, CreateWindowAux, EventMask, InputFocus, Window, WindowClass,
};
use x11rb::rust_connection::RustConnection;

pub const WIDTH: u32 = 1280;
pub const HEIGHT: u32 = 800;

/// A running Xvfb, killed on drop.
pub struct Xvfb {
    child: Child,
    pub display: String,
}

impl Xvfb {
    /// Starts `Xvfb` on a free display (it picks one with `-displayfd` and reports it once it
    /// accepts connections), with a 1280x800x24 screen.
    pub fn start() -> Result<Xvfb> {
        Xvfb::start_with(&[])
    }

    /// Like [`Xvfb::start`], with extra arguments for Xvfb.
    // The test's own X server: killed and waited for on drop.
    #[allow(clippy::disallowed_methods)]
    pub fn start_with(extra: &[&str]) -> Result<Xvfb> {
        let screen = format!("{WIDTH}x{HEIGHT}x24");
        let mut child = Command::new("Xvfb")
            .args(["-displayfd", "1", "-screen", "0", &screen, "-noreset"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context(
                "cannot run Xvfb; install it with `apt-get install -y xvfb x11-utils` \
                 (these tests need a real X server and do not skip)",
            )?;
        let stdout = child.stdout.take().context("Xvfb stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut xvfb = Xvfb {
            child,
            display: String::new(),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .context("Xvfb did not report its display within 20 s")?;
        let number: u32 = line
            .trim()
            .parse()
            .with_context(|| format!("Xvfb reported {line:?} instead of a display number"))?;
        xvfb.display = format!(":{number}");
        Ok(xvfb)
    }

    /// A plain X client connection for the test's own windows and checks.
    pub fn client(&self) -> Result<RustConnection> {
        let (conn, _) = RustConnection::connect(Some(&self.display))
            .with_context(|| format!("connecting to {}", self.display))?;
        Ok(conn)
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn root(conn: &RustConnection) -> Window {
    conn.setup().roots[0].root
}

/// Creates, maps and waits for an override-redirect window filled with `rgb` (0xRRGGBB),
/// listening for `events`.
pub fn window(
    conn: &RustConnection,
    (x, y, width, height): (i16, i16, u16, u16),
    rgb: u32,
    events: EventMask,
) -> Result<Window> {
    let id = conn.generate_id()?;
    let aux = CreateWindowAux::new()
        .background_pixel(rgb)
        .override_redirect(1)
        .event_mask(events | EventMask::EXPOSURE | EventMask::STRUCTURE_NOTIFY);
    conn.create_window(
        x11rb::COPY_DEPTH_FROM_PARENT,
        id,
        root(conn),
        x,
        y,
        width,
        height,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &aux,
    )?
    .check()?;
    conn.map_window(id)?.check()?;
    wait_for(
        conn,
        Duration::from_secs(5),
        |e| matches!(e, Event::Expose(expose) if expose.window == id),
    )
    .context("the test window was never exposed")?;
    Ok(id)
}

/// Gives a window the keyboard focus.
pub fn focus(conn: &RustConnection, window: Window) -> Result<()> {
    conn.set_input_focus(InputFocus::PARENT, window, x11rb::CURRENT_TIME)?
        .check()?;
    Ok(())
}

/// Reads events until one matches, failing after `timeout`.
pub fn wait_for(
    conn: &RustConnection,
    timeout: Duration,
    mut matches: impl FnMut(&Event) -> bool,
) -> Result<Event> {
    let deadline = Instant::now() + timeout;
    loop {
        conn.flush()?;
        while let Some(event) = conn.poll_for_event()? {
            if matches(&event) {
                return Ok(event);
            }
        }
        if Instant::now() >= deadline {
            bail!("no matching event within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Collects the events that `keep` accepts until `done` says the list is complete (failing
/// after `timeout`), then keeps reading for `settle` more to catch events that should not be
/// there.
pub fn collect(
    conn: &RustConnection,
    timeout: Duration,
    settle: Duration,
    mut keep: impl FnMut(&Event) -> bool,
    mut done: impl FnMut(&[Event]) -> bool,
) -> Result<Vec<Event>> {
    let deadline = Instant::now() + timeout;
    let mut events = Vec::new();
    let mut complete_at: Option<Instant> = None;
    loop {
        conn.flush()?;
        while let Some(event) = conn.poll_for_event()? {
            if keep(&event) {
                events.push(event);
            }
        }
        if complete_at.is_none() && done(&events) {
            complete_at = Some(Instant::now());
        }
        match complete_at {
            Some(at) if at.elapsed() >= settle => return Ok(events),
            None if Instant::now() >= deadline => {
                bail!("events incomplete after {timeout:?}: {events:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Discards every queued event.
pub fn drain(conn: &RustConnection) -> Result<()> {
    conn.get_input_focus()?.reply()?;
    while conn.poll_for_event()?.is_some() {}
    Ok(())
}
