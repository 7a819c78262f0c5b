//! AIO's single-use viewer tickets through the orchestrator's sandbox API proxy.
//!
//! An AIO client asks `POST {api}/tickets` and opens `{api}{viewer_path}` in a browser, which
//! sends no header. sandboxd's own tickets open sandboxd's viewer page, which the proxy cannot
//! serve (its script would run on this origin). So the proxy answers `POST /tickets` itself:
//! a ticket of its own, in sandboxd's answer shape, bound to the sandbox and to the caller's
//! key, good once within [`TICKET_TTL`]. Its `viewer_path` is sandboxd's
//! (`/vnc/index.html?ticket=`), so `{api}{viewer_path}` reaches [`redeem`] (let through without
//! a key by `require_key` for exactly that path and a `ticket`), which uses the ticket up,
//! issues a viewer token (`view` or `control`) for the key, sets the viewer cookie and sends
//! the browser to the orchestrator's own viewer. Revoking the key ends that viewer.
//!
//! The terminal page is sandboxd's too, so terminal tickets and `GET /v1/shell/terminal-url`
//! answer 501 naming the way that works through the orchestrator (the shell API).
//!
//! Tickets are kept in the database by their hash ([`crate::db::ViewerTicketRecord`]), so any
//! orchestrator replica redeems a ticket another made.

use std::time::Duration;

use axum::Json;
use axum::extract::Request;
use axum::http::header::{self, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sandbox_client::types::{Envelope, TicketRequest, TicketResult};

use super::AppState;
use super::error::ApiError;
use crate::auth::Caller;
use crate::db::ViewerTicketRecord;
use crate::tokens::Scope;

/// How long a ticket may wait for its one use (sandboxd's own tickets' lifetime).
pub const TICKET_TTL: Duration = Duration::from_secs(60);
/// How long the viewer a ticket opens lasts (a viewer token's default).
const VIEWER_TTL_SECS: i64 = super::tokens::DEFAULT_TTL_SECS;
/// The largest `POST /tickets` body read.
const MAX_TICKET_REQUEST: usize = 16 * 1024;
/// At most this many tickets of one key wait at once (older ones are dropped first).
const MAX_WAITING_PER_KEY: i64 = 1_000;

/// The answer the proxy gives itself for a sandbox API request it does not forward, if any.
pub async fn intercept(
    state: &AppState,
    caller: &Caller,
    sandbox_id: &str,
    path: &str,
    request: Request,
) -> Result<Result<Response, ApiError>, Request> {
    let route = path.split('?').next().unwrap_or_default();
    match (request.method(), route) {
        (&Method::POST, "/tickets") => Ok(issue(state, caller, sandbox_id, request).await),
        (&Method::GET, "/v1/shell/terminal-url") => Ok(Ok(terminal_not_served())),
        _ => Err(request),
    }
}

/// The sandbox and ticket of a keyless `GET /v1/sandboxes/{id}/api/vnc/index.html?ticket=`,
/// the one sandbox API request let through without a key.
pub fn ticket_request(
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Option<(String, String)> {
    if method != Method::GET {
        return None;
    }
    let id = path
        .strip_prefix("/v1/sandboxes/")?
        .strip_suffix("/api/vnc/index.html")?;
    if id.is_empty() || id.contains('/') {
        return None;
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query?).ok()?;
    let ticket = pairs.into_iter().find(|(name, _)| name == "ticket")?.1;
    Some((id.to_string(), ticket))
}

async fn issue(
    state: &AppState,
    caller: &Caller,
    sandbox_id: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let Ok(bytes) = axum::body::to_bytes(request.into_body(), MAX_TICKET_REQUEST).await else {
        return Ok(sandbox_api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the body is too large",
        ));
    };
    let asked: TicketRequest = match agentbox_http::body::parse_json(&bytes) {
        Ok(asked) => asked,
        Err(error) => {
            return Ok(sandbox_api_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                error.to_string(),
            ));
        }
    };
    if asked.terminal == Some(true) {
        return Ok(terminal_not_served());
    }
    // The sandbox must be the caller's and ready (a paused one with auto_resume wakes).
    state
        .sandboxes
        .get_ready(sandbox_id, caller.owner())
        .await?;
    let view_only = asked.view_only.unwrap_or(false);
    let ticket = crate::secret::new_secret("tkt_");
    let now = crate::secret::now_ms();
    let ttl_ms = i64::try_from(TICKET_TTL.as_millis()).unwrap_or(i64::MAX);
    state
        .sandboxes
        .store()
        .insert_viewer_ticket(
            &crate::secret::sha256_hex(&ticket),
            &ViewerTicketRecord {
                sandbox_id: sandbox_id.to_string(),
                key_id: caller.key_id.clone(),
                owner: caller.owner().map(str::to_owned),
                view_only,
                made_at: now,
            },
            MAX_WAITING_PER_KEY,
            now - ttl_ms,
        )
        .await?;
    let mut viewer_path = format!("/vnc/index.html?ticket={ticket}");
    if view_only {
        viewer_path.push_str("&view_only=true");
    }
    Ok(Json(Envelope::ok(TicketResult {
        ticket,
        expires_in: TICKET_TTL.as_secs(),
        view_only,
        terminal: false,
        viewer_path,
    }))
    .into_response())
}

