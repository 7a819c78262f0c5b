//! The shell's private state on disk: one root directory (on `/dev/shm`) holding a directory per
//! session (its saved environment, working directory and `done` FIFO) and the zygotes' FIFO
//! directories, all reached through one descriptor of the root.
//!
//! Every file operation here is relative to that descriptor (`mkdirat`, `openat`, `renameat`,
//! ...): a path from `/` is looked up through the image's root directory, and where the image
//! sits on fuse-overlayfs each lookup of `/` is a round trip to the FUSE daemon (about 17 us,
//! against 0.4 us from a descriptor, measured in the container). A command makes a dozen of
//! these operations; bash, which cannot use descriptors for them, still gets absolute paths
//! ([`StateRoot::path_of`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::{Gid, Uid, UnlinkatFlags};
use supervisor::process::Identity;

/// One session's directory in the state root.
#[derive(Debug, Clone)]
pub struct SessionDir {
    pub root: Arc<StateRoot>,
    /// Its name in the root.
    pub name: String,
}

impl SessionDir {
    /// Its absolute path (for bash).
    pub fn path(&self) -> PathBuf {
        self.root.path_of(&self.name)
    }

    /// `file` in it, relative to the root.
    pub fn file(&self, file: &str) -> String {
        format!("{}/{file}", self.name)
    }
}

/// How deep [`StateRoot::remove_tree`] goes (the wrapper makes no directories; a command could).
const MAX_TREE_DEPTH: usize = 16;

/// The state root, open.
#[derive(Debug)]
pub struct StateRoot {
    path: PathBuf,
    dir: OwnedFd,
}

impl StateRoot {
    /// Creates `path` (mode 0700, owned by `identity`) and opens it. Fails if it exists.
    pub fn create(path: PathBuf, identity: Option<&Identity>) -> io::Result<StateRoot> {
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        let dir = nix::fcntl::open(
            &path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )?;
        if let Some(identity) = identity {
            nix::unistd::fchown(&dir, owner(identity), group(identity))?;
        }
        Ok(StateRoot { path, dir })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the directory has been removed (a command may remove anything of its user's).
    pub fn is_removed(&self) -> bool {
        nix::sys::stat::fstat(&self.dir).map_or(true, |stat| stat.st_nlink == 0)
    }

    /// The absolute path of `relative` (for bash).
    pub fn path_of(&self, relative: &str) -> PathBuf {
        self.path.join(relative)
    }

    /// Makes the directory `relative` (mode 0700, owned by `identity`) unless it exists.
    pub fn make_private_dir(&self, relative: &str, identity: Option<&Identity>) -> io::Result<()> {
        match nix::sys::stat::mkdirat(&self.dir, relative, Mode::S_IRWXU) {
            Ok(()) => self.chown(relative, identity),
            Err(Errno::EEXIST) if self.is_dir(relative) => Ok(()),
            Err(errno) => Err(errno.into()),
        }
    }

    /// Makes the FIFO `relative` (mode 0600, owned by `identity`).
    pub fn make_fifo(&self, relative: &str, identity: Option<&Identity>) -> io::Result<()> {
        nix::unistd::mkfifoat(&self.dir, relative, Mode::S_IRUSR | Mode::S_IWUSR)?;
        self.chown(relative, identity)
    }

    /// Opens `relative` (never following a symlink in its last component).
    pub fn open(&self, relative: &str, flags: OFlag) -> io::Result<OwnedFd> {
        Ok(nix::fcntl::openat(
            &self.dir,
            relative,
            flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )?)
    }

    /// The size of the regular file `relative`, or None if there is none.
    pub fn file_len(&self, relative: &str) -> Option<u64> {
        let stat = self.stat(relative)?;
        (SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG)
            .then_some(stat.st_size as u64)
    }

    /// What `relative` is (not following a symlink), or None if it does not exist.
    pub fn file_type(&self, relative: &str) -> Option<SFlag> {
        self.stat(relative)
            .map(|stat| SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT)
    }

    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(nix::fcntl::renameat(&self.dir, from, &self.dir, to)?)
    }

    /// Removes the file (not directory) `relative`.
    pub fn remove_file(&self, relative: &str) -> io::Result<()> {
        Ok(nix::unistd::unlinkat(
            &self.dir,
            relative,
            UnlinkatFlags::NoRemoveDir,
        )?)
    }

    /// The whole of the file `relative`.
    pub fn read(&self, relative: &str) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        File::from(self.open(relative, OFlag::O_RDONLY)?).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Removes `relative` and everything in it (symlinks are removed, never followed). Missing
    /// is fine.
    pub fn remove_tree(&self, relative: &str) -> io::Result<()> {
        match remove_tree_at(&self.dir, relative, 0) {
            Err(Errno::ENOENT) => Ok(()),
            other => Ok(other?),
        }
    }

    fn is_dir(&self, relative: &str) -> bool {
        self.file_type(relative) == Some(SFlag::S_IFDIR)
    }

    fn stat(&self, relative: &str) -> Option<nix::sys::stat::FileStat> {
        nix::sys::stat::fstatat(&self.dir, relative, AtFlags::AT_SYMLINK_NOFOLLOW).ok()
    }

    fn chown(&self, relative: &str, identity: Option<&Identity>) -> io::Result<()> {
        let Some(identity) = identity else {
            return Ok(());
        };
        Ok(nix::unistd::fchownat(
            &self.dir,
            relative,
            owner(identity),
            group(identity),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )?)
    }
}

/// Removes `name` in `dir`: a file at once, a directory after its contents.
fn remove_tree_at<Fd: AsFd, P: ?Sized + nix::NixPath>(
    dir: Fd,
    name: &P,
    depth: usize,
) -> Result<(), Errno> {
    match nix::unistd::unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
        Err(Errno::EISDIR | Errno::EPERM) => {}
        other => return other,
    }
    if depth >= MAX_TREE_DEPTH {
        return Err(Errno::ELOOP);
    }
    let sub = nix::fcntl::openat(
        &dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )?;
    let mut entries = nix::dir::Dir::from_fd(sub.try_clone().map_err(|_| Errno::EMFILE)?)?;
    // Names may be any bytes: a command can make files here.
    let names: Vec<std::ffi::CString> = entries
        .iter()
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_owned())
        .filter(|entry| entry.as_bytes() != b"." && entry.as_bytes() != b"..")
        .collect();
    for entry in names {
        remove_tree_at(&sub, entry.as_c_str(), depth + 1)?;
    }
    nix::unistd::unlinkat(&dir, name, UnlinkatFlags::RemoveDir)
}

