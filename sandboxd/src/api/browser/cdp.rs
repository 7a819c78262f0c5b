//! Chromium's DevTools protocol on sandboxd's own port, behind the API key: `/cdp/json/version`,
//! `/cdp/json` (`/list`), `/cdp/json/protocol`, `PUT /cdp/json/new`, and the WebSockets
//! `/cdp` (the browser target) and `/cdp/devtools/...`. Chromium itself listens on loopback only.
//!
//! Debugger URLs in the JSON answers are rewritten to point back here (`ws://<Host>/cdp/...`),
//! so Playwright's `connect_over_cdp("http://host:8080/cdp", headers={...})` works as given.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};

use crate::api::AppState;
use crate::api::error::ApiError;

/// The largest CDP message relayed from Chromium (screenshots of tall pages are large).
const MAX_MESSAGE: usize = 256 * 1024 * 1024;
/// The largest CDP message a client may send (a command with a large script or file).
const MAX_CLIENT_MESSAGE: usize = 32 * 1024 * 1024;
/// Bytes of unfinished client messages all CDP sessions may hold together.
const CLIENT_BUDGET: usize = 64 * 1024 * 1024;

/// What a CDP client may do: messages up to 32 MiB, none unfinished for more than 30 s, and
/// 64 MiB of unfinished messages across every session (sandboxd has one caller: its key).
fn client_limits() -> agentbox_http::ws::Limits {
    static BUDGET: std::sync::OnceLock<std::sync::Arc<agentbox_http::ws::Budget>> =
        std::sync::OnceLock::new();
    agentbox_http::ws::Limits {
        budget: Some(
            BUDGET
                .get_or_init(|| agentbox_http::ws::Budget::new(CLIENT_BUDGET))
                .clone(),
        ),
        ..agentbox_http::ws::Limits::new(MAX_CLIENT_MESSAGE)
    }
}
/// The largest JSON answer read from Chromium.
const MAX_JSON: usize = 8 * 1024 * 1024;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/cdp", get(root))
        .route("/cdp/", get(root))
        .route("/cdp/{*path}", any(path))
}

/// The `Host` the client used, for URLs that must work as given.
fn host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("localhost")
        .to_string()
}

async fn root(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    if !agentbox_http::ws::is_upgrade(request.headers()) {
        return json(
            &state,
            Method::GET,
            "/json/version",
            &host(request.headers()),
        )
        .await;
    }
    let version = fetch(&state, Method::GET, "/json/version").await?;
    let value: serde_json::Value = serde_json::from_slice(&version).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("the browser answered non-JSON: {e}"),
        )
    })?;
    let target = value["webSocketDebuggerUrl"]
        .as_str()
        .and_then(|url| url.split_once("/devtools/"))
        .map(|(_, rest)| format!("/devtools/{rest}"))
        .ok_or_else(|| {
            ApiError::new(StatusCode::BAD_GATEWAY, "the browser gave no debugger URL")
        })?;
    websocket(state, target, request).await
}

async fn path(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    let rest = request
        .uri()
        .path()
        .strip_prefix("/cdp")
        .unwrap_or("/")
        .to_string();
    if rest.starts_with("/devtools/") {
        return websocket(state, rest, request).await;
    }
    let endpoint = rest.trim_end_matches('/');
    let method = request.method().clone();
    match (method.clone(), endpoint) {
        (Method::GET, "/json" | "/json/list" | "/json/version" | "/json/protocol") => {
            json(&state, method, endpoint, &host(request.headers())).await
        }
        (Method::PUT | Method::GET, "/json/new") => {
            let with_query = match request.uri().query() {
                Some(query) => format!("{endpoint}?{query}"),
                None => endpoint.to_string(),
            };
            // Chromium answers GET /json/new with 405; PUT is the form it takes.
            json(&state, Method::PUT, &with_query, &host(request.headers())).await
        }
        _ => Err(ApiError::not_found(format!(
            "no CDP endpoint {} {rest}: use /cdp (WebSocket), /cdp/json/version, /cdp/json/list, \
             /cdp/json/protocol, PUT /cdp/json/new or /cdp/devtools/...",
            request.method()
        ))),
    }
}

/// Fetches `path` from Chromium's loopback endpoint.
async fn fetch(state: &AppState, method: Method, path: &str) -> Result<Bytes, ApiError> {
    let url = format!("http://{}{path}", state.settings.browser.cdp_addr);
    let response = state
        .http
        .request(method, &url)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("the browser did not answer: {e}")))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| ApiError::unavailable(format!("the browser did not answer: {e}")))?;
    if body.len() > MAX_JSON {
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "the browser's answer is too large",
        ));
    }
    if !status.is_success() {
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "the browser answered {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
        ));
    }
    Ok(body)
}

/// A JSON endpoint with every debugger URL pointing back through this port.
async fn json(
    state: &AppState,
    method: Method,
    path: &str,
    host: &str,
) -> Result<Response, ApiError> {
    let body = fetch(state, method, path).await?;
    let text = String::from_utf8_lossy(&body);
    let upstream = state.settings.browser.cdp_addr.to_string();
    let text = text
        .replace(&format!("ws://{upstream}/"), &format!("ws://{host}/cdp/"))
        .replace(&format!("ws={upstream}/"), &format!("ws={host}/cdp/"));
    Ok((
        [
            (header::CONTENT_TYPE, "application/json; charset=UTF-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response())
}

async fn websocket(
    state: AppState,
    target: String,
    request: Request,
) -> Result<Response, ApiError> {
    agentbox_http::origin::check(request.headers(), &state.settings.allowed_origins)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    let (mut parts, _) = request.into_parts();
    let upgrade = agentbox_http::ws::accept(&mut parts, None, client_limits())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let url = format!("ws://{}{target}", state.settings.browser.cdp_addr);
    let upstream = agentbox_http::ws::connect(&url, &[], MAX_MESSAGE)
        .await
        .map_err(|e| ApiError::unavailable(e.to_string()))?;
    let activity = state.activity.clone();
    Ok(upgrade.on_upgrade(move |socket| async move {
        let _active = activity.hold();
        let end = agentbox_http::ws::relay(socket, upstream, None, std::future::pending()).await;
        tracing::info!(?end, "CDP session closed");
    }))
}
