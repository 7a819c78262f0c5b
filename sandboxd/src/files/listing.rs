//! Directory listings: `list` (a directory, optionally recursive), `find` (names matching a
//! glob) and `glob` (paths matching a glob, with metadata). Walks never follow symlinks; see
//! [`super::walk`].

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::confine::{ConfineError, Resolved};
use super::walk::{MAX_WALK_DEPTH, Visit, WalkOptions, walk};
use super::{FileError, Files, Kind, Meta};

/// No listing, find or glob looks at more entries than this.
pub const MAX_WALK_ENTRIES: usize = 200_000;
/// The most paths `find` returns.
pub const MAX_FIND_RESULTS: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListSort {
    #[default]
    Name,
    Size,
    Modified,
    /// Directories first, then by extension, then by name.
    Type,
}

#[derive(Debug, Clone)]
pub struct ListRequest<'a> {
    pub path: &'a OsStr,
    pub recursive: bool,
    pub show_hidden: bool,
    /// Extensions such as `.py`; files with other extensions are left out (directories stay).
    pub file_types: Option<Vec<String>>,
    /// For recursive listings: 1 = the directory's own entries.
    pub max_depth: Option<usize>,
    pub sort_by: ListSort,
    pub sort_desc: bool,
}

#[derive(Debug, Clone)]
pub struct ListEntry {
    pub name: String,
    pub path: PathBuf,
    pub meta: Meta,
    /// `.py`, for files with an extension.
    pub extension: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ListOutcome {
    pub path: PathBuf,
    pub entries: Vec<ListEntry>,
    pub directory_count: usize,
    pub file_count: usize,
    /// The walk stopped at [`MAX_WALK_ENTRIES`].
    pub truncated: bool,
}

#[derive(Debug, Clone)]
pub struct FindOutcome {
    pub path: PathBuf,
    pub files: Vec<PathBuf>,
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GlobSort {
    #[default]
    Path,
    Name,
    Size,
    Modified,
}

#[derive(Debug, Clone)]
pub struct GlobRequest<'a> {
    pub path: &'a OsStr,
    pub pattern: &'a str,
    pub exclude: Vec<String>,
    pub include_hidden: bool,
    pub files_only: bool,
    pub max_results: usize,
    pub sort_by: GlobSort,
    pub sort_desc: bool,
}

#[derive(Debug, Clone)]
pub struct GlobEntry {
    pub path: PathBuf,
    pub name: String,
    pub meta: Meta,
}

#[derive(Debug, Clone)]
pub struct GlobOutcome {
    pub path: PathBuf,
    pub pattern: String,
    pub entries: Vec<GlobEntry>,
    /// Matches found before `max_results` was applied.
    pub total_count: usize,
    pub truncated: bool,
}

impl Files {
    pub fn list(&self, request: &ListRequest<'_>) -> Result<ListOutcome, FileError> {
        if request.max_depth == Some(0) {
            return Err(FileError::invalid(
                "max_depth",
                "max_depth must be at least 1",
            ));
        }
        let r = self.confine.resolve(request.path)?;
        let dir = self.open_directory(&r)?;
        let options = WalkOptions {
            max_depth: if request.recursive {
                request.max_depth.unwrap_or(MAX_WALK_DEPTH)
            } else {
                1
            },
            skip_hidden: !request.show_hidden,
            max_entries: MAX_WALK_ENTRIES,
        };
        let types: Option<Vec<String>> = request.file_types.as_ref().map(|types| {
            types
                .iter()
                .map(|t| {
                    let t = t.trim().to_ascii_lowercase();
                    if t.starts_with('.') {
                        t
                    } else {
                        format!(".{t}")
                    }
                })
                .collect()
        });
        let mut entries = Vec::new();
        let summary = walk(dir, &options, &mut |entry| {
            let extension = extension_of(entry.name, entry.meta.kind);
            let wanted = match (&types, entry.meta.kind) {
                (Some(types), kind) if kind != Kind::Directory => extension
                    .as_ref()
                    .is_some_and(|e| types.contains(&e.to_ascii_lowercase())),
                _ => true,
            };
            if wanted {
                entries.push(ListEntry {
                    name: entry.name.to_string_lossy().into_owned(),
                    path: r.requested.join(entry.rel),
                    meta: entry.meta,
                    extension,
                });
            }
            Visit::Continue
        });
        sort_list(&mut entries, request.sort_by, request.sort_desc);
        let directory_count = entries
            .iter()
            .filter(|e| e.meta.kind == Kind::Directory)
            .count();
        Ok(ListOutcome {
            path: r.requested,
            file_count: entries.len() - directory_count,
            directory_count,
            entries,
            truncated: summary.truncated,
        })
    }

    /// Paths below `path` whose name matches `glob` (or, for a glob with a `/`, whose path
    /// relative to `path` matches). Directories are not returned.
    pub fn find(&self, path: &OsStr, glob: &str) -> Result<FindOutcome, FileError> {
        let matcher = compile_glob("glob", glob)?;
        let by_path = glob.contains('/');
        let r = self.confine.resolve(path)?;
        let dir = self.open_directory(&r)?;
        let options = WalkOptions {
            max_depth: MAX_WALK_DEPTH,
            skip_hidden: false,
            max_entries: MAX_WALK_ENTRIES,
        };
        let mut files = Vec::new();
        let mut truncated = false;
        let summary = walk(dir, &options, &mut |entry| {
            if entry.meta.kind == Kind::Directory {
                return Visit::Continue;
            }
            let subject: &Path = if by_path {
                entry.rel
            } else {
                Path::new(entry.name)
            };
            if matcher.is_match(subject) {
                if files.len() == MAX_FIND_RESULTS {
                    truncated = true;
                    return Visit::Stop;
                }
                files.push(r.requested.join(entry.rel));
            }
            Visit::Continue
        });
        files.sort();
        Ok(FindOutcome {
            path: r.requested,
            files,
            truncated: truncated || summary.truncated,
        })
    }

