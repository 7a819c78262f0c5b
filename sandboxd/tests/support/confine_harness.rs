//! The confinement invariant, checked on a real tree: whatever path comes in, the resolver
//! either refuses (or fails) or lands inside the root, and nothing outside the root changes.
//! Shared by the seeded property test (`tests/it/confine_property.rs`) and the fuzz target
//! (`fuzz/fuzz_targets/confine.rs`, which includes this file by path).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use sandboxd::files::confine::{Confinement, Strategy, descriptor_path};
use tempfile::TempDir;

/// The names a generated path is made of: plain entries, symlinks leading in, out and around.
pub const NAMES: &[&str] = &[
    "a",
    "b",
    "file",
    "link-in",
    "link-abs-in",
    "link-out",
    "link-up",
    "link-file-out",
    "link-root",
    "loop",
    "dangling-in",
    "dangling-out",
    "new",
    "..",
    ".",
    "",
];

/// What happened to one path (for statistics; any of them is fine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Refused,
    Failed,
    Opened,
    Created,
}

/// A root (with a workspace) and an outside directory, linked by symlinks:
///
/// ```text
/// root/a/{link-in -> ../b, link-abs-in -> ROOT/b, link-out -> OUTSIDE, link-up -> ../../..,
///         link-file-out -> OUTSIDE/secret, loop -> loop, dangling-in -> ../b/new-target,
///         dangling-out -> OUTSIDE/new-target}
/// root/b/{file, link-root -> ROOT}
/// root/workspace/
/// outside/{secret, dir/}
/// ```
pub struct Tree {
    pub root: TempDir,
    pub outside: TempDir,
    /// One confinement per strategy.
    pub confinements: Vec<Confinement>,
    root_real: PathBuf,
    outside_before: Vec<(PathBuf, String)>,
}

impl Tree {
    pub fn new() -> Self {
        // Named so that trees left by an interrupted fuzz run are easy to find and remove.
        let root = tempfile::Builder::new()
            .prefix("agentbox-confine-root-")
            .tempdir()
            .expect("temporary root");
        let outside = tempfile::Builder::new()
            .prefix("agentbox-confine-outside-")
            .tempdir()
            .expect("temporary outside");
        let r = root.path();
        let o = outside.path();
        for dir in ["a", "b", "workspace"] {
            std::fs::create_dir(r.join(dir)).expect("tree dir");
        }
        std::fs::write(r.join("b/file"), "inside").expect("tree file");
        std::fs::write(o.join("secret"), "outside").expect("outside file");
        std::fs::create_dir(o.join("dir")).expect("outside dir");
        let links: [(&Path, PathBuf); 10] = [
            (Path::new("a/link-in"), PathBuf::from("../b")),
            (Path::new("a/link-abs-in"), r.join("b")),
            (Path::new("a/link-out"), o.to_path_buf()),
            (Path::new("a/link-up"), PathBuf::from("../../..")),
            (Path::new("a/link-file-out"), o.join("secret")),
            (Path::new("a/loop"), PathBuf::from("loop")),
            (Path::new("a/dangling-in"), PathBuf::from("../b/new-target")),
            (Path::new("a/dangling-out"), o.join("new-target")),
            (Path::new("b/link-root"), r.to_path_buf()),
            (Path::new("workspace/up"), PathBuf::from("..")),
        ];
        for (link, target) in links {
            symlink(target, r.join(link)).expect("tree symlink");
        }
        let confinements = [Strategy::Openat2, Strategy::Walk]
            .into_iter()
            .map(|s| Confinement::new(&[r.to_path_buf()], &r.join("workspace")).with_strategy(s))
            .collect();
        let root_real = std::fs::canonicalize(r).expect("canonical root");
        let outside_before = snapshot(o);
        Self {
            root,
            outside,
            confinements,
            root_real,
            outside_before,
        }
    }

    /// Absolute prefixes a generated path may start with.
    pub fn prefixes(&self) -> Vec<Vec<u8>> {
        vec![
            Vec::new(),
            self.root.path().as_os_str().as_bytes().to_vec(),
            self.root_real.as_os_str().as_bytes().to_vec(),
            self.outside.path().as_os_str().as_bytes().to_vec(),
            b"/".to_vec(),
            b"/tmp".to_vec(),
            b"/proc/self".to_vec(),
        ]
    }

    /// Resolves and opens `raw` under every strategy; `create` also creates it (and its
    /// parents) when missing, then removes what was created. `Err` names a broken invariant.
    pub fn check(&self, raw: &[u8], create: bool) -> Result<Verdict, String> {
        let raw = OsStr::from_bytes(raw);
        let mut verdict = Verdict::Failed;
        for confinement in &self.confinements {
            verdict = self.check_one(confinement, raw, create)?;
        }
        Ok(verdict)
    }

