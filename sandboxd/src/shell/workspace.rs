//! The workspace directory, looked up in its parent directory held open.
//!
//! Whether the workspace exists is asked for every new session (it is where the session starts,
//! else the home directory), and whether a waiting bash sits in it for every command handed to
//! one (see `wrapper.bash`, READY_DIR). A lookup from `/` costs a round trip to the FUSE daemon
//! where the image sits on fuse-overlayfs (see `state`); the workspace's name looked up in a
//! handle of its parent costs a few microseconds, and answers exactly what `is_dir` on the path
//! would, as long as the parent itself is not replaced (then it is opened again).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

use super::procs;

/// A directory by path, its parent held open.
#[derive(Debug)]
pub struct Workspace {
    path: PathBuf,
    /// The handle of the path's parent, opened on first use and again once it is removed.
    parent: Mutex<Option<OwnedFd>>,
}

/// Where a directory is: the device and inode numbers `stat` gives.
pub type DirIdentity = (u64, u64);

impl Workspace {
    pub fn new(path: PathBuf) -> Workspace {
        Workspace {
            path,
            parent: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the path names a directory now (following symlinks, as `Path::is_dir`).
    pub fn is_dir(&self) -> bool {
        self.identity().is_some()
    }

    /// The directory the path names now, if it is one.
    pub fn identity(&self) -> Option<DirIdentity> {
        let stat = self.stat()?;
        (SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
            .then_some((stat.st_dev, stat.st_ino))
    }

    /// Whether process `pid` works in the directory the path names now.
    pub fn is_cwd_of(&self, pid: i32) -> bool {
        self.identity()
            .is_some_and(|dir| procs::cwd_identity(pid) == Some(dir))
    }

    fn stat(&self) -> Option<FileStat> {
        let (Some(parent_path), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            // `/` (or a path ending in `..`): no parent to hold.
            return nix::sys::stat::stat(&self.path).ok();
        };
        let parent_path = if parent_path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent_path
        };
        let mut parent = self.lock();
        let held = parent.take().filter(|fd| {
            // Removed (its last name unlinked): the path's parent is another directory now, if
            // any.
            nix::sys::stat::fstat(fd).is_ok_and(|stat| stat.st_nlink > 0)
        });
        let fd = match held {
            Some(fd) => fd,
            None => nix::fcntl::open(
                parent_path,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok()?,
        };
        let stat = nix::sys::stat::fstatat(&fd, name, AtFlags::empty()).ok();
        *parent = Some(fd);
        stat
    }

    fn lock(&self) -> MutexGuard<'_, Option<OwnedFd>> {
        // A plain value: consistent even if poisoned.
        self.parent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_answers_as_is_dir_would_through_removal_renaming_and_a_new_parent() {
        let top = tempfile::tempdir().unwrap();
        let parent = top.path().join("home");
        let path = parent.join("work space");
        std::fs::create_dir_all(&path).unwrap();
        let workspace = Workspace::new(path.clone());
        assert!(workspace.is_dir());
        let first = workspace.identity().unwrap();
        // Held, as a waiting bash's working directory holds it: its inode number cannot be
        // given to the next directory.
        let _held = std::fs::File::open(&path).unwrap();

        std::fs::remove_dir(&path).unwrap();
        assert!(!workspace.is_dir(), "removed");
        std::fs::write(&path, "").unwrap();
        assert!(!workspace.is_dir(), "a file by that name");
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(workspace.is_dir(), "made anew");
        assert_ne!(workspace.identity().unwrap(), first, "another directory");

        std::fs::rename(&path, parent.join("elsewhere")).unwrap();
        assert!(!workspace.is_dir(), "renamed away");
        std::os::unix::fs::symlink(parent.join("elsewhere"), &path).unwrap();
        assert!(workspace.is_dir(), "a symlink to a directory, followed");

        // The parent replaced: the held one is gone, the new one is found.
        std::fs::remove_dir_all(&parent).unwrap();
        assert!(!workspace.is_dir());
        std::fs::create_dir_all(&path).unwrap();
        assert!(workspace.is_dir(), "under a new parent");
    }

    #[test]
    fn it_knows_which_process_works_in_it() {
        let top = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(top.path().join("w"));
        std::fs::create_dir(workspace.path()).unwrap();
        let pid = std::process::id() as i32;
        assert!(!workspace.is_cwd_of(pid), "this test runs elsewhere");
        let here = Workspace::new(std::env::current_dir().unwrap());
        assert!(here.is_cwd_of(pid));
        assert!(!here.is_cwd_of(i32::MAX), "no such process");
        assert!(Workspace::new(PathBuf::from("/")).is_dir());
    }
}
