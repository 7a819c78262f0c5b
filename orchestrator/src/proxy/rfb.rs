//! A filter for the client-to-server half of an RFB (VNC) session, as carried by websockify.
//!
//! **View** mode lets a viewer watch and nothing else: it follows the handshake (protocol
//! version, security type, the VNC-auth response, ClientInit) and then every message, and drops
//! KeyEvent (4), PointerEvent (5) and ClientCutText (6), plus xvp (251) and SetDesktopSize
//! (252), which would also act on the desktop. Messages that only shape what the viewer
//! receives (SetPixelFormat, SetEncodings, FramebufferUpdateRequest, EnableContinuousUpdates,
//! ClientFence) pass. A message type it does not know closes the session: its length is
//! unknown, so nothing after it could be parsed safely. RFB 3.3 and security types other than
//! None and VNC authentication are refused in view mode for the same reason.
//!
//! **Control** mode passes everything after the handshake unchanged.
//!
//! In both modes ClientInit's shared flag is forced to 1, so one viewer connecting never
//! disconnects the others. Messages may be split across, or merged within, WebSocket frames:
//! the filter buffers partial messages and emits only whole ones.

/// Largest message the filter buffers (SetEncodings with 65535 encodings is ~256 KiB).
pub const MAX_BUFFER: usize = 512 * 1024;
/// Largest ClientCutText a view session may send (it is skipped, never buffered).
pub const MAX_CUT_TEXT: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Version,
    Security,
    VncAuthResponse,
    ClientInit,
    Messages,
    /// Control mode after the handshake: bytes pass unparsed.
    Passthrough,
}

/// Why a view session was closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RfbError {
    #[error("not an RFB protocol version: {0:?}")]
    BadVersion(String),
    #[error("RFB 3.3 is not supported in view mode")]
    OldVersion,
    #[error("security type {0} is not supported in view mode")]
    Security(u8),
    #[error("unknown client message type {0} in view mode")]
    UnknownMessage(u8),
    #[error("client message too large ({0} bytes)")]
    TooLarge(usize),
}

/// Counts of what the filter did (for logs and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterStats {
    pub forwarded_messages: u64,
    pub dropped_inputs: u64,
}

/// The filter for one session.
#[derive(Debug)]
pub struct RfbClientFilter {
    view_only: bool,
    phase: Phase,
    buffer: Vec<u8>,
    /// Bytes of a dropped ClientCutText still to skip.
    skip: usize,
    pub stats: FilterStats,
}

impl RfbClientFilter {
    pub fn view() -> Self {
        Self::new(true)
    }

    pub fn control() -> Self {
        Self::new(false)
    }

    fn new(view_only: bool) -> Self {
        Self {
            view_only,
            phase: Phase::Version,
            buffer: Vec::new(),
            skip: 0,
            stats: FilterStats::default(),
        }
    }

