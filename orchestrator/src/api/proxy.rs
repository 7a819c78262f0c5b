//! A sandbox's services through the orchestrator. Everything goes to **sandboxd's port only**,
//! with the sandbox's own key; a container that took over a freed address does not have that
//! key, so its sandboxd refuses the orchestrator (and the proxy reports the sandbox gone).
//!
//! - `ANY /v1/sandboxes/{id}/api/{path}`: sandboxd's API (HTTP with streaming bodies, and
//!   WebSockets), with the caller's API key swapped for the sandbox's; the URLs in
//!   `/v1/browser/info` become this server's, with credentials a client needs no header for
//!   ([`browser_info_for_the_client`]); AIO's viewer tickets are the orchestrator's own
//!   ([`super::viewer_tickets`]). Every answer is
//!   sandbox-originated content: it carries `Content-Security-Policy: sandbox` and `nosniff`
//!   (downloads also `Content-Disposition: attachment`), so nothing an agent wrote runs as
//!   script on this origin.
//! - `GET /v1/sandboxes/{id}/cdp` (WebSocket: the browser target, or `json/version`) and
//!   `/v1/sandboxes/{id}/cdp/{json/..., devtools/...}`: Chromium's DevTools protocol through
//!   sandboxd's `/cdp`, for the owner's API key or a `control` token.
//! - `GET /v1/sandboxes/{id}/vnc/?token=...`: trades a viewer token for an HttpOnly,
//!   SameSite=Strict cookie scoped to this sandbox's `/vnc` path and redirects to the viewer
//!   page, which is the orchestrator's own (embedded, see [`super::assets`]), never a page from
//!   the sandbox. `/vnc/session` tells the page its scope; `/vnc/websockify` is the RFB
//!   WebSocket, relayed through [`RfbFilter`] to sandboxd's `/vnc/websockify` (view tokens ask
//!   sandboxd for a view-only session too, so x11vnc itself refuses their input).
//!
//! Every WebSocket session, and every plain HTTP answer while its body streams (event streams,
//! downloads), is registered with its authority ([`crate::sessions`]) and ends when the key or
//! token behind it is revoked or expires, or when the sandbox stops being ready.
//! Every proxied request and open session counts as activity for the idle reaper.

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures_util::StreamExt;

use super::error::ApiError;
use super::{AppState, bearer};
use crate::auth::Caller;
use crate::backend::SANDBOXD_PORT;
use crate::db::SandboxRecord;
use crate::proxy::rfb::{InputGate, RfbFilter};
use crate::sandboxes::AccessError;
use crate::sessions::{Authority, SessionGuard};
use crate::tokens::{Claims, Scope};
use agentbox_http::ws::RelayFilter;

/// How large a relayed WebSocket message may be, each way.
#[derive(Debug, Clone, Copy)]
struct MessageLimits {
    /// From the client (a CDP command with a large script or file; a viewer's clipboard).
    client: usize,
    /// From sandboxd (CDP screenshots of tall pages are large; RFB arrives in small pieces).
    upstream: usize,
}

/// CDP and the sandbox API's sockets.
const MAX_MESSAGE: MessageLimits = MessageLimits {
    client: 32 * 1024 * 1024,
    upstream: 256 * 1024 * 1024,
};
/// A viewer's RFB.
const MAX_VNC_MESSAGE: MessageLimits = MessageLimits {
    client: 4 * 1024 * 1024,
    upstream: 16 * 1024 * 1024,
};
/// What every answer carrying sandbox-originated content gets: no script, no sniffing.
const SANDBOXED_CSP: &str = "sandbox";

/// Routes behind the API key.
pub fn api_routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/sandboxes/{id}/api", any(api_root))
        .route("/v1/sandboxes/{id}/api/{*path}", any(api_path))
}

/// Routes that check a token (or, for CDP, a key) themselves.
pub fn token_routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/sandboxes/{id}/vnc", get(vnc_page))
        .route("/v1/sandboxes/{id}/vnc/", get(vnc_page))
        .route("/v1/sandboxes/{id}/vnc/session", get(vnc_session))
        .route("/v1/sandboxes/{id}/vnc/websockify", get(vnc_socket))
        .route("/v1/sandboxes/{id}/cdp", get(cdp_root))
        .route("/v1/sandboxes/{id}/cdp/{*path}", any(cdp_path))
}

