//! Directory walks by descriptor: each directory is opened relative to its parent's descriptor
//! with `O_NOFOLLOW`, so a walk never follows a symlink and never leaves the tree it started in,
//! even if the tree changes while it runs. Symlinks are reported as entries, never entered.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, fstatat};

use super::{Kind, Meta};

/// No walk goes deeper than this (each level holds one open descriptor).
pub const MAX_WALK_DEPTH: usize = 128;

/// What to walk.
#[derive(Debug, Clone, Copy)]
pub struct WalkOptions {
    /// 1 = the start directory's entries only.
    pub max_depth: usize,
    /// Skip entries whose name starts with `.` (and do not enter such directories).
    pub skip_hidden: bool,
    /// Stop after this many entries; the walk reports itself truncated.
    pub max_entries: usize,
}

/// One entry met by a walk.
pub struct Entry<'a> {
    /// The directory holding the entry (readable), for `*at` calls on `name`.
    pub dir: BorrowedFd<'a>,
    pub name: &'a OsStr,
    /// Relative to the start directory, `name` included.
    pub rel: &'a Path,
    /// 1 for the start directory's entries.
    pub depth: usize,
    pub meta: Meta,
}

/// What the visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    Continue,
    /// Do not enter this directory.
    Skip,
    Stop,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct WalkSummary {
    pub entries: usize,
    /// Stopped at `max_entries`.
    pub truncated: bool,
    /// Directories that could not be read (permissions, vanished).
    pub unreadable: usize,
}

/// Walks the directory open at `start` (a readable directory descriptor), entries in name
/// order, depth first.
pub fn walk(
    start: OwnedFd,
    options: &WalkOptions,
    visit: &mut dyn FnMut(&Entry<'_>) -> Visit,
) -> WalkSummary {
    let mut summary = WalkSummary::default();
    match Dir::from_fd(start) {
        Ok(dir) => {
            let mut rel = PathBuf::new();
            walk_dir(dir, &mut rel, 1, options, visit, &mut summary);
        }
        Err(_) => summary.unreadable += 1,
    }
    summary
}

/// Returns false when the walk must stop.
fn walk_dir(
    mut dir: Dir,
    rel: &mut PathBuf,
    depth: usize,
    options: &WalkOptions,
    visit: &mut dyn FnMut(&Entry<'_>) -> Visit,
    summary: &mut WalkSummary,
) -> bool {
    let mut names: Vec<CString> = Vec::new();
    for entry in dir.iter() {
        let Ok(entry) = entry else {
            summary.unreadable += 1;
            break;
        };
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." || (options.skip_hidden && bytes.starts_with(b".")) {
            continue;
        }
        names.push(name.to_owned());
        if names.len() > options.max_entries {
            break;
        }
    }
    names.sort();
    for name in names {
        if summary.entries >= options.max_entries {
            summary.truncated = true;
            return false;
        }
        // The entry may have vanished since readdir; skip it then.
        let Ok(stat) = fstatat(&dir, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        summary.entries += 1;
        let meta = Meta::from_stat(&stat);
        let os_name = OsStr::from_bytes(name.to_bytes());
        rel.push(os_name);
        let decision = visit(&Entry {
            dir: dir.as_fd(),
            name: os_name,
            rel,
            depth,
            meta,
        });
        let keep_going = match decision {
            Visit::Stop => false,
            Visit::Skip => true,
            Visit::Continue => {
                if meta.kind == Kind::Directory && depth < options.max_depth.min(MAX_WALK_DEPTH) {
                    match open_child_dir(&dir, &name) {
                        Some(child) => walk_dir(child, rel, depth + 1, options, visit, summary),
                        None => {
                            summary.unreadable += 1;
                            true
                        }
                    }
                } else {
                    true
                }
            }
        };
        rel.pop();
        if !keep_going {
            return false;
        }
    }
    true
}

fn open_child_dir(parent: &Dir, name: &CString) -> Option<Dir> {
    let fd = openat(
        parent,
        name.as_c_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    Dir::from_fd(fd).ok()
}

/// Opens a regular file in a walked directory for reading, refusing symlinks and anything that
/// is not a regular file (a FIFO would block; `O_NONBLOCK` keeps the open itself from blocking).
pub fn open_file_in(dir: BorrowedFd<'_>, name: &OsStr) -> Option<std::fs::File> {
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = std::fs::File::from(fd);
    file.metadata().ok().filter(|m| m.is_file())?;
    Some(file)
}
