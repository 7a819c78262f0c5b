//! Program output: size-rotated log files and `tracing` events, one line at a time.
//!
//! Each program writes to `<dir>/<name>.log`. When a write would take the file past the size limit
//! the file is renamed to `<name>.log.1` (older backups shift up to `.N`, the oldest is dropped)
//! and a fresh file is opened. The same lines go to `tracing` under target `program`, tagged with
//! the program name and the stream.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Longest line kept as one event; longer lines are split.
const MAX_LINE: usize = 16 * 1024;

/// A log file that rotates by size.
#[derive(Debug)]
pub struct RotatingLog {
    path: PathBuf,
    max_bytes: u64,
    backups: u32,
    file: Option<File>,
    size: u64,
}

impl RotatingLog {
    /// Opens (appending) `path`. `backups == 0` means the file is truncated when full.
    pub fn open(path: PathBuf, max_bytes: u64, backups: u32) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path,
            max_bytes,
            backups,
            file: Some(file),
            size,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of backup number `n` (1 is the newest).
    pub fn backup_path(&self, n: u32) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// Appends `data`, rotating first if it would not fit. A single write larger than the limit
    /// still goes into one (fresh) file.
    pub fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        if self.size > 0 && self.size + data.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?;
                self.size = 0;
                self.file.insert(file)
            }
        };
        file.write_all(data)?;
        self.size += data.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        if self.backups == 0 {
            std::fs::remove_file(&self.path).or_else(ignore_not_found)?;
        } else {
            std::fs::remove_file(self.backup_path(self.backups)).or_else(ignore_not_found)?;
            for n in (1..self.backups).rev() {
                std::fs::rename(self.backup_path(n), self.backup_path(n + 1))
                    .or_else(ignore_not_found)?;
            }
            std::fs::rename(&self.path, self.backup_path(1)).or_else(ignore_not_found)?;
        }
        self.size = 0;
        Ok(())
    }
}

fn ignore_not_found(error: io::Error) -> io::Result<()> {
    if error.kind() == io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(error)
    }
}

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Copies `reader` line by line into `log` (if any) and `tracing` until end of file.
pub async fn pump_lines(
    program: Arc<str>,
    stream: Stream,
    reader: impl AsyncRead + Unpin,
    log: Option<Arc<Mutex<RotatingLog>>>,
) {
    let mut reader = BufReader::with_capacity(8 * 1024, reader);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_line_bounded(&mut reader, &mut line).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(program = %program, %error, "output stream closed with an error");
                return;
            }
        }
        if let Some(log) = &log {
            // The lock only guards in-memory state and short appends; a poisoned lock is usable.
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(error) = log.write_all(&line) {
                tracing::warn!(program = %program, path = %log.path().display(), %error, "cannot write program log");
            }
        }
        let text = String::from_utf8_lossy(&line);
        tracing::info!(
            target: "program",
            program = %program,
            stream = stream.as_str(),
            "{}",
            text.trim_end_matches(['\n', '\r'])
        );
    }
}

/// Reads up to and including a newline, or `MAX_LINE` bytes, whichever comes first.
async fn read_line_bounded(
    reader: &mut BufReader<impl AsyncRead + Unpin>,
    out: &mut Vec<u8>,
) -> io::Result<usize> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(out.len());
        }
        let room = MAX_LINE - out.len();
        let (take, done) = match available.iter().take(room).position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => {
                let n = available.len().min(room);
                (n, out.len() + n >= MAX_LINE)
            }
        };
        out.extend_from_slice(&available[..take]);
        reader.consume(take);
        if done {
            return Ok(out.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_the_configured_number_of_backups() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RotatingLog::open(dir.path().join("p.log"), 100, 2).unwrap();
        for i in 0..20 {
            log.write_all(format!("line {i:02} ......................\n").as_bytes())
                .unwrap();
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["p.log", "p.log.1", "p.log.2"]);
        for name in &names {
            let len = std::fs::metadata(dir.path().join(name)).unwrap().len();
            assert!(len <= 100, "{name} has {len} bytes");
        }
        let newest = std::fs::read_to_string(dir.path().join("p.log")).unwrap();
        assert!(newest.ends_with("line 19 ......................\n"));
    }

    #[test]
    fn zero_backups_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = RotatingLog::open(dir.path().join("p.log"), 10, 0).unwrap();
        log.write_all(b"0123456789").unwrap();
        log.write_all(b"abc").unwrap();
        assert_eq!(std::fs::read(dir.path().join("p.log")).unwrap(), b"abc");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn long_lines_are_split_and_partial_last_line_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Mutex::new(
            RotatingLog::open(dir.path().join("p.log"), 1 << 20, 1).unwrap(),
        ));
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\nlast");
        pump_lines("p".into(), Stream::Stdout, &input[..], Some(log.clone())).await;
        let written = std::fs::read(dir.path().join("p.log")).unwrap();
        assert_eq!(written, input);
    }
}
