//! The web console (issue 10): its pages, sign-in and sign-out, and share links.
//!
//! - Pages (`/`, `/sign-in`, `/sandboxes`, `/sandboxes/{id}`, `/runs`, `/runs/new`,
//!   `/runs/{id}`, `/share/runs/{id}`) are the embedded files under `novnc/console/`, with the
//!   strict page policy of [`super::assets`]; the page scripts call the REST API with the
//!   console's cookie. A page that needs a sign-in redirects to `/sign-in`; a run or sandbox
//!   that does not exist is an error page with its status, not a blank one.
//! - `POST /console/session {key}` trades an API key for a session cookie (`agentbox_console`:
//!   a random secret, HttpOnly, SameSite=Strict, Secure behind TLS, the server keeps the row;
//!   the browser never keeps the key); `DELETE /console/session` ends the row and the desktop
//!   sessions it opened; `GET /console/session` says who is signed in.
//! - Every request authenticated by the cookie that changes state must carry this server's
//!   `Origin` (and no cross-site `Sec-Fetch-Site`); the sandbox API proxy does not take the
//!   cookie at all.
//! - `GET /share/runs/{id}?token=<view token>` is a share link: the token (for the run's
//!   sandbox) becomes an HttpOnly cookie scoped to `/share/runs/{id}`, under which the page
//!   reads the run, its events, its artifacts and a view-only desktop, and nothing else.

use axum::Json;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use super::AppState;
use super::callers::{CONSOLE_COOKIE, cookie, same_origin};
use super::error::ApiError;
use super::extract::ApiJson;
use super::runs::{StreamAuthority, artifact_response, event_stream};
use crate::auth::Caller;
use crate::console::{ConsoleError, SignInRefused};
use crate::db::{ConsoleSessionRecord, RunRecord};
use crate::proxy::rfb::RfbFilter;
use crate::sandboxes::AccessError;
use crate::tokens::{Claims, TokenError};
use agentbox_http::timestamp::rfc3339_from_unix_ms as rfc3339;

/// A share link's cookie (scoped to `/share/runs/{id}`).
pub const SHARE_COOKIE: &str = "agentbox_share";
/// The most `script:` demos listed.
const MAX_SCRIPTS: usize = 200;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/", get(home))
        .route("/sign-in", get(sign_in_page))
        .route("/sandboxes", get(sandboxes_page))
        .route("/sandboxes/{id}", get(sandbox_page))
        .route("/runs", get(runs_page))
        .route("/runs/new", get(new_run_page))
        .route("/runs/{id}", get(run_page))
        .route(
            "/console/session",
            get(session_info).post(sign_in).delete(sign_out),
        )
        .route("/console/models", get(models))
        .route("/share/runs/{id}", get(share_page))
        .route("/share/runs/{id}/run", get(share_run))
        .route("/share/runs/{id}/events", get(share_events))
        .route("/share/runs/{id}/websockify", get(share_socket))
        .route(
            "/share/runs/{id}/artifacts/{folder}/{file}",
            get(share_artifact),
        )
}

impl From<ConsoleError> for ApiError {
    fn from(error: ConsoleError) -> Self {
        match error {
            ConsoleError::Key(error) => ApiError::from(error),
            ConsoleError::Store(error) => ApiError::from(error),
        }
    }
}

