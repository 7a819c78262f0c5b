//! Authentication.
//!
//! - Every route but `/healthz` needs the API key: `Authorization: Bearer <key>` or
//!   `X-AIO-API-Key: <key>`, compared in constant time ([`require_api_key`]). Only an explicit
//!   `SANDBOX_AUTH=none` at start-up runs without one.
//! - The viewer routes (`/vnc/...`) also take a desktop session ([`require_key_or_viewer`]),
//!   and the terminal page (`/terminal...`) a terminal session ([`require_key_or_terminal`]): a
//!   ticket of the right scope from `POST /tickets` in the URL is traded once for an HttpOnly,
//!   SameSite=Strict cookie scoped to that path, and the request is redirected to the same URL
//!   without the ticket.
//! - `GET /auth` (AIO's sub-request check, `super::tickets::authenticate`) needs none of them
//!   to be reached and answers 200 only for one of them.
//! - A request no route takes is answered 401 without the key, 404 or 405 only with it
//!   ([`key_before_unrouted`]): a caller without the key cannot map which routes exist.

use agentbox_http::fallback::Unrouted;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;
use crate::tickets::{Grant, Scope};

/// How a request to a viewer route was let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewerAccess {
    /// The API key (or no key configured).
    Key,
    /// A viewer session.
    Session,
    /// A viewer session from a view-only ticket: the desktop can be watched, not used.
    ViewOnlySession,
}

pub async fn require_api_key(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    match &state.settings.api_key {
        Some(key) if !presented_key_matches(request.headers(), key) => {
            ApiError::unauthorized().into_response()
        }
        _ => next.run(request).await,
    }
}

/// Around every route and both fallbacks: when no route took the request (the answer carries
/// [`Unrouted`]) and the caller did not present the key, the answer is 401, as for any keyed
/// route, not the 404 or 405 that would tell which paths exist.
pub async fn key_before_unrouted(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let keyed = state
        .settings
        .api_key
        .as_deref()
        .is_none_or(|key| presented_key_matches(request.headers(), key));
    let response = next.run(request).await;
    if !keyed && response.extensions().get::<Unrouted>().is_some() {
        return ApiError::unauthorized().into_response();
    }
    response
}

/// A kind of browser session: the cookie that carries it and the ticket scopes that open it.
#[derive(Debug, Clone, Copy)]
pub(super) struct SessionKind {
    /// The cookie's name.
    pub cookie: &'static str,
    /// The cookie's `Path`: the pages and WebSocket the session opens.
    pub path: &'static str,
    /// What this kind of session is, for messages.
    pub what: &'static str,
    pub scopes: &'static [Scope],
}

/// The cookie holding a viewer session.
pub const VIEWER_COOKIE: &str = "sandboxd_viewer";
/// The cookie holding a terminal session.
pub const TERMINAL_COOKIE: &str = "sandboxd_terminal";

/// The remote desktop under `/vnc`.
pub(super) const DESKTOP: SessionKind = SessionKind {
    cookie: VIEWER_COOKIE,
    path: "/vnc",
    what: "desktop",
    scopes: &[Scope::Desktop, Scope::DesktopViewOnly],
};

/// The terminal page under `/terminal`.
pub(super) const TERMINAL: SessionKind = SessionKind {
    cookie: TERMINAL_COOKIE,
    path: "/terminal",
    what: "terminal",
    scopes: &[Scope::Terminal],
};

/// How a browser session check ended.
enum SessionCheck {
    /// Let the request through with this grant (`None`: the key).
    Pass(Option<Grant>),
    /// Answer this instead (a redirect that sets the cookie, or a refusal).
    Answer(Response),
}

