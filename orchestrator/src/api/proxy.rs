//! A sandbox's services through the orchestrator:
//!
//! - `ANY /v1/sandboxes/{id}/api/{path}`: sandboxd's API (HTTP with streaming bodies, and
//!   WebSocket), with the caller's API key swapped for the sandbox's own key;
//! - `GET /v1/sandboxes/{id}/vnc/{path}`: the noVNC client and its WebSocket (`websockify`),
//!   with a viewer token from the `token` query parameter or the `agentbox_vnc` cookie (set when
//!   a page is loaded with the parameter). A `view` token's input never reaches the desktop;
//! - `GET /v1/sandboxes/{id}/cdp` (WebSocket: the browser target) and
//!   `/v1/sandboxes/{id}/cdp/{json/version, json/list, devtools/...}`, so Playwright's
//!   `connect_over_cdp` works through the orchestrator; API key or `control` token.
//!
//! Every proxied request and every open session counts as activity for the idle reaper.

use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Request, State, WebSocketUpgrade};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures_util::StreamExt;

use super::error::ApiError;
use super::{AppState, bearer};
use crate::auth::Caller;
use crate::backend::{CDP_PORT, NOVNC_PORT, SANDBOXD_PORT};
use crate::db::SandboxRecord;
use crate::proxy::rfb::RfbClientFilter;
use crate::proxy::ws;
use crate::sandboxes::AccessError;
use crate::tokens::{Claims, Scope};

/// The cookie carrying a viewer token (scoped to one sandbox's `/vnc` path).
pub const VNC_COOKIE: &str = "agentbox_vnc";

/// Routes behind the API key.
pub fn api_routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/sandboxes/{id}/api", any(api_root))
        .route("/v1/sandboxes/{id}/api/{*path}", any(api_path))
}

/// Routes that check a token (or, for CDP, a key) themselves.
pub fn token_routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/sandboxes/{id}/vnc/{*path}", get(vnc))
        .route("/v1/sandboxes/{id}/cdp", get(cdp_root))
        .route("/v1/sandboxes/{id}/cdp/{*path}", get(cdp_path))
}

fn is_websocket(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The part of the request path after `/v1/sandboxes/{id}/{service}`, raw, plus the query.
fn upstream_path(request: &Request, id: &str, service: &str) -> String {
    let prefix = format!("/v1/sandboxes/{id}/{service}");
    let rest = request.uri().path().strip_prefix(&prefix).unwrap_or("");
    let rest = if rest.is_empty() { "/" } else { rest };
    match request.uri().query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_string(),
    }
}

fn address(record: &SandboxRecord) -> Result<&str, ApiError> {
    record.address.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            "the sandbox has no address yet",
        )
    })
}

async fn api_root(
    state: State<AppState>,
    caller: Extension<Caller>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    api(state, caller, id, request).await
}

async fn api_path(
    state: State<AppState>,
    caller: Extension<Caller>,
    Path((id, _)): Path<(String, String)>,
    request: Request,
) -> Result<Response, ApiError> {
    api(state, caller, id, request).await
}

async fn api(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    id: String,
    request: Request,
) -> Result<Response, ApiError> {
    let record = state.sandboxes.get_ready(&id, caller.owner()).await?;
    let address = address(&record)?.to_string();
    let path = upstream_path(&request, &id, "api");
    let activity = state.sandboxes.activity().clone();
    if is_websocket(request.headers()) {
        let protocol = request
            .headers()
            .get(header::SEC_WEBSOCKET_PROTOCOL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let upstream = ws::connect(
            &format!("ws://{address}:{SANDBOXD_PORT}{path}"),
            Some(&record.api_key),
            protocol.as_deref(),
        )
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.to_string()))?;
        let (mut parts, _) = request.into_parts();
        let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        let upgrade = match protocol {
            Some(p) => upgrade.protocols(
                p.split(',')
                    .map(|s| s.trim().to_string())
                    .collect::<Vec<_>>(),
            ),
            None => upgrade,
        };
        let metrics = state.metrics.clone();
        return Ok(upgrade.on_upgrade(move |socket| async move {
            let _hold = activity.hold(&id);
            let _gauge = metrics.session("api");
            let end = ws::relay(socket, upstream, None, std::future::pending()).await;
            tracing::info!(sandbox_id = %id, ?end, "API WebSocket closed");
        }));
    }
    let hold = activity.hold(&id);
    let upstream = format!("http://{address}:{SANDBOXD_PORT}{path}");
    let response = state
        .proxy
        .forward(request, &upstream, Some(&record.api_key))
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.to_string()))?;
    // Keep the sandbox active until the body has been sent (long downloads, event streams).
    let (parts, body) = response.into_parts();
    let body = Body::from_stream(body.into_data_stream().map(move |chunk| {
        let _ = &hold;
        chunk
    }));
    Ok(Response::from_parts(parts, body))
}

