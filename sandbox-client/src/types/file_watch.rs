//! `/v1/file/watch*`: AIO Sandbox's file watches. Unlike the rest of the file API these answer
//! plain resource JSON with HTTP status codes, not the `{success, message, data}` envelope
//! (as AIO documents them; its SDK reads them as untyped JSON). Errors still use the error
//! envelope of every route.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The kind of a change (AIO's five).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum FileWatchEventType {
    Create,
    Write,
    Remove,
    Rename,
    Chmod,
}

/// `POST /v1/file/watch`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileWatchCreateRequest {
    /// The directory to watch: absolute, or relative to the workspace.
    pub path: String,
    /// Also watch every directory below it (default true).
    #[serde(default)]
    pub recursive: Option<bool>,
    /// Globs of names or relative paths to leave out; an excluded directory is not watched.
    /// Default: `.git`, `node_modules`, `__pycache__`, `.venv`, `*.pyc`, `*.pyo`, `.DS_Store`,
    /// `*.swp`, `*.swo`. `[]` excludes nothing.
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
    /// Coalescing window in milliseconds, 50 to 5000 (default 300). A writer closing its file
    /// ends the window early.
    #[serde(default)]
    pub debounce: Option<f64>,
    /// When not empty, only paths matching one of these globs are reported (`*.py` matches at
    /// any depth).
    #[serde(default)]
    pub include_patterns: Option<Vec<String>>,
}

/// A watcher.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileWatchInfo {
    pub watcher_id: String,
    /// The watched directory, absolute.
    pub path: String,
    pub recursive: bool,
    pub exclude: Vec<String>,
    pub include_patterns: Vec<String>,
    /// Milliseconds.
    pub debounce: u64,
    /// Unix time in seconds.
    pub created_at: f64,
    /// The last event's `seq` (0: none yet).
    pub cursor: u64,
    /// Directories the kernel watches for it.
    pub directories: u64,
    /// False once it stopped (its directory went away); `closed_reason` says why.
    pub active: bool,
    #[serde(default)]
    pub closed_reason: Option<String>,
}

/// `GET /v1/file/watch`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileWatchList {
    pub watchers: Vec<FileWatchInfo>,
    pub count: u64,
    /// The most watchers at once.
    pub max_watchers: u64,
}

/// One change (AIO's `FileEvent`).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileWatchEvent {
    /// Position in the watcher's stream, from 1 (0 for `wait`'s answer about a file that
    /// existed already).
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: FileWatchEventType,
    /// Absolute.
    pub path: String,
    /// Relative to the watched directory.
    pub relative_path: String,
    /// For `rename`: the path before.
    #[serde(default)]
    pub old_path: Option<String>,
    pub is_dir: bool,
    /// When it was reported, Unix time in seconds.
    pub timestamp: f64,
    /// `lstat` facts when it was reported; absent for removals.
    #[serde(default)]
    pub mtime: Option<f64>,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub inode: Option<u64>,
}

/// A notice that changes may be missing.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileWatchOverflow {
    /// Position in the watcher's stream (0 when it stands for records the full queue dropped).
    pub seq: u64,
    /// `queue_full` (records dropped before this reader read them), `kernel_queue` (the
    /// kernel's queue overflowed), `directory_limit` or `not_watched` (a new directory is not
    /// watched).
    pub reason: String,
    pub message: String,
    /// For `queue_full`: how many records this reader missed.
    #[serde(default)]
    pub dropped: Option<u64>,
    #[serde(default)]
    pub path: Option<String>,
    pub timestamp: f64,
}

/// `POST /v1/file/watch/{watcher_id}/poll`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileWatchPollRequest {
    /// The `cursor` of the previous answer: events after it are returned (default 0: all
    /// still kept).
    #[serde(default)]
    pub since: Option<f64>,
    /// Alias of `since` (AIO's documentation names it so).
    #[serde(default)]
    pub cursor: Option<f64>,
    /// The most events to return, 1 to 1000 (default 100).
    #[serde(default)]
    pub limit: Option<f64>,
    /// Seconds to wait for an event when there is none yet, 0 to 300 (default 0: answer at
    /// once).
    #[serde(default)]
    pub timeout: Option<f64>,
}

/// Answer of `poll` and of `GET .../events` without `Accept: text/event-stream`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileWatchPollResult {
    pub watcher_id: String,
    pub events: Vec<FileWatchEvent>,
    /// Pass it as `since` next time.
    pub cursor: u64,
    /// Changes may be missing (see `overflows`): re-read the tree, then go on from `cursor`.
    pub overflow: bool,
    pub overflows: Vec<FileWatchOverflow>,
    /// More events are waiting: poll again at once.
    pub has_more: bool,
    /// False once the watcher stopped.
    pub active: bool,
    #[serde(default)]
    pub closed_reason: Option<String>,
}

/// `POST /v1/file/watch/wait`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileWatchWaitRequest {
    /// The file or directory (exact path); its parent directory must exist.
    pub path: String,
    /// Seconds, 1 to 300 (default 30).
    #[serde(default)]
    pub timeout: Option<f64>,
    /// The kinds to wait for (default all five). With `create`, a path that exists already
    /// answers at once.
    #[serde(default)]
    pub event_types: Option<Vec<FileWatchEventType>>,
}

/// Answer of `wait`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileWatchWaitResult {
    /// The change; null when the time ran out.
    pub event: Option<FileWatchEvent>,
    pub timed_out: bool,
}

/// Answer of `DELETE /v1/file/watch/{watcher_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileWatchStopResult {
    pub watcher_id: String,
    pub stopped: bool,
}
