//! Path confinement: turns a caller's path into a file inside one of the allowed roots, or refuses
//! it with a reason, touching nothing.
//!
//! It works in two phases.
//!
//! 1. **Planning** ([`Confinement::resolve`]) checks the text (not empty, no NUL byte), makes it
//!    absolute against the workspace, normalises it lexically (`.` dropped, `..` removes the
//!    previous component) and refuses it if no root contains it. It then follows symlinks one at a
//!    time, from the root down, refusing any whose target lies outside every root. The result is a
//!    symlink-free path beneath one root.
//! 2. **Use** ([`Confinement::open`] and friends) opens that path relative to a descriptor of its
//!    root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`. The plan
//!    has no symlinks left in it, so if one was swapped in after planning, the kernel refuses
//!    instead of following it: a race can make an operation fail, never reach outside the root.
//!    Where `openat2` is missing (old kernels, strict seccomp profiles) the same guarantee comes
//!    from walking the path one component at a time with `openat(O_NOFOLLOW)` from the root's
//!    descriptor.
//!
//! Planning is path-based and may be wrong under a race; only the use phase is trusted.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::{Mode, SFlag, fstat, fstatat, mkdirat};

/// The most symlinks one resolution follows (Linux's own limit).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// How the use phase opens paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `openat2` with `RESOLVE_BENEATH`, falling back to [`Strategy::Walk`] where the kernel or
    /// seccomp refuses the system call.
    Openat2,
    /// One `openat(O_NOFOLLOW)` per component, from the root's descriptor.
    Walk,
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Empty,
    NulByte,
    /// After normalisation the path lies in no root.
    OutsideRoots {
        resolved: PathBuf,
    },
    /// A symlink on the way points outside every root.
    SymlinkOutside {
        link: PathBuf,
        target: PathBuf,
    },
    TooManySymlinks,
    /// Between planning and use, a symlink or another file took the place of a component.
    Changed,
}

/// A failure to resolve or open a path.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The path is not allowed; `message` names it and the reason.
    #[error("{message}")]
    Refused { reason: Refusal, message: String },
    #[error("{path}: no such file or directory")]
    NotFound { path: PathBuf },
    #[error("{path}: not a directory")]
    NotADirectory { path: PathBuf },
    #[error("{path} is a directory")]
    IsADirectory { path: PathBuf },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ConfineError {
    pub fn is_refusal(&self) -> bool {
        matches!(self, ConfineError::Refused { .. })
    }
}

/// One allowed root: as configured, and with symlinks resolved at start-up.
#[derive(Debug)]
struct Root {
    given: PathBuf,
    real: PathBuf,
}

/// The allowed roots, the workspace relative paths resolve against, and the opening strategy.
#[derive(Debug)]
pub struct Confinement {
    roots: Vec<Root>,
    /// "/home/agent, /tmp", for messages.
    roots_text: String,
    workspace: PathBuf,
    strategy: Strategy,
    /// Set once `openat2` answered ENOSYS, so later calls go straight to the walk.
    openat2_missing: AtomicBool,
}

/// A planned path: symlink-free and beneath one root.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The caller's path, absolute and normalised: what answers name.
    pub requested: PathBuf,
    /// The same file with every symlink resolved.
    pub real: PathBuf,
    /// `real` relative to its root (empty for the root itself).
    rel: PathBuf,
    root: usize,
    /// How many trailing components of `real` did not exist at planning time (0: it exists).
    pub missing: usize,
}

impl Resolved {
    pub fn exists(&self) -> bool {
        self.missing == 0
    }

    /// Whether this is one of the roots itself.
    pub fn is_root(&self) -> bool {
        self.rel.as_os_str().is_empty()
    }
}