    /// Paths below `path` matching `pattern` relative to it (`*` stays within a component, `**`
    /// crosses them).
    pub fn glob(&self, request: &GlobRequest<'_>) -> Result<GlobOutcome, FileError> {
        if request.max_results == 0 {
            return Err(FileError::invalid(
                "max_results",
                "max_results must be at least 1",
            ));
        }
        let matcher = compile_glob("pattern", request.pattern)?;
        let exclude = compile_set("exclude", &request.exclude)?;
        let r = self.confine.resolve(request.path)?;
        let dir = self.open_directory(&r)?;
        let pattern = request.pattern.trim_start_matches("./");
        let max_depth = if pattern.contains("**") {
            MAX_WALK_DEPTH
        } else {
            pattern.split('/').filter(|c| !c.is_empty()).count().max(1)
        };
        let options = WalkOptions {
            max_depth,
            skip_hidden: !request.include_hidden,
            max_entries: MAX_WALK_ENTRIES,
        };
        let mut entries = Vec::new();
        let summary = walk(dir, &options, &mut |entry| {
            if exclude.is_match(entry.rel) || exclude.is_match(entry.name) {
                return Visit::Skip;
            }
            let is_dir = entry.meta.kind == Kind::Directory;
            if matcher.is_match(entry.rel) && !(request.files_only && is_dir) {
                entries.push(GlobEntry {
                    path: r.requested.join(entry.rel),
                    name: entry.name.to_string_lossy().into_owned(),
                    meta: entry.meta,
                });
            }
            Visit::Continue
        });
        sort_glob(&mut entries, request.sort_by, request.sort_desc);
        let total_count = entries.len();
        let truncated = summary.truncated || total_count > request.max_results;
        entries.truncate(request.max_results);
        Ok(GlobOutcome {
            path: r.requested,
            pattern: request.pattern.to_string(),
            entries,
            total_count,
            truncated,
        })
    }

    /// Opens a planned path as a readable directory.
    pub(crate) fn open_directory(&self, r: &Resolved) -> Result<OwnedFd, FileError> {
        if !r.exists() {
            return Err(ConfineError::NotFound {
                path: r.requested.clone(),
            }
            .into());
        }
        Ok(self
            .confine
            .open(r, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())?)
    }
}

/// A glob where `*` and `?` stay within one path component and `**` crosses components.
pub(crate) fn compile_glob(field: &'static str, pattern: &str) -> Result<GlobMatcher, FileError> {
    let pattern = pattern.trim_start_matches("./");
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|error| FileError::invalid(field, format!("invalid glob {pattern:?}: {error}")))
}

/// Several globs, matched against a name or a relative path (`*` may cross `/`, as in
/// ripgrep's `-g`).
pub(crate) fn compile_set(field: &'static str, patterns: &[String]) -> Result<GlobSet, FileError> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = Glob::new(pattern.trim_start_matches("./")).map_err(|error| {
            FileError::invalid(field, format!("invalid glob {pattern:?}: {error}"))
        })?;
        builder.add(glob);
    }
    builder
        .build()
        .map_err(|error| FileError::invalid(field, format!("invalid globs: {error}")))
}

/// `.py` for `x.py`; `None` for directories, dotfiles without another dot, and names without
/// an extension.
fn extension_of(name: &OsStr, kind: Kind) -> Option<String> {
    if kind == Kind::Directory {
        return None;
    }
    Path::new(name)
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
}

fn modified_order(a: Option<SystemTime>, b: Option<SystemTime>) -> Ordering {
    a.cmp(&b)
}

fn sort_list(entries: &mut [ListEntry], by: ListSort, descending: bool) {
    entries.sort_by(|a, b| {
        let primary = match by {
            ListSort::Name => a.name.cmp(&b.name),
            ListSort::Size => a.meta.size.cmp(&b.meta.size),
            ListSort::Modified => modified_order(a.meta.modified, b.meta.modified),
            ListSort::Type => (b.meta.kind == Kind::Directory)
                .cmp(&(a.meta.kind == Kind::Directory))
                .then_with(|| a.extension.cmp(&b.extension)),
        };
        let order = primary.then_with(|| a.path.cmp(&b.path));
        if descending { order.reverse() } else { order }
    });
}

fn sort_glob(entries: &mut [GlobEntry], by: GlobSort, descending: bool) {
    entries.sort_by(|a, b| {
        let primary = match by {
            GlobSort::Path => Ordering::Equal,
            GlobSort::Name => a.name.cmp(&b.name),
            GlobSort::Size => a.meta.size.cmp(&b.meta.size),
            GlobSort::Modified => modified_order(a.meta.modified, b.meta.modified),
        };
        let order = primary.then_with(|| a.path.cmp(&b.path));
        if descending { order.reverse() } else { order }
    });
}
