//! File watches on inotify: a watcher follows a directory (and, recursively, the directories
//! below it) and keeps what changed in a bounded queue that callers read by cursor, by long
//! poll or as a stream. No HTTP here.
//!
//! # Confinement
//! The watched directory is planned and opened through [`Confinement`] like every other file
//! operation, and the inotify watch is added on that open descriptor (`/proc/self/fd/N`), so
//! the kernel watches the directory the confinement opened, never a path re-read after the
//! check. Directories found below it are opened the same way; symlinks are never followed
//! (a symlinked directory is an entry, not a subtree), and sizes and inodes in events come from
//! `fstatat(AT_SYMLINK_NOFOLLOW)` on a confined descriptor of the parent directory.
//!
//! # Events and coalescing
//! inotify's events become AIO's five kinds: `create`, `write`, `remove`, `rename`, `chmod`.
//! Events for one path are gathered for at most the watcher's `debounce` window, counted from
//! the first one: writes after a create stay one `create`, repeated writes one `write`, a chmod
//! beside a write or create disappears into it. A writer closing the file (`IN_CLOSE_WRITE`)
//! ends the window at once, so a file written in one go is reported as soon as it is complete.
//! Removals, renames and new directories are reported at once. A rename inside the tree is one
//! `rename` event (`old_path` set); moved out of the tree it is a `remove`, moved in a `create`.
//!
//! # Bounds and overflow
//! - At most [`WatchLimits::max_watchers`] watchers, and [`WatchLimits::max_waits`] one-shot
//!   waits at a time; more is refused ([`WatchError::TooMany`]).
//! - One watcher covers at most [`WatchLimits::max_directories`] directories: a tree larger
//!   than that is refused at creation; a directory appearing later past the limit is not
//!   watched and an [`OverflowReason::DirectoryLimit`] notice says so.
//! - Each watcher keeps the last [`WatchLimits::queue_capacity`] records. When it is full the
//!   oldest record is dropped; a reader whose cursor is older than what is left is told how
//!   many records it missed ([`Batch::missed`]), never given a silent gap. The kernel's own
//!   queue overflowing (`IN_Q_OVERFLOW`) becomes an [`OverflowReason::KernelQueue`] notice.
//! - Pending (coalescing) paths are bounded by [`WatchLimits::max_pending`]: past it the
//!   oldest is reported early.
//!
//! Deleting a watcher stops its task; dropping the task closes the inotify descriptor, which
//! removes every kernel watch it held.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use globset::{Glob, GlobSet, GlobSetBuilder};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag, fstatat};
use tokio::time::Instant;

use super::walk::{self, Visit, WalkOptions};
use super::{ConfineError, Confinement, FileError};

/// The shortest and longest coalescing window, in milliseconds (AIO's range).
pub const DEBOUNCE_RANGE_MS: (u64, u64) = (50, 5_000);
/// AIO's default coalescing window.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(300);
/// AIO's default `exclude`.
pub const DEFAULT_EXCLUDE: &[&str] = &[
    ".git",
    "node_modules",
    "__pycache__",
    ".venv",
    "*.pyc",
    "*.pyo",
    ".DS_Store",
    "*.swp",
    "*.swo",
];
/// The longest glob pattern accepted.
pub const MAX_PATTERN_LEN: usize = 512;
/// An unpaired `IN_MOVED_FROM` waits this long for its `IN_MOVED_TO` before it is a removal.
const MOVE_PAIRING: Duration = Duration::from_millis(10);

/// Bounds on watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchLimits {
    /// Watchers alive at once.
    pub max_watchers: usize,
    /// One-shot waits at once.
    pub max_waits: usize,
    /// Records one watcher keeps.
    pub queue_capacity: usize,
    /// Directories one watcher covers.
    pub max_directories: usize,
    /// Paths one watcher coalesces at once.
    pub max_pending: usize,
    /// Patterns in `exclude` or `include_patterns`.
    pub max_patterns: usize,
}

impl Default for WatchLimits {
    fn default() -> Self {
        Self {
            max_watchers: 16,
            max_waits: 16,
            queue_capacity: 4_096,
            max_directories: 4_096,
            max_pending: 1_024,
            max_patterns: 64,
        }
    }
}

/// What to watch.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// The directory: absolute, or relative to the workspace.
    pub path: OsString,
    /// Also every directory below it.
    pub recursive: bool,
    /// Names or relative paths to leave out (globs); an excluded directory is not watched.
    pub exclude: Vec<String>,
    /// When not empty, only paths matching one of these globs are reported (a bare `*.py`
    /// matches at any depth).
    pub include: Vec<String>,
    /// The coalescing window.
    pub debounce: Duration,
}

/// The kind of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Create,
    Write,
    Remove,
    Rename,
    Chmod,
}

impl ChangeKind {
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Create => "create",
            ChangeKind::Write => "write",
            ChangeKind::Remove => "remove",
            ChangeKind::Rename => "rename",
            ChangeKind::Chmod => "chmod",
        }
    }
}

