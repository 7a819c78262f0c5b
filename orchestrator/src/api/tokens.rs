//! `/v1/sandboxes/{id}/tokens`: viewer tokens for the noVNC client (and CDP, with `control`).

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::{self, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::types::{CreateTokenRequest, ErrorBody, Revoked, Token};
use crate::auth::Caller;
use crate::tokens::Scope;
use agentbox_http::timestamp::rfc3339_from_unix_ms;

/// Token lifetime when the request gives none.
pub const DEFAULT_TTL_SECS: i64 = 900;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, revoke_all))
        .routes(routes!(revoke))
}

/// The live-desktop page for a token: the orchestrator's own viewer, which trades the token for
/// a cookie scoped to this sandbox on first load (and drops it from the address bar).
pub fn viewer_url(state: &AppState, sandbox_id: &str, token: &str) -> String {
    let query = serde_urlencoded::to_string([("token", token)]).unwrap_or_default();
    format!(
        "{}/v1/sandboxes/{sandbox_id}/vnc/?{query}",
        state.public_url
    )
}

/// Issues a signed, expiring token scoped to this sandbox.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/tokens", tag = "tokens",
    params(("id" = String, Path)),
    request_body = CreateTokenRequest,
    responses((status = 201, body = Token), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<CreateTokenRequest>,
) -> Result<(StatusCode, Json<Token>), ApiError> {
    let refusal = match request.scope {
        Scope::View | Scope::Control => None,
        Scope::Cdp => Some(
            "invalid `scope`: must be `view` or `control` (a `cdp` credential comes only in the \
             CDP URL that the sandbox's /v1/browser/info reports through this server)",
        ),
        Scope::Share => Some(
            "invalid `scope`: must be `view` or `control` (a share link is made from its run: \
             POST /v1/runs/{id}/shares)",
        ),
    };
    if let Some(message) = refusal {
        return Err(ApiError {
            loc: Some(vec!["body".into(), "scope".into()]),
            ..ApiError::invalid(message)
        });
    }
    let ttl = request.ttl_secs.unwrap_or(DEFAULT_TTL_SECS);
    let (token, record) = state
        .sandboxes
        .issue_token(&id, caller.owner(), &caller.key_id, request.scope, ttl)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(Token {
            viewer_url: viewer_url(&state, &id, &token),
            id: record.id,
            token,
            scope: record.scope,
            expires_at: rfc3339_from_unix_ms(record.expires_at),
        }),
    ))
}

/// Revokes every token of the sandbox; open sessions using them are closed.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/tokens", tag = "tokens",
    params(("id" = String, Path)),
    responses((status = 200, body = Revoked), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_all(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Revoked>, ApiError> {
    let revoked = state
        .sandboxes
        .revoke_tokens(&id, caller.owner(), None)
        .await?;
    Ok(Json(Revoked { revoked }))
}

/// Revokes one token; open sessions using it are closed.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/tokens/{token_id}", tag = "tokens",
    params(("id" = String, Path), ("token_id" = String, Path)),
    responses((status = 200, body = Revoked), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, token_id)): Path<(String, String)>,
) -> Result<Json<Revoked>, ApiError> {
    let revoked = state
        .sandboxes
        .revoke_tokens(&id, caller.owner(), Some(&token_id))
        .await?;
    Ok(Json(Revoked { revoked }))
}

/// The cookie carrying a viewer token (scoped to one sandbox's `/vnc` path).
pub const VNC_COOKIE: &str = "agentbox_vnc";

/// Trades a viewer token for the viewer cookie (HttpOnly, SameSite=Strict, scoped to the
/// sandbox's `/vnc` path, for `max_age` seconds) and sends the browser to the viewer page.
pub(super) fn viewer_cookie_redirect(
    state: &AppState,
    id: &str,
    token: &str,
    max_age: i64,
) -> Response {
    let secure = if state.public_url.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{VNC_COOKIE}={token}; Path=/v1/sandboxes/{id}/vnc; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    );
    let mut response = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/v1/sandboxes/{id}/vnc/"))],
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