impl Confinement {
    /// Roots are made absolute and have their symlinks resolved now (a root that does not exist
    /// yet is kept as given). Relative paths resolve against `workspace`.
    pub fn new(roots: &[PathBuf], workspace: &Path) -> Self {
        let mut kept: Vec<Root> = Vec::new();
        for root in roots {
            let given = normalize(Path::new("/"), root);
            let real = std::fs::canonicalize(&given).unwrap_or_else(|_| given.clone());
            if !kept.iter().any(|r| r.real == real) {
                kept.push(Root { given, real });
            }
        }
        let roots_text = kept
            .iter()
            .map(|r| r.given.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let workspace = normalize(Path::new("/"), workspace);
        let workspace = std::fs::canonicalize(&workspace).unwrap_or(workspace);
        Self {
            roots: kept,
            roots_text,
            workspace,
            strategy: Strategy::Openat2,
            openat2_missing: AtomicBool::new(false),
        }
    }

    /// Chooses how paths are opened (tests and the fuzz target exercise both).
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The roots with their symlinks resolved.
    pub fn roots(&self) -> impl Iterator<Item = &Path> {
        self.roots.iter().map(|r| r.real.as_path())
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Whether `path` (absolute, symlink-free) lies beneath a root.
    pub fn contains(&self, path: &Path) -> bool {
        path.is_absolute() && self.root_of(&normalize(Path::new("/"), path)).is_some()
    }

    /// Checks the text of `raw` and makes it absolute and normalised, without looking at the
    /// filesystem or the roots.
    pub fn absolute(&self, raw: &OsStr) -> Result<PathBuf, ConfineError> {
        if raw.is_empty() {
            return Err(self.refused(raw, Refusal::Empty));
        }
        if raw.as_bytes().contains(&0) {
            return Err(self.refused(raw, Refusal::NulByte));
        }
        Ok(normalize(&self.workspace, Path::new(raw)))
    }

    /// Plans `raw`: see the module documentation. Follows symlinks, the last component's too.
    pub fn resolve(&self, raw: &OsStr) -> Result<Resolved, ConfineError> {
        let requested = self.absolute(raw)?;
        let mut path = requested.clone();
        let mut hops = 0;
        'restart: loop {
            let Some((root, names)) = self.root_of(&path) else {
                return Err(self.refused(
                    raw,
                    Refusal::OutsideRoots {
                        resolved: path.clone(),
                    },
                ));
            };
            let root_real = &self.roots[root].real;
            let mut real = root_real.clone();
            for (i, name) in names.iter().enumerate() {
                let candidate = real.join(name);
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(self.refused(raw, Refusal::TooManySymlinks));
                        }
                        let target =
                            std::fs::read_link(&candidate).map_err(|source| ConfineError::Io {
                                op: "reading the symlink",
                                path: candidate.clone(),
                                source,
                            })?;
                        let mut next = real.join(&target);
                        next.extend(&names[i + 1..]);
                        let next = normalize(Path::new("/"), &next);
                        if self.root_of(&next).is_none() {
                            return Err(self.refused(
                                raw,
                                Refusal::SymlinkOutside {
                                    link: candidate,
                                    target,
                                },
                            ));
                        }
                        path = next;
                        continue 'restart;
                    }
                    Ok(meta) => {
                        if i + 1 < names.len() && !meta.is_dir() {
                            return Err(ConfineError::NotADirectory { path: candidate });
                        }
                        real = candidate;
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        let missing = names.len() - i;
                        real.extend(&names[i..]);
                        return Ok(self.planned(requested, real, root, missing));
                    }
                    Err(source) => {
                        return Err(ConfineError::Io {
                            op: "inspecting",
                            path: candidate,
                            source,
                        });
                    }
                }
            }
            return Ok(self.planned(requested, real, root, 0));
        }
    }

    fn planned(&self, requested: PathBuf, real: PathBuf, root: usize, missing: usize) -> Resolved {
        let rel = real
            .strip_prefix(&self.roots[root].real)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Resolved {
            requested,
            real,
            rel,
            root,
            missing,
        }
    }

    /// Opens a planned path beneath its root without following any symlink (see the module
    /// documentation). `mode` only matters with `O_CREAT`.
    pub fn open(&self, r: &Resolved, flags: OFlag, mode: Mode) -> Result<OwnedFd, ConfineError> {
        let root = self.open_root(r.root)?;
        self.open_beneath(&root, &r.rel, flags, mode)
            .map_err(|errno| self.open_error(r, &r.requested, errno))
    }

    /// Opens the directory holding a planned path (`O_PATH`), for `*at` calls on its last
    /// component, which is returned too.
    pub fn open_parent(&self, r: &Resolved) -> Result<(OwnedFd, OsString), ConfineError> {
        let (Some(parent), Some(name)) = (r.rel.parent(), r.rel.file_name()) else {
            return Err(ConfineError::IsADirectory {
                path: r.requested.clone(),
            });
        };
        let root = self.open_root(r.root)?;
        let dir = self
            .open_beneath(
                &root,
                parent,
                OFlag::O_PATH | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .map_err(|errno| {
                let shown = r.requested.parent().unwrap_or(&r.requested);
                self.open_error(r, shown, errno)
            })?;
        Ok((dir, name.to_owned()))
    }

    /// Creates the missing directories above a planned path's last component (mode 0777 less
    /// the umask), each relative to a descriptor of the one above it.
    pub fn create_parent_dirs(&self, r: &Resolved) -> Result<(), ConfineError> {
        if r.missing <= 1 {
            return Ok(());
        }
        let names: Vec<&OsStr> = r.rel.iter().collect();
        let existing = names.len() - r.missing;
        let root = self.open_root(r.root)?;
        let start: PathBuf = names[..existing].iter().collect();
        let mut dir = self
            .open_beneath(
                &root,
                &start,
                OFlag::O_PATH | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .map_err(|errno| self.open_error(r, &r.requested, errno))?;
        let mut shown = r.real.clone();
        for _ in 0..r.missing {
            shown.pop();
        }
        for name in &names[existing..names.len() - 1] {
            shown.push(name);
            match mkdirat(&dir, *name, Mode::from_bits_truncate(0o777)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(errno) => {
                    return Err(ConfineError::Io {
                        op: "creating the directory",
                        path: shown,
                        source: errno.into(),
                    });
                }
            }
            dir = open_component(
                dir.as_fd(),
                name,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|errno| self.open_error(r, &shown, errno))?;
        }
        Ok(())
    }

    fn open_root(&self, root: usize) -> Result<OwnedFd, ConfineError> {
        let path = &self.roots[root].real;
        nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| ConfineError::Io {
            op: "opening the root",
            path: path.clone(),
            source: errno.into(),
        })
    }

    /// Opens `rel` (symlink-free, only normal components) beneath `root` without following
    /// symlinks.
    fn open_beneath(
        &self,
        root: &OwnedFd,
        rel: &Path,
        flags: OFlag,
        mode: Mode,
    ) -> nix::Result<OwnedFd> {
        let flags = flags | OFlag::O_CLOEXEC;
        let mode = if flags.contains(OFlag::O_CREAT) {
            mode
        } else {
            Mode::empty()
        };
        if self.strategy == Strategy::Openat2 && !self.openat2_missing.load(Ordering::Relaxed) {
            let target: &Path = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel
            };
            let how = OpenHow::new().flags(flags).mode(mode).resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
            // EAGAIN: a concurrent rename somewhere; the kernel asks to retry.
            for _ in 0..8 {
                match openat2(root, target, how) {
                    Err(Errno::EAGAIN) => continue,
                    Err(Errno::ENOSYS) => {
                        if !self.openat2_missing.swap(true, Ordering::Relaxed) {
                            tracing::info!(
                                "openat2 is not available; paths are opened one component at a \
                                 time with O_NOFOLLOW"
                            );
                        }
                        break;
                    }
                    // Docker's older seccomp profiles answer EPERM for system calls they do not
                    // know; the walk gives the same guarantee.
                    Err(Errno::EPERM) => break,
                    other => return other,
                }
            }
        }
        walk_beneath(root, rel, flags, mode)
    }

    fn open_error(&self, r: &Resolved, shown: &Path, errno: Errno) -> ConfineError {
        match errno {
            Errno::ELOOP | Errno::EXDEV => self.refused(r.requested.as_os_str(), Refusal::Changed),
            Errno::ENOENT => ConfineError::NotFound {
                path: shown.to_path_buf(),
            },
            Errno::ENOTDIR => ConfineError::NotADirectory {
                path: shown.to_path_buf(),
            },
            Errno::EISDIR => ConfineError::IsADirectory {
                path: shown.to_path_buf(),
            },
            errno => ConfineError::Io {
                op: "opening",
                path: shown.to_path_buf(),
                source: errno.into(),
            },
        }
    }

    /// The root containing `path` (absolute, normalised; under a root's configured or resolved
    /// name) and the components below it. The longest root wins.
    fn root_of(&self, path: &Path) -> Option<(usize, Vec<OsString>)> {
        let mut best: Option<(usize, usize, Vec<OsString>)> = None;
        for (i, root) in self.roots.iter().enumerate() {
            for base in [&root.real, &root.given] {
                if let Ok(rest) = path.strip_prefix(base) {
                    let depth = base.components().count();
                    if best.as_ref().is_none_or(|(_, d, _)| depth > *d) {
                        let names = rest.iter().map(OsStr::to_owned).collect();
                        best = Some((i, depth, names));
                    }
                }
            }
        }
        best.map(|(i, _, names)| (i, names))
    }

    fn refused(&self, raw: &OsStr, reason: Refusal) -> ConfineError {
        let shown = format!("{:?}", raw.to_string_lossy());
        let roots = &self.roots_text;
        let message = match &reason {
            Refusal::Empty => "the path is empty".to_string(),
            Refusal::NulByte => format!("path {shown} contains a NUL byte"),
            Refusal::OutsideRoots { resolved } => {
                if resolved.as_os_str() == raw {
                    format!("path {shown} is outside the allowed roots {roots}")
                } else {
                    format!(
                        "path {shown} is outside the allowed roots {roots} (it resolves to {})",
                        resolved.display()
                    )
                }
            }
            Refusal::SymlinkOutside { link, target } => format!(
                "path {shown}: symlink {} leads outside the allowed roots {roots} (it points to {})",
                link.display(),
                target.display()
            ),
            Refusal::TooManySymlinks => format!(
                "path {shown}: too many levels of symbolic links (more than {MAX_SYMLINK_HOPS})"
            ),
            Refusal::Changed => format!(
                "path {shown} changed while it was being opened (a symlink or another file took \
                 the place of one of its components); nothing was done"
            ),
        };
        ConfineError::Refused { reason, message }
    }
}

