//! A command's output: kept in a bounded buffer as raw bytes, rendered for agents as plain text
//! (terminal escape sequences removed, carriage-return overwrites resolved, optionally cut to a
//! maximum number of characters with a note saying so).

/// How many characters an answer holds when truncation is on (AIO's limit).
pub const TRUNCATE_CHARS: usize = 30_000;

/// The most recent output of one command, at most `limit` bytes (older bytes are dropped).
#[derive(Debug)]
pub struct OutputBuffer {
    data: Vec<u8>,
    /// Bytes dropped from the front to stay within `limit`.
    dropped: u64,
    limit: usize,
}

/// Output as text, ready for an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedOutput {
    pub text: String,
    /// True when part of the output is missing from `text` (and `text` says so).
    pub truncated: bool,
}

impl OutputBuffer {
    pub fn new(limit: usize) -> Self {
        Self {
            data: Vec::new(),
            dropped: 0,
            limit: limit.max(1024),
        }
    }

    /// Appends bytes, dropping the oldest ones beyond the limit. Trimming happens in steps of a
    /// quarter of the limit so that appending stays amortised O(n).
    pub fn push(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
        if self.data.len() > self.limit + self.limit / 4 {
            let mut cut = self.data.len() - self.limit;
            // Never start the kept part in the middle of a UTF-8 sequence.
            while cut < self.data.len() && (self.data[cut] & 0b1100_0000) == 0b1000_0000 {
                cut += 1;
            }
            self.data.drain(..cut);
            self.dropped += cut as u64;
        }
    }

    /// Total bytes ever appended.
    pub fn total_bytes(&self) -> u64 {
        self.dropped + self.data.len() as u64
    }

    /// The raw output from byte `offset` on (an offset into everything ever appended), as
    /// text. An incomplete UTF-8 sequence at the end is held back (the returned offset stops
    /// before it, so the next read starts with it); bytes that are not UTF-8 become U+FFFD. An
    /// offset in the part already dropped reads from the oldest byte kept. None when `offset`
    /// is past the end.
    pub fn read_from(&self, offset: u64) -> Option<Chunk> {
        let total = self.total_bytes();
        if offset > total {
            return None;
        }
        let start = offset.max(self.dropped);
        let from = usize::try_from(start - self.dropped).unwrap_or(self.data.len());
        let bytes = &self.data[from.min(self.data.len())..];
        let complete = complete_utf8_len(bytes);
        Some(Chunk {
            text: String::from_utf8_lossy(&bytes[..complete]).into_owned(),
            skipped: start - offset,
            next_offset: start + complete as u64,
        })
    }

    /// The output as clean text, the last `max_chars` characters at most (with a note in front
    /// when anything is left out).
    pub fn render(&self, max_chars: Option<usize>) -> RenderedOutput {
        let text = clean_terminal_text(&String::from_utf8_lossy(&self.data));
        let text = text.trim_end_matches(['\n', '\r']);
        let chars = text.chars().count();
        let limit = max_chars.unwrap_or(usize::MAX);
        if chars <= limit && self.dropped == 0 {
            return RenderedOutput {
                text: text.to_string(),
                truncated: false,
            };
        }
        let mut note = if self.dropped > 0 {
            format!(
                "[output truncated: the first {} bytes were discarded",
                self.dropped
            )
        } else {
            "[output truncated".to_string()
        };
        // The note's own length counts towards the limit.
        let budget_note = format!("{note}; showing the last {chars} of {chars} characters]\n");
        let keep = chars.min(limit.saturating_sub(budget_note.chars().count()));
        if keep < chars {
            note.push_str(&format!("; showing the last {keep} of {chars} characters"));
        }
        note.push_str("]\n");
        let skip = chars - keep;
        let tail: String = text.chars().skip(skip).collect();
        RenderedOutput {
            text: note + &tail,
            truncated: true,
        }
    }
}

/// What [`OutputBuffer::read_from`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    /// Bytes between the requested offset and the first one read (already dropped).
    pub skipped: u64,
    /// Where the next read continues.
    pub next_offset: u64,
}

/// The length of `bytes` without an incomplete UTF-8 sequence at its end (a sequence that may
/// still be completed by later bytes; invalid bytes are not held back).
fn complete_utf8_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // A sequence is at most 4 bytes: look at the last 3 for its lead byte.
    for back in 1..=len.min(3) {
        let b = bytes[len - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: keep looking for the lead
        }
        let needed = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return len, // ASCII or invalid: nothing to hold back
        };
        return if back < needed { len - back } else { len };
    }
    len
}

/// Turns terminal output into what a person would read: escape sequences (colours, cursor
/// movement, titles) are removed, `\r` returns to the start of the line so that progress bars
/// show their last state, backspace moves back, and other control characters are dropped.
pub fn clean_terminal_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut line: Vec<char> = Vec::new();
    let mut column = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            '\u{9b}' => skip_csi(&mut chars),
            '\n' => {
                out.extend(line.drain(..));
                out.push('\n');
                column = 0;
            }
            '\r' => column = 0,
            '\u{8}' => column = column.saturating_sub(1),
            '\t' => put(&mut line, &mut column, c),
            c if c.is_control() => {}
            c => put(&mut line, &mut column, c),
        }
    }
    out.extend(line);
    out
}

