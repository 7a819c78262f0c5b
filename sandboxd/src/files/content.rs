//! One file's content: read (whole or a line range, as text or base64), write (text, base64 or
//! raw; truncate or append), replace a string, search lines with a regex.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::confine::{ConfineError, Resolved};
use super::{FileError, Files, LimitKind};

/// How read content is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadEncoding {
    /// As text; a file that is not UTF-8 is an error naming the offset of the first bad byte.
    #[default]
    Utf8,
    Base64,
}

#[derive(Debug, Clone)]
pub struct ReadRequest<'a> {
    pub path: &'a OsStr,
    /// First line to return, 0-based; negative counts from the end (`-10`: the last ten
    /// lines), as a Python slice does.
    pub start_line: Option<i64>,
    /// Line to stop before (exclusive); negative counts from the end.
    pub end_line: Option<i64>,
    pub encoding: ReadEncoding,
}

#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub path: PathBuf,
    pub content: String,
    /// Bytes of file content returned (before base64).
    pub bytes: u64,
}

/// How written content is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteEncoding {
    /// Text; `leading_newline` and `trailing_newline` apply.
    #[default]
    Utf8,
    /// Base64 of the bytes to write.
    Base64,
    /// The string's bytes exactly as given.
    Raw,
}

#[derive(Debug, Clone)]
pub struct WriteRequest<'a> {
    pub path: &'a OsStr,
    pub content: &'a str,
    pub encoding: WriteEncoding,
    pub append: bool,
    pub leading_newline: bool,
    pub trailing_newline: bool,
}

#[derive(Debug, Clone)]
pub struct WriteOutcome {
    pub path: PathBuf,
    pub bytes_written: u64,
}

#[derive(Debug, Clone)]
pub struct ReplaceOutcome {
    pub path: PathBuf,
    pub replaced_count: u64,
}

#[derive(Debug, Clone)]
pub struct SearchOutcome {
    pub path: PathBuf,
    /// The matching lines, without their line terminators.
    pub matches: Vec<String>,
    /// Their line numbers, 0-based like `start_line` of a read.
    pub line_numbers: Vec<u64>,
    /// More lines matched than [`MAX_SEARCH_MATCHES`].
    pub truncated: bool,
}

/// The most lines one search returns.
pub const MAX_SEARCH_MATCHES: usize = 10_000;

/// Whether a write replaces the file's content or adds to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteMode {
    Truncate,
    Append,
}

impl Files {
    pub fn read(&self, request: &ReadRequest<'_>) -> Result<ReadOutcome, FileError> {
        let from_end = |value: Option<i64>| value.is_some_and(|v| v < 0);
        if let (Some(start), Some(end)) = (request.start_line, request.end_line)
            && end < start
            && !from_end(Some(start))
            && !from_end(Some(end))
        {
            return Err(FileError::invalid(
                "end_line",
                format!("end_line ({end}) is before start_line ({start})"),
            ));
        }
        let r = self.confine.resolve(request.path)?;
        let mut file = self.open_regular(&r)?;
        let limit = self.limits.max_read_bytes;
        let bytes = if request.start_line.is_none() && request.end_line.is_none() {
            self.read_whole(file, &r)?
        } else {
            // Counted from the end: the file's lines are counted first (streamed, not kept).
            let total = if from_end(request.start_line) || from_end(request.end_line) {
                let total = count_lines(&mut file, &r)?;
                std::io::Seek::rewind(&mut file).map_err(FileError::io("reading", &r.requested))?;
                total
            } else {
                0
            };
            let absolute = |value: i64| {
                if value < 0 {
                    total.saturating_sub(value.unsigned_abs())
                } else {
                    value.unsigned_abs()
                }
            };
            let start = request.start_line.map_or(0, absolute);
            let end = request.end_line.map(absolute);
            // As a Python slice: an end before the start selects nothing.
            if end.is_some_and(|end| end <= start) {
                Vec::new()
            } else {
                read_line_range(file, start, end, limit, &r)?
            }
        };
        let count = bytes.len() as u64;
        let content = match request.encoding {
            ReadEncoding::Base64 => BASE64.encode(&bytes),
            ReadEncoding::Utf8 => String::from_utf8(bytes).map_err(|error| {
                FileError::invalid(
                    "encoding",
                    format!(
                        "{} is not UTF-8 text (invalid byte at offset {}); read it with \
                         \"encoding\": \"base64\" or download it",
                        r.requested.display(),
                        error.utf8_error().valid_up_to()
                    ),
                )
            })?,
        };
        Ok(ReadOutcome {
            path: r.requested,
            content,
            bytes: count,
        })
    }