fn bad_gateway(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", message)
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

/// sandboxd refused the sandbox's own key: whatever answers at the address is not that sandbox
/// any more. Check it now rather than at the next heartbeat.
fn not_the_sandbox(state: &AppState, record: &SandboxRecord) -> ApiError {
    let sandboxes = state.sandboxes.clone();
    let id = record.id.clone();
    tokio::spawn(async move { sandboxes.check_now(&id).await });
    tracing::warn!(sandbox_id = %record.id, "the sandbox's address refused its key; checking it");
    bad_gateway("the sandbox no longer answers at its address (it is being checked)")
}

/// Opens a WebSocket to sandboxd and relays the client's socket to it, as one session resting
/// on `authority`; `filter` sees the bytes both ways.
async fn relay_websocket(
    state: &AppState,
    record: &SandboxRecord,
    request: Request,
    upstream_path: &str,
    authority: Authority,
    filter: Option<Box<dyn RelayFilter>>,
    max_message: MessageLimits,
) -> Result<Response, ApiError> {
    // Sessions count against the key they rest on (a token's issuer).
    let holder = match &authority.key_id {
        Some(key_id) => key_id.clone(),
        None => format!("sandbox:{}", record.id),
    };
    let (slot, limits) = state.relays.open(&holder, max_message.client)?;
    let protocols = agentbox_http::ws::requested_protocols(request.headers());
    let (mut parts, _) = request.into_parts();
    let upgrade = agentbox_http::ws::accept(&mut parts, protocols.as_deref(), limits)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let url = format!("ws://{}:{SANDBOXD_PORT}{upstream_path}", address(record)?);
    let key = format!("Bearer {}", state.sandboxes.sandbox_key(record));
    let mut headers = vec![("authorization", key.as_str())];
    if let Some(protocols) = protocols.as_deref() {
        headers.push(("sec-websocket-protocol", protocols));
    }
    let upstream = match agentbox_http::ws::connect(&url, &headers, max_message.upstream).await {
        Ok(upstream) => upstream,
        Err(error) if error.to_string().contains("401") => {
            return Err(not_the_sandbox(state, record));
        }
        Err(error) => return Err(bad_gateway(error.to_string())),
    };
    let activity = state.sandboxes.activity().clone();
    let metrics = state.metrics.clone();
    let mut session = state.sandboxes.sessions().open(authority.clone());
    let id = record.id.clone();
    Ok(upgrade.on_upgrade(move |socket| async move {
        let _slot = slot;
        let _hold = activity.hold(&id);
        let _gauge = metrics.session(authority.kind);
        tracing::info!(sandbox_id = %id, kind = authority.kind, token_id = ?authority.token_id, "session opened");
        let end = agentbox_http::ws::relay(socket, upstream, filter, session.ended()).await;
        tracing::info!(sandbox_id = %id, kind = authority.kind, ?end, "session closed");
    }))
}

// ---- the sandbox API ----

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
    let path = upstream_path(&request, &id, "api");
    // What a WebSocket, or an answer while its body streams, rests on: the caller's key.
    let authority = Authority {
        sandbox_id: id.clone(),
        key_id: Some(caller.key_id.clone()),
        token_id: None,
        expires_at: None,
        console_session: None,
        kind: "api",
    };
    if agentbox_http::ws::is_upgrade(request.headers()) {
        return relay_websocket(
            &state,
            &record,
            request,
            &path,
            authority,
            None,
            MAX_MESSAGE,
        )
        .await;
    }
    let request = match super::viewer_tickets::intercept(&state, &caller, &id, &path, request).await
    {
        Ok(answered) => return answered,
        Err(request) => request,
    };
    let is_download = path.starts_with("/v1/file/download");
    let is_browser_info =
        request.method() == Method::GET && path.split('?').next() == Some("/v1/browser/info");
    let activity = state.sandboxes.activity().clone();
    let hold = activity.hold(&id);
    let upstream = format!("http://{}:{SANDBOXD_PORT}{path}", address(&record)?);
    let key = state.sandboxes.sandbox_key(&record);
    let response = state
        .proxy
        .forward(request, &upstream, Some(&key))
        .await
        .map_err(|e| bad_gateway(e.to_string()))?;
    if response.status() == StatusCode::UNAUTHORIZED {
        return Err(not_the_sandbox(&state, &record));
    }
    if is_browser_info && response.status() == StatusCode::OK {
        return browser_info_for_the_client(&state, &caller, &id, response).await;
    }
    // A streamed answer (an event stream, a long download) rests on the caller's key as a
    // WebSocket does: revoking the key, or the sandbox ending, cuts it off mid-body. Until the
    // body has been sent the sandbox counts as active.
    let session = state.sandboxes.sessions().open(authority);
    let (mut parts, body) = response.into_parts();
    sandboxed(&mut parts.headers, is_download);
    Ok(Response::from_parts(
        parts,
        ending_with_authority(body, session, hold, id),
    ))
}