fn put(line: &mut Vec<char>, column: &mut usize, c: char) {
    if *column < line.len() {
        line[*column] = c;
    } else {
        line.push(c);
    }
    *column += 1;
}

/// Skips what follows an ESC: a CSI sequence, a string (OSC, DCS, ...) up to its terminator, or
/// intermediate bytes and one final byte.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.next() {
        Some('[') => skip_csi(chars),
        Some(']' | 'P' | 'X' | '^' | '_') => {
            // Ends at BEL or ST (ESC \).
            while let Some(c) = chars.next() {
                if c == '\u{7}' {
                    break;
                }
                if c == '\u{1b}' {
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                    }
                    break;
                }
            }
        }
        Some(c) if ('\u{20}'..='\u{2f}').contains(&c) => {
            while let Some(&c) = chars.peek() {
                chars.next();
                if !('\u{20}'..='\u{2f}').contains(&c) {
                    break;
                }
            }
        }
        _ => {}
    }
}

/// Skips a CSI sequence's parameter and intermediate bytes and its final byte.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) {
            break;
        }
        if !('\u{20}'..='\u{3f}').contains(&c) {
            break; // malformed: stop at the first byte that cannot belong to it
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_overwrites_are_cleaned() {
        assert_eq!(
            clean_terminal_text("\u{1b}[1;31mred\u{1b}[0m plain"),
            "red plain"
        );
        assert_eq!(
            clean_terminal_text("\u{1b}]0;title\u{7}text\u{1b}]2;t\u{1b}\\!"),
            "text!"
        );
        assert_eq!(clean_terminal_text("\u{1b}(Bcharset"), "charset");
        assert_eq!(clean_terminal_text(" 10%\r 50%\r100%\ndone"), "100%\ndone");
        assert_eq!(clean_terminal_text("abc\rX\n"), "Xbc\n");
        assert_eq!(
            clean_terminal_text("windows\r\nline\r\n"),
            "windows\nline\n"
        );
        assert_eq!(clean_terminal_text("ab\u{8}c\u{7}"), "ac");
        assert_eq!(clean_terminal_text("tab\there ünï"), "tab\there ünï");
    }

    #[test]
    fn the_buffer_keeps_the_tail_on_char_boundaries() {
        let mut buffer = OutputBuffer::new(1024);
        for _ in 0..1000 {
            buffer.push("é".as_bytes());
        }
        assert_eq!(buffer.total_bytes(), 2000);
        let rendered = buffer.render(None);
        assert!(rendered.truncated);
        assert!(rendered.text.starts_with("[output truncated: the first"));
        let body = rendered.text.split_once("]\n").unwrap().1;
        assert!(body.chars().all(|c| c == 'é'), "{body:?}");
    }

    #[test]
    fn rendering_truncates_to_the_limit_and_says_so() {
        let mut buffer = OutputBuffer::new(1 << 20);
        let line = "0123456789".repeat(10) + "\n";
        for _ in 0..1000 {
            buffer.push(line.as_bytes());
        }
        let full = buffer.render(None);
        assert!(!full.truncated);
        assert_eq!(full.text.chars().count(), 101 * 1000 - 1);
        let cut = buffer.render(Some(TRUNCATE_CHARS));
        assert!(cut.truncated);
        assert!(cut.text.chars().count() <= TRUNCATE_CHARS);
        assert!(cut.text.starts_with("[output truncated; showing the last"));
        assert!(cut.text.ends_with("0123456789"));
        let small = buffer.render(Some(1_000_000));
        assert!(!small.truncated);
    }

    #[test]
    fn reads_from_offsets_hold_back_split_characters() {
        let mut buffer = OutputBuffer::new(1024);
        buffer.push(b"ab\xc3");
        let first = buffer.read_from(0).unwrap();
        assert_eq!((first.text.as_str(), first.next_offset), ("ab", 2));
        buffer.push(b"\xa9z");
        let second = buffer.read_from(first.next_offset).unwrap();
        assert_eq!((second.text.as_str(), second.next_offset), ("\u{e9}z", 5));
        assert_eq!(buffer.read_from(5).unwrap().text, "");
        assert_eq!(buffer.read_from(6), None);
        buffer.push(b"\xff");
        assert_eq!(buffer.read_from(5).unwrap().text, "\u{fffd}");
    }

    #[test]
    fn reads_from_dropped_offsets_start_at_the_oldest_kept_byte() {
        let mut buffer = OutputBuffer::new(1024);
        buffer.push(&[b'x'; 2000]);
        let chunk = buffer.read_from(0).unwrap();
        assert_eq!(chunk.next_offset, 2000);
        assert_eq!(chunk.skipped + chunk.text.len() as u64, 2000);
        assert!(chunk.skipped > 0);
    }
}