/// The signed-in session of a page request, if any.
async fn signed_in(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(ConsoleSessionRecord, Caller)>, ApiError> {
    match cookie(headers, CONSOLE_COOKIE) {
        Some(secret) => Ok(state.console.resolve(secret).await?),
        None => Ok(None),
    }
}

fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// To the sign-in page, coming back to `uri` afterwards.
fn to_sign_in(uri: &Uri) -> Response {
    let next = uri.path_and_query().map_or("/", |p| p.as_str());
    let query = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    see_other(&format!("/sign-in?{query}"))
}

fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An honest error page: its status, what happened, and where to go from here.
pub fn error_page(status: StatusCode, title: &str, message: &str, link: (&str, &str)) -> Response {
    let template = match super::assets::text("console/error.html") {
        Some(text) => text,
        None => return (status, message.to_string()).into_response(),
    };
    let html = template
        .replace("{{title}}", &escape_html(title))
        .replace("{{message}}", &escape_html(message))
        .replace("{{link_href}}", &escape_html(link.0))
        .replace("{{link_text}}", &escape_html(link.1));
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response();
    super::assets::harden(response.headers_mut());
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn home(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    if signed_in(&state, request.headers()).await?.is_some() {
        Ok(see_other("/runs"))
    } else {
        Ok(see_other("/sign-in"))
    }
}

async fn sign_in_page() -> Result<Response, ApiError> {
    super::assets::page("console/sign-in.html")
}

/// A console page for signed-in people; the sign-in page for others.
async fn simple_page(state: AppState, request: Request, file: &str) -> Result<Response, ApiError> {
    if signed_in(&state, request.headers()).await?.is_none() {
        return Ok(to_sign_in(request.uri()));
    }
    super::assets::page(file)
}

async fn sandboxes_page(
    State(state): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    simple_page(state, request, "console/sandboxes.html").await
}

async fn runs_page(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    simple_page(state, request, "console/runs.html").await
}

async fn new_run_page(
    State(state): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    simple_page(state, request, "console/new-run.html").await
}

async fn sandbox_page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let Some((_, caller)) = signed_in(&state, request.headers()).await? else {
        return Ok(to_sign_in(request.uri()));
    };
    match state.sandboxes.get(&id, caller.owner()).await {
        Ok(_) => super::assets::page("console/sandbox.html"),
        Err(crate::sandboxes::SandboxError::NotFound(_)) => Ok(error_page(
            StatusCode::NOT_FOUND,
            "No such sandbox",
            &format!(
                "There is no sandbox {id} for this key: it ended and was removed, or it never existed."
            ),
            ("/sandboxes", "See your sandboxes"),
        )),
        Err(error) => Err(error.into()),
    }
}

async fn run_page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let Some((_, caller)) = signed_in(&state, request.headers()).await? else {
        return Ok(to_sign_in(request.uri()));
    };
    match state.runs.get(&id, caller.owner()).await {
        Ok(_) => super::assets::page("console/run.html"),
        Err(crate::runs::RunError::NotFound(_)) => Ok(error_page(
            StatusCode::NOT_FOUND,
            "No such run",
            &format!(
                "There is no run {id} for this key: the address is wrong, or the run was deleted."
            ),
            ("/runs", "See your runs"),
        )),
        Err(error) => Err(error.into()),
    }
}

// ---- sign-in ----

#[derive(Debug, Deserialize)]
struct SignInRequest {
    key: String,
}

fn session_json(record: &ConsoleSessionRecord, caller: &Caller) -> serde_json::Value {
    serde_json::json!({
        "key_id": caller.key_id,
        "is_admin": caller.is_admin,
        "expires_at": rfc3339(record.expires_at),
    })
}

fn session_cookie(state: &AppState, value: &str, max_age_secs: i64) -> Option<HeaderValue> {
    let secure = if state.public_url.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{CONSOLE_COOKIE}={value}; Path=/; Max-Age={max_age_secs}; HttpOnly; SameSite=Strict{secure}"
    ))
    .ok()
}

