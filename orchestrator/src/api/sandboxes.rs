//! `/v1/sandboxes`: create, list, get, delete, change timeouts, pause and resume, hibernate and
//! wake.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::types::{
    CreateSandboxRequest, ErrorBody, Sandbox, SandboxList, SandboxUrls, SetTimeoutRequest,
};
use crate::auth::Caller;
use crate::backend::Placement;
use crate::db::{SandboxRecord, SandboxStatus};
use crate::sandboxes::{CreateSpec, TimeoutChange};
use agentbox_http::timestamp::rfc3339_from_unix_ms;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get, delete))
        .routes(routes!(set_timeout))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(hibernate))
        .routes(routes!(wake))
}

/// The wire form of a sandbox.
pub fn to_wire(state: &AppState, record: &SandboxRecord) -> Sandbox {
    let base = format!("{}/v1/sandboxes/{}", state.public_url, record.id);
    let ws_base = super::websocket_url(&base);
    Sandbox {
        id: record.id.clone(),
        status: record.status.as_str().into(),
        image: record.image.clone(),
        created_at: rfc3339_from_unix_ms(record.created_at),
        ready_at: record.ready_at.map(rfc3339_from_unix_ms),
        expires_at: rfc3339_from_unix_ms(record.expires_at),
        last_active_at: rfc3339_from_unix_ms(
            state
                .sandboxes
                .activity()
                .get(&record.id)
                .map_or(record.last_active_at, |(last, _)| {
                    last.max(record.last_active_at)
                }),
        ),
        idle_timeout_secs: record.idle_timeout_secs,
        max_lifetime_secs: record.max_lifetime_secs,
        resolution: record.resolution.clone(),
        metadata: record.metadata.clone(),
        error: record.error.clone(),
        paused_at: record.paused_at.map(rfc3339_from_unix_ms),
        auto_resume: record.auto_resume,
        idle_pause_secs: record.idle_pause_secs,
        hibernated_at: record.hibernated_at.map(rfc3339_from_unix_ms),
        idle_hibernate_secs: record.idle_hibernate_secs,
        urls: SandboxUrls {
            api: format!("{base}/api"),
            vnc: format!("{base}/vnc/"),
            cdp: format!("{ws_base}/cdp"),
        },
    }
}

/// Creates a sandbox and answers once it is ready (or 503 with the reason and its logs).
#[utoipa::path(post, path = "/v1/sandboxes", tag = "sandboxes",
    request_body = CreateSandboxRequest,
    responses(
        (status = 201, body = Sandbox),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, description = "the key has --max-sandboxes-per-key sandboxes running", body = ErrorBody),
        (status = 503, description = "the sandbox did not become ready (it was removed)", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<CreateSandboxRequest>,
) -> Result<(StatusCode, Json<Sandbox>), ApiError> {
    let spec = CreateSpec {
        image: request.image,
        resolution: request.resolution,
        idle_timeout_secs: request.idle_timeout_secs,
        max_lifetime_secs: request.max_lifetime_secs,
        env: request.env.unwrap_or_default(),
        metadata: request.metadata.unwrap_or_default(),
        auto_resume: request.auto_resume.unwrap_or(false),
        idle_pause_secs: request.idle_pause_secs,
        idle_hibernate_secs: request.idle_hibernate_secs,
        snapshot: request.snapshot,
        profile: request.profile,
        placement: request
            .placement
            .map(|p| Placement {
                constraints: p.constraints,
                preferences: p.preferences,
            })
            .unwrap_or_default(),
    };
    let (record, _) = state.sandboxes.create(&caller.key_id, spec).await?;
    Ok((StatusCode::CREATED, Json(to_wire(&state, &record))))
}