/// Opens `rel` beneath `root` one component at a time, never following a symlink: directories
/// with `O_DIRECTORY | O_NOFOLLOW`, the last component with `O_NOFOLLOW`.
fn walk_beneath(root: &OwnedFd, rel: &Path, flags: OFlag, mode: Mode) -> nix::Result<OwnedFd> {
    let mut names = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            // A plan never holds these; refuse rather than climb.
            Component::RootDir | Component::ParentDir | Component::Prefix(_) => {
                return Err(Errno::EXDEV);
            }
        }
    }
    let Some((last, dirs)) = names.split_last() else {
        return openat(root, ".", flags, mode);
    };
    let mut current: Option<OwnedFd> = None;
    for name in dirs {
        let dir = current.as_ref().map_or(root.as_fd(), AsFd::as_fd);
        current = Some(open_component(
            dir,
            name,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?);
    }
    let dir = current.as_ref().map_or(root.as_fd(), AsFd::as_fd);
    open_component(dir, last, flags, mode)
}

/// Opens one component with `O_NOFOLLOW`, answering ELOOP whenever it is a symlink (with
/// `O_DIRECTORY` the kernel says ENOTDIR; with `O_PATH` it would open the symlink itself).
fn open_component(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlag,
    mode: Mode,
) -> nix::Result<OwnedFd> {
    let is_symlink = |stat: &nix::sys::stat::FileStat| {
        SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
    };
    match openat(dir, name, flags | OFlag::O_NOFOLLOW, mode) {
        Err(Errno::ENOTDIR)
            if fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|s| is_symlink(&s)) =>
        {
            Err(Errno::ELOOP)
        }
        Ok(fd) if flags.contains(OFlag::O_PATH) && is_symlink(&fstat(&fd)?) => Err(Errno::ELOOP),
        other => other,
    }
}