/// Uses a ticket up and opens the orchestrator's viewer with a token for the ticket's key.
pub async fn redeem(state: &AppState, sandbox_id: &str, ticket: &str) -> Response {
    let taken = state
        .sandboxes
        .store()
        .take_viewer_ticket(&crate::secret::sha256_hex(ticket))
        .await;
    let grant = match taken {
        Ok(grant) => grant,
        Err(error) => return ApiError::from(error).into_response(),
    };
    let now = crate::secret::now_ms();
    // Used up either way: a ticket for another sandbox, or too old, opens nothing.
    let Some(grant) = grant.filter(|g| opens(g, sandbox_id, now)) else {
        return ApiError::unauthorized(
            "the ticket is unknown, used or expired: ask for a new one (POST {api}/tickets)",
        )
        .into_response();
    };
    let scope = if grant.view_only {
        Scope::View
    } else {
        Scope::Control
    };
    let issued = state
        .sandboxes
        .issue_token(
            sandbox_id,
            grant.owner.as_deref(),
            &grant.key_id,
            scope,
            VIEWER_TTL_SECS,
        )
        .await;
    match issued {
        Ok((token, _)) => {
            super::tokens::viewer_cookie_redirect(state, sandbox_id, &token, VIEWER_TTL_SECS)
        }
        Err(error) => ApiError::from(error).into_response(),
    }
}

/// Whether a ticket taken at `now` opens `sandbox_id`'s viewer.
fn opens(ticket: &ViewerTicketRecord, sandbox_id: &str, now: i64) -> bool {
    let ttl_ms = i64::try_from(TICKET_TTL.as_millis()).unwrap_or(i64::MAX);
    ticket.sandbox_id == sandbox_id && now - ticket.made_at < ttl_ms
}

fn terminal_not_served() -> Response {
    sandbox_api_error(
        StatusCode::NOT_IMPLEMENTED,
        "the terminal page is not served through the orchestrator (its script would run on the \
         orchestrator's origin): use the shell API through /api instead (POST /v1/shell/exec, \
         or the WebSocket /v1/shell/ws)",
    )
}

/// An error in sandboxd's answer shape (`success: false`), for answers the proxy gives on a
/// sandbox API path in sandboxd's place.
fn sandbox_api_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "success": false, "message": message.into(), "data": null });
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_viewer_page_with_a_ticket_is_let_through() {
        let let_through =
            |method: &Method, path: &str, query: Option<&str>| ticket_request(method, path, query);
        assert_eq!(
            let_through(
                &Method::GET,
                "/v1/sandboxes/sbx-1/api/vnc/index.html",
                Some("ticket=tkt_a&view_only=true")
            ),
            Some(("sbx-1".into(), "tkt_a".into()))
        );
        for (method, path, query) in [
            (
                Method::POST,
                "/v1/sandboxes/sbx-1/api/vnc/index.html",
                Some("ticket=t"),
            ),
            (Method::GET, "/v1/sandboxes/sbx-1/api/vnc/index.html", None),
            (
                Method::GET,
                "/v1/sandboxes/sbx-1/api/vnc/index.html",
                Some("other=t"),
            ),
            (
                Method::GET,
                "/v1/sandboxes/sbx-1/api/v1/shell/exec",
                Some("ticket=t"),
            ),
            (
                Method::GET,
                "/v1/sandboxes/a/b/api/vnc/index.html",
                Some("ticket=t"),
            ),
            (
                Method::GET,
                "/v1/sandboxes//api/vnc/index.html",
                Some("ticket=t"),
            ),
        ] {
            assert_eq!(let_through(&method, path, query), None, "{method} {path}");
        }
    }

    #[test]
    fn a_ticket_opens_its_own_sandbox_within_its_minute_only() {
        let ticket = ViewerTicketRecord {
            sandbox_id: "sbx-1".into(),
            key_id: "key-1".into(),
            owner: Some("key-1".into()),
            view_only: true,
            made_at: 1_000,
        };
        assert!(opens(&ticket, "sbx-1", 1_000 + 59_999));
        assert!(!opens(&ticket, "sbx-2", 1_000), "another sandbox");
        assert!(!opens(&ticket, "sbx-1", 1_000 + 60_000), "expired");
    }
}
