//! `/v1/file/watch*`: AIO Sandbox's file watches over [`crate::files::watch`]: create, list,
//! stop, poll (long poll by cursor), the event stream (Server-Sent Events with
//! `Accept: text/event-stream`, else the same JSON as a poll) and the one-shot wait for a path.
//!
//! As AIO serves them, answers are plain resource JSON (no `{success, message, data}`
//! envelope); errors are the usual error envelope: 403 for a path outside the roots, 404 for a
//! missing directory or watcher, 422 naming a bad field, 429 past the number of watchers.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{AioJson, AioQuery};
use crate::api::types::{
    ErrorBody, FileWatchCreateRequest, FileWatchEvent, FileWatchEventType, FileWatchInfo,
    FileWatchList, FileWatchOverflow, FileWatchPollRequest, FileWatchPollResult,
    FileWatchStopResult, FileWatchWaitRequest, FileWatchWaitResult,
};
use crate::api::validate::{self, SecondsRange};
use crate::files::watch::{
    Batch, ChangeKind, DEFAULT_DEBOUNCE, DEFAULT_EXCLUDE, FileEvent, Overflow, OverflowReason,
    Record, WatchError, WatchSpec, Watcher, WatcherInfo,
};

/// Events in one poll answer by default, and at most.
const DEFAULT_POLL_LIMIT: i64 = 100;
const MAX_POLL_LIMIT: i64 = 1_000;
/// The longest long poll and wait, in seconds.
const MAX_WAIT_SECONDS: f64 = 300.0;
/// `wait`'s default, in seconds (AIO's).
const DEFAULT_WAIT_SECONDS: f64 = 30.0;
/// Records read from the queue per step of an event stream.
const STREAM_BATCH: usize = 256;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(wait))
        .routes(routes!(stop))
        .routes(routes!(events))
        .routes(routes!(poll))
}

/// The watchers, oldest id first.
#[utoipa::path(get, path = "/v1/file/watch", tag = "file-watch",
    responses((status = 200, body = FileWatchList)))]
pub async fn list(State(state): State<AppState>) -> Json<FileWatchList> {
    let watchers: Vec<FileWatchInfo> = state.watches.list().iter().map(info).collect();
    Json(FileWatchList {
        count: watchers.len() as u64,
        watchers,
        max_watchers: state.watches.limits().max_watchers as u64,
    })
}

/// Starts watching a directory (recursively by default). Changes are kept in a bounded queue
/// read with `poll`, `events` or the SSE stream.
#[utoipa::path(post, path = "/v1/file/watch", tag = "file-watch",
    request_body = FileWatchCreateRequest,
    responses(
        (status = 200, body = FileWatchInfo),
        (status = 400, description = "not a directory", body = ErrorBody),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such directory", body = ErrorBody),
        (status = 422, description = "bad field (names it), or a tree too large to watch", body = ErrorBody),
        (status = 429, description = "as many watchers as allowed exist already", body = ErrorBody),
        (status = 503, description = "the kernel's inotify limits are reached", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileWatchCreateRequest>,
) -> Result<Json<FileWatchInfo>, ApiError> {
    validate::not_blank("path", &request.path)?;
    let debounce = validate::whole_number(
        "debounce",
        request.debounce,
        DEFAULT_DEBOUNCE.as_millis() as i64,
        50..=5_000,
    )?;
    let spec = WatchSpec {
        path: request.path.into(),
        recursive: request.recursive.unwrap_or(true),
        exclude: request
            .exclude
            .unwrap_or_else(|| DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect()),
        include: request.include_patterns.unwrap_or_default(),
        debounce: Duration::from_millis(debounce.unsigned_abs()),
    };
    let watcher = state.watches.create(spec).await.map_err(watch_error)?;
    Ok(Json(info(&watcher.info())))
}

/// Waits for a change to exactly `path` (a file or directory whose parent exists). A path
/// that exists already answers at once with a `create` event when `event_types` has `create`.
/// When the time runs out the answer is `{"event": null, "timed_out": true}`.
#[utoipa::path(post, path = "/v1/file/watch/wait", tag = "file-watch",
    request_body = FileWatchWaitRequest,
    responses(
        (status = 200, body = FileWatchWaitResult),
        (status = 400, description = "the parent is not a directory", body = ErrorBody),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such parent directory", body = ErrorBody),
        (status = 422, description = "bad field (names it)", body = ErrorBody),
        (status = 429, description = "too many waits at once", body = ErrorBody),
    ))]
