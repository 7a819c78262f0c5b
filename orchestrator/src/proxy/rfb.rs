//! A filter on an RFB (VNC) session, as carried over a WebSocket: it follows **both** halves of
//! the handshake and then every client message, and lets input through only when the session
//! may act.
//!
//! The handshake is pinned: the server must greet with `RFB 003.008`, the client must answer
//! exactly that, the server must offer security type None (sandboxd terminates the real VNC
//! authentication itself), the client must choose it, and the server must report success.
//! Client bytes that arrive before the server reached the step they answer, or that differ in
//! any way, end the session: a filter that guessed the server's state could be desynchronised
//! (libvncserver applies RFB 3.3 rules to every minor version below 7), so it never guesses.
//!
//! After ClientInit (whose shared flag is forced to 1, so one viewer never disconnects the
//! others), each client message is parsed by type and length. Messages that only shape what the
//! viewer receives (SetPixelFormat, SetEncodings, FramebufferUpdateRequest,
//! EnableContinuousUpdates, ClientFence) always pass. **Input** (KeyEvent, PointerEvent,
//! ClientCutText, xvp, SetDesktopSize, QEMU extended key events) passes only when the session
//! is not view-only and its [`InputGate`] is open; otherwise it is dropped whole. A message type
//! the filter does not know ends the session: its length is unknown, so nothing after it could
//! be parsed safely.
//!
//! Messages may be split across, or merged within, WebSocket frames: the filter buffers partial
//! messages and emits whole ones (ClientCutText text is streamed through or skipped, never
//! buffered).

use agentbox_http::ws::RelayFilter;
use tokio::sync::watch;

/// Largest client message the filter buffers (SetEncodings with 65535 encodings is ~256 KiB).
pub const MAX_BUFFER: usize = 512 * 1024;
/// Largest ClientCutText accepted.
pub const MAX_CUT_TEXT: usize = 16 * 1024 * 1024;
/// Largest server handshake unit buffered (ServerInit with its desktop name).
const MAX_SERVER_HANDSHAKE: usize = 64 * 1024;

const VERSION: &[u8; 12] = b"RFB 003.008\n";
const SECURITY_NONE: u8 = 1;

/// Whether a control session's input may reach the desktop right now (a person holds control)
/// or not (an agent drives). View sessions never send input, whatever the gate says.
#[derive(Debug, Clone)]
pub struct InputGate(watch::Receiver<bool>);

impl InputGate {
    /// A gate that is always open.
    pub fn open() -> Self {
        // With the sender gone the receiver keeps the last value: open for good.
        let (_, rx) = watch::channel(true);
        Self(rx)
    }

    /// A gate following `rx` (`true`: input passes).
    pub fn following(rx: watch::Receiver<bool>) -> Self {
        Self(rx)
    }

    fn allows(&self) -> bool {
        *self.0.borrow()
    }
}

