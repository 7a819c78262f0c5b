//! Snapshots and forks: `POST /v1/sandboxes/{id}/snapshots`, `GET /v1/snapshots`,
//! `GET|DELETE /v1/snapshots/{id}`, `POST /v1/sandboxes/{id}/fork`. A sandbox starts from a
//! snapshot with `snapshot` in `POST /v1/sandboxes`.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::sandboxes::to_wire;
use super::types::{ErrorBody, ForkRequest, ForkResult, Snapshot, SnapshotList};
use crate::auth::Caller;
use crate::db::SnapshotRecord;
use crate::sandboxes::CreateSpec;
use agentbox_http::timestamp::rfc3339_from_unix_ms;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(take))
        .routes(routes!(list))
        .routes(routes!(get, delete))
        .routes(routes!(fork_sandbox))
}

fn to_wire_snapshot(record: &SnapshotRecord) -> Snapshot {
    Snapshot {
        id: record.id.clone(),
        parent_sandbox_id: record.parent_sandbox_id.clone(),
        image: record.image.clone(),
        resolution: record.resolution.clone(),
        status: record.status.as_str().into(),
        size_bytes: record.size_bytes,
        created_at: rfc3339_from_unix_ms(record.created_at),
    }
}

/// Takes a snapshot of a ready sandbox: its home (files, the workspace, the browser profile
/// with its cookies, logins and open tabs) as it is now. The browser is stopped for the moment
/// it takes (it saves its session) and the agent's processes are frozen, so the snapshot is
/// never a half-written state; both go on afterwards. Not in it: running processes and memory,
/// /tmp, `~/.cache`, shell histories, the sandbox's key and VNC passwords (never in the home).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/snapshots", tag = "snapshots",
    params(("id" = String, Path, description = "the sandbox")),
    responses((status = 201, body = Snapshot), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the sandbox is not ready (creating, paused, hibernated...), or the key has --max-snapshots-per-key snapshots", body = ErrorBody)))]
pub async fn take(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Snapshot>), ApiError> {
    let snapshot = state.sandboxes.take_snapshot(&id, &caller.key_id).await?;
    Ok((StatusCode::CREATED, Json(to_wire_snapshot(&snapshot))))
}

/// The key's snapshots (every key's for the admin key), oldest first.
#[utoipa::path(get, path = "/v1/snapshots", tag = "snapshots",
    responses((status = 200, body = SnapshotList), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<SnapshotList>, ApiError> {
    let snapshots = state.sandboxes.snapshots(caller.owner()).await?;
    Ok(Json(SnapshotList {
        snapshots: snapshots.iter().map(to_wire_snapshot).collect(),
    }))
}

/// One snapshot: its size, parent and creation time.
#[utoipa::path(get, path = "/v1/snapshots/{id}", tag = "snapshots",
    params(("id" = String, Path)),
    responses((status = 200, body = Snapshot), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Snapshot>, ApiError> {
    let snapshot = state.sandboxes.snapshot(&id, caller.owner()).await?;
    Ok(Json(to_wire_snapshot(&snapshot)))
}

/// Deletes a snapshot and its archive. Sandboxes started from it keep their files.
#[utoipa::path(delete, path = "/v1/snapshots/{id}", tag = "snapshots",
    params(("id" = String, Path)),
    responses((status = 204, description = "deleted"), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "still being taken", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.sandboxes.delete_snapshot(&id, caller.owner()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Forks a ready sandbox: takes a snapshot of it (see `POST /v1/sandboxes/{id}/snapshots`)
/// and starts `count` sandboxes from it at once, each with its own id, key and tokens. All or
/// nothing: when one cannot be made, the others are removed and the error is answered.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/fork", tag = "snapshots",
    params(("id" = String, Path, description = "the sandbox to fork")),
    request_body = ForkRequest,
    responses((status = 201, body = ForkResult), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the sandbox is not ready, or the key has --max-snapshots-per-key snapshots", body = ErrorBody),
        (status = 422, description = "`count` is not between 1 and 20, or another field is invalid", body = ErrorBody),
        (status = 429, description = "the forks would pass --max-sandboxes-per-key", body = ErrorBody),
        (status = 503, description = "a fork did not become ready (none was kept)", body = ErrorBody)))]
pub async fn fork_sandbox(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<ForkRequest>,
) -> Result<(StatusCode, Json<ForkResult>), ApiError> {
    let spec = CreateSpec {
        metadata: request.metadata.unwrap_or_default(),
        idle_timeout_secs: request.idle_timeout_secs,
        max_lifetime_secs: request.max_lifetime_secs,
        ..CreateSpec::default()
    };
    let keep = request.keep_snapshot.unwrap_or(false);
    let (made, snapshot) = state
        .sandboxes
        .fork_sandbox(&id, &caller.key_id, request.count, spec, keep)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ForkResult {
            sandboxes: made.iter().map(|r| to_wire(&state, r)).collect(),
            snapshot: keep.then(|| to_wire_snapshot(&snapshot)),
        }),
    ))
}