/// How long the credentials in a proxied `/v1/browser/info` last. Sessions opened with them
/// end then too: a client that runs longer asks for the browser info again.
const BROWSER_INFO_TTL_SECS: i64 = 3600;
/// The largest browser info answer read (it is a few hundred bytes).
const MAX_BROWSER_INFO: usize = 64 * 1024;

/// sandboxd's `/v1/browser/info` reports URLs at its own address, which a client of this server
/// can neither reach nor, with no way to send a header (Playwright's `connect_over_cdp(url)`,
/// a browser opening the viewer), authenticate to. Through the proxy they become this server's
/// routes for the sandbox, each carrying a credential the caller's key issues for
/// [`BROWSER_INFO_TTL_SECS`]: `cdp_url` the CDP route with a `cdp` token (DevTools only: no
/// viewer, no share page), `vnc_url` the viewer with a `view` token (watch only). Revoking the
/// key or the tokens ends what they opened.
async fn browser_info_for_the_client(
    state: &AppState,
    caller: &Caller,
    id: &str,
    response: Response,
) -> Result<Response, ApiError> {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BROWSER_INFO)
        .await
        .map_err(|e| bad_gateway(format!("reading the sandbox's browser info: {e}")))?;
    let mut info: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| bad_gateway(format!("the sandbox's browser info is not JSON: {e}")))?;
    let Some(data) = info
        .get_mut("data")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return Err(bad_gateway("the sandbox's browser info has no `data`"));
    };
    let issue = async |scope: Scope| {
        state
            .sandboxes
            .issue_token(
                id,
                caller.owner(),
                &caller.key_id,
                scope,
                BROWSER_INFO_TTL_SECS,
            )
            .await
            .map(|(token, _)| token)
    };
    let cdp_token = issue(Scope::Cdp).await?;
    let view_token = issue(Scope::View).await?;
    let query = serde_urlencoded::to_string([("token", cdp_token.as_str())]).unwrap_or_default();
    let cdp_url = super::websocket_url(&format!(
        "{}/v1/sandboxes/{id}/cdp?{query}",
        state.public_url
    ));
    data.insert("cdp_url".into(), cdp_url.into());
    data.insert(
        "vnc_url".into(),
        super::tokens::viewer_url(state, id, &view_token).into(),
    );
    let body = serde_json::to_vec(&info).map_err(ApiError::internal)?;
    parts.headers.remove(header::CONTENT_LENGTH);
    sandboxed(&mut parts.headers, false);
    Ok(Response::from_parts(parts, Body::from(body)))
}