/// `POST /console/session {key}`: signs in.
async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SignInRequest>,
) -> Result<Response, ApiError> {
    same_origin(&headers, &state.allowed_origins)?;
    let signed = match state.console.sign_in(&body.key).await? {
        Ok(signed) => signed,
        Err(refused @ (SignInRefused::Empty | SignInRefused::TooLong)) => {
            return Err(ApiError {
                loc: Some(vec!["body".into(), "key".into()]),
                ..ApiError::invalid(format!("invalid `key`: {refused}"))
            });
        }
        Err(refused @ SignInRefused::UnknownKey) => {
            return Err(ApiError {
                loc: Some(vec!["body".into(), "key".into()]),
                ..ApiError::unauthorized(refused.to_string())
            });
        }
    };
    let caller = signed.caller;
    let max_age = crate::console::SESSION_TTL_MS / 1000;
    let mut response = Json(session_json(&signed.record, &caller)).into_response();
    if let Some(cookie) = session_cookie(&state, &signed.secret, max_age) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `DELETE /console/session`: signs out (the row ends; the cookie is cleared).
async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    same_origin(&headers, &state.allowed_origins)?;
    if let Some((record, _)) = signed_in(&state, &headers).await? {
        state.console.sign_out(&record.id).await?;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Some(cookie) = session_cookie(&state, "", 0) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// `GET /console/session`: who is signed in, or 401.
async fn session_info(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some((record, caller)) = signed_in(&state, &headers).await? else {
        return Err(ApiError::unauthorized("not signed in"));
    };
    let mut response = Json(session_json(&record, &caller)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `GET /console/models`: what the new-run form offers: the providers (and whether this server
/// has their key) and the `script:` demos in `--scripts-dir`.
async fn models(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if signed_in(&state, &headers).await?.is_none() {
        return Err(ApiError::unauthorized("not signed in"));
    }
    let options = &state.runs.models;
    let providers = serde_json::json!([
        {"prefix": "anthropic:", "example": "anthropic:claude-sonnet-4-5",
         "configured": matches!(options.anthropic_key, Ok(Some(_))),
         "needs": "ANTHROPIC_API_KEY"},
        {"prefix": "openai:", "example": "openai:computer-use-preview",
         "configured": matches!(options.openai_key, Ok(Some(_))),
         "needs": "OPENAI_API_KEY"},
        {"prefix": "openai-chat:", "example": "openai-chat:ui-tars-1.5-7b",
         "configured": options.chat_base_url.is_some(),
         "needs": "OPENAI_CHAT_BASE_URL"},
    ]);
    let dir = state.sandboxes.settings().scripts_dir.clone();
    let mut scripts = Vec::new();
    if let Ok(mut entries) = tokio::fs::read_dir(&dir).await {
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") && !name.starts_with('.') {
                scripts.push(format!("script:{name}"));
            }
            if scripts.len() >= MAX_SCRIPTS {
                break;
            }
        }
    }
    scripts.sort();
    Ok(Json(serde_json::json!({"providers": providers, "scripts": scripts})).into_response())
}

// ---- share links ----

/// Why a share link does not open, as a page.
fn share_refused(error: &AccessError) -> Response {
    let (status, title, message) = match error {
        AccessError::Invalid(TokenError::Expired) => (
            StatusCode::GONE,
            "This share link has expired",
            "Share links last a limited time. Ask whoever sent it for a new one.",
        ),
        AccessError::Revoked | AccessError::IssuerRevoked => (
            StatusCode::GONE,
            "This share link no longer works",
            "It was revoked. Ask whoever sent it for a new one.",
        ),
        AccessError::NotAShareLink => (
            StatusCode::UNAUTHORIZED,
            "This is not a valid share link",
            "It is a viewer link for a sandbox, not a share link. A share link is made from the \
             run's page.",
        ),
        AccessError::OtherRun => (
            StatusCode::UNAUTHORIZED,
            "This is not a valid share link",
            "It was made for another run. Ask whoever sent it for a link to this one.",
        ),
        _ => (
            StatusCode::UNAUTHORIZED,
            "This is not a valid share link",
            "The link is incomplete or was changed. Copy the whole link again.",
        ),
    };
    error_page(status, title, message, ("/sign-in", "Sign in to Agentbox"))
}

fn share_refused_api(error: &AccessError) -> ApiError {
    match error {
        AccessError::Invalid(TokenError::Expired) => ApiError::new(
            StatusCode::GONE,
            "link_expired",
            "this share link has expired",
        ),
        AccessError::Revoked | AccessError::IssuerRevoked => ApiError::new(
            StatusCode::GONE,
            "link_revoked",
            "this share link was revoked",
        ),
        _ => ApiError::unauthorized(format!("not a valid share link: {error}")),
    }
}

/// A share request's cookie checked as a share link for run `id` (and for no other).
async fn share_access(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
) -> Result<(RunRecord, Claims, Option<String>, String), ApiError> {
    let Some(token) = cookie(headers, SHARE_COOKIE) else {
        return Err(ApiError::unauthorized(
            "no share link: open the link you were sent",
        ));
    };
    let run = state.runs.get(id, None).await?;
    match state.sandboxes.verify_share_token(token, id).await? {
        Ok((claims, record)) => Ok((run, claims, record.issuer_key_id, token.to_string())),
        Err(error) => Err(share_refused_api(&error)),
    }
}

/// `GET /share/runs/{id}?token=`: trades the link's token for a cookie scoped to this run's
/// share routes and drops it from the address bar; then the share page.
async fn share_page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let token = request.uri().query().and_then(|query| {
        serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .ok()?
            .into_iter()
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v)
    });
    let Some(token) = token else {
        // The page asks `/run` itself and tells why when the cookie does not open it.
        return super::assets::page("console/share.html");
    };
    match state.runs.get(&id, None).await {
        Ok(_) => {}
        Err(crate::runs::RunError::NotFound(_)) => {
            return Ok(error_page(
                StatusCode::NOT_FOUND,
                "This run no longer exists",
                "The share link points to a run that was deleted.",
                ("/sign-in", "Sign in to Agentbox"),
            ));
        }
        Err(error) => return Err(error.into()),
    }
    let claims = match state.sandboxes.verify_share_token(&token, &id).await? {
        Ok((claims, _)) => claims,
        Err(error) => return Ok(share_refused(&error)),
    };
    let max_age = ((claims.exp - crate::secret::now_ms()) / 1000).max(0);
    let secure = if state.public_url.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{SHARE_COOKIE}={token}; Path=/share/runs/{id}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    );
    let mut response = see_other(&format!("/share/runs/{id}"));
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// `GET /share/runs/{id}/run`: what the share page shows of the run.
async fn share_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (run, claims, _, _) = share_access(&state, &id, &headers).await?;
    let sandbox_status = match &run.sandbox_id {
        Some(sandbox) => state
            .sandboxes
            .get(sandbox, None)
            .await
            .ok()
            .map(|s| s.status),
        None => None,
    };
    let sandbox_live = sandbox_status.is_some_and(|s| s.is_live());
    let sandbox_paused = sandbox_status == Some(crate::db::SandboxStatus::Paused);
    let body = serde_json::json!({
        "id": run.id,
        "status": run.status.as_str(),
        "task": run.task,
        "answer": run.answer,
        "reason": run.reason,
        "last_seq": run.last_seq,
        "created_at": rfc3339(run.created_at),
        "ended_at": run.ended_at.map(rfc3339),
        "sandbox_live": sandbox_live,
        "sandbox_paused": sandbox_paused,
        "link_expires_at": rfc3339(claims.exp),
    });
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

/// `GET /share/runs/{id}/events`: the run's events (SSE), under the share link.
async fn share_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (_, _, _, token) = share_access(&state, &id, &headers).await?;
    let after_seq = query.as_deref().and_then(|query| {
        serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .ok()?
            .into_iter()
            .find(|(k, _)| k == "after_seq")
            .and_then(|(_, v)| v.parse::<i64>().ok())
    });
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .or(after_seq)
        .filter(|seq| *seq >= 0)
        .unwrap_or(0);
    Ok(event_stream(
        &state,
        &id,
        after,
        StreamAuthority::Share {
            token,
            run_id: id.clone(),
        },
    ))
}

