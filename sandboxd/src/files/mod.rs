//! Files in the sandbox, for the agent: read, write, search, list, edit, upload and download,
//! every path confined to the allowed roots. No HTTP here: typed requests in, typed outcomes out,
//! [`FileError`] on failure.
//!
//! # Layout
//! - [`confine`]: the path resolver every operation goes through (roots, symlinks, `openat2`).
//! - [`walk`]: descriptor-based directory walks that never follow symlinks.
//! - [`content`]: read, write, replace and search in one file.
//! - [`listing`]: list, find and glob.
//! - [`grep`]: regex search across files.
//! - [`editor`]: the `str_replace_editor` tool (view, create, str_replace, insert, undo_edit).
//! - [`document`]: PDF pages, spreadsheet rows and presentation slides as text, for the
//!   editor's `view` (the one part that runs a program, and is async).
//! - [`transfer`]: streamed uploads and downloads.
//! - [`size`]: byte sizes such as `1M`.
//! - [`watch`]: inotify watches with bounded event queues (async, unlike the rest).
//!
//! All of it but [`document`]'s PDF reading is blocking file-system work: callers on an async runtime run it on blocking
//! threads.

pub mod confine;
pub mod content;
pub mod document;
pub mod editor;
pub mod grep;
pub mod listing;
pub mod size;
pub mod transfer;
pub mod walk;
pub mod watch;

use std::path::PathBuf;
use std::time::SystemTime;

pub use confine::{ConfineError, Confinement, Refusal, Resolved, Strategy};

/// Size limits, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most content one read returns (after decoding into text or base64's source bytes).
    pub max_read_bytes: u64,
    /// The most content one write, replace or edit puts in a file.
    pub max_write_bytes: u64,
    /// The largest upload.
    pub max_upload_bytes: u64,
}

/// Which limit a request went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Read,
    Write,
    Upload,
}

/// Why a file operation failed. Every variant names the path or the request field.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path was refused, or could not be resolved.
    #[error(transparent)]
    Path(#[from] ConfineError),
    /// The content is larger than a limit. `size` is `None` when it was streamed and the count
    /// stopped at the limit.
    #[error("{path}: larger than the {kind:?} limit of {limit} bytes")]
    TooLarge {
        kind: LimitKind,
        path: PathBuf,
        size: Option<u64>,
        limit: u64,
    },
    /// A request field has a value that cannot be used; `field` is its name in the request.
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
    /// The request clashes with the state of the file system or the edit history.
    #[error("{message}")]
    Conflict { message: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl FileError {
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        FileError::Invalid {
            field,
            message: message.into(),
        }
    }

    pub(crate) fn io(
        op: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| FileError::Io { op, path, source }
    }
}

/// The file service: confinement, limits and the editor's undo history.
#[derive(Debug)]
pub struct Files {
    confine: Confinement,
    limits: Limits,
    history: editor::History,
}

impl Files {
    pub fn new(confine: Confinement, limits: Limits) -> Self {
        Self {
            confine,
            limits,
            history: editor::History::default(),
        }
    }

    pub fn confinement(&self) -> &Confinement {
        &self.confine
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }
}

/// What kind of directory entry something is (symlinks are never followed when listing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    Other,
}

/// `lstat` facts about an entry.
#[derive(Debug, Clone, Copy)]
pub struct Meta {
    pub kind: Kind,
    pub size: u64,
    pub modified: Option<SystemTime>,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

impl Meta {
    pub(crate) fn from_stat(stat: &nix::sys::stat::FileStat) -> Self {
        use nix::sys::stat::SFlag;
        let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        let kind = if format == SFlag::S_IFREG {
            Kind::File
        } else if format == SFlag::S_IFDIR {
            Kind::Directory
        } else if format == SFlag::S_IFLNK {
            Kind::Symlink
        } else {
            Kind::Other
        };
        let modified = u64::try_from(stat.st_mtime).ok().map(|secs| {
            SystemTime::UNIX_EPOCH
                + std::time::Duration::new(secs, u32::try_from(stat.st_mtime_nsec).unwrap_or(0))
        });
        Self {
            kind,
            size: u64::try_from(stat.st_size).unwrap_or(0),
            modified,
            mode: stat.st_mode & 0o7777,
        }
    }

    /// `ls -l` style: `-rw-r--r--`.
    pub fn permissions_text(&self) -> String {
        let kind = match self.kind {
            Kind::File => '-',
            Kind::Directory => 'd',
            Kind::Symlink => 'l',
            Kind::Other => '?',
        };
        let mut text = String::with_capacity(10);
        text.push(kind);
        for shift in [6, 3, 0] {
            let bits = (self.mode >> shift) & 0o7;
            text.push(if bits & 4 != 0 { 'r' } else { '-' });
            text.push(if bits & 2 != 0 { 'w' } else { '-' });
            text.push(if bits & 1 != 0 { 'x' } else { '-' });
        }
        text
    }
}