/// `body`, aborted as soon as `session`'s authority ends: with an error, so that the client
/// sees a cut-off answer (no last chunk, or fewer bytes than its length), never a complete
/// one. `hold` lives as long as the body.
fn ending_with_authority<H: Send + 'static>(
    body: Body,
    session: SessionGuard,
    hold: H,
    sandbox_id: String,
) -> Body {
    let data = body.into_data_stream();
    let state = Some((data, session, hold, sandbox_id));
    let chunks = futures_util::stream::unfold(state, |state| async move {
        let (mut data, mut session, hold, sandbox_id) = state?;
        tokio::select! {
            biased;
            why = session.ended() => {
                tracing::info!(%sandbox_id, %why, "a streamed answer was cut off");
                let error = std::io::Error::other(format!("the answer was cut off: {why}"));
                Some((Err(axum::Error::new(error)), None))
            }
            chunk = data.next() => {
                chunk.map(|chunk| (chunk, Some((data, session, hold, sandbox_id))))
            }
        }
    });
    Body::from_stream(chunks)
}

/// Marks an answer as sandbox-originated content: never script on this origin, never sniffed,
/// and for downloads never displayed inline.
pub(super) fn sandboxed(headers: &mut HeaderMap, is_download: bool) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(SANDBOXED_CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
    if is_download {
        let attachment = headers
            .get(header::CONTENT_DISPOSITION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("attachment")
            });
        if !attachment {
            headers.insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment"),
            );
        }
    }
}

// ---- viewer tokens ----

/// The viewer token of a request: `?token=` first, then the cookie. Returns (token, from query).
fn presented_token(request_headers: &HeaderMap, query: Option<&str>) -> Option<(String, bool)> {
    if let Some(query) = query
        && let Ok(pairs) = serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        && let Some((_, token)) = pairs.into_iter().find(|(k, _)| k == "token")
    {
        return Some((token, true));
    }
    agentbox_http::cookie::value(request_headers, super::tokens::VNC_COOKIE)
        .map(|value| (value.to_string(), false))
}

fn access_error(error: AccessError) -> ApiError {
    match error {
        AccessError::OtherSandbox
        | AccessError::NeedsControl
        | AccessError::CdpOnly
        | AccessError::ShareOnly => ApiError::forbidden(error.to_string()),
        _ => ApiError::unauthorized(format!("viewer token refused: {error}")),
    }
}

/// Checks a token for sandbox `id`; returns its claims and the key that issued it.
async fn check_token(
    state: &AppState,
    token: &str,
    id: &str,
) -> Result<(Claims, Option<String>), ApiError> {
    let (claims, record) = state
        .sandboxes
        .verify_token(token, id)
        .await?
        .map_err(access_error)?;
    Ok((claims, record.issuer_key_id))
}

pub(super) fn token_authority(
    id: &str,
    claims: &Claims,
    issuer: Option<String>,
    kind: &'static str,
) -> Authority {
    Authority {
        sandbox_id: id.to_string(),
        key_id: issuer,
        token_id: Some(claims.tid.clone()),
        expires_at: Some(claims.exp),
        console_session: None,
        kind,
    }
}

/// The token for a `/vnc` request, or 401 saying how to get one.
async fn vnc_token(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(String, bool, Claims, Option<String>), ApiError> {
    let Some((token, from_query)) = presented_token(headers, query) else {
        return Err(ApiError::unauthorized(
            "a viewer token is required: open the viewer_url from POST /v1/sandboxes/{id}/tokens",
        ));
    };
    let (claims, record) = state
        .sandboxes
        .verify_viewer_token(&token, id)
        .await?
        .map_err(access_error)?;
    Ok((token, from_query, claims, record.issuer_key_id))
}

// ---- VNC ----

/// `GET /v1/sandboxes/{id}/vnc/`: with `?token=`, sets the viewer cookie and redirects to the
/// same page without the token; with the cookie, the orchestrator's own viewer page.
async fn vnc_page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let query = request.uri().query().map(str::to_owned);
    let (token, from_query, claims, _) =
        vnc_token(&state, &id, request.headers(), query.as_deref()).await?;
    // A paused sandbox's viewer page loads and says so: its session answers 409 naming the
    // state until the sandbox is resumed (or, with `auto_resume`, resumes it).
    if state.sandboxes.get(&id, None).await?.status != crate::db::SandboxStatus::Paused {
        state.sandboxes.get_ready(&id, None).await?;
    }
    if from_query {
        let max_age = ((claims.exp - crate::secret::now_ms()) / 1000).max(0);
        return Ok(super::tokens::viewer_cookie_redirect(
            &state, &id, &token, max_age,
        ));
    }
    super::assets::page("viewer/index.html")
}