fn owner(identity: &Identity) -> Option<Uid> {
    Some(Uid::from_raw(identity.uid))
}

fn group(identity: &Identity) -> Option<Gid> {
    Some(Gid::from_raw(identity.gid))
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    fn root() -> (tempfile::TempDir, StateRoot) {
        let parent = tempfile::tempdir().unwrap();
        let root = StateRoot::create(parent.path().join("root"), None).unwrap();
        (parent, root)
    }

    #[test]
    fn directories_fifos_and_files_are_made_and_read_relative_to_the_root() {
        let (_parent, root) = root();
        root.make_private_dir("1", None).unwrap();
        root.make_private_dir("1", None).unwrap(); // exists: fine
        let mode = std::fs::metadata(root.path_of("1")).unwrap();
        assert!(mode.is_dir());
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o700
        );
        root.make_fifo("1/done", None).unwrap();
        assert_eq!(root.file_type("1/done"), Some(SFlag::S_IFIFO));
        assert_eq!(root.file_len("1/done"), None, "not a regular file");
        assert_eq!(root.file_len("1/env"), None);
        std::fs::write(root.path_of("1/env.next"), "x=1\n").unwrap();
        root.rename("1/env.next", "1/env").unwrap();
        assert_eq!(root.file_len("1/env"), Some(4));
        assert_eq!(root.read("1/env").unwrap(), b"x=1\n");
        root.remove_file("1/env").unwrap();
        assert_eq!(root.file_type("1/env"), None);
        // A file where a directory should be is not taken for one.
        std::fs::write(root.path_of("2"), "").unwrap();
        assert!(root.make_private_dir("2", None).is_err());
    }

    #[test]
    fn trees_are_removed_without_following_symlinks() {
        let (parent, root) = root();
        let outside = parent.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "").unwrap();
        root.make_private_dir("s", None).unwrap();
        std::fs::create_dir_all(root.path_of("s/a/b")).unwrap();
        std::fs::write(root.path_of("s/a/b/f"), "").unwrap();
        std::fs::write(
            root.path_of("s/a")
                .join(std::ffi::OsStr::from_bytes(b"\xff\xfe")),
            "",
        )
        .unwrap();
        std::os::unix::fs::symlink(&outside, root.path_of("s/link")).unwrap();
        root.make_fifo("s/done", None).unwrap();
        root.remove_tree("s").unwrap();
        assert_eq!(root.file_type("s"), None);
        assert!(
            outside.join("keep").exists(),
            "the symlink's target is left alone"
        );
        root.remove_tree("s").unwrap(); // missing: fine
        // Symlinks are not followed in the last component either.
        std::os::unix::fs::symlink(&outside, root.path_of("l")).unwrap();
        assert!(root.open("l", OFlag::O_RDONLY).is_err());
        root.remove_tree("l").unwrap();
        assert!(outside.join("keep").exists());
    }
}