/// One change, as reported.
#[derive(Debug, Clone)]
pub struct FileEvent {
    pub seq: u64,
    pub kind: ChangeKind,
    /// As the caller names it (the watched path as requested, joined with `relative_path`).
    pub path: PathBuf,
    /// Relative to the watched directory (empty for the directory itself).
    pub relative_path: PathBuf,
    /// For `rename`: where it was.
    pub old_path: Option<PathBuf>,
    pub is_dir: bool,
    /// When it was reported.
    pub timestamp: SystemTime,
    /// `lstat` facts when it was reported (absent for removals, or when it is gone again).
    pub mtime: Option<SystemTime>,
    pub size: Option<u64>,
    pub inode: Option<u64>,
}

/// Why events may be missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverflowReason {
    /// The kernel's event queue overflowed (`IN_Q_OVERFLOW`): some changes were not seen.
    KernelQueue,
    /// A new directory was not watched: the watcher covers its limit of directories already.
    DirectoryLimit { path: PathBuf, limit: usize },
    /// A new directory could not be watched (vanished, refused, or the kernel's watch limit).
    NotWatched { path: PathBuf, message: String },
}

impl std::fmt::Display for OverflowReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OverflowReason::KernelQueue => write!(
                f,
                "the kernel's inotify queue overflowed: some changes were not seen; re-read the \
                 tree"
            ),
            OverflowReason::DirectoryLimit { path, limit } => write!(
                f,
                "{} is not watched: this watcher covers {limit} directories already (the most \
                 one watcher covers); changes below it are not reported",
                path.display()
            ),
            OverflowReason::NotWatched { path, message } => write!(
                f,
                "{} is not watched: {message}; changes below it are not reported",
                path.display()
            ),
        }
    }
}

/// A record saying that changes may be missing.
#[derive(Debug, Clone)]
pub struct Overflow {
    pub seq: u64,
    pub reason: OverflowReason,
    pub timestamp: SystemTime,
}

/// One entry of a watcher's queue.
#[derive(Debug, Clone)]
pub enum Record {
    Change(FileEvent),
    Overflow(Overflow),
}

impl Record {
    pub fn seq(&self) -> u64 {
        match self {
            Record::Change(event) => event.seq,
            Record::Overflow(overflow) => overflow.seq,
        }
    }
}

/// What a read of the queue found.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub records: Vec<Record>,
    /// Records after the reader's cursor that the full queue dropped before this read.
    pub missed: u64,
    /// Pass this as the next read's cursor.
    pub cursor: u64,
    /// More records are waiting after this batch.
    pub has_more: bool,
    /// The watcher has stopped (deleted, or its directory went away); the message says why.
    pub closed: Option<String>,
}

/// Facts about a watcher.
#[derive(Debug, Clone)]
pub struct WatcherInfo {
    pub id: String,
    pub path: PathBuf,
    pub recursive: bool,
    pub exclude: Vec<String>,
    pub include: Vec<String>,
    pub debounce: Duration,
    pub created: SystemTime,
    /// The last record's sequence number.
    pub cursor: u64,
    pub directories: usize,
    pub closed: Option<String>,
}