pub async fn wait(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileWatchWaitRequest>,
) -> Result<Json<FileWatchWaitResult>, ApiError> {
    validate::not_blank("path", &request.path)?;
    let timeout = validate::seconds(
        "timeout",
        request.timeout.unwrap_or(DEFAULT_WAIT_SECONDS),
        SecondsRange::from_to(1.0, MAX_WAIT_SECONDS),
    )?;
    let kinds: Vec<ChangeKind> = match request.event_types {
        None => vec![
            ChangeKind::Create,
            ChangeKind::Write,
            ChangeKind::Remove,
            ChangeKind::Rename,
            ChangeKind::Chmod,
        ],
        Some(types) if types.is_empty() => {
            return Err(ApiError::invalid(
                "event_types",
                "event_types is empty: give at least one of create, write, remove, rename, \
                 chmod, or leave it out for all",
            ));
        }
        Some(types) => types.into_iter().map(kind_of).collect(),
    };
    let event = state
        .watches
        .wait(OsStr::new(&request.path), &kinds, timeout)
        .await
        .map_err(watch_error)?;
    Ok(Json(FileWatchWaitResult {
        timed_out: event.is_none(),
        event: event.as_ref().map(file_event),
    }))
}

/// Stops a watcher and forgets it; streams reading it end.
#[utoipa::path(delete, path = "/v1/file/watch/{watcher_id}", tag = "file-watch",
    params(("watcher_id" = String, Path, description = "From `create`")),
    responses(
        (status = 200, body = FileWatchStopResult),
        (status = 404, description = "no such watcher", body = ErrorBody),
    ))]
pub async fn stop(
    State(state): State<AppState>,
    UrlPath(watcher_id): UrlPath<String>,
) -> Result<Json<FileWatchStopResult>, ApiError> {
    state.watches.stop(&watcher_id).map_err(watch_error)?;
    Ok(Json(FileWatchStopResult {
        watcher_id,
        stopped: true,
    }))
}

/// Where an event stream starts.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this `seq` (default: after the last one kept now for a stream, all kept
    /// ones for JSON). `Last-Event-ID` (`{watcher_id}:{seq}`) takes precedence.
    #[serde(default)]
    pub since: Option<u64>,
}

/// The watcher's changes. With `Accept: text/event-stream`, a Server-Sent Events stream:
/// `watch_started` first, then `file_change` (data: the event; id: `{watcher_id}:{seq}`, so
/// a reconnecting client resumes with `Last-Event-ID`), `overflow` when changes may be
/// missing, and `watch_stopped` before it ends. Otherwise the JSON answer of a `poll` that
/// does not wait.
#[utoipa::path(get, path = "/v1/file/watch/{watcher_id}/events", tag = "file-watch",
    params(("watcher_id" = String, Path, description = "From `create`"), EventsQuery),
    responses(
        (status = 200, description = "Server-Sent Events with `Accept: text/event-stream`, else JSON",
            content((String = "text/event-stream"), (FileWatchPollResult = "application/json"))),
        (status = 404, description = "no such watcher", body = ErrorBody),
    ))]
pub async fn events(
    State(state): State<AppState>,
    UrlPath(watcher_id): UrlPath<String>,
    AioQuery(query): AioQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let watcher = state.watches.get(&watcher_id).map_err(watch_error)?;
    let wants_stream = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(':').next())
        .and_then(|seq| seq.trim().parse::<u64>().ok());
    if !wants_stream {
        let batch = watcher.read(resume.or(query.since).unwrap_or(0), MAX_POLL_LIMIT as usize);
        return Ok(Json(poll_result(&watcher, batch)).into_response());
    }
    let start = resume
        .or(query.since)
        .unwrap_or_else(|| watcher.info().cursor);
    Ok(Sse::new(event_stream(watcher, start))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// Events after `since` (or `cursor`), waiting up to `timeout` seconds for the first one.
/// `overflow: true` means changes may be missing (the queue dropped some before they were
/// read, or the kernel's queue overflowed): re-read the tree and go on from `cursor`.
#[utoipa::path(post, path = "/v1/file/watch/{watcher_id}/poll", tag = "file-watch",
    params(("watcher_id" = String, Path, description = "From `create`")),
    request_body = FileWatchPollRequest,
    responses(
        (status = 200, body = FileWatchPollResult),
        (status = 404, description = "no such watcher", body = ErrorBody),
        (status = 422, description = "bad field (names it)", body = ErrorBody),
    ))]
