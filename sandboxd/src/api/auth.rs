//! Authentication.
//!
//! - Every route but `/healthz` needs the API key: `Authorization: Bearer <key>` or
//!   `X-AIO-API-Key: <key>`, compared in constant time ([`require_api_key`]). Only an explicit
//!   `SANDBOX_AUTH=none` at start-up runs without one.
//! - The viewer routes (`/vnc/...`) also take a viewer session ([`require_key_or_viewer`]): a
//!   ticket from `POST /tickets` in the URL is traded once for an HttpOnly, SameSite=Strict
//!   cookie scoped to `/vnc`, and the request is redirected to the same URL without the ticket.

use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;
use super::vnc::VIEWER_COOKIE;

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

/// The key, a ticket (traded for a session), or a viewer session cookie.
pub async fn require_key_or_viewer(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let key_ok = match &state.settings.api_key {
        Some(key) => presented_key_matches(request.headers(), key),
        None => true,
    };
    if key_ok {
        request.extensions_mut().insert(ViewerAccess::Key);
        return next.run(request).await;
    }
    if let Some(ticket) = query_value(request.uri(), "ticket") {
        let session = match state.tickets.redeem(&ticket) {
            Ok(Some(session)) => session,
            Ok(None) => {
                return ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "the ticket is unknown, used or expired: ask for a new one (POST /tickets)",
                )
                .into_response();
            }
            Err(error) => return ApiError::internal(error.to_string()).into_response(),
        };
        let (secret, grant) = session;
        let access = if grant.view_only {
            ViewerAccess::ViewOnlySession
        } else {
            ViewerAccess::Session
        };
        let cookie = format!(
            "{VIEWER_COOKIE}={secret}; Path=/vnc; Max-Age={}; HttpOnly; SameSite=Strict",
            crate::tickets::SESSION_TTL.as_secs()
        );
        let cookie = HeaderValue::from_str(&cookie).ok();
        if agentbox_http::ws::is_upgrade(request.headers()) {
            // A WebSocket cannot follow a redirect: let it through with the ticket's grant.
            request.extensions_mut().insert(access);
            return next.run(request).await;
        }
        // Take the ticket out of the address bar (and of any later Referer).
        let target = without_query_value(request.uri(), "ticket");
        let mut response =
            (StatusCode::SEE_OTHER, [(header::LOCATION, target.as_str())]).into_response();
        if let Some(cookie) = cookie {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return response;
    }
    if let Some(secret) = cookie_value(request.headers(), VIEWER_COOKIE)
        && let Some(grant) = state.tickets.session(&secret)
    {
        let access = if grant.view_only {
            ViewerAccess::ViewOnlySession
        } else {
            ViewerAccess::Session
        };
        request.extensions_mut().insert(access);
        return next.run(request).await;
    }
    ApiError::unauthorized().into_response()
}

fn presented_key_matches(headers: &HeaderMap, key: &str) -> bool {
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

fn query_value(uri: &Uri, name: &str) -> Option<String> {
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

fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
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