/// Lists sandboxes: `?status=ready` and any number of `metadata.KEY=VALUE` filters.
#[utoipa::path(get, path = "/v1/sandboxes", tag = "sandboxes",
    params(
        ("status" = Option<String>, Query, description = "creating, ready, degraded, paused, hibernating, hibernated, waking, deleting or lost"),
        ("metadata.KEY" = Option<String>, Query, description = "only sandboxes whose metadata KEY has this value"),
    ),
    responses((status = 200, body = SandboxList), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> Result<Json<SandboxList>, ApiError> {
    let (status, metadata) = super::extract::list_query::<SandboxStatus>(query.as_deref())?;
    let records = state
        .sandboxes
        .list(caller.owner(), status, &metadata)
        .await?;
    Ok(Json(SandboxList {
        sandboxes: records.iter().map(|r| to_wire(&state, r)).collect(),
    }))
}

/// One sandbox.
#[utoipa::path(get, path = "/v1/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = Sandbox), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let record = state.sandboxes.get(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Removes the sandbox: its container, its tokens, its record.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 204, description = "removed"), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.sandboxes.delete(&id, caller.owner()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Changes the idle timeout and/or the absolute lifetime (counted from creation).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/timeout", tag = "sandboxes",
    params(("id" = String, Path)),
    request_body = SetTimeoutRequest,
    responses((status = 200, body = Sandbox), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_timeout(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<SetTimeoutRequest>,
) -> Result<Json<Sandbox>, ApiError> {
    let record = state
        .sandboxes
        .set_timeouts(
            &id,
            caller.owner(),
            TimeoutChange {
                idle_timeout_secs: request.idle_timeout_secs,
                max_lifetime_secs: request.max_lifetime_secs,
                idle_pause_secs: request.idle_pause_secs,
                idle_hibernate_secs: request.idle_hibernate_secs,
            },
        )
        .await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Pauses the sandbox: every process is frozen (the cgroup freezer). It keeps its memory, its
/// files, its processes and their open connections, and uses no CPU; its open viewers and
/// relays are closed, and calls through `/api`, `/cdp` and `/vnc` answer 409 naming the state
/// (or resume it, with `auto_resume`). Its idle and lifetime clocks keep running. Refused (409)
/// while a run drives it (queued or running: take the run over first); a run that waits for an
/// answer or is held by a person may have its sandbox paused, and is resumed when it acts
/// again.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/pause", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = Sandbox), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "not ready or degraded (already paused, still being created, lost), or a run drives it", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn pause(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let record = state.sandboxes.pause(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Resumes a paused sandbox: its processes go on where they were (a page's scripts, a shell's
/// commands); answers once its sandboxd answers again. Connections a peer timed out while it
/// was frozen are gone; open viewers must connect again.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/resume", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = Sandbox), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the sandbox is not paused, or its container is gone (it is then lost)", body = ErrorBody),
        (status = 503, description = "resumed, but sandboxd did not answer in time", body = ErrorBody)))]
pub async fn resume(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let record = state.sandboxes.resume(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Hibernates the sandbox: its browser is stopped (saving its session: tabs, cookies, logins),
/// its home is archived on the orchestrator's disk and its container is removed: it then uses
/// no memory and no CPU. Kept: every file in the home (`~`, the workspace, the browser
/// profile). Lost: running processes and what they hold in memory (a page's script state,
/// Jupyter variables, shell sessions), open connections (viewers, terminals, CDP clients),
/// the clipboard, /tmp, `~/.cache` and shell histories. Its id, key, tokens and URLs stay; wake
/// it with `POST /v1/sandboxes/{id}/wake` (or any call, with `auto_resume`). Its idle and
/// lifetime clocks keep running. Refused (409) while a run drives it, as pause is.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/hibernate", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = Sandbox), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "not ready, degraded or paused (already hibernated, still being created, lost), a run drives it, or its home could not be archived (it stays as it was)", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn hibernate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let record = state.sandboxes.hibernate(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Wakes a hibernated sandbox: a new container of the same image and settings starts with the
/// kept home, and the browser reopens the tabs it had. Answers once it is ready. Counts against
/// the key's sandboxes again (429 past the limit).
#[utoipa::path(post, path = "/v1/sandboxes/{id}/wake", tag = "sandboxes",
    params(("id" = String, Path)),
    responses((status = 200, body = Sandbox), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the sandbox is not hibernated", body = ErrorBody),
        (status = 429, description = "the key has --max-sandboxes-per-key sandboxes running", body = ErrorBody),
        (status = 503, description = "the new container did not become ready (the sandbox stays hibernated)", body = ErrorBody)))]
pub async fn wake(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let record = state.sandboxes.wake(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}