pub async fn poll(
    State(state): State<AppState>,
    UrlPath(watcher_id): UrlPath<String>,
    AioJson(request): AioJson<FileWatchPollRequest>,
) -> Result<Json<FileWatchPollResult>, ApiError> {
    let watcher = state.watches.get(&watcher_id).map_err(watch_error)?;
    let (field, value) = match (request.since, request.cursor) {
        (Some(since), _) => ("since", Some(since)),
        (None, cursor) => ("cursor", cursor),
    };
    let since = validate::whole_number(field, value, 0, 0..=i64::MAX)?.unsigned_abs();
    let limit = validate::whole_number(
        "limit",
        request.limit,
        DEFAULT_POLL_LIMIT,
        1..=MAX_POLL_LIMIT,
    )?
    .unsigned_abs() as usize;
    let timeout = validate::seconds(
        "timeout",
        request.timeout.unwrap_or(0.0),
        SecondsRange::from_to(0.0, MAX_WAIT_SECONDS),
    )?;
    let batch = if timeout.is_zero() {
        watcher.read(since, limit)
    } else {
        match tokio::time::timeout(timeout, watcher.next_batch(since, limit)).await {
            Ok(batch) => batch,
            Err(_) => watcher.read(since, limit),
        }
    };
    Ok(Json(poll_result(&watcher, batch)))
}

/// The SSE events of a watcher from `since` on, until it stops.
fn event_stream(
    watcher: std::sync::Arc<Watcher>,
    since: u64,
) -> impl futures::Stream<Item = Result<Event, std::convert::Infallible>> {
    struct Reader {
        watcher: std::sync::Arc<Watcher>,
        cursor: u64,
        ready: std::collections::VecDeque<Event>,
        started: bool,
        done: bool,
    }
    let reader = Reader {
        watcher,
        cursor: since,
        ready: std::collections::VecDeque::new(),
        started: false,
        done: false,
    };
    futures::stream::unfold(reader, |mut reader| async move {
        loop {
            if let Some(event) = reader.ready.pop_front() {
                return Some((Ok(event), reader));
            }
            if reader.done {
                return None;
            }
            let id = reader.watcher.id.clone();
            if !reader.started {
                reader.started = true;
                let started = serde_json::json!({
                    "watcher_id": id,
                    "path": shown(&reader.watcher.path),
                    "cursor": reader.cursor,
                });
                reader.ready.push_back(
                    Event::default()
                        .event("watch_started")
                        .data(started.to_string()),
                );
                continue;
            }
            let batch = reader.watcher.next_batch(reader.cursor, STREAM_BATCH).await;
            reader.cursor = batch.cursor;
            if batch.missed > 0 {
                let overflow = queue_full(batch.missed);
                reader.ready.push_back(
                    Event::default()
                        .event("overflow")
                        .data(json_text(&overflow)),
                );
            }
            for record in &batch.records {
                let event = match record {
                    Record::Change(change) => Event::default()
                        .event("file_change")
                        .id(format!("{id}:{}", change.seq))
                        .data(json_text(&file_event(change))),
                    Record::Overflow(notice) => Event::default()
                        .event("overflow")
                        .id(format!("{id}:{}", notice.seq))
                        .data(json_text(&overflow(notice))),
                };
                reader.ready.push_back(event);
            }
            if let Some(reason) = batch.closed
                && !batch.has_more
            {
                let stopped = serde_json::json!({ "watcher_id": id, "reason": reason });
                reader.ready.push_back(
                    Event::default()
                        .event("watch_stopped")
                        .data(stopped.to_string()),
                );
                reader.done = true;
            }
        }
    })
}

fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}

