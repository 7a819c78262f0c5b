//! Who a request comes from when it carries no API key: the console's sign-in cookie
//! (`agentbox_console`), checked the same way wherever a keyed route takes it (the REST API,
//! the proxies, the console's own calls). A state-changing request on the cookie must come
//! from this server's own pages.

use axum::http::Method;
use axum::http::header::{self, HeaderMap};

use super::AppState;
use super::error::ApiError;
use crate::auth::Caller;

/// The console sign-in's cookie.
pub const CONSOLE_COOKIE: &str = "agentbox_console";

/// The value of cookie `name`, if the request carries it.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    agentbox_http::cookie::value(headers, name)
}

/// A browser request that changes state must come from this server's own pages: `Origin`
/// present and ours (a cross-site form or script is refused even though SameSite=Strict would
/// already keep the cookie off it), and no `Sec-Fetch-Site` saying otherwise.
pub fn same_origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), ApiError> {
    if headers.get(header::ORIGIN).is_none() {
        return Err(ApiError::forbidden(
            "a console request that changes state must carry this server's Origin header",
        ));
    }
    agentbox_http::origin::check(headers, allowed)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && site != "same-origin"
        && site != "none"
    {
        return Err(ApiError::forbidden(format!(
            "a console request that changes state must come from this server's pages (Sec-Fetch-Site: {site})"
        )));
    }
    Ok(())
}

/// Whether `path` is the sandbox API proxy (`/v1/sandboxes/{id}/api[/...]`).
fn is_sandbox_api(path: &str) -> bool {
    path.strip_prefix("/v1/sandboxes/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(_, service)| service == "api" || service.starts_with("api/"))
}

/// The caller a console cookie stands for, for a keyed route (the key header is absent).
pub async fn caller(
    state: &AppState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let Some(secret) = cookie(headers, CONSOLE_COOKIE) else {
        return Err(ApiError::unauthorized(
            "missing `Authorization: Bearer <api key>`",
        ));
    };
    if is_sandbox_api(path) {
        return Err(ApiError::unauthorized(
            "the sandbox API takes an API key in `Authorization: Bearer`, not the console's sign-in",
        ));
    }
    if !method.is_safe() {
        same_origin(headers, &state.allowed_origins)?;
    }
    match state.console.resolve(secret).await? {
        Some((_, caller)) => Ok(caller),
        None => Err(ApiError::unauthorized(
            "the console sign-in ended or expired: sign in again",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sandbox_api_proxy_is_refused_to_the_cookie() {
        assert!(is_sandbox_api("/v1/sandboxes/sbx-1/api"));
        assert!(is_sandbox_api("/v1/sandboxes/sbx-1/api/v1/shell/exec"));
        assert!(!is_sandbox_api("/v1/sandboxes/sbx-1"));
        assert!(!is_sandbox_api("/v1/sandboxes/sbx-1/apix"));
        assert!(!is_sandbox_api("/v1/sandboxes/sbx-1/tokens"));
        assert!(!is_sandbox_api("/v1/runs/api/x"));
    }
}