    /// Feeds bytes from the client; returns the bytes to send on to the server.
    pub fn feed(&mut self, input: &[u8]) -> Result<Vec<u8>, RfbError> {
        if self.phase == Phase::Passthrough {
            return Ok(input.to_vec());
        }
        let mut input = input;
        if self.skip > 0 {
            let n = self.skip.min(input.len());
            self.skip -= n;
            input = &input[n..];
        }
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.extend_from_slice(input);
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            if self.skip > 0 {
                let n = self.skip.min(buffer.len() - at);
                self.skip -= n;
                at += n;
            }
            let rest = &buffer[at..];
            if rest.is_empty() {
                break;
            }
            match self.step(rest, &mut out)? {
                Some(used) => at += used,
                None => break,
            }
            if self.phase == Phase::Passthrough {
                out.extend_from_slice(&buffer[at..]);
                at = buffer.len();
                break;
            }
        }
        buffer.drain(..at);
        if buffer.len() > MAX_BUFFER {
            return Err(RfbError::TooLarge(buffer.len()));
        }
        self.buffer = buffer;
        Ok(out)
    }

    /// Handles one unit at the start of `rest`; `None` when more bytes are needed.
    fn step(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, RfbError> {
        match self.phase {
            Phase::Version => {
                if rest.len() < 12 {
                    return Ok(None);
                }
                let version = &rest[..12];
                if !version.starts_with(b"RFB ") || version[11] != b'\n' {
                    return Err(RfbError::BadVersion(
                        String::from_utf8_lossy(version).into(),
                    ));
                }
                if &version[4..11] == b"003.003" {
                    if self.view_only {
                        return Err(RfbError::OldVersion);
                    }
                    // 3.3: the server picks the security type; nothing else to follow.
                    self.phase = Phase::Passthrough;
                } else {
                    self.phase = Phase::Security;
                }
                out.extend_from_slice(version);
                Ok(Some(12))
            }
            Phase::Security => {
                let kind = rest[0];
                self.phase = match kind {
                    1 => Phase::ClientInit,
                    2 => Phase::VncAuthResponse,
                    _ if self.view_only => return Err(RfbError::Security(kind)),
                    _ => Phase::Passthrough,
                };
                out.push(kind);
                Ok(Some(1))
            }
            Phase::VncAuthResponse => {
                if rest.len() < 16 {
                    return Ok(None);
                }
                out.extend_from_slice(&rest[..16]);
                self.phase = Phase::ClientInit;
                Ok(Some(16))
            }
            Phase::ClientInit => {
                out.push(1); // shared: never disconnect the other viewers
                self.phase = if self.view_only {
                    Phase::Messages
                } else {
                    Phase::Passthrough
                };
                Ok(Some(1))
            }
            Phase::Messages => self.message(rest, out),
            Phase::Passthrough => {
                out.extend_from_slice(rest);
                Ok(Some(rest.len()))
            }
        }
    }

    /// One client message in view mode.
    fn message(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, RfbError> {
        let kind = rest[0];
        let (len, forward) = match kind {
            0 => (20, true),   // SetPixelFormat
            3 => (10, true),   // FramebufferUpdateRequest
            150 => (10, true), // EnableContinuousUpdates
            2 => {
                // SetEncodings: type, pad, u16 count, count * i32
                if rest.len() < 4 {
                    return Ok(None);
                }
                let count = u16::from_be_bytes([rest[2], rest[3]]) as usize;
                (4 + 4 * count, true)
            }
            248 => {
                // ClientFence: type, 3 pad, u32 flags, u8 length, payload
                if rest.len() < 9 {
                    return Ok(None);
                }
                (9 + rest[8] as usize, true)
            }
            4 => (8, false),   // KeyEvent
            5 => (6, false),   // PointerEvent
            251 => (4, false), // xvp (shutdown/reboot/reset)
            252 => {
                // SetDesktopSize: type, pad, u16 w, u16 h, u8 screens, pad, screens * 16
                if rest.len() < 8 {
                    return Ok(None);
                }
                (8 + 16 * rest[6] as usize, false)
            }
            6 => {
                // ClientCutText: type, 3 pad, u32 length, text; skipped, never buffered.
                if rest.len() < 8 {
                    return Ok(None);
                }
                let text = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
                if text > MAX_CUT_TEXT {
                    return Err(RfbError::TooLarge(text));
                }
                self.stats.dropped_inputs += 1;
                self.skip = text;
                return Ok(Some(8));
            }
            other => return Err(RfbError::UnknownMessage(other)),
        };
        if rest.len() < len {
            return Ok(None);
        }
        if forward {
            out.extend_from_slice(&rest[..len]);
            self.stats.forwarded_messages += 1;
        } else {
            self.stats.dropped_inputs += 1;
        }
        Ok(Some(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake() -> Vec<u8> {
        let mut bytes = b"RFB 003.008\n".to_vec();
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

    fn session() -> Vec<u8> {
        let mut all = handshake();
        for part in [
            set_encodings(),
            pointer(),
            update_request(),
            key(),
            cut_text(b"hello"),
            pointer(),
            update_request(),
        ] {
            all.extend(part);
        }
        all
    }

    fn expected_view_output() -> Vec<u8> {
        let mut all = b"RFB 003.008\n".to_vec();
        all.extend([1, 1]); // security, ClientInit forced shared
        all.extend(set_encodings());
        all.extend(update_request());
        all.extend(update_request());
        all
    }

    #[test]
    fn view_mode_drops_input_and_forces_sharing() {
        let mut filter = RfbClientFilter::view();
        let out = filter.feed(&session()).unwrap();
        assert_eq!(out, expected_view_output());
        assert_eq!(filter.stats.dropped_inputs, 4);
        assert_eq!(filter.stats.forwarded_messages, 3);
    }

    #[test]
    fn every_split_of_the_stream_gives_the_same_output() {
        let all = session();
        for chunk in 1..=all.len() {
            let mut filter = RfbClientFilter::view();
            let mut out = Vec::new();
            for piece in all.chunks(chunk) {
                out.extend(filter.feed(piece).unwrap());
            }
            assert_eq!(out, expected_view_output(), "chunk size {chunk}");
        }
        // Two-way splits at every position.
        for cut in 0..all.len() {
            let mut filter = RfbClientFilter::view();
            let mut out = filter.feed(&all[..cut]).unwrap();
            out.extend(filter.feed(&all[cut..]).unwrap());
            assert_eq!(out, expected_view_output(), "cut at {cut}");
        }
    }

    #[test]
    fn control_mode_passes_input() {
        let mut filter = RfbClientFilter::control();
        let all = session();
        let out = filter.feed(&all).unwrap();
        let mut expected = all.clone();
        expected[13] = 1; // shared flag forced
        assert_eq!(out, expected);
    }

    #[test]
    fn vnc_auth_response_is_passed_in_view_mode() {
        let mut filter = RfbClientFilter::view();
        let mut bytes = b"RFB 003.008\n".to_vec();
        bytes.push(2);
        bytes.extend([7u8; 16]);
        bytes.push(1);
        bytes.extend(pointer());
        let out = filter.feed(&bytes).unwrap();
        assert_eq!(out.len(), 12 + 1 + 16 + 1);
    }

    #[test]
    fn unknown_messages_and_unsupported_handshakes_close_view_sessions() {
        let mut filter = RfbClientFilter::view();
        let mut bytes = handshake();
        bytes.push(200);
        assert_eq!(filter.feed(&bytes), Err(RfbError::UnknownMessage(200)));

        let mut filter = RfbClientFilter::view();
        assert_eq!(filter.feed(b"RFB 003.003\n"), Err(RfbError::OldVersion));

        let mut filter = RfbClientFilter::view();
        let mut bytes = b"RFB 003.008\n".to_vec();
        bytes.push(19); // VeNCrypt
        assert_eq!(filter.feed(&bytes), Err(RfbError::Security(19)));

        let mut filter = RfbClientFilter::view();
        assert!(matches!(
            filter.feed(b"GET / HTTP/1.1\r\n"),
            Err(RfbError::BadVersion(_))
        ));
    }

    #[test]
    fn large_cut_text_is_skipped_across_frames() {
        let mut filter = RfbClientFilter::view();
        filter.feed(&handshake()).unwrap();
        let text = vec![b'x'; 100_000];
        let message = cut_text(&text);
        let mut out = Vec::new();
        for piece in message.chunks(4096) {
            out.extend(filter.feed(piece).unwrap());
        }
        out.extend(filter.feed(&update_request()).unwrap());
        assert_eq!(out, update_request());
        let mut huge = vec![6, 0, 0, 0];
        huge.extend(((MAX_CUT_TEXT + 1) as u32).to_be_bytes());
        assert!(matches!(filter.feed(&huge), Err(RfbError::TooLarge(_))));
    }
}