/// Why a session was closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RfbError {
    #[error("the server did not greet with RFB 003.008: {0:?}")]
    ServerVersion(String),
    #[error("only RFB 003.008 is accepted from viewers, got {0:?}")]
    ClientVersion(String),
    #[error("the server does not offer security type None (offered {0:?})")]
    ServerSecurity(Vec<u8>),
    #[error("security type {0} is not accepted (only None)")]
    ClientSecurity(u8),
    #[error("the server refused the session")]
    ServerRefused,
    #[error("the viewer sent {0} bytes before the server's {1}")]
    Early(usize, &'static str),
    #[error("unknown client message type {0}")]
    UnknownMessage(u8),
    #[error("unknown QEMU client message subtype {0}")]
    UnknownQemu(u8),
    #[error("client message too large ({0} bytes)")]
    TooLarge(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerPhase {
    Version,
    SecurityTypes,
    SecurityResult,
    ServerInit,
    /// After ServerInit: server messages are not parsed.
    Running,
    /// The server refused the session: nothing more passes.
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientPhase {
    Version,
    Security,
    ClientInit,
    Messages,
}

/// Counts of what the filter did (for logs and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterStats {
    pub forwarded_messages: u64,
    pub forwarded_inputs: u64,
    pub dropped_inputs: u64,
}

/// The filter for one session.
#[derive(Debug)]
pub struct RfbFilter {
    view_only: bool,
    gate: InputGate,
    server: ServerPhase,
    server_buffer: Vec<u8>,
    client: ClientPhase,
    client_buffer: Vec<u8>,
    /// ClientCutText bytes still to come: forwarded when `cut_forward`, skipped otherwise.
    cut_remaining: usize,
    cut_forward: bool,
    pub stats: FilterStats,
}

impl RfbFilter {
    /// A view-only session: input never passes.
    pub fn view() -> Self {
        Self::new(true, InputGate::open())
    }

    /// A control session whose input passes while `gate` is open.
    pub fn control(gate: InputGate) -> Self {
        Self::new(false, gate)
    }

    fn new(view_only: bool, gate: InputGate) -> Self {
        Self {
            view_only,
            gate,
            server: ServerPhase::Version,
            server_buffer: Vec::new(),
            client: ClientPhase::Version,
            client_buffer: Vec::new(),
            cut_remaining: 0,
            cut_forward: false,
            stats: FilterStats::default(),
        }
    }

    fn input_allowed(&self) -> bool {
        !self.view_only && self.gate.allows()
    }

    // ---- server to client ----

    /// Follows the server's half of the handshake.
    pub fn observe_server(&mut self, input: &[u8]) -> Result<(), RfbError> {
        if matches!(self.server, ServerPhase::Running) {
            return Ok(());
        }
        if self.server == ServerPhase::Refused {
            return Err(RfbError::ServerRefused);
        }
        self.server_buffer.extend_from_slice(input);
        loop {
            let buffer = &self.server_buffer;
            let used = match self.server {
                ServerPhase::Version => {
                    if buffer.len() < 12 {
                        break;
                    }
                    if &buffer[..12] != VERSION {
                        return Err(RfbError::ServerVersion(
                            String::from_utf8_lossy(&buffer[..12]).into_owned(),
                        ));
                    }
                    self.server = ServerPhase::SecurityTypes;
                    12
                }
                ServerPhase::SecurityTypes => {
                    let Some(&count) = buffer.first() else { break };
                    if count == 0 {
                        self.server = ServerPhase::Refused;
                        return Err(RfbError::ServerRefused);
                    }
                    let count = count as usize;
                    if buffer.len() < 1 + count {
                        break;
                    }
                    if !buffer[1..1 + count].contains(&SECURITY_NONE) {
                        return Err(RfbError::ServerSecurity(buffer[1..1 + count].to_vec()));
                    }
                    self.server = ServerPhase::SecurityResult;
                    1 + count
                }
                ServerPhase::SecurityResult => {
                    if buffer.len() < 4 {
                        break;
                    }
                    if buffer[..4] != [0, 0, 0, 0] {
                        self.server = ServerPhase::Refused;
                        return Err(RfbError::ServerRefused);
                    }
                    self.server = ServerPhase::ServerInit;
                    4
                }
                ServerPhase::ServerInit => {
                    // width, height, pixel format (16), name length (4), name
                    if buffer.len() < 24 {
                        break;
                    }
                    let name = u32::from_be_bytes([buffer[20], buffer[21], buffer[22], buffer[23]])
                        as usize;
                    if name > MAX_SERVER_HANDSHAKE {
                        return Err(RfbError::TooLarge(name));
                    }
                    if buffer.len() < 24 + name {
                        break;
                    }
                    self.server = ServerPhase::Running;
                    24 + name
                }
                ServerPhase::Running | ServerPhase::Refused => break,
            };
            self.server_buffer.drain(..used);
        }
        if self.server == ServerPhase::Running {
            // What followed ServerInit is ordinary server traffic: not ours to keep.
            self.server_buffer = Vec::new();
        } else if self.server_buffer.len() > MAX_SERVER_HANDSHAKE {
            return Err(RfbError::TooLarge(self.server_buffer.len()));
        }
        Ok(())
    }

    // ---- client to server ----

    /// Feeds bytes from the client; returns the bytes to send on to the server.
    pub fn feed(&mut self, input: &[u8]) -> Result<Vec<u8>, RfbError> {
        let mut out = Vec::new();
        let mut input = input;
        if self.cut_remaining > 0 {
            let n = self.cut_remaining.min(input.len());
            if self.cut_forward {
                out.extend_from_slice(&input[..n]);
            }
            self.cut_remaining -= n;
            input = &input[n..];
        }
        let mut buffer = std::mem::take(&mut self.client_buffer);
        buffer.extend_from_slice(input);
        let mut at = 0;
        loop {
            if self.cut_remaining > 0 {
                let n = self.cut_remaining.min(buffer.len() - at);
                if self.cut_forward {
                    out.extend_from_slice(&buffer[at..at + n]);
                }
                self.cut_remaining -= n;
                at += n;
            }
            if at >= buffer.len() {
                break;
            }
            match self.client_step(&buffer[at..], &mut out)? {
                Some(used) => at += used,
                None => break,
            }
        }
        buffer.drain(..at);
        if buffer.len() > MAX_BUFFER {
            return Err(RfbError::TooLarge(buffer.len()));
        }
        self.client_buffer = buffer;
        Ok(out)
    }

    /// Handles one unit at the start of `rest`; `None` when more bytes are needed.
    fn client_step(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, RfbError> {
        match self.client {
            ClientPhase::Version => {
                if self.server == ServerPhase::Version {
                    return Err(RfbError::Early(rest.len(), "greeting"));
                }
                let compare = rest.len().min(12);
                if rest[..compare] != VERSION[..compare] {
                    return Err(RfbError::ClientVersion(
                        String::from_utf8_lossy(&rest[..compare]).into_owned(),
                    ));
                }
                if rest.len() < 12 {
                    return Ok(None);
                }
                out.extend_from_slice(VERSION);
                self.client = ClientPhase::Security;
                Ok(Some(12))
            }
            ClientPhase::Security => {
                if matches!(
                    self.server,
                    ServerPhase::Version | ServerPhase::SecurityTypes
                ) {
                    return Err(RfbError::Early(rest.len(), "security types"));
                }
                if rest[0] != SECURITY_NONE {
                    return Err(RfbError::ClientSecurity(rest[0]));
                }
                out.push(SECURITY_NONE);
                self.client = ClientPhase::ClientInit;
                Ok(Some(1))
            }
            ClientPhase::ClientInit => {
                if !matches!(self.server, ServerPhase::ServerInit | ServerPhase::Running) {
                    return Err(RfbError::Early(rest.len(), "security result"));
                }
                out.push(1); // shared: never disconnect the other viewers
                self.client = ClientPhase::Messages;
                Ok(Some(1))
            }
            ClientPhase::Messages => self.message(rest, out),
        }
    }

    /// One client message after the handshake.
    fn message(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, RfbError> {
        let kind = rest[0];
        let (len, is_input) = match kind {
            0 => (20, false),   // SetPixelFormat
            3 => (10, false),   // FramebufferUpdateRequest
            150 => (10, false), // EnableContinuousUpdates
            2 => {
                // SetEncodings: type, pad, u16 count, count * i32
                if rest.len() < 4 {
                    return Ok(None);
                }
                (
                    4 + 4 * u16::from_be_bytes([rest[2], rest[3]]) as usize,
                    false,
                )
            }
            248 => {
                // ClientFence: type, 3 pad, u32 flags, u8 length, payload (at most 64)
                if rest.len() < 9 {
                    return Ok(None);
                }
                (9 + rest[8] as usize, false)
            }
            4 => (8, true),   // KeyEvent
            5 => (6, true),   // PointerEvent
            250 => (4, true), // xvp: type, pad, version, operation
            251 => {
                // SetDesktopSize: type, pad, u16 w, u16 h, u8 screens, pad, screens * 16
                if rest.len() < 8 {
                    return Ok(None);
                }
                (8 + 16 * rest[6] as usize, true)
            }
            255 => {
                // QEMU client message: type, subtype; subtype 0 is the extended key event
                // (type, subtype, u16 down, u32 keysym, u32 keycode).
                if rest.len() < 2 {
                    return Ok(None);
                }
                if rest[1] != 0 {
                    return Err(RfbError::UnknownQemu(rest[1]));
                }
                (12, true)
            }
            6 => {
                // ClientCutText: type, 3 pad, s32 length, text (streamed or skipped). A
                // negative length is the Extended Clipboard form (noVNC answers a server's
                // clipboard capabilities with one): its absolute value bytes follow.
                if rest.len() < 8 {
                    return Ok(None);
                }
                let length = i32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
                let text = length.unsigned_abs() as usize;
                if text > MAX_CUT_TEXT {
                    return Err(RfbError::TooLarge(text));
                }
                self.cut_forward = self.input_allowed();
                if self.cut_forward {
                    out.extend_from_slice(&rest[..8]);
                    self.stats.forwarded_inputs += 1;
                } else {
                    self.stats.dropped_inputs += 1;
                }
                self.cut_remaining = text;
                return Ok(Some(8));
            }
            other => return Err(RfbError::UnknownMessage(other)),
        };
        if rest.len() < len {
            return Ok(None);
        }
        if !is_input {
            out.extend_from_slice(&rest[..len]);
            self.stats.forwarded_messages += 1;
        } else if self.input_allowed() {
            out.extend_from_slice(&rest[..len]);
            self.stats.forwarded_inputs += 1;
        } else {
            self.stats.dropped_inputs += 1;
        }
        Ok(Some(len))
    }
}

impl RelayFilter for RfbFilter {
    fn client_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>, String> {
        self.feed(bytes).map_err(|e| e.to_string())
    }

    fn upstream_bytes(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.observe_server(bytes).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's handshake as sandboxd sends it, then ServerInit with the name "x".
    fn server_handshake() -> Vec<u8> {
        let mut bytes = VERSION.to_vec();
        bytes.extend([1, 1]); // one type: None
        bytes.extend([0, 0, 0, 0]); // OK
        bytes.extend([5, 0, 3, 32]); // 1280x800
        bytes.extend([32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0]);
        bytes.extend([0, 0, 0, 1, b'x']);
        bytes
    }

    fn client_handshake() -> Vec<u8> {
        let mut bytes = VERSION.to_vec();
        bytes.push(1); // security None
        bytes.push(0); // ClientInit, not shared
        bytes
    }

    fn set_encodings() -> Vec<u8> {
        vec![2, 0, 0, 2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x21]
    }

    fn update_request() -> Vec<u8> {
        vec![3, 1, 0, 0, 0, 0, 5, 0, 3, 32]
    }

    fn pointer() -> Vec<u8> {
        vec![5, 1, 0, 100, 0, 200]
    }

    fn key() -> Vec<u8> {
        vec![4, 1, 0, 0, 0, 0, 0, 0x61]
    }

    fn cut_text(text: &[u8]) -> Vec<u8> {
        let mut m = vec![6, 0, 0, 0];
        m.extend_from_slice(&(text.len() as u32).to_be_bytes());
        m.extend_from_slice(text);
        m
    }

    fn messages() -> Vec<u8> {
        let mut all = Vec::new();
        for part in [
            set_encodings(),
            pointer(),
            update_request(),
            key(),
            cut_text(b"hello"),
            vec![250, 0, 1, 2], // xvp
            vec![251, 0, 2, 0, 1, 0, 1, 0]
                .into_iter()
                .chain([0; 16])
                .collect(), // SetDesktopSize
            vec![255, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 30], // QEMU key
            pointer(),
            update_request(),
        ] {
            all.extend(part);
        }
        all
    }

    /// Runs a session through a filter: the server's handshake is observed in full first, then
    /// the client's bytes are fed in `chunk`-sized pieces.
    fn run(filter: &mut RfbFilter, chunk: usize) -> Result<Vec<u8>, RfbError> {
        let mut client = client_handshake();
        client.extend(messages());
        let server = server_handshake();
        // The server speaks first at each step; feed in handshake order.
        filter.observe_server(&server[..12])?;
        let mut out = Vec::new();
        out.extend(filter.feed(&client[..12])?);
        filter.observe_server(&server[12..14])?;
        out.extend(filter.feed(&client[12..13])?);
        filter.observe_server(&server[14..])?;
        for piece in client[13..].chunks(chunk) {
            out.extend(filter.feed(piece)?);
        }
        Ok(out)
    }

    fn expected_view_output() -> Vec<u8> {
        let mut all = VERSION.to_vec();
        all.extend([1, 1]); // security, ClientInit forced shared
        all.extend(set_encodings());
        all.extend(update_request());
        all.extend(update_request());
        all
    }

    #[test]
    fn view_sessions_drop_every_input_whatever_the_split() {
        for chunk in 1..=messages().len() + 1 {
            let mut filter = RfbFilter::view();
            assert_eq!(
                run(&mut filter, chunk).unwrap(),
                expected_view_output(),
                "chunk {chunk}"
            );
            assert_eq!(filter.stats.dropped_inputs, 7);
            assert_eq!(filter.stats.forwarded_inputs, 0);
        }
    }

    #[test]
    fn control_sessions_pass_input_only_while_the_gate_is_open() {
        let (tx, rx) = watch::channel(true);
        let mut filter = RfbFilter::control(InputGate::following(rx));
        let out = run(&mut filter, 7).unwrap();
        let mut expected = client_handshake();
        expected[13] = 1; // shared forced
        expected.extend(messages());
        assert_eq!(out, expected);
        tx.send_replace(false);
        assert!(filter.feed(&pointer()).unwrap().is_empty());
        assert!(filter.feed(&cut_text(b"secret")).unwrap().is_empty());
        assert_eq!(filter.feed(&update_request()).unwrap(), update_request());
        tx.send_replace(true);
        assert_eq!(filter.feed(&pointer()).unwrap(), pointer());
    }

    #[test]
    fn every_version_but_3_8_is_refused_before_anything_passes() {
        for minor in 0..=9u8 {
            if minor == 8 {
                continue;
            }
            let mut filter = RfbFilter::view();
            filter.observe_server(VERSION).unwrap();
            let version = format!("RFB 003.00{minor}\n");
            // Byte by byte: refused at the first differing byte, nothing forwarded.
            let mut forwarded = Vec::new();
            let mut refused = false;
            for byte in version.as_bytes() {
                match filter.feed(&[*byte]) {
                    Ok(out) => forwarded.extend(out),
                    Err(RfbError::ClientVersion(_)) => {
                        refused = true;
                        break;
                    }
                    Err(other) => panic!("{other}"),
                }
            }
            assert!(refused, "{version:?}");
            assert!(forwarded.is_empty(), "{version:?}");
        }
    }

    #[test]
    fn client_bytes_ahead_of_the_server_are_refused() {
        let mut filter = RfbFilter::view();
        assert!(matches!(filter.feed(VERSION), Err(RfbError::Early(..))));
        let mut filter = RfbFilter::view();
        filter.observe_server(VERSION).unwrap();
        let mut early = VERSION.to_vec();
        early.push(1);
        assert!(matches!(filter.feed(&early), Err(RfbError::Early(..))));
        let mut filter = RfbFilter::view();
        filter.observe_server(&server_handshake()[..14]).unwrap();
        let mut early = VERSION.to_vec();
        early.extend([1, 0]);
        assert!(matches!(filter.feed(&early), Err(RfbError::Early(..))));
    }

    #[test]
    fn servers_that_do_not_follow_the_pinned_handshake_end_the_session() {
        let mut filter = RfbFilter::view();
        assert!(filter.observe_server(b"RFB 003.003\n").is_err());
        let mut filter = RfbFilter::view();
        let mut bytes = VERSION.to_vec();
        bytes.extend([1, 2]); // VNC auth only
        assert!(matches!(
            filter.observe_server(&bytes),
            Err(RfbError::ServerSecurity(_))
        ));
        let mut filter = RfbFilter::view();
        let mut bytes = VERSION.to_vec();
        bytes.extend([1, 1, 0, 0, 0, 1]); // failed
        assert_eq!(filter.observe_server(&bytes), Err(RfbError::ServerRefused));
    }

    #[test]
    fn unknown_messages_and_security_types_end_the_session() {
        let handshaken = || {
            let mut filter = RfbFilter::view();
            let server = server_handshake();
            filter.observe_server(&server).unwrap();
            filter
        };
        let mut filter = handshaken();
        let mut bytes = client_handshake();
        bytes.push(200);
        assert_eq!(filter.feed(&bytes), Err(RfbError::UnknownMessage(200)));
        let mut filter = handshaken();
        let mut bytes = client_handshake();
        bytes.extend([255, 1]);
        assert_eq!(filter.feed(&bytes), Err(RfbError::UnknownQemu(1)));
        let mut filter = handshaken();
        let mut bytes = VERSION.to_vec();
        bytes.push(2);
        assert_eq!(filter.feed(&bytes), Err(RfbError::ClientSecurity(2)));
    }

    #[test]
    fn large_cut_text_is_skipped_or_streamed_never_buffered() {
        let text = vec![b'x'; 100_000];
        let message = cut_text(&text);
        let mut filter = RfbFilter::view();
        filter.observe_server(&server_handshake()).unwrap();
        filter.feed(&client_handshake()).unwrap();
        let mut out = Vec::new();
        for piece in message.chunks(4096) {
            out.extend(filter.feed(piece).unwrap());
            assert!(filter.client_buffer.len() < 16);
        }
        out.extend(filter.feed(&update_request()).unwrap());
        assert_eq!(out, update_request());

        let mut filter = RfbFilter::control(InputGate::open());
        filter.observe_server(&server_handshake()).unwrap();
        filter.feed(&client_handshake()).unwrap();
        let mut out = Vec::new();
        for piece in message.chunks(4096) {
            out.extend(filter.feed(piece).unwrap());
        }
        assert_eq!(out, message);

        let mut huge = vec![6, 0, 0, 0];
        huge.extend(((MAX_CUT_TEXT + 1) as u32).to_be_bytes());
        assert!(matches!(filter.feed(&huge), Err(RfbError::TooLarge(_))));
        let mut huge = vec![6, 0, 0, 0];
        huge.extend(i32::MIN.to_be_bytes());
        assert!(matches!(filter.feed(&huge), Err(RfbError::TooLarge(_))));
    }

    /// noVNC answers a server's Extended Clipboard capabilities with a ClientCutText whose
    /// length is negative (-8: flags and one size): its |length| bytes follow. A view session
    /// drops it whole and goes on; a control session forwards it.
    #[test]
    fn extended_clipboard_messages_have_negative_lengths() {
        let mut caps = vec![6, 0, 0, 0];
        caps.extend((-8i32).to_be_bytes());
        caps.extend([0, 0, 0, 1, 0, 0, 0x10, 0]);
        let mut filter = RfbFilter::view();
        filter.observe_server(&server_handshake()).unwrap();
        filter.feed(&client_handshake()).unwrap();
        let mut bytes = caps.clone();
        bytes.extend(update_request());
        assert_eq!(filter.feed(&bytes).unwrap(), update_request());

        let mut filter = RfbFilter::control(InputGate::open());
        filter.observe_server(&server_handshake()).unwrap();
        filter.feed(&client_handshake()).unwrap();
        assert_eq!(filter.feed(&bytes).unwrap(), bytes);
    }
}