/// `GET /v1/sandboxes/{id}/vnc/session`: what the viewer cookie allows.
async fn vnc_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let query = request.uri().query().map(str::to_owned);
    let (_, _, claims, _) = vnc_token(&state, &id, request.headers(), query.as_deref()).await?;
    state.sandboxes.get_ready(&id, None).await?;
    let body = serde_json::json!({
        "sandbox_id": id,
        "scope": claims.scope.as_str(),
        "expires_at": agentbox_http::timestamp::rfc3339_from_unix_ms(claims.exp),
    });
    Ok(([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response())
}

/// Relays a viewer's RFB WebSocket to sandboxd's `upstream_path` through `filter`.
pub(super) async fn relay_vnc(
    state: &AppState,
    record: &SandboxRecord,
    request: Request,
    upstream_path: &str,
    authority: Authority,
    filter: RfbFilter,
) -> Result<Response, ApiError> {
    relay_websocket(
        state,
        record,
        request,
        upstream_path,
        authority,
        Some(Box::new(filter)),
        MAX_VNC_MESSAGE,
    )
    .await
}

/// `GET /v1/sandboxes/{id}/vnc/websockify`: the RFB WebSocket. A viewer token (query or
/// cookie) decides the scope; without one, a console sign-in of the sandbox's owner gets a
/// control session, which follows the control gate like a control token's (while a run's
/// agent drives, its input is dropped) and ends at sign-out.
async fn vnc_socket(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    agentbox_http::origin::check(request.headers(), &state.allowed_origins)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    let query = request.uri().query().map(str::to_owned);
    if presented_token(request.headers(), query.as_deref()).is_none()
        && super::callers::cookie(request.headers(), super::callers::CONSOLE_COOKIE).is_some()
    {
        let caller = super::callers::caller(
            &state,
            request.method(),
            request.uri().path(),
            request.headers(),
        )
        .await?;
        let record = state.sandboxes.get_ready(&id, caller.owner()).await?;
        let authority = Authority {
            sandbox_id: id.clone(),
            key_id: Some(caller.key_id),
            token_id: None,
            expires_at: None,
            console_session: caller.console_session,
            kind: "vnc",
        };
        let filter =
            RfbFilter::control(InputGate::following(state.sandboxes.control_gate(&record)));
        return relay_vnc(
            &state,
            &record,
            request,
            "/vnc/websockify",
            authority,
            filter,
        )
        .await;
    }
    let (_, _, claims, issuer) =
        vnc_token(&state, &id, request.headers(), query.as_deref()).await?;
    let record = state.sandboxes.get_ready(&id, None).await?;
    let (filter, path) = match claims.scope {
        Scope::View => (RfbFilter::view(), "/vnc/websockify?view_only=true"),
        Scope::Control => (
            RfbFilter::control(InputGate::following(state.sandboxes.control_gate(&record))),
            "/vnc/websockify",
        ),
        // `vnc_token` refused it already.
        Scope::Cdp => return Err(access_error(AccessError::CdpOnly)),
        Scope::Share => return Err(access_error(AccessError::ShareOnly)),
    };
    let authority = token_authority(&id, &claims, issuer, "vnc");
    relay_websocket(
        &state,
        &record,
        request,
        path,
        authority,
        Some(Box::new(filter)),
        MAX_VNC_MESSAGE,
    )
    .await
}

// ---- CDP ----

/// Who may use CDP: the owner's API key, or a `control` token for this sandbox.
async fn cdp_access(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(SandboxRecord, Authority), ApiError> {
    if let Some(key) = bearer(headers) {
        let caller = state
            .keys
            .authenticate(key)
            .await?
            .ok_or_else(|| ApiError::unauthorized("unknown or revoked API key"))?;
        let record = state.sandboxes.get_ready(id, caller.owner()).await?;
        let authority = Authority {
            sandbox_id: id.to_string(),
            key_id: Some(caller.key_id),
            token_id: None,
            expires_at: None,
            console_session: None,
            kind: "cdp",
        };
        return Ok((record, authority));
    }
    let Some((token, _)) = presented_token(headers, query) else {
        return Err(ApiError::unauthorized(
            "CDP needs `Authorization: Bearer <api key>` or a control token (`token` parameter)",
        ));
    };
    let (claims, issuer) = check_token(state, &token, id).await?;
    if !matches!(claims.scope, Scope::Control | Scope::Cdp) {
        return Err(access_error(AccessError::NeedsControl));
    }
    let record = state.sandboxes.get_ready(id, None).await?;
    Ok((record, token_authority(id, &claims, issuer, "cdp")))
}

async fn cdp_root(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    cdp(state, id, "/cdp".to_string(), request).await
}

async fn cdp_path(
    State(state): State<AppState>,
    Path((id, path)): Path<(String, String)>,
    request: Request,
) -> Result<Response, ApiError> {
    cdp(
        state,
        id,
        format!("/cdp/{}", path.trim_start_matches('/')),
        request,
    )
    .await
}

async fn cdp(
    state: AppState,
    id: String,
    path: String,
    request: Request,
) -> Result<Response, ApiError> {
    let query = request.uri().query().map(str::to_owned);
    let (record, authority) = cdp_access(&state, &id, request.headers(), query.as_deref()).await?;
    if agentbox_http::ws::is_upgrade(request.headers()) {
        agentbox_http::origin::check(request.headers(), &state.allowed_origins)
            .map_err(|e| ApiError::forbidden(e.to_string()))?;
        return relay_websocket(
            &state,
            &record,
            request,
            &path,
            authority,
            None,
            MAX_MESSAGE,
        )
        .await;
    }
    let method = request.method().clone();
    if method != Method::GET && method != Method::PUT {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "CDP's HTTP endpoints take GET (and PUT for json/new)",
        ));
    }
    state.sandboxes.activity().touch(&id);
    let address = address(&record)?.to_string();
    let upstream_path = match &query {
        Some(q) if path.trim_end_matches('/').ends_with("/json/new") => format!("{path}?{q}"),
        _ => path.clone(),
    };
    let upstream = format!("http://{address}:{SANDBOXD_PORT}{upstream_path}");
    let forwarded = Request::builder()
        .method(method)
        .uri(&upstream)
        .body(Body::empty())
        .map_err(ApiError::internal)?;
    let key = state.sandboxes.sandbox_key(&record);
    let response = state
        .proxy
        .forward(forwarded, &upstream, Some(&key))
        .await
        .map_err(|e| bad_gateway(e.to_string()))?;
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED {
        return Err(not_the_sandbox(&state, &record));
    }
    let bytes = axum::body::to_bytes(response.into_body(), 8 * 1024 * 1024)
        .await
        .map_err(|e| bad_gateway(e.to_string()))?;
    // sandboxd pointed the debugger URLs at itself; point them at this server instead.
    let text = String::from_utf8_lossy(&bytes);
    let public = format!("{}/v1/sandboxes/{id}/cdp/", state.public_url);
    let ws_public = super::websocket_url(&public);
    let ws_host = ws_public
        .trim_start_matches("ws://")
        .trim_start_matches("wss://");
    let sandboxd = format!("{address}:{SANDBOXD_PORT}/cdp/");
    let text = text
        .replace(&format!("ws://{sandboxd}"), &ws_public)
        .replace(&format!("ws={sandboxd}"), &format!("ws={ws_host}"));
    let mut response = (status, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    sandboxed(response.headers_mut(), false);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_content_is_sandboxed_and_downloads_are_attachments() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
        sandboxed(&mut headers, true);
        assert_eq!(headers[header::CONTENT_SECURITY_POLICY], "sandbox");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(headers[header::CONTENT_DISPOSITION], "attachment");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment; filename=\"a.html\""),
        );
        sandboxed(&mut headers, true);
        assert_eq!(
            headers[header::CONTENT_DISPOSITION],
            "attachment; filename=\"a.html\""
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("inline; filename=\"a.html\""),
        );
        sandboxed(&mut headers, true);
        assert_eq!(headers[header::CONTENT_DISPOSITION], "attachment");
    }
}