/// The key, a ticket of one of `kind`'s scopes (traded for a session: a redirect that sets its
/// cookie, or for a WebSocket, which cannot follow one, the ticket's grant directly), or a
/// session cookie of `kind`.
fn check_session(state: &AppState, kind: SessionKind, request: &Request) -> SessionCheck {
    let key_ok = match &state.settings.api_key {
        Some(key) => presented_key_matches(request.headers(), key),
        None => true,
    };
    if key_ok {
        return SessionCheck::Pass(None);
    }
    if let Some(ticket) = query_value(request.uri(), "ticket") {
        let (secret, grant) = match state.tickets.redeem(&ticket) {
            Ok(Some((secret, grant))) if kind.scopes.contains(&grant.scope) => (secret, grant),
            Ok(Some(_)) => {
                return SessionCheck::Answer(
                    ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        format!("the ticket is not for the {}", kind.what),
                    )
                    .into_response(),
                );
            }
            Ok(None) => {
                return SessionCheck::Answer(
                    ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "the ticket is unknown, used or expired: ask for a new one (POST /tickets)",
                    )
                    .into_response(),
                );
            }
            Err(error) => {
                return SessionCheck::Answer(ApiError::internal(error.to_string()).into_response());
            }
        };
        if agentbox_http::ws::is_upgrade(request.headers()) {
            return SessionCheck::Pass(Some(grant));
        }
        // Take the ticket out of the address bar (and of any later Referer).
        let target = without_query_value(request.uri(), "ticket");
        let mut response =
            (StatusCode::SEE_OTHER, [(header::LOCATION, target.as_str())]).into_response();
        if let Some(cookie) = session_cookie(kind, &secret) {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return SessionCheck::Answer(response);
    }
    if let Some(grant) = cookie_value(request.headers(), kind.cookie)
        .and_then(|secret| state.tickets.session(&secret))
        .filter(|grant| kind.scopes.contains(&grant.scope))
    {
        return SessionCheck::Pass(Some(grant));
    }
    SessionCheck::Answer(ApiError::unauthorized().into_response())
}

/// The key, a desktop ticket (traded for a session), or a desktop session cookie.
pub async fn require_key_or_viewer(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    match check_session(&state, DESKTOP, &request) {
        SessionCheck::Pass(grant) => {
            let access = match grant {
                None => ViewerAccess::Key,
                Some(grant) if grant.view_only() => ViewerAccess::ViewOnlySession,
                Some(_) => ViewerAccess::Session,
            };
            request.extensions_mut().insert(access);
            next.run(request).await
        }
        SessionCheck::Answer(response) => response,
    }
}

/// The key, a terminal ticket (traded for a session), or a terminal session cookie.
pub async fn require_key_or_terminal(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    match check_session(&state, TERMINAL, &request) {
        SessionCheck::Pass(_) => next.run(request).await,
        SessionCheck::Answer(response) => response,
    }
}

/// The `Set-Cookie` value of a session of `kind` (`None` if the secret is not header-safe,
/// which [`crate::tickets`]' URL-safe base64 secrets always are).
pub(super) fn session_cookie(kind: SessionKind, secret: &str) -> Option<HeaderValue> {
    let cookie = format!(
        "{}={secret}; Path={}; Max-Age={}; HttpOnly; SameSite=Strict",
        kind.cookie,
        kind.path,
        crate::tickets::SESSION_TTL.as_secs()
    );
    HeaderValue::from_str(&cookie).ok()
}

pub(super) fn presented_key_matches(headers: &HeaderMap, key: &str) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let aio = headers
        .get("x-aio-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    [bearer, aio]
        .into_iter()
        .flatten()
        .any(|presented| bool::from(presented.as_bytes().ct_eq(key.as_bytes())))
}

fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(super) fn query_value(uri: &Uri, name: &str) -> Option<String> {
    query_pairs(uri)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// The request's path and query with every `name` parameter removed.
fn without_query_value(uri: &Uri, name: &str) -> String {
    let kept: Vec<(String, String)> = query_pairs(uri)
        .into_iter()
        .filter(|(k, _)| k != name)
        .collect();
    if kept.is_empty() {
        return uri.path().to_string();
    }
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(kept)
        .finish();
    format!("{}?{query}", uri.path())
}

pub(super) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    agentbox_http::cookie::value(headers, name).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticket_is_taken_out_of_the_address() {
        let uri: Uri = "/vnc/vnc.html?ticket=abc&view_only=true".parse().unwrap();
        assert_eq!(query_value(&uri, "ticket").as_deref(), Some("abc"));
        assert_eq!(
            without_query_value(&uri, "ticket"),
            "/vnc/vnc.html?view_only=true"
        );
        let uri: Uri = "/vnc/index.html?ticket=abc".parse().unwrap();
        assert_eq!(without_query_value(&uri, "ticket"), "/vnc/index.html");
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; sandboxd_viewer=xyz; b=2"),
        );
        assert_eq!(
            cookie_value(&headers, VIEWER_COOKIE).as_deref(),
            Some("xyz")
        );
        assert_eq!(cookie_value(&headers, "c"), None);
    }
}