/// Joins `path` to `base` when relative and normalises lexically: `.` and repeated separators
/// vanish, `..` removes the previous component (and stays at `/`).
pub fn normalize(base: &Path, path: &Path) -> PathBuf {
    let joined;
    let path = if path.is_absolute() {
        path
    } else {
        joined = base.join(path);
        &joined
    };
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The path the kernel gives for an open descriptor (`/proc/self/fd/N`), to check where an open
/// really landed.
pub fn descriptor_path(fd: &impl AsRawFd) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("dir")).unwrap();
        std::fs::write(root.path().join("dir/file"), "in").unwrap();
        std::fs::write(outside.path().join("secret"), "out").unwrap();
        symlink(outside.path(), root.path().join("out")).unwrap();
        symlink("dir/file", root.path().join("rel-in")).unwrap();
        symlink(root.path().join("dir"), root.path().join("abs-in")).unwrap();
        symlink("../../../../../../..", root.path().join("dir/up")).unwrap();
        symlink("loop", root.path().join("loop")).unwrap();
        (root, outside)
    }

    fn check(c: &Confinement, raw: &str) -> Result<Resolved, ConfineError> {
        c.resolve(OsStr::new(raw))
    }

    #[test]
    fn normalisation() {
        let base = Path::new("/w");
        assert_eq!(
            normalize(base, Path::new("a/./b/../c")),
            Path::new("/w/a/c")
        );
        assert_eq!(normalize(base, Path::new("/../../x")), Path::new("/x"));
        assert_eq!(normalize(base, Path::new("../../..")), Path::new("/"));
        assert_eq!(normalize(base, Path::new("//a//b/")), Path::new("/a/b"));
    }

    #[test]
    fn plans_and_refusals() {
        let (root, outside) = setup();
        for strategy in [Strategy::Openat2, Strategy::Walk] {
            let c = Confinement::new(&[root.path().to_path_buf()], &root.path().join("dir"))
                .with_strategy(strategy);
            let real_root = std::fs::canonicalize(root.path()).unwrap();
            let r = check(&c, "file").unwrap();
            assert_eq!(r.real, real_root.join("dir/file"));
            assert!(r.exists());
            let r = check(&c, "../rel-in").unwrap();
            assert_eq!(r.real, real_root.join("dir/file"));
            let r = check(&c, &format!("{}/abs-in/new/deeper", root.path().display())).unwrap();
            assert_eq!(r.real, real_root.join("dir/new/deeper"));
            assert_eq!(r.missing, 2);

            let refusal = |raw: &str| match check(&c, raw) {
                Err(ConfineError::Refused { reason, message }) => (reason, message),
                other => panic!("{raw}: expected a refusal, got {other:?}"),
            };
            assert_eq!(refusal("").0, Refusal::Empty);
            assert_eq!(refusal("a\0b").0, Refusal::NulByte);
            assert!(matches!(
                refusal("../../../etc/passwd").0,
                Refusal::OutsideRoots { .. }
            ));
            assert!(matches!(
                refusal("/etc/passwd").0,
                Refusal::OutsideRoots { .. }
            ));
            let (reason, message) = refusal("../out/secret");
            assert!(
                matches!(reason, Refusal::SymlinkOutside { .. }),
                "{reason:?}"
            );
            assert!(message.contains("leads outside"), "{message}");
            assert!(matches!(
                refusal("up/etc").0,
                Refusal::SymlinkOutside { .. }
            ));
            assert_eq!(refusal("../loop").0, Refusal::TooManySymlinks);
            assert!(matches!(
                check(&c, "file/below"),
                Err(ConfineError::NotADirectory { .. })
            ));

            // The use phase lands where the plan says.
            let r = check(&c, "../rel-in").unwrap();
            let fd = c.open(&r, OFlag::O_RDONLY, Mode::empty()).unwrap();
            assert_eq!(descriptor_path(&fd).unwrap(), real_root.join("dir/file"));
            let _ = &outside;
        }
    }

    #[test]
    fn a_symlink_swapped_in_after_planning_is_refused_at_use() {
        let (root, outside) = setup();
        for strategy in [Strategy::Openat2, Strategy::Walk] {
            let c =
                Confinement::new(&[root.path().to_path_buf()], root.path()).with_strategy(strategy);
            std::fs::create_dir_all(root.path().join("swap")).unwrap();
            std::fs::write(root.path().join("swap/secret"), "in").unwrap();
            let r = check(&c, "swap/secret").unwrap();
            let p = check(&c, "swap/newdir/new").unwrap();
            std::fs::remove_dir_all(root.path().join("swap")).unwrap();
            symlink(outside.path(), root.path().join("swap")).unwrap();
            let err = c.open(&r, OFlag::O_RDONLY, Mode::empty()).unwrap_err();
            assert!(err.is_refusal(), "{strategy:?}: {err:?}");
            let err = c.create_parent_dirs(&p).unwrap_err();
            assert!(err.is_refusal(), "{strategy:?}: {err:?}");
            assert!(!outside.path().join("newdir").exists());
            std::fs::remove_file(root.path().join("swap")).unwrap();
        }
    }

    #[test]
    fn parents_are_created_inside_the_root() {
        let (root, _outside) = setup();
        let c = Confinement::new(&[root.path().to_path_buf()], root.path());
        let r = check(&c, "a/b/c/file").unwrap();
        assert_eq!(r.missing, 4);
        c.create_parent_dirs(&r).unwrap();
        assert!(root.path().join("a/b/c").is_dir());
        assert!(!root.path().join("a/b/c/file").exists());
        let (dir, name) = c.open_parent(&r).unwrap();
        assert_eq!(name, "file");
        let real_root = std::fs::canonicalize(root.path()).unwrap();
        assert_eq!(descriptor_path(&dir).unwrap(), real_root.join("a/b/c"));
    }

    #[test]
    fn nested_and_aliased_roots() {
        let (root, outside) = setup();
        let alias = outside.path().join("alias");
        symlink(root.path(), &alias).unwrap();
        let c = Confinement::new(&[alias.clone(), root.path().join("dir")], Path::new("/"));
        // The configured name of a root works as well as its real name.
        let r = check(&c, &format!("{}/dir/file", alias.display())).unwrap();
        assert!(r.exists());
        assert!(c.contains(&r.real));
        assert!(!c.contains(outside.path()));
    }
}
