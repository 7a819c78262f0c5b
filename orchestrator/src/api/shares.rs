//! `/v1/runs/{id}/shares`: share links, each bound to one run (its signed claims name it),
//! made, listed and revoked from that run. A link opens the run's share page under
//! `/share/runs/{id}` (see `console`) and nothing else.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::types::{CreateShareRequest, ErrorBody, Revoked, Share, ShareList};
use crate::auth::Caller;
use crate::db::TokenRecord;
use agentbox_http::timestamp::rfc3339_from_unix_ms as rfc3339;

/// A share link's lifetime when the request gives none.
pub const DEFAULT_TTL_SECS: i64 = 3600;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list, revoke_all))
        .routes(routes!(revoke))
}

fn to_wire(record: &TokenRecord, url: Option<String>) -> Share {
    Share {
        id: record.id.clone(),
        url,
        created_at: rfc3339(record.created_at),
        expires_at: rfc3339(record.expires_at),
    }
}

/// Makes a share link for this run: anyone holding it sees the run's task, timeline and files
/// and watches its desktop (never controls it), until it expires or is revoked. The URL is
/// given only in this answer.
#[utoipa::path(post, path = "/v1/runs/{id}/shares", tag = "runs",
    params(("id" = String, Path)),
    request_body = CreateShareRequest,
    responses((status = 201, body = Share), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<CreateShareRequest>,
) -> Result<(StatusCode, Json<Share>), ApiError> {
    let run = state.runs.get(&id, caller.owner()).await?;
    let ttl = request.ttl_secs.unwrap_or(DEFAULT_TTL_SECS);
    let (token, record) = state
        .sandboxes
        .issue_share_token(&run.id, run.sandbox_id.as_deref(), &caller.key_id, ttl)
        .await?;
    let query = serde_urlencoded::to_string([("token", token.as_str())]).unwrap_or_default();
    let url = format!("{}/share/runs/{}?{query}", state.public_url, run.id);
    Ok((StatusCode::CREATED, Json(to_wire(&record, Some(url)))))
}

/// The run's share links that still open (not expired, not revoked), oldest first.
#[utoipa::path(get, path = "/v1/runs/{id}/shares", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 200, body = ShareList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<ShareList>, ApiError> {
    let run = state.runs.get(&id, caller.owner()).await?;
    let shares = state.sandboxes.share_tokens(&run.id).await?;
    Ok(Json(ShareList {
        shares: shares.iter().map(|record| to_wire(record, None)).collect(),
    }))
}

/// Revokes every share link of the run; pages and desktops open through them end at once.
#[utoipa::path(delete, path = "/v1/runs/{id}/shares", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 200, body = Revoked), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_all(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Revoked>, ApiError> {
    let run = state.runs.get(&id, caller.owner()).await?;
    let revoked = state.sandboxes.revoke_share_tokens(&run.id, None).await?;
    Ok(Json(Revoked { revoked }))
}

/// Revokes one share link; pages and desktops open through it end at once.
#[utoipa::path(delete, path = "/v1/runs/{id}/shares/{share_id}", tag = "runs",
    params(("id" = String, Path), ("share_id" = String, Path)),
    responses((status = 200, body = Revoked), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, share_id)): Path<(String, String)>,
) -> Result<Json<Revoked>, ApiError> {
    let run = state.runs.get(&id, caller.owner()).await?;
    let revoked = state
        .sandboxes
        .revoke_share_tokens(&run.id, Some(&share_id))
        .await?;
    Ok(Json(Revoked { revoked }))
}