fn poll_result(watcher: &Watcher, batch: Batch) -> FileWatchPollResult {
    let mut overflows = Vec::new();
    if batch.missed > 0 {
        overflows.push(queue_full(batch.missed));
    }
    let mut events = Vec::new();
    for record in &batch.records {
        match record {
            Record::Change(change) => events.push(file_event(change)),
            Record::Overflow(notice) => overflows.push(overflow(notice)),
        }
    }
    FileWatchPollResult {
        watcher_id: watcher.id.clone(),
        events,
        cursor: batch.cursor,
        overflow: !overflows.is_empty(),
        overflows,
        has_more: batch.has_more,
        active: batch.closed.is_none(),
        closed_reason: batch.closed,
    }
}

fn queue_full(missed: u64) -> FileWatchOverflow {
    FileWatchOverflow {
        seq: 0,
        reason: "queue_full".to_string(),
        message: format!(
            "{missed} events were dropped from the watcher's full queue before they were read; \
             re-read the tree, then go on from the cursor"
        ),
        dropped: Some(missed),
        path: None,
        timestamp: unix(SystemTime::now()),
    }
}

fn overflow(notice: &Overflow) -> FileWatchOverflow {
    let (reason, path) = match &notice.reason {
        OverflowReason::KernelQueue => ("kernel_queue", None),
        OverflowReason::DirectoryLimit { path, .. } => ("directory_limit", Some(shown(path))),
        OverflowReason::NotWatched { path, .. } => ("not_watched", Some(shown(path))),
    };
    FileWatchOverflow {
        seq: notice.seq,
        reason: reason.to_string(),
        message: notice.reason.to_string(),
        dropped: None,
        path,
        timestamp: unix(notice.timestamp),
    }
}

fn file_event(event: &FileEvent) -> FileWatchEvent {
    FileWatchEvent {
        seq: event.seq,
        kind: match event.kind {
            ChangeKind::Create => FileWatchEventType::Create,
            ChangeKind::Write => FileWatchEventType::Write,
            ChangeKind::Remove => FileWatchEventType::Remove,
            ChangeKind::Rename => FileWatchEventType::Rename,
            ChangeKind::Chmod => FileWatchEventType::Chmod,
        },
        path: shown(&event.path),
        relative_path: shown(&event.relative_path),
        old_path: event.old_path.as_deref().map(shown),
        is_dir: event.is_dir,
        timestamp: unix(event.timestamp),
        mtime: event.mtime.map(unix),
        size: event.size,
        inode: event.inode,
    }
}

fn kind_of(kind: FileWatchEventType) -> ChangeKind {
    match kind {
        FileWatchEventType::Create => ChangeKind::Create,
        FileWatchEventType::Write => ChangeKind::Write,
        FileWatchEventType::Remove => ChangeKind::Remove,
        FileWatchEventType::Rename => ChangeKind::Rename,
        FileWatchEventType::Chmod => ChangeKind::Chmod,
    }
}

fn info(info: &WatcherInfo) -> FileWatchInfo {
    FileWatchInfo {
        watcher_id: info.id.clone(),
        path: shown(&info.path),
        recursive: info.recursive,
        exclude: info.exclude.clone(),
        include_patterns: info.include.clone(),
        debounce: info.debounce.as_millis() as u64,
        created_at: unix(info.created),
        cursor: info.cursor,
        directories: info.directories as u64,
        active: info.closed.is_none(),
        closed_reason: info.closed.clone(),
    }
}

fn watch_error(error: WatchError) -> ApiError {
    match error {
        WatchError::File(error) => crate::api::files::file_error(error),
        error @ WatchError::TooMany { .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, error.to_string())
        }
        error @ WatchError::UnknownWatcher { .. } => ApiError::not_found(format!(
            "{error}: list the watchers with GET /v1/file/watch"
        )),
        WatchError::Inotify { op, source } => {
            use nix::errno::Errno;
            let limits = source
                .raw_os_error()
                .is_some_and(|code| code == Errno::ENOSPC as i32 || code == Errno::EMFILE as i32);
            if limits {
                ApiError::unavailable(format!(
                    "{op}: {source} (the kernel's inotify limits, fs.inotify.max_user_watches \
                     and max_user_instances, are reached; stop a watcher or watch less)"
                ))
            } else {
                ApiError::internal(format!("{op}: {source}"))
            }
        }
    }
}

fn unix(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn shown(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}
