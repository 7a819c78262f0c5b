//! An incremental Server-Sent Events decoder that gives the same events whatever the chunk
//! boundaries are: a chunk may end inside a field name, inside a multi-byte character, between
//! the `\r` and the `\n` of a line ending, or inside a JSON payload.
//!
//! It follows the WHATWG "event stream interpretation" rules: lines end with `\r\n`, `\n` or
//! `\r`; a blank line dispatches the event; `data` lines are joined with `\n`; a single space
//! after the colon is dropped; lines starting with `:` are comments; a leading byte-order mark
//! is skipped; an event not ended by a blank line when the stream ends is dropped. Bytes are
//! only decoded as UTF-8 once a whole line is in, so a character split across chunks is intact.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event` field (empty when absent; SSE's default type is `message`).
    pub event: String,
    /// The `data` lines joined with `\n`.
    pub data: String,
    /// The `id` field, when given.
    pub id: Option<String>,
}

/// Longest line kept: an event bigger than this is a broken or hostile stream.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A line longer than [`MAX_LINE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event-stream line is longer than {MAX_LINE_BYTES} bytes")]
pub struct LineTooLong;

/// The decoder's state between chunks.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the line being read.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    /// Whether the first bytes (and a possible byte-order mark) have been seen.
    started: bool,
    /// Bytes of a possible BOM at the very start, while fewer than three have arrived.
    bom: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk; complete events are appended to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LineTooLong> {
        let mut chunk = chunk;
        if !self.started {
            // Collect up to three bytes to decide whether the stream starts with a BOM.
            while !chunk.is_empty() && self.bom.len() < 3 {
                self.bom.push(chunk[0]);
                chunk = &chunk[1..];
                if !BOM.starts_with(&self.bom) {
                    break;
                }
            }
            if self.bom.len() == 3 && self.bom == BOM {
                self.bom.clear();
                self.started = true;
            } else if !BOM.starts_with(&self.bom) {
                let held = std::mem::take(&mut self.bom);
                self.started = true;
                self.feed(&held, out)?;
            } else {
                // Still a prefix of the BOM and the chunk is used up.
                return Ok(());
            }
        }
        self.feed(chunk, out)
    }

    fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LineTooLong> {
        if chunk.is_empty() {
            // An empty chunk must not forget a `\r` that ended the previous one.
            return Ok(());
        }
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        while let Some(end) = chunk.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.append(&chunk[..end])?;
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out);
            let is_cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if is_cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.append(chunk)
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), LineTooLong> {
        if self.line.len() + bytes.len() > MAX_LINE_BYTES {
            return Err(LineTooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                    id: self.id.clone(),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.find(':') {
            Some(colon) => {
                let value = &text[colon + 1..];
                (&text[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&text[..], ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
    }
}

/// Decodes a whole stream given as chunks (for tests and replay).
pub fn decode_all<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<SseEvent>, LineTooLong> {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.push(chunk, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream exercising every rule: CRLF, CR and LF endings, a BOM, comments, multi-line
    /// data, no space after the colon, a field without a colon, multi-byte characters, an id,
    /// an unterminated event at the end.
    const STREAM: &[u8] = "\u{feff}: comment\r\nevent: message_start\r\ndata: {\"type\":\"message_start\",\"text\":\"héllo 世界 🎨\"}\r\n\r\nevent:ping\rdata:{\"a\":1}\r\rdata: line one\ndata: line two\nid: 7\n\n: keep-alive\n\ndata\n\nevent: end\ndata: [DONE]\n\ndata: never dispatched".as_bytes();

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent {
                event: "message_start".into(),
                data: "{\"type\":\"message_start\",\"text\":\"héllo 世界 🎨\"}".into(),
                id: None,
            },
            SseEvent {
                event: "ping".into(),
                data: "{\"a\":1}".into(),
                id: None,
            },
            SseEvent {
                event: "".into(),
                data: "line one\nline two".into(),
                id: Some("7".into()),
            },
            SseEvent {
                event: "".into(),
                data: "".into(),
                id: Some("7".into()),
            },
            SseEvent {
                event: "end".into(),
                data: "[DONE]".into(),
                id: Some("7".into()),
            },
        ]
    }

    #[test]
    fn whole_stream() -> anyhow::Result<()> {
        assert_eq!(decode_all([STREAM])?, expected());
        Ok(())
    }

    #[test]
    fn every_single_split_point() -> anyhow::Result<()> {
        for cut in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(cut);
            assert_eq!(decode_all([a, b])?, expected(), "cut at byte {cut}");
        }
        Ok(())
    }

    #[test]
    fn every_pair_of_split_points() -> anyhow::Result<()> {
        for first in 0..=STREAM.len() {
            for second in first..=STREAM.len() {
                let chunks = [&STREAM[..first], &STREAM[first..second], &STREAM[second..]];
                assert_eq!(
                    decode_all(chunks)?,
                    expected(),
                    "cuts at {first} and {second}"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn one_byte_at_a_time() -> anyhow::Result<()> {
        assert_eq!(decode_all(STREAM.chunks(1))?, expected());
        Ok(())
    }

    #[test]
    fn cr_then_lf_in_the_next_chunk_is_one_line_ending() -> anyhow::Result<()> {
        let events = decode_all([
            b"data: a\r".as_slice(),
            b"\n\r".as_slice(),
            b"\n".as_slice(),
        ])?;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "a");
        Ok(())
    }

    #[test]
    fn a_partial_bom_that_is_not_a_bom_is_data() -> anyhow::Result<()> {
        let events = decode_all([b"\xEF".as_slice(), b"data: x\n\n".as_slice()])?;
        // The lone 0xEF makes the first line's field name invalid UTF-8, so it is ignored.
        assert!(events.is_empty());
        let events = decode_all([b"da".as_slice(), b"ta: x\n\n".as_slice()])?;
        assert_eq!(events.len(), 1);
        Ok(())
    }

    #[test]
    fn overlong_lines_are_refused() {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        let big = vec![b'a'; MAX_LINE_BYTES + 1];
        assert_eq!(decoder.push(&big, &mut out), Err(LineTooLong));
    }
}