/// Why a watch operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The path or a field was refused (names it).
    #[error(transparent)]
    File(#[from] FileError),
    #[error("too many {what}: at most {limit} at a time; {hint}")]
    TooMany {
        what: &'static str,
        limit: usize,
        hint: &'static str,
    },
    #[error("no watcher {id}")]
    UnknownWatcher { id: String },
    /// inotify itself failed (no instance left, the kernel's watch limit).
    #[error("{op}: {source}")]
    Inotify {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The watches of the sandbox.
#[derive(Debug)]
pub struct Watches {
    confine: Arc<Confinement>,
    limits: WatchLimits,
    watchers: Mutex<BTreeMap<String, Arc<Watcher>>>,
    waits: Arc<AtomicUsize>,
}

impl Watches {
    pub fn new(confine: Confinement, limits: WatchLimits) -> Self {
        Self {
            confine: Arc::new(confine),
            limits,
            watchers: Mutex::new(BTreeMap::new()),
            waits: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn limits(&self) -> WatchLimits {
        self.limits
    }

    /// Starts a watcher. Must run on a tokio runtime.
    pub async fn create(&self, spec: WatchSpec) -> Result<Arc<Watcher>, WatchError> {
        if lock(&self.watchers).len() >= self.limits.max_watchers {
            return Err(too_many_watchers(self.limits.max_watchers));
        }
        let watcher = Arc::new(start(self.confine.clone(), self.limits, spec, None).await?);
        let mut watchers = lock(&self.watchers);
        // Checked again: another create may have finished meanwhile.
        if watchers.len() >= self.limits.max_watchers {
            return Err(too_many_watchers(self.limits.max_watchers));
        }
        watchers.insert(watcher.id.clone(), watcher.clone());
        tracing::info!(watcher = %watcher.id, path = %watcher.path.display(), "file watch started");
        Ok(watcher)
    }

    pub fn get(&self, id: &str) -> Result<Arc<Watcher>, WatchError> {
        lock(&self.watchers)
            .get(id)
            .cloned()
            .ok_or_else(|| WatchError::UnknownWatcher { id: id.to_string() })
    }

    pub fn list(&self) -> Vec<WatcherInfo> {
        lock(&self.watchers).values().map(|w| w.info()).collect()
    }

    /// Stops and forgets a watcher; its readers see it closed.
    pub fn stop(&self, id: &str) -> Result<WatcherInfo, WatchError> {
        let watcher = lock(&self.watchers)
            .remove(id)
            .ok_or_else(|| WatchError::UnknownWatcher { id: id.to_string() })?;
        watcher.shutdown("the watcher was stopped");
        tracing::info!(watcher = %id, "file watch stopped");
        Ok(watcher.info())
    }

    /// Waits up to `timeout` for a change of one of `kinds` to exactly `path`. When the path
    /// exists already and `kinds` has `create`, answers at once with a `create` event (AIO's
    /// behaviour: waiting for a file that is there is over). `None`: the time ran out.
    pub async fn wait(
        &self,
        path: &OsStr,
        kinds: &[ChangeKind],
        timeout: Duration,
    ) -> Result<Option<FileEvent>, WatchError> {
        let _slot = WaitSlot::take(&self.waits, self.limits.max_waits)?;
        let requested = self.confine.absolute(path).map_err(FileError::from)?;
        let (Some(parent), Some(name)) = (requested.parent(), requested.file_name()) else {
            return Err(FileError::invalid(
                "path",
                format!(
                    "{}: wait needs a file or directory inside a directory",
                    requested.display()
                ),
            )
            .into());
        };
        let spec = WatchSpec {
            path: parent.as_os_str().to_owned(),
            recursive: false,
            exclude: Vec::new(),
            include: Vec::new(),
            debounce: Duration::from_millis(DEBOUNCE_RANGE_MS.0),
        };
        let watcher = start(
            self.confine.clone(),
            self.limits,
            spec,
            Some(name.to_owned()),
        )
        .await?;
        // The watch is in place: a change from now on is seen. One that happened before is
        // the file being there already.
        if kinds.contains(&ChangeKind::Create)
            && let Some(event) = watcher.existing(Path::new(name)).await
        {
            return Ok(Some(event));
        }
        let deadline = Instant::now() + timeout;
        let mut cursor = 0;
        loop {
            let batch = match tokio::time::timeout_at(
                deadline,
                watcher.next_batch(cursor, self.limits.queue_capacity),
            )
            .await
            {
                Ok(batch) => batch,
                Err(_) => return Ok(None),
            };
            cursor = batch.cursor;
            for record in batch.records {
                if let Record::Change(event) = record
                    && event.relative_path == Path::new(name)
                    && kinds.contains(&event.kind)
                {
                    return Ok(Some(event));
                }
            }
            if let Some(reason) = batch.closed {
                return Err(FileError::Conflict {
                    message: format!(
                        "waiting for {}: the watch on its directory ended: {reason}",
                        requested.display()
                    ),
                }
                .into());
            }
        }
    }
}

fn too_many_watchers(limit: usize) -> WatchError {
    WatchError::TooMany {
        what: "watchers",
        limit,
        hint: "stop one with DELETE /v1/file/watch/{watcher_id} first",
    }
}

/// Counts a one-shot wait while it runs.
struct WaitSlot(Arc<AtomicUsize>);

impl WaitSlot {
    fn take(count: &Arc<AtomicUsize>, limit: usize) -> Result<Self, WatchError> {
        let taken = count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < limit).then_some(n + 1)
        });
        match taken {
            Ok(_) => Ok(Self(count.clone())),
            Err(_) => Err(WatchError::TooMany {
                what: "waits",
                limit,
                hint: "try again when one has ended",
            }),
        }
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One watcher: its settings, its queue and the task reading inotify.
#[derive(Debug)]
pub struct Watcher {
    pub id: String,
    /// As requested, absolute and normalised.
    pub path: PathBuf,
    pub recursive: bool,
    pub exclude: Vec<String>,
    pub include: Vec<String>,
    pub debounce: Duration,
    pub created: SystemTime,
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
    confine: Arc<Confinement>,
    real: PathBuf,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watcher {
    pub fn info(&self) -> WatcherInfo {
        let queue = lock(&self.shared.queue);
        WatcherInfo {
            id: self.id.clone(),
            path: self.path.clone(),
            recursive: self.recursive,
            exclude: self.exclude.clone(),
            include: self.include.clone(),
            debounce: self.debounce,
            created: self.created,
            cursor: queue.next_seq - 1,
            directories: self.shared.directories.load(Ordering::Relaxed),
            closed: queue.closed.clone(),
        }
    }

    /// The records after `cursor`, at most `limit`, without waiting.
    pub fn read(&self, cursor: u64, limit: usize) -> Batch {
        lock(&self.shared.queue).read(cursor, limit)
    }

    /// The records after `cursor`, at most `limit`, waiting until there is one or the watcher
    /// closes.
    pub async fn next_batch(&self, cursor: u64, limit: usize) -> Batch {
        let mut changes = self.shared.wake.subscribe();
        loop {
            let batch = self.read(cursor, limit);
            if !batch.records.is_empty() || batch.missed > 0 || batch.closed.is_some() {
                return batch;
            }
            if changes.changed().await.is_err() {
                return self.read(cursor, limit);
            }
        }
    }

    /// Stops the task and closes the queue.
    fn shutdown(&self, reason: &str) {
        self.task.abort();
        lock(&self.shared.queue).close(reason);
        self.shared.wake.send_modify(|n| *n += 1);
    }

    /// A `create` event for `rel` if it exists now (not queued).
    async fn existing(&self, rel: &Path) -> Option<FileEvent> {
        let confine = self.confine.clone();
        let real = self.real.clone();
        let rel_owned = rel.to_path_buf();
        let facts = tokio::task::spawn_blocking(move || stat_beneath(&confine, &real, &rel_owned))
            .await
            .ok()
            .flatten()?;
        Some(FileEvent {
            seq: 0,
            kind: ChangeKind::Create,
            path: self.path.join(rel),
            relative_path: rel.to_path_buf(),
            old_path: None,
            is_dir: facts.is_dir,
            timestamp: SystemTime::now(),
            mtime: facts.mtime,
            size: facts.size,
            inode: Some(facts.inode),
        })
    }
}

/// The part of a watcher its task shares.
#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Bumped on every change of the queue, to wake readers.
    wake: tokio::sync::watch::Sender<u64>,
    directories: AtomicUsize,
}

impl Shared {
    fn push(&self, make: impl FnOnce(u64) -> Record) {
        lock(&self.queue).push(make);
        self.wake.send_modify(|n| *n += 1);
    }
}

/// A bounded queue of records numbered from 1.
#[derive(Debug)]
struct Queue {
    records: VecDeque<Record>,
    capacity: usize,
    next_seq: u64,
    closed: Option<String>,
}

impl Queue {
    fn new(capacity: usize) -> Self {
        Self {
            records: VecDeque::new(),
            capacity: capacity.max(1),
            next_seq: 1,
            closed: None,
        }
    }

    fn push(&mut self, make: impl FnOnce(u64) -> Record) {
        if self.closed.is_some() {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.records.len() >= self.capacity {
            self.records.pop_front();
        }
        self.records.push_back(make(seq));
    }

    fn close(&mut self, reason: &str) {
        if self.closed.is_none() {
            self.closed = Some(reason.to_string());
        }
    }

    fn read(&self, cursor: u64, limit: usize) -> Batch {
        let last = self.next_seq - 1;
        // A cursor from the future (or another watcher) reads from now on.
        let cursor = cursor.min(last);
        let first = self.records.front().map_or(self.next_seq, Record::seq);
        let missed = (first - 1).saturating_sub(cursor);
        let mut records: Vec<Record> = self
            .records
            .iter()
            .filter(|r| r.seq() > cursor)
            .take(limit.saturating_add(1))
            .cloned()
            .collect();
        let has_more = records.len() > limit;
        records.truncate(limit);
        let cursor = records.last().map_or(cursor.max(first - 1), Record::seq);
        Batch {
            records,
            missed,
            cursor,
            has_more,
            closed: self.closed.clone(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn new_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = (nanos as u64).to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("w-{hex}")
}

/// Compiles patterns; `field` names them in refusals.
fn glob_set(patterns: &[String], field: &'static str, max: usize) -> Result<GlobSet, FileError> {
    if patterns.len() > max {
        return Err(FileError::invalid(
            field,
            format!("{field} has {} patterns; at most {max}", patterns.len()),
        ));
    }
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        if pattern.is_empty() || pattern.len() > MAX_PATTERN_LEN {
            return Err(FileError::invalid(
                field,
                format!("{field}: a pattern must have 1 to {MAX_PATTERN_LEN} characters"),
            ));
        }
        let glob = Glob::new(pattern).map_err(|error| {
            FileError::invalid(
                field,
                format!("{field}: {pattern:?} is not a glob: {error}"),
            )
        })?;
        builder.add(glob);
    }
    builder.build().map_err(|error| {
        FileError::invalid(
            field,
            format!("{field}: the patterns cannot be used: {error}"),
        )
    })
}

/// `lstat` facts of an entry.
#[derive(Debug, Clone, Copy)]
struct Facts {
    is_dir: bool,
    size: Option<u64>,
    mtime: Option<SystemTime>,
    inode: u64,
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)` of `rel` below `base` (real, symlink-free), its parent opened
/// through the confinement.
fn stat_beneath(confine: &Confinement, base: &Path, rel: &Path) -> Option<Facts> {
    let name = rel.file_name()?;
    let parent = base.join(rel.parent().unwrap_or(Path::new("")));
    let dir = open_dir(confine, &parent).ok()?;
    let stat = fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    let is_dir = format == SFlag::S_IFDIR;
    let mtime = u64::try_from(stat.st_mtime).ok().map(|secs| {
        SystemTime::UNIX_EPOCH + Duration::new(secs, u32::try_from(stat.st_mtime_nsec).unwrap_or(0))
    });
    Some(Facts {
        is_dir,
        size: (!is_dir).then(|| u64::try_from(stat.st_size).unwrap_or(0)),
        mtime,
        inode: stat.st_ino,
    })
}

/// Opens a directory through the confinement (`O_PATH`).
fn open_dir(confine: &Confinement, path: &Path) -> Result<OwnedFd, ConfineError> {
    let r = confine.resolve(path.as_os_str())?;
    confine.open(&r, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())
}

fn watch_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::DELETE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::EXCL_UNLINK
}

/// Adds a kernel watch on the directory open at `dir`.
fn add_watch(watches: &mut inotify::Watches, dir: &OwnedFd) -> std::io::Result<WatchDescriptor> {
    watches.add(format!("/proc/self/fd/{}", dir.as_raw_fd()), watch_mask())
}

/// The filters of a watcher.
#[derive(Debug, Clone)]
struct Filter {
    exclude: GlobSet,
    include: Option<GlobSet>,
    /// For waits: only this name in the watched directory.
    only: Option<OsString>,
}

impl Filter {
    fn excluded(&self, rel: &Path) -> bool {
        if let Some(only) = &self.only {
            return rel.as_os_str() != only.as_os_str();
        }
        !self.exclude.is_empty()
            && (self.exclude.is_match(rel) || rel.iter().any(|name| self.exclude.is_match(name)))
    }

    fn reported(&self, rel: &Path) -> bool {
        match &self.include {
            None => true,
            Some(include) => {
                include.is_match(rel) || rel.file_name().is_some_and(|name| include.is_match(name))
            }
        }
    }
}

/// Starts a watcher on `spec`; `only` limits it to one name in the directory (waits).
async fn start(
    confine: Arc<Confinement>,
    limits: WatchLimits,
    spec: WatchSpec,
    only: Option<OsString>,
) -> Result<Watcher, WatchError> {
    let (min, max) = DEBOUNCE_RANGE_MS;
    let debounce_ms = u64::try_from(spec.debounce.as_millis()).unwrap_or(u64::MAX);
    if !(min..=max).contains(&debounce_ms) {
        return Err(FileError::invalid(
            "debounce",
            format!("debounce is {debounce_ms} ms; it must be {min} to {max}"),
        )
        .into());
    }
    let filter = Filter {
        exclude: glob_set(&spec.exclude, "exclude", limits.max_patterns)?,
        include: if spec.include.is_empty() {
            None
        } else {
            Some(glob_set(
                &spec.include,
                "include_patterns",
                limits.max_patterns,
            )?)
        },
        only,
    };
    let setup = {
        let confine = confine.clone();
        let spec = spec.clone();
        let filter = filter.clone();
        tokio::task::spawn_blocking(move || setup(&confine, &spec, &filter, limits))
    };
    let Setup {
        inotify,
        requested,
        real,
        dirs,
    } = setup.await.map_err(|error| WatchError::Inotify {
        op: "setting up the watch",
        source: std::io::Error::other(error.to_string()),
    })??;
    let stream = inotify
        .into_event_stream(vec![0u8; 64 * 1024])
        .map_err(|source| WatchError::Inotify {
            op: "reading inotify",
            source,
        })?;
    let (wake, _) = tokio::sync::watch::channel(0u64);
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::new(limits.queue_capacity)),
        wake,
        directories: AtomicUsize::new(dirs.len()),
    });
    let tracker = Tracker {
        confine: confine.clone(),
        real: real.clone(),
        shown: requested.clone(),
        recursive: spec.recursive,
        filter,
        debounce: spec.debounce,
        limits,
        watches: stream.watches(),
        dirs,
        pending: HashMap::new(),
        moved_from: None,
        shared: shared.clone(),
    };
    let task = tokio::spawn(tracker.run(stream)).abort_handle();
    Ok(Watcher {
        id: new_id(),
        path: requested,
        recursive: spec.recursive,
        exclude: spec.exclude,
        include: spec.include,
        debounce: spec.debounce,
        created: SystemTime::now(),
        shared,
        task,
        confine,
        real,
    })
}

struct Setup {
    inotify: Inotify,
    requested: PathBuf,
    real: PathBuf,
    dirs: HashMap<WatchDescriptor, PathBuf>,
}

/// Plans and opens the directory, finds the directories below it (recursive) and adds the
/// kernel watches. Blocking.
fn setup(
    confine: &Confinement,
    spec: &WatchSpec,
    filter: &Filter,
    limits: WatchLimits,
) -> Result<Setup, WatchError> {
    let r = confine.resolve(&spec.path).map_err(FileError::from)?;
    let dir = confine
        .open(&r, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())
        .map_err(FileError::from)?;
    let mut below: Vec<PathBuf> = Vec::new();
    if spec.recursive {
        let readable = confine
            .open(&r, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())
            .map_err(FileError::from)?;
        let mut too_many = false;
        walk::walk(
            readable,
            &WalkOptions {
                max_depth: walk::MAX_WALK_DEPTH,
                skip_hidden: false,
                max_entries: usize::MAX,
            },
            &mut |entry| {
                if entry.meta.kind != super::Kind::Directory {
                    return Visit::Continue;
                }
                if filter.excluded(entry.rel) {
                    return Visit::Skip;
                }
                if below.len() + 1 >= limits.max_directories {
                    too_many = true;
                    return Visit::Stop;
                }
                below.push(entry.rel.to_path_buf());
                Visit::Continue
            },
        );
        if too_many {
            return Err(FileError::invalid(
                "path",
                format!(
                    "{} has more than {} directories (not counting excluded ones), the most one \
                     watcher covers: watch a smaller directory, exclude some, or set recursive \
                     to false",
                    r.requested.display(),
                    limits.max_directories
                ),
            )
            .into());
        }
    }
    let inotify = Inotify::init().map_err(|source| WatchError::Inotify {
        op: "creating an inotify instance",
        source,
    })?;
    let mut watches = inotify.watches();
    let mut dirs = HashMap::new();
    let wd = add_watch(&mut watches, &dir).map_err(|source| WatchError::Inotify {
        op: "watching the directory",
        source,
    })?;
    dirs.insert(wd, PathBuf::new());
    for rel in below {
        // A directory that vanished or turned into something else since the walk is skipped.
        let Ok(fd) = open_dir(confine, &r.real.join(&rel)) else {
            continue;
        };
        let wd = add_watch(&mut watches, &fd).map_err(|source| WatchError::Inotify {
            op: "watching a directory below",
            source,
        })?;
        dirs.insert(wd, rel);
    }
    Ok(Setup {
        inotify,
        requested: r.requested,
        real: r.real,
        dirs,
    })
}

/// A change waiting out its coalescing window.
#[derive(Debug, Clone)]
struct Pending {
    kind: ChangeKind,
    is_dir: bool,
    deadline: Instant,
}

/// A `IN_MOVED_FROM` waiting for its `IN_MOVED_TO`.
#[derive(Debug, Clone)]
struct MovedFrom {
    cookie: u32,
    rel: PathBuf,
    is_dir: bool,
    deadline: Instant,
}

/// The task's state: the kernel watches and the coalescing.
struct Tracker {
    confine: Arc<Confinement>,
    real: PathBuf,
    shown: PathBuf,
    recursive: bool,
    filter: Filter,
    debounce: Duration,
    limits: WatchLimits,
    watches: inotify::Watches,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    pending: HashMap<PathBuf, Pending>,
    moved_from: Option<MovedFrom>,
    shared: Arc<Shared>,
}

impl Tracker {
    async fn run(mut self, mut stream: inotify::EventStream<Vec<u8>>) {
        loop {
            let deadline = self.next_deadline();
            tokio::select! {
                item = stream.next() => match item {
                    Some(Ok(event)) => {
                        self.on_event(event.wd, event.mask, event.cookie, event.name);
                        self.flush_due(Instant::now());
                    }
                    Some(Err(error)) => {
                        tracing::warn!(%error, "reading inotify failed; the watch ends");
                        self.close(&format!("reading inotify failed: {error}"));
                        return;
                    }
                    None => {
                        self.close("inotify ended");
                        return;
                    }
                },
                () = sleep_until(deadline), if deadline.is_some() => {
                    self.flush_due(Instant::now());
                }
            }
            if self.dirs.is_empty() {
                self.flush_all();
                self.close("the watched directory was removed or moved away");
                return;
            }
        }
    }

    fn close(&self, reason: &str) {
        lock(&self.shared.queue).close(reason);
        self.shared.wake.send_modify(|n| *n += 1);
    }

    fn next_deadline(&self) -> Option<Instant> {
        let pending = self.pending.values().map(|p| p.deadline).min();
        let moved = self.moved_from.as_ref().map(|m| m.deadline);
        match (pending, moved) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_event(
        &mut self,
        wd: WatchDescriptor,
        mask: EventMask,
        cookie: u32,
        name: Option<OsString>,
    ) {
        let now = Instant::now();
        if mask.contains(EventMask::Q_OVERFLOW) {
            self.flush_all();
            self.shared.push(|seq| {
                Record::Overflow(Overflow {
                    seq,
                    reason: OverflowReason::KernelQueue,
                    timestamp: SystemTime::now(),
                })
            });
            return;
        }
        let Some(dir_rel) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if mask.contains(EventMask::IGNORED) {
            self.dirs.remove(&wd);
            self.shared
                .directories
                .store(self.dirs.len(), Ordering::Relaxed);
            return;
        }
        if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
            // Below the top, the parent's event reported it already.
            if dir_rel.as_os_str().is_empty() {
                // The watched directory itself went away: report it and stop watching the
                // rest, whose paths no longer mean anything.
                self.flush_all();
                self.emit(ChangeKind::Remove, PathBuf::new(), None, true);
                for (wd, _) in self.dirs.drain() {
                    let _ = self.watches.remove(wd);
                }
            }
            return;
        }
        let Some(name) = name else {
            return;
        };
        let rel = dir_rel.join(&name);
        let is_dir = mask.contains(EventMask::ISDIR);
        if let Some(from) = self.moved_from.take() {
            if mask.contains(EventMask::MOVED_TO) && cookie == from.cookie {
                self.renamed(from, rel, is_dir);
                return;
            }
            self.moved_out(from);
        }
        if mask.contains(EventMask::MOVED_FROM) {
            self.moved_from = Some(MovedFrom {
                cookie,
                rel,
                is_dir,
                deadline: now + MOVE_PAIRING,
            });
            return;
        }
        if self.filter.excluded(&rel) {
            return;
        }
        if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
            if is_dir {
                self.flush(&rel);
                self.emit(ChangeKind::Create, rel.clone(), None, true);
                if self.recursive {
                    self.watch_new_tree(&rel);
                }
            } else {
                self.record(ChangeKind::Create, rel, false, now);
            }
        } else if mask.contains(EventMask::MODIFY) {
            self.record(ChangeKind::Write, rel, is_dir, now);
        } else if mask.contains(EventMask::ATTRIB) {
            self.record(ChangeKind::Chmod, rel, is_dir, now);
        } else if mask.contains(EventMask::CLOSE_WRITE) {
            // The writer is done: what it did is reported now.
            self.flush(&rel);
        } else if mask.contains(EventMask::DELETE) {
            self.flush(&rel);
            self.emit(ChangeKind::Remove, rel, None, is_dir);
        }
    }

    /// A rename inside the tree.
    fn renamed(&mut self, from: MovedFrom, to: PathBuf, is_dir: bool) {
        if is_dir {
            for rel in self.dirs.values_mut() {
                if let Ok(rest) = rel.strip_prefix(&from.rel) {
                    *rel = to.join(rest);
                }
            }
        }
        self.flush(&from.rel);
        self.flush(&to);
        match (self.filter.excluded(&from.rel), self.filter.excluded(&to)) {
            (false, false) => self.emit(ChangeKind::Rename, to, Some(from.rel), is_dir),
            (true, false) => {
                self.emit(ChangeKind::Create, to.clone(), None, is_dir);
                if is_dir && self.recursive && !self.is_watched(&to) {
                    self.watch_new_tree(&to);
                }
            }
            (false, true) => {
                self.emit(ChangeKind::Remove, from.rel, None, is_dir);
                if is_dir {
                    self.unwatch_tree(&to);
                }
            }
            (true, true) => {}
        }
    }

    /// Moved out of the tree: gone from here.
    fn moved_out(&mut self, from: MovedFrom) {
        if from.is_dir {
            self.unwatch_tree(&from.rel);
        }
        if self.filter.excluded(&from.rel) {
            return;
        }
        self.flush(&from.rel);
        self.emit(ChangeKind::Remove, from.rel, None, from.is_dir);
    }

    fn is_watched(&self, rel: &Path) -> bool {
        self.dirs.values().any(|r| r == rel)
    }

    /// Stops watching `rel` and everything below it.
    fn unwatch_tree(&mut self, rel: &Path) {
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, r)| r.starts_with(rel) && !r.as_os_str().is_empty())
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            let _ = self.watches.remove(wd.clone());
            self.dirs.remove(&wd);
        }
        self.shared
            .directories
            .store(self.dirs.len(), Ordering::Relaxed);
    }

    /// Watches a directory that appeared, and reports what is in it already (it may have
    /// filled before the watch was in place).
    fn watch_new_tree(&mut self, top: &Path) {
        let mut queue: VecDeque<PathBuf> = VecDeque::from([top.to_path_buf()]);
        while let Some(rel) = queue.pop_front() {
            if self.dirs.len() >= self.limits.max_directories {
                let limit = self.limits.max_directories;
                let path = self.shown.join(&rel);
                self.shared.push(|seq| {
                    Record::Overflow(Overflow {
                        seq,
                        reason: OverflowReason::DirectoryLimit { path, limit },
                        timestamp: SystemTime::now(),
                    })
                });
                return;
            }
            let real = self.real.join(&rel);
            let watched = open_dir(&self.confine, &real)
                .map_err(|e| e.to_string())
                .and_then(|fd| add_watch(&mut self.watches, &fd).map_err(|e| e.to_string()));
            let wd = match watched {
                Ok(wd) => wd,
                Err(message) => {
                    // Gone again before it could be watched: its removal is reported anyway.
                    if stat_beneath(&self.confine, &self.real, &rel).is_some() {
                        let path = self.shown.join(&rel);
                        self.shared.push(|seq| {
                            Record::Overflow(Overflow {
                                seq,
                                reason: OverflowReason::NotWatched { path, message },
                                timestamp: SystemTime::now(),
                            })
                        });
                    }
                    continue;
                }
            };
            self.dirs.insert(wd, rel.clone());
            self.shared
                .directories
                .store(self.dirs.len(), Ordering::Relaxed);
            let Ok(r) = self.confine.resolve(real.as_os_str()) else {
                continue;
            };
            let Ok(readable) =
                self.confine
                    .open(&r, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())
            else {
                continue;
            };
            let mut found: Vec<(PathBuf, bool)> = Vec::new();
            walk::walk(
                readable,
                &WalkOptions {
                    max_depth: 1,
                    skip_hidden: false,
                    max_entries: self.limits.max_pending,
                },
                &mut |entry| {
                    found.push((
                        rel.join(entry.rel),
                        entry.meta.kind == super::Kind::Directory,
                    ));
                    Visit::Continue
                },
            );
            let now = Instant::now();
            for (child, is_dir) in found {
                if self.filter.excluded(&child) {
                    continue;
                }
                if is_dir {
                    self.emit(ChangeKind::Create, child.clone(), None, true);
                    queue.push_back(child);
                } else if !self.pending.contains_key(&child) {
                    self.record(ChangeKind::Create, child, false, now);
                }
            }
        }
    }

    /// Adds a change to the coalescing window of its path.
    fn record(&mut self, kind: ChangeKind, rel: PathBuf, is_dir: bool, now: Instant) {
        if let Some(pending) = self.pending.get_mut(&rel) {
            use ChangeKind::{Chmod, Create, Write};
            match (pending.kind, kind) {
                (Create | Write, Write) | (Create | Write | Chmod, Chmod) => return,
                (Chmod, Write) => {
                    pending.kind = Write;
                    return;
                }
                _ => self.flush(&rel),
            }
        }
        if self.pending.len() >= self.limits.max_pending
            && let Some(oldest) = self
                .pending
                .iter()
                .min_by_key(|(_, p)| p.deadline)
                .map(|(rel, _)| rel.clone())
        {
            self.flush(&oldest);
        }
        self.pending.insert(
            rel,
            Pending {
                kind,
                is_dir,
                deadline: now + self.debounce,
            },
        );
    }

    /// Reports the pending change of `rel`, if any.
    fn flush(&mut self, rel: &Path) {
        if let Some(pending) = self.pending.remove(rel) {
            self.emit(pending.kind, rel.to_path_buf(), None, pending.is_dir);
        }
    }

    fn flush_due(&mut self, now: Instant) {
        if let Some(from) = &self.moved_from
            && from.deadline <= now
            && let Some(from) = self.moved_from.take()
        {
            self.moved_out(from);
        }
        let mut due: Vec<(Instant, PathBuf)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(rel, p)| (p.deadline, rel.clone()))
            .collect();
        due.sort();
        for (_, rel) in due {
            self.flush(&rel);
        }
    }

    fn flush_all(&mut self) {
        if let Some(from) = self.moved_from.take() {
            self.moved_out(from);
        }
        let mut all: Vec<(Instant, PathBuf)> = self
            .pending
            .iter()
            .map(|(rel, p)| (p.deadline, rel.clone()))
            .collect();
        all.sort();
        for (_, rel) in all {
            self.flush(&rel);
        }
    }

    /// Puts a change in the queue, with the entry's facts as they are now.
    fn emit(&mut self, kind: ChangeKind, rel: PathBuf, old: Option<PathBuf>, is_dir: bool) {
        let reported =
            self.filter.reported(&rel) || old.as_deref().is_some_and(|o| self.filter.reported(o));
        if !reported {
            return;
        }
        let facts = if kind == ChangeKind::Remove {
            None
        } else {
            stat_beneath(&self.confine, &self.real, &rel)
        };
        let path = if rel.as_os_str().is_empty() {
            self.shown.clone()
        } else {
            self.shown.join(&rel)
        };
        let old_path = old.map(|o| self.shown.join(o));
        self.shared.push(|seq| {
            Record::Change(FileEvent {
                seq,
                kind,
                path,
                relative_path: rel,
                old_path,
                is_dir: facts.map_or(is_dir, |f| f.is_dir),
                timestamp: SystemTime::now(),
                mtime: facts.and_then(|f| f.mtime),
                size: facts.and_then(|f| f.size),
                inode: facts.map(|f| f.inode),
            })
        });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seq: u64) -> Record {
        Record::Change(FileEvent {
            seq,
            kind: ChangeKind::Write,
            path: PathBuf::from("/x"),
            relative_path: PathBuf::from("x"),
            old_path: None,
            is_dir: false,
            timestamp: SystemTime::now(),
            mtime: None,
            size: None,
            inode: None,
        })
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_readers_learn_how_many_they_missed() {
        let mut queue = Queue::new(3);
        for _ in 0..5 {
            queue.push(change);
        }
        let batch = queue.read(0, 10);
        let seqs: Vec<u64> = batch.records.iter().map(Record::seq).collect();
        assert_eq!(seqs, vec![3, 4, 5]);
        assert_eq!(batch.missed, 2);
        assert_eq!(batch.cursor, 5);
        // A reader that kept up misses nothing.
        let batch = queue.read(3, 1);
        assert_eq!(batch.missed, 0);
        assert_eq!(batch.records.len(), 1);
        assert!(batch.has_more);
        assert_eq!(batch.cursor, 4);
        // Nothing new: the cursor stays.
        let batch = queue.read(5, 10);
        assert!(batch.records.is_empty());
        assert_eq!(batch.cursor, 5);
        // A cursor from the future reads from now on.
        assert_eq!(queue.read(99, 10).cursor, 5);
    }

    #[test]
    fn filters_match_names_at_any_depth() {
        let filter = Filter {
            exclude: glob_set(&["node_modules".into(), "*.pyc".into()], "exclude", 8).unwrap(),
            include: Some(glob_set(&["*.py".into()], "include_patterns", 8).unwrap()),
            only: None,
        };
        assert!(filter.excluded(Path::new("a/node_modules/b.js")));
        assert!(filter.excluded(Path::new("x/y.pyc")));
        assert!(!filter.excluded(Path::new("src/main.py")));
        assert!(filter.reported(Path::new("src/deep/main.py")));
        assert!(!filter.reported(Path::new("src/main.rs")));
        let err = glob_set(&["a[".into()], "exclude", 8).unwrap_err();
        assert!(
            matches!(
                err,
                FileError::Invalid {
                    field: "exclude",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