// ---- tokens ----

/// The viewer token of a request: `?token=` first, then the cookie. Returns (token, from query).
fn presented_token(request_headers: &HeaderMap, query: Option<&str>) -> Option<(String, bool)> {
    if let Some(query) = query
        && let Ok(pairs) = serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        && let Some((_, token)) = pairs.into_iter().find(|(k, _)| k == "token")
    {
        return Some((token, true));
    }
    request_headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == VNC_COOKIE)
        .map(|(_, value)| (value.to_string(), false))
}

fn access_error(error: AccessError) -> ApiError {
    match error {
        AccessError::OtherSandbox | AccessError::NeedsControl => {
            ApiError::forbidden(error.to_string())
        }
        _ => ApiError::unauthorized(format!("viewer token refused: {error}")),
    }
}

/// Checks a token for sandbox `id`.
async fn check_token(state: &AppState, token: &str, id: &str) -> Result<Claims, ApiError> {
    state
        .sandboxes
        .verify_token(token, id)
        .await?
        .map_err(access_error)
}

/// Resolves when the token stops being valid or the sandbox goes away.
async fn until_invalid(state: AppState, claims: Claims) -> String {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !state.sandboxes.token_still_valid(&claims).await {
            return "token revoked or expired".into();
        }
        if state.sandboxes.get_ready(&claims.sid, None).await.is_err() {
            return "sandbox gone".into();
        }
    }
}

// ---- VNC ----

async fn vnc(
    State(state): State<AppState>,
    Path((id, path)): Path<(String, String)>,
    request: Request,
) -> Result<Response, ApiError> {
    let Some((token, from_query)) = presented_token(request.headers(), request.uri().query())
    else {
        return Err(ApiError::unauthorized(
            "a viewer token is required (query parameter `token` or the agentbox_vnc cookie)",
        ));
    };
    let claims = check_token(&state, &token, &id).await?;
    let record = state.sandboxes.get_ready(&id, None).await?;
    let address = address(&record)?.to_string();
    if is_websocket(request.headers()) {
        let protocol = request
            .headers()
            .get(header::SEC_WEBSOCKET_PROTOCOL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let upstream = ws::connect(
            &format!("ws://{address}:{NOVNC_PORT}/websockify"),
            None,
            protocol.as_deref(),
        )
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.to_string()))?;
        let (mut parts, _) = request.into_parts();
        let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        let upgrade = match protocol {
            Some(p) => upgrade.protocols(
                p.split(',')
                    .map(|s| s.trim().to_string())
                    .collect::<Vec<_>>(),
            ),
            None => upgrade,
        };
        let filter = match claims.scope {
            Scope::View => RfbClientFilter::view(),
            Scope::Control => RfbClientFilter::control(),
        };
        let activity = state.sandboxes.activity().clone();
        let metrics = state.metrics.clone();
        return Ok(upgrade.on_upgrade(move |socket| async move {
            let _hold = activity.hold(&id);
            let _gauge = metrics.session("vnc");
            tracing::info!(sandbox_id = %id, token_id = %claims.tid, scope = claims.scope.as_str(), "VNC viewer attached");
            let end = ws::relay(socket, upstream, Some(filter), until_invalid(state.clone(), claims)).await;
            tracing::info!(sandbox_id = %id, ?end, "VNC viewer detached");
        }));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "GET only",
        ));
    }
    state.sandboxes.activity().touch(&id);
    let upstream = format!(
        "http://{address}:{NOVNC_PORT}/{}",
        path.trim_start_matches('/')
    );
    let (parts, _) = request.into_parts();
    let mut forwarded = Request::from_parts(parts, Body::empty());
    *forwarded.uri_mut() = upstream
        .parse()
        .map_err(|_| ApiError::bad_request("bad path"))?;
    let mut response = state
        .proxy
        .forward(forwarded, &upstream, None)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.to_string()))?;
    if from_query {
        let max_age = ((claims.exp - crate::secret::now_ms()) / 1000).max(0);
        let cookie = format!(
            "{VNC_COOKIE}={token}; Path=/v1/sandboxes/{id}/vnc; Max-Age={max_age}; HttpOnly; SameSite=Strict"
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

// ---- CDP ----

/// Who may use CDP: the owner's API key, or a `control` token for this sandbox.
async fn cdp_access(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<SandboxRecord, ApiError> {
    if let Some(key) = bearer(headers) {
        let caller = state
            .keys
            .authenticate(key)
            .await?
            .ok_or_else(|| ApiError::unauthorized("unknown or revoked API key"))?;
        return Ok(state.sandboxes.get_ready(id, caller.owner()).await?);
    }
    let Some((token, _)) = presented_token(headers, query) else {
        return Err(ApiError::unauthorized(
            "CDP needs `Authorization: Bearer <api key>` or a control token (`token` parameter)",
        ));
    };
    let claims = check_token(state, &token, id).await?;
    if claims.scope != Scope::Control {
        return Err(access_error(AccessError::NeedsControl));
    }
    Ok(state.sandboxes.get_ready(id, None).await?)
}

async fn cdp_root(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let query = request.uri().query().map(str::to_owned);
    let record = cdp_access(&state, &id, request.headers(), query.as_deref()).await?;
    let address = address(&record)?.to_string();
    if !is_websocket(request.headers()) {
        return cdp_json(&state, &id, &address, "/json/version").await;
    }
    // The browser target's WebSocket path comes from /json/version.
    let version = fetch_json(&state, &address, "/json/version").await?;
    let target = version["webSocketDebuggerUrl"]
        .as_str()
        .and_then(|url| url.split_once("/devtools/"))
        .map(|(_, rest)| format!("/devtools/{rest}"))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "bad_gateway",
                "the browser gave no debugger URL",
            )
        })?;
    cdp_websocket(state, id, address, target, request).await
}