    pub fn write(&self, request: &WriteRequest<'_>) -> Result<WriteOutcome, FileError> {
        let mut data = match request.encoding {
            WriteEncoding::Utf8 | WriteEncoding::Raw => request.content.as_bytes().to_vec(),
            WriteEncoding::Base64 => BASE64.decode(request.content.trim()).map_err(|error| {
                FileError::invalid("content", format!("content is not valid base64: {error}"))
            })?,
        };
        if request.encoding == WriteEncoding::Utf8 {
            if request.leading_newline {
                data.insert(0, b'\n');
            }
            if request.trailing_newline {
                data.push(b'\n');
            }
        }
        let path = self.confine.absolute(request.path)?;
        self.check_write_size(&path, data.len())?;
        let r = self.confine.resolve(request.path)?;
        let mode = if request.append {
            WriteMode::Append
        } else {
            WriteMode::Truncate
        };
        self.write_bytes(&r, &data, mode)?;
        Ok(WriteOutcome {
            path: r.requested,
            bytes_written: data.len() as u64,
        })
    }

    /// Replaces every occurrence of `old` with `new`; the file is rewritten only if something
    /// was replaced.
    pub fn replace(&self, path: &OsStr, old: &str, new: &str) -> Result<ReplaceOutcome, FileError> {
        if old.is_empty() {
            return Err(FileError::invalid("old_str", "old_str must not be empty"));
        }
        let r = self.confine.resolve(path)?;
        let content = self.read_limited(&r)?;
        let old = old.as_bytes();
        let mut replaced = Vec::with_capacity(content.len());
        let mut count = 0u64;
        let mut last = 0;
        for at in memchr::memmem::find_iter(&content, old) {
            replaced.extend_from_slice(&content[last..at]);
            replaced.extend_from_slice(new.as_bytes());
            last = at + old.len();
            count += 1;
        }
        if count > 0 {
            replaced.extend_from_slice(&content[last..]);
            self.check_write_size(&r.requested, replaced.len())?;
            self.write_bytes(&r, &replaced, WriteMode::Truncate)?;
        }
        Ok(ReplaceOutcome {
            path: r.requested,
            replaced_count: count,
        })
    }

    /// The lines of a file that match `regex`.
    pub fn search(&self, path: &OsStr, regex: &str) -> Result<SearchOutcome, FileError> {
        let pattern = regex::bytes::Regex::new(regex)
            .map_err(|error| FileError::invalid("regex", format!("invalid regex: {error}")))?;
        let r = self.confine.resolve(path)?;
        let content = self.read_limited(&r)?;
        let mut outcome = SearchOutcome {
            path: r.requested,
            matches: Vec::new(),
            line_numbers: Vec::new(),
            truncated: false,
        };
        for (number, line) in lines(&content).enumerate() {
            if pattern.is_match(line) {
                if outcome.matches.len() == MAX_SEARCH_MATCHES {
                    outcome.truncated = true;
                    break;
                }
                outcome
                    .matches
                    .push(String::from_utf8_lossy(line).into_owned());
                outcome.line_numbers.push(number as u64);
            }
        }
        Ok(outcome)
    }

    /// Opens a planned path for reading; it must be a regular file.
    pub(crate) fn open_regular(&self, r: &Resolved) -> Result<std::fs::File, FileError> {
        if !r.exists() {
            return Err(ConfineError::NotFound {
                path: r.requested.clone(),
            }
            .into());
        }
        // O_NONBLOCK: opening a FIFO must not hang; it is refused just below.
        let fd = self
            .confine
            .open(r, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty())
            .map_err(|error| not_a_file_if_device(error, r))?;
        let file = std::fs::File::from(fd);
        let meta = file
            .metadata()
            .map_err(FileError::io("inspecting", &r.requested))?;
        if meta.is_dir() {
            return Err(ConfineError::IsADirectory {
                path: r.requested.clone(),
            }
            .into());
        }
        if !meta.is_file() {
            return Err(FileError::NotAFile {
                path: r.requested.clone(),
            });
        }
        Ok(file)
    }

    /// The whole content of a planned regular file, within the read limit.
    pub(crate) fn read_limited(&self, r: &Resolved) -> Result<Vec<u8>, FileError> {
        let file = self.open_regular(r)?;
        self.read_whole(file, r)
    }