    fn check_one(&self, c: &Confinement, raw: &OsStr, create: bool) -> Result<Verdict, String> {
        let planned = c.resolve(raw);
        self.compare_with_kernel(c, raw, &planned)?;
        let r = match planned {
            Ok(r) => r,
            Err(error) if error.is_refusal() => return Ok(Verdict::Refused),
            Err(_) => return Ok(Verdict::Failed),
        };
        if !self.inside(&r.real) {
            return Err(format!(
                "{raw:?} planned outside the root: {}",
                r.real.display()
            ));
        }
        if r.exists() {
            return match c.open(&r, OFlag::O_PATH, Mode::empty()) {
                Ok(fd) => {
                    self.check_landing(raw, &fd)?;
                    Ok(Verdict::Opened)
                }
                Err(_) => Ok(Verdict::Failed),
            };
        }
        if !create || r.is_root() {
            return Ok(Verdict::Failed);
        }
        if c.create_parent_dirs(&r).is_err() {
            self.remove_created(&r.real, r.missing);
            return Ok(Verdict::Failed);
        }
        let opened = c.open(
            &r,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::from_bits_truncate(0o644),
        );
        let result = match &opened {
            Ok(fd) => self.check_landing(raw, fd).map(|()| Verdict::Created),
            Err(_) => Ok(Verdict::Failed),
        };
        drop(opened);
        self.remove_created(&r.real, r.missing);
        result
    }

    /// Where an open descriptor really is, according to the kernel.
    fn check_landing(&self, raw: &OsStr, fd: &std::os::fd::OwnedFd) -> Result<(), String> {
        let landed = descriptor_path(fd).map_err(|e| format!("reading /proc/self/fd: {e}"))?;
        if self.inside(&landed) {
            Ok(())
        } else {
            Err(format!(
                "{raw:?} opened {} outside the root",
                landed.display()
            ))
        }
    }

    /// For paths without `..` (whose lexical meaning can differ from the kernel's), the
    /// kernel's own resolution is the oracle: outside means refused, inside means the same file.
    fn compare_with_kernel(
        &self,
        c: &Confinement,
        raw: &OsStr,
        planned: &Result<sandboxd::files::Resolved, sandboxd::files::ConfineError>,
    ) -> Result<(), String> {
        let path = Path::new(raw);
        if raw.is_empty()
            || raw.as_bytes().contains(&0)
            || path.components().any(|c| c == Component::ParentDir)
        {
            return Ok(());
        }
        let absolute = c.workspace().join(path);
        let Ok(kernel) = std::fs::canonicalize(&absolute) else {
            return Ok(());
        };
        match planned {
            Ok(r) if r.exists() && r.real != kernel => Err(format!(
                "{raw:?}: planned {} but the kernel resolves {}",
                r.real.display(),
                kernel.display()
            )),
            Ok(_) if !self.inside(&kernel) => Err(format!(
                "{raw:?} resolves to {} outside the root, yet was not refused",
                kernel.display()
            )),
            _ => Ok(()),
        }
    }

    /// Removes a file made by `check` and the `missing - 1` directories made above it.
    fn remove_created(&self, real: &Path, missing: usize) {
        let _ = std::fs::remove_file(real);
        let mut dir = real.to_path_buf();
        for _ in 1..missing {
            dir.pop();
            let _ = std::fs::remove_dir(&dir);
        }
    }

    fn inside(&self, path: &Path) -> bool {
        path.starts_with(&self.root_real)
    }

    /// `Err` if anything outside the root changed.
    pub fn check_outside_untouched(&self) -> Result<(), String> {
        let now = snapshot(self.outside.path());
        if now == self.outside_before {
            Ok(())
        } else {
            Err(format!(
                "the outside changed: before {:?}, now {now:?}",
                self.outside_before
            ))
        }
    }
}

impl Default for Tree {
    fn default() -> Self {
        Self::new()
    }
}

/// Every entry below `dir` with its content (files), target (symlinks) or `dir`.
fn snapshot(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut entries = Vec::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return entries;
    };
    for entry in read.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            let target = std::fs::read_link(&path).unwrap_or_default();
            entries.push((path, format!("-> {}", target.display())));
        } else if kind.is_dir() {
            entries.push((path.clone(), "dir".into()));
            entries.extend(snapshot(&path));
        } else {
            let content = std::fs::read(&path).unwrap_or_default();
            entries.push((path, String::from_utf8_lossy(&content).into_owned()));
        }
    }
    entries.sort();
    entries
}