async fn cdp_path(
    State(state): State<AppState>,
    Path((id, path)): Path<(String, String)>,
    request: Request,
) -> Result<Response, ApiError> {
    let query = request.uri().query().map(str::to_owned);
    let record = cdp_access(&state, &id, request.headers(), query.as_deref()).await?;
    let address = address(&record)?.to_string();
    let path = format!("/{}", path.trim_start_matches('/'));
    if path.starts_with("/devtools/") && is_websocket(request.headers()) {
        return cdp_websocket(state, id, address, path, request).await;
    }
    let json = path.trim_end_matches('/');
    if matches!(
        json,
        "/json" | "/json/list" | "/json/version" | "/json/protocol"
    ) {
        return cdp_json(&state, &id, &address, json).await;
    }
    Err(ApiError::not_found(format!(
        "no CDP route {path}: use /cdp (WebSocket), /cdp/json/version, /cdp/json/list or /cdp/devtools/..."
    )))
}

async fn fetch_json(
    state: &AppState,
    address: &str,
    path: &str,
) -> Result<serde_json::Value, ApiError> {
    let upstream = format!("http://{address}:{CDP_PORT}{path}");
    let request = Request::builder()
        .uri(&upstream)
        .body(Body::empty())
        .map_err(ApiError::internal)?;
    let response = state
        .proxy
        .forward(request, &upstream, None)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.to_string()))?;
    let bytes = axum::body::to_bytes(response.into_body(), 8 * 1024 * 1024)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "bad_gateway",
            format!("the browser answered non-JSON: {e}"),
        )
    })
}

/// A `/json/...` answer with every debugger URL pointing back at the orchestrator.
async fn cdp_json(
    state: &AppState,
    id: &str,
    address: &str,
    path: &str,
) -> Result<Response, ApiError> {
    state.sandboxes.activity().touch(id);
    let value = fetch_json(state, address, path).await?;
    let text = serde_json::to_string(&value).map_err(ApiError::internal)?;
    let public = format!("{}/v1/sandboxes/{id}/cdp/", state.public_url);
    let ws_public = public
        .replacen("https://", "wss://", 1)
        .replacen("http://", "ws://", 1);
    let ws_host = ws_public
        .trim_start_matches("ws://")
        .trim_start_matches("wss://");
    let text = text
        .replace(&format!("ws://{address}:{CDP_PORT}/"), &ws_public)
        .replace(
            &format!("ws={address}:{CDP_PORT}/"),
            &format!("ws={ws_host}"),
        );
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

async fn cdp_websocket(
    state: AppState,
    id: String,
    address: String,
    path: String,
    request: Request,
) -> Result<Response, ApiError> {
    let upstream = ws::connect(&format!("ws://{address}:{CDP_PORT}{path}"), None, None)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.to_string()))?;
    let (mut parts, _) = request.into_parts();
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &state)
        .await
        .map_err(|e| ApiError::bad_request(e.body_text()))?
        .max_message_size(256 * 1024 * 1024)
        .max_frame_size(256 * 1024 * 1024);
    let activity = state.sandboxes.activity().clone();
    let metrics = state.metrics.clone();
    Ok(upgrade.on_upgrade(move |socket| async move {
        let _hold = activity.hold(&id);
        let _gauge = metrics.session("cdp");
        let end = ws::relay(socket, upstream, None, std::future::pending()).await;
        tracing::info!(sandbox_id = %id, ?end, "CDP session closed");
    }))
}