/// `GET /share/runs/{id}/artifacts/{folder}/{file}`: screenshots and outputs, under the link.
async fn share_artifact(
    State(state): State<AppState>,
    Path((id, folder, file)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    share_access(&state, &id, &headers).await?;
    let name = format!("{folder}/{file}");
    let (record, bytes) = state.runs.artifact(&id, None, &name).await?;
    Ok(artifact_response(&record, bytes, &file))
}

/// `GET /share/runs/{id}/websockify`: the desktop, view-only whatever the token's scope.
async fn share_socket(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    agentbox_http::origin::check(request.headers(), &state.allowed_origins)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    let (run, claims, issuer, _) = share_access(&state, &id, request.headers()).await?;
    let sandbox_id = run
        .sandbox_id
        .ok_or_else(|| ApiError::not_found(format!("run {id} has no sandbox yet")))?;
    let record = state.sandboxes.get_ready(&sandbox_id, None).await?;
    let authority = super::proxy::token_authority(&sandbox_id, &claims, issuer, "vnc");
    super::proxy::relay_vnc(
        &state,
        &record,
        request,
        "/vnc/websockify?view_only=true",
        authority,
        RfbFilter::view(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_pages_escape_what_they_repeat() {
        assert_eq!(
            escape_html("<script>a&b</script>\"'"),
            "&lt;script&gt;a&amp;b&lt;/script&gt;&quot;&#39;"
        );
    }

    #[test]
    fn state_changes_need_our_origin() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8090"));
        assert!(same_origin(&headers, &[]).is_err(), "no Origin");
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(same_origin(&headers, &[]).is_err(), "another origin");
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8090"),
        );
        assert!(same_origin(&headers, &[]).is_ok());
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(same_origin(&headers, &[]).is_err(), "cross-site fetch");
    }
}
