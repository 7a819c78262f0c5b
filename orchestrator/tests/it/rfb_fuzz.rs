//! The view-mode RFB filter alone in front of a real x11vnc that has no view-only protection of
//! its own (`-nopw`, no `-viewonly`): random and adversarial client byte streams (every version
//! string `RFB 003.000`-`003.009`, 3.3- and 3.8-style handshakes, split at many byte positions,
//! garbage, mutated sessions). Through a view filter, no pointer motion, button, key or
//! clipboard change may ever reach the X server. A control session at the end shows the harness
//! does see input when it arrives.
//!
//! Needs `Xvfb` and `x11vnc` on the host (`apt-get install -y xvfb x11vnc`); fails without them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orchestrator::proxy::rfb::{InputGate, RfbFilter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    AtomEnum, ConnectionExt as _, CreateWindowAux, EventMask, InputFocus, WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How many x11vnc servers share the display: x11vnc greets one new client about every 100 ms,
/// so sessions run in parallel across servers.
const SERVERS: usize = 16;

/// A real Xvfb on a display it picks, and x11vnc servers without a password (and without
/// view-only mode) on free loopback ports.
// The test's own X server and VNC servers: killed and waited for by `Killed` on drop.
#[allow(clippy::disallowed_methods)]
fn desktop() -> Result<(Killed, Vec<Killed>, String, Vec<u16>)> {
    let mut xvfb = Command::new("Xvfb")
        .args([
            "-displayfd",
            "1",
            "-screen",
            "0",
            "800x600x24",
            "-nolisten",
            "tcp",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("running Xvfb (apt-get install -y xvfb)")?;
    let mut line = String::new();
    BufReader::new(xvfb.stdout.take().context("stdout")?).read_line(&mut line)?;
    let display = format!(":{}", line.trim());
    let xvfb = Killed(xvfb);
    let mut servers = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..SERVERS {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        servers.push(Killed(
            Command::new("x11vnc")
                .args([
                    "-display",
                    &display,
                    "-rfbport",
                    &port.to_string(),
                    "-localhost",
                ])
                .args([
                    "-forever",
                    "-shared",
                    "-nopw",
                    "-noxrecord",
                    "-quiet",
                    "-noxdamage",
                ])
                .args(["-nolookup", "-wait", "2", "-defer", "2"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("running x11vnc (apt-get install -y x11vnc)")?,
        ));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("x11vnc did not listen on {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        ports.push(port);
    }
    Ok((xvfb, servers, display, ports))
}

/// What the X server shows of input: events on a full-screen focused window, the pointer, and
/// the selection owners.
struct Witness {
    conn: RustConnection,
    root: u32,
    clipboard: u32,
}

impl Witness {
    fn new(display: &str) -> Result<Self> {
        let (conn, screen) = RustConnection::connect(Some(display))?;
        let setup = conn.setup();
        let screen = &setup.roots[screen];
        let root = screen.root;
        let window = conn.generate_id()?;
        conn.create_window(
            x11rb::COPY_DEPTH_FROM_PARENT,
            window,
            root,
            0,
            0,
            screen.width_in_pixels,
            screen.height_in_pixels,
            0,
            WindowClass::INPUT_OUTPUT,
            x11rb::COPY_FROM_PARENT,
            &CreateWindowAux::new().override_redirect(1).event_mask(
                EventMask::KEY_PRESS
                    | EventMask::KEY_RELEASE
                    | EventMask::BUTTON_PRESS
                    | EventMask::BUTTON_RELEASE
                    | EventMask::POINTER_MOTION,
            ),
        )?;
        conn.map_window(window)?;
        conn.sync()?;
        conn.set_input_focus(InputFocus::POINTER_ROOT, window, x11rb::CURRENT_TIME)?;
        conn.warp_pointer(x11rb::NONE, root, 0, 0, 0, 0, 10, 10)?;
        let clipboard = conn.intern_atom(false, b"CLIPBOARD")?.reply()?.atom;
        conn.sync()?;
        let witness = Self {
            conn,
            root,
            clipboard,
        };
        witness.events()?; // the warp's own motion
        Ok(witness)
    }

    fn pointer(&self) -> Result<(i16, i16)> {
        let reply = self.conn.query_pointer(self.root)?.reply()?;
        Ok((reply.root_x, reply.root_y))
    }

    fn owners(&self) -> Result<(u32, u32)> {
        Ok((
            self.conn
                .get_selection_owner(AtomEnum::PRIMARY.into())?
                .reply()?
                .owner,
            self.conn
                .get_selection_owner(self.clipboard)?
                .reply()?
                .owner,
        ))
    }

    /// Input events delivered since the last call.
    fn events(&self) -> Result<Vec<String>> {
        self.conn.sync()?;
        let mut seen = Vec::new();
        while let Some(event) = self.conn.poll_for_event()? {
            match event {
                Event::KeyPress(_)
                | Event::KeyRelease(_)
                | Event::ButtonPress(_)
                | Event::ButtonRelease(_)
                | Event::MotionNotify(_) => seen.push(format!("{event:?}")),
                _ => {}
            }
        }
        Ok(seen)
    }
}

/// Where a 3.8 client waits for the server before going on: (client bytes sent, server bytes
/// it waits for): the security types after the version, the result after the security type,
/// ServerInit (with a non-empty name) after ClientInit.
const PACING: [(usize, usize); 4] = [(0, 12), (12, 14), (13, 18), (14, 43)];
/// How long a paced client waits for the server's next handshake step.
const PATIENCE: Duration = Duration::from_secs(10);

/// The server's side of one session, observed through the filter as the relay does.
struct Upstream {
    stream: TcpStream,
    buffer: Vec<u8>,
    received: usize,
    ended: Option<String>,
}

impl Upstream {
    /// Reads what the server sends until it has sent `want` bytes in all, or `wait` passes.
    async fn read_until(&mut self, filter: &mut RfbFilter, want: usize, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while self.ended.is_none() && (self.received < want || want == usize::MAX) {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut self.buffer)).await {
                Err(_) => return,
                Ok(Ok(0)) | Ok(Err(_)) => self.ended = Some("server closed".into()),
                Ok(Ok(n)) => {
                    self.received += n;
                    if let Err(error) = filter.observe_server(&self.buffer[..n]) {
                        self.ended = Some(format!("filter: {error}"));
                    }
                }
            }
        }
    }
}

/// Runs one client byte stream through `filter` to x11vnc, in `chunks` (cut further at the
/// handshake's pacing points, where the client waits for the server as a real one does).
/// Returns how the session ended.
async fn run(port: u16, mut filter: RfbFilter, stream: &[u8], chunks: &[usize]) -> Result<String> {
    let mut server = Upstream {
        stream: TcpStream::connect(("127.0.0.1", port)).await?,
        buffer: vec![0u8; 256 * 1024],
        received: 0,
        ended: None,
    };
    let mut at = 0;
    let mut sizes = chunks.iter().cycle();
    while at < stream.len() {
        for (sent, want) in PACING {
            if at == sent {
                server.read_until(&mut filter, want, PATIENCE).await;
            }
        }
        if let Some(end) = server.ended.take() {
            return Ok(end);
        }
        let mut size = (*sizes.next().unwrap_or(&1)).max(1).min(stream.len() - at);
        if let Some((point, _)) = PACING.iter().find(|(p, _)| *p > at && *p < at + size) {
            size = point - at;
        }
        let piece = &stream[at..at + size];
        at += size;
        match filter.feed(piece) {
            Ok(out) => {
                if !out.is_empty() && server.stream.write_all(&out).await.is_err() {
                    return Ok("server closed".into());
                }
            }
            Err(error) => return Ok(format!("filter: {error}")),
        }
        server
            .read_until(&mut filter, usize::MAX, Duration::from_millis(1))
            .await;
    }
    // Let the server act on what it got.
    server
        .read_until(&mut filter, usize::MAX, Duration::from_millis(30))
        .await;
    Ok(server.ended.unwrap_or_else(|| "stream sent".into()))
}

fn pointer(x: u16, y: u16, buttons: u8) -> Vec<u8> {
    let mut m = vec![5, buttons];
    m.extend(x.to_be_bytes());
    m.extend(y.to_be_bytes());
    m
}

fn key(down: bool, keysym: u32) -> Vec<u8> {
    let mut m = vec![4, down as u8, 0, 0];
    m.extend(keysym.to_be_bytes());
    m
}

fn cut(text: &[u8]) -> Vec<u8> {
    let mut m = vec![6, 0, 0, 0];
    m.extend((text.len() as u32).to_be_bytes());
    m.extend(text);
    m
}

/// Input of every kind, as an attacker would send after a handshake.
fn inputs() -> Vec<u8> {
    let mut all = Vec::new();
    for (x, y) in [(200, 200), (400, 300), (600, 500)] {
        all.extend(pointer(x, y, 1));
        all.extend(pointer(x, y, 0));
    }
    all.extend(key(true, 0x61));
    all.extend(key(false, 0x61));
    all.extend(cut(b"clipboard from a viewer"));
    all.extend([255, 0, 0, 1, 0, 0, 0, 0x62, 0, 0, 0, 56]); // QEMU extended key
    all.extend([250, 0, 1, 4]); // xvp reboot
    all
}

/// Handshakes an attacker might try: every minor version, in 3.3 style (ClientInit at once,
/// with and without the 8 bytes an old filter took for VNC auth) and in 3.8 style.
fn handshakes() -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    for minor in 0..=9u8 {
        let version = format!("RFB 003.00{minor}\n").into_bytes();
        let mut v33 = version.clone();
        v33.push(1);
        all.push(v33);
        let mut v33_padded = version.clone();
        v33_padded.extend([1, 0, 0, 0, 0, 0, 0, 0, 1]);
        all.push(v33_padded);
        let mut v38 = version.clone();
        v38.extend([1, 1]);
        all.push(v38);
        let mut v38_vnc_auth = version;
        v38_vnc_auth.push(2);
        v38_vnc_auth.extend([0u8; 16]);
        v38_vnc_auth.push(1);
        all.push(v38_vnc_auth);
    }
    all.push(b"RFB 004.001\n\x01\x01".to_vec());
    all.push(b"GET / HTTP/1.1\r\n\r\n".to_vec());
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_view_session_stream_ever_acts_on_a_real_x11vnc() -> Result<()> {
    let (_xvfb, _x11vnc, display, ports) = desktop()?;
    let witness = Witness::new(&display)?;
    let pointer_before = witness.pointer()?;
    let owners_before = witness.owners()?;
    // Every (stream, chunking) to try; one session per server at a time.
    let mut cases: Vec<(Vec<u8>, Vec<usize>)> = Vec::new();
    // Adversarial handshakes followed by input, split at many positions.
    for handshake in handshakes() {
        let mut stream = handshake.clone();
        stream.extend(inputs());
        for chunks in [
            vec![stream.len()],
            vec![1],
            vec![3, 5],
            vec![7],
            vec![handshake.len()],
            vec![11, 1],
        ] {
            cases.push((stream.clone(), chunks));
        }
        // And every single cut position of the handshake-plus-first-input prefix, for the
        // versions that matter most (3.3, the 3.3-rules range, and 3.8).
        let interesting = [
            b"RFB 003.003",
            b"RFB 003.006",
            b"RFB 003.007",
            b"RFB 003.008",
        ]
        .iter()
        .any(|v| handshake.starts_with(*v));
        if interesting {
            for cut in 1..(handshake.len() + 8).min(stream.len()) {
                cases.push((stream.clone(), vec![cut, stream.len()]));
            }
        }
    }
    // Random garbage, random garbage after a valid handshake, and mutated valid sessions.
    let mut rng = fastrand::Rng::with_seed(0x005e_ed07);
    for round in 0..300 {
        let mut stream = Vec::new();
        match round % 3 {
            0 => {
                let n = rng.usize(1..200);
                stream.extend((0..n).map(|_| rng.u8(..)));
            }
            1 => {
                stream.extend_from_slice(b"RFB 003.008\n\x01\x01");
                let n = rng.usize(1..200);
                stream.extend((0..n).map(|_| rng.u8(..)));
            }
            _ => {
                stream.extend_from_slice(b"RFB 003.008\n\x01\x01");
                stream.extend(inputs());
                for _ in 0..rng.usize(1..6) {
                    let at = rng.usize(..stream.len());
                    stream[at] = rng.u8(..);
                }
            }
        }
        let chunks: Vec<usize> = (0..4).map(|_| rng.usize(1..32)).collect();
        cases.push((stream, chunks));
    }
    let sessions = cases.len();
    let mut ends: std::collections::BTreeMap<String, usize> = Default::default();
    for batch in cases.chunks(SERVERS) {
        let runs = batch
            .iter()
            .zip(&ports)
            .map(|((stream, chunks), port)| run(*port, RfbFilter::view(), stream, chunks));
        for end in futures_util::future::join_all(runs).await {
            let end = end?;
            let kind = end
                .split_whitespace()
                .filter(|w| w.parse::<usize>().is_err())
                .take(9)
                .collect::<Vec<_>>()
                .join(" ");
            *ends.entry(kind).or_default() += 1;
        }
    }

    let events = witness.events()?;
    assert!(
        events.is_empty(),
        "{} input events reached the X server through view sessions, first: {:?}",
        events.len(),
        events.first()
    );
    assert_eq!(witness.pointer()?, pointer_before, "the pointer moved");
    assert_eq!(witness.owners()?, owners_before, "the clipboard changed");
    eprintln!("{sessions} view sessions, none acted; endings: {ends:#?}");

    // The same input through a control session does reach it: the witness is not blind.
    let mut stream = b"RFB 003.008\n\x01\x01".to_vec();
    stream.extend(pointer(123, 234, 0));
    stream.extend(key(true, 0x61));
    stream.extend(key(false, 0x61));
    run(
        ports[0],
        RfbFilter::control(InputGate::open()),
        &stream,
        &[stream.len()],
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while witness.pointer()? != (123, 234) {
        if Instant::now() > deadline {
            bail!("a control session's pointer event did not arrive");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !witness.events()?.is_empty(),
        "a control session's input arrives"
    );
    Ok(())
}