    fn read_whole(&self, file: std::fs::File, r: &Resolved) -> Result<Vec<u8>, FileError> {
        let limit = self.limits.max_read_bytes;
        let size = file
            .metadata()
            .map_err(FileError::io("inspecting", &r.requested))?
            .len();
        if size > limit {
            return Err(FileError::TooLarge {
                kind: LimitKind::Read,
                path: r.requested.clone(),
                size: Some(size),
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        // The file may grow while it is read: never take more than the limit.
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(FileError::io("reading", &r.requested))?;
        if bytes.len() as u64 > limit {
            return Err(FileError::TooLarge {
                kind: LimitKind::Read,
                path: r.requested.clone(),
                size: None,
                limit,
            });
        }
        Ok(bytes)
    }

    pub(crate) fn check_write_size(
        &self,
        path: &std::path::Path,
        size: usize,
    ) -> Result<(), FileError> {
        let limit = self.limits.max_write_bytes;
        if size as u64 > limit {
            return Err(FileError::TooLarge {
                kind: LimitKind::Write,
                path: path.to_path_buf(),
                size: Some(size as u64),
                limit,
            });
        }
        Ok(())
    }

    /// Writes `data` to a planned path, creating missing parent directories inside the root.
    /// Callers check the size first.
    pub(crate) fn write_bytes(
        &self,
        r: &Resolved,
        data: &[u8],
        mode: WriteMode,
    ) -> Result<(), FileError> {
        if r.is_root() {
            return Err(ConfineError::IsADirectory {
                path: r.requested.clone(),
            }
            .into());
        }
        self.confine.create_parent_dirs(r)?;
        let flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_NONBLOCK
            | match mode {
                WriteMode::Truncate => OFlag::O_TRUNC,
                WriteMode::Append => OFlag::O_APPEND,
            };
        let fd = self
            .confine
            .open(r, flags, Mode::from_bits_truncate(0o666))
            .map_err(|error| not_a_file_if_device(error, r))?;
        let mut file = std::fs::File::from(fd);
        let meta = file
            .metadata()
            .map_err(FileError::io("inspecting", &r.requested))?;
        if !meta.is_file() {
            return Err(FileError::NotAFile {
                path: r.requested.clone(),
            });
        }
        file.write_all(data)
            .map_err(FileError::io("writing", &r.requested))?;
        Ok(())
    }
}

/// Opening a socket, or a FIFO for writing with no reader, fails with ENXIO: report it as what
/// it is, not as an I/O failure.
fn not_a_file_if_device(error: ConfineError, r: &Resolved) -> FileError {
    match &error {
        ConfineError::Io { source, .. } if source.raw_os_error() == Some(nix::libc::ENXIO) => {
            FileError::NotAFile {
                path: r.requested.clone(),
            }
        }
        _ => error.into(),
    }
}

/// Reads lines `start..end` (0-based, `end` exclusive, terminators kept) without holding more
/// than `limit` bytes: skipped lines are scanned, not stored.
/// The number of lines of a file: newline-terminated ones, and a last one without its newline.
fn count_lines(file: &mut std::fs::File, r: &Resolved) -> Result<u64, FileError> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut lines = 0u64;
    let mut last = b'\n';
    loop {
        let buffer = reader
            .fill_buf()
            .map_err(FileError::io("reading", &r.requested))?;
        let Some(&end) = buffer.last() else {
            break;
        };
        lines += memchr::memchr_iter(b'\n', buffer).count() as u64;
        last = end;
        let n = buffer.len();
        reader.consume(n);
    }
    Ok(lines + u64::from(last != b'\n'))
}

fn read_line_range(
    file: std::fs::File,
    start: u64,
    end: Option<u64>,
    limit: u64,
    r: &Resolved,
) -> Result<Vec<u8>, FileError> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let io = |e| FileError::io("reading", &r.requested)(e);
    let mut line = 0u64;
    while line < start {
        let buffer = reader.fill_buf().map_err(io)?;
        if buffer.is_empty() {
            return Ok(Vec::new());
        }
        match memchr::memchr(b'\n', buffer) {
            Some(at) => {
                reader.consume(at + 1);
                line += 1;
            }
            None => {
                let n = buffer.len();
                reader.consume(n);
            }
        }
    }
    let mut out = Vec::new();
    while end.is_none_or(|end| line < end) {
        let buffer = reader.fill_buf().map_err(io)?;
        if buffer.is_empty() {
            break;
        }
        let (take, newline) = match memchr::memchr(b'\n', buffer) {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        if (out.len() + take) as u64 > limit {
            return Err(FileError::TooLarge {
                kind: LimitKind::Read,
                path: r.requested.clone(),
                size: None,
                limit,
            });
        }
        out.extend_from_slice(&buffer[..take]);
        reader.consume(take);
        if newline {
            line += 1;
        }
    }
    Ok(out)
}

/// The lines of `content` without terminators (`\n` or `\r\n`); a final newline does not start
/// another line.
pub(crate) fn lines(content: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let empty = content.is_empty();
    body.split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .take(if empty { 0 } else { usize::MAX })
}

#[cfg(test)]
mod tests {
    use super::lines;

    #[test]
    fn splitting_lines() {
        let split = |s: &str| lines(s.as_bytes()).map(|l| l.to_vec()).collect::<Vec<_>>();
        assert_eq!(split(""), Vec::<Vec<u8>>::new());
        assert_eq!(split("a"), vec![b"a".to_vec()]);
        assert_eq!(split("a\n"), vec![b"a".to_vec()]);
        assert_eq!(
            split("a\r\n\nb"),
            vec![b"a".to_vec(), b"".to_vec(), b"b".to_vec()]
        );
        assert_eq!(split("\n"), vec![b"".to_vec()]);
    }
}
