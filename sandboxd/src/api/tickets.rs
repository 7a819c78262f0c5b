//! `POST /tickets` (AIO's path): a single-use ticket for a browser, traded for a viewer session
//! cookie on first use (see [`crate::tickets`]); and `GET /auth`, AIO's authentication
//! sub-request, which a reverse proxy (nginx's `auth_request`) asks before it lets a request
//! through.

use axum::Json;
use axum::extract::State;
use axum::http::header::{self, HeaderMap};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth;
use super::error::ApiError;
use super::extract::AioJson;
use super::types::{AuthResult, Envelope, ErrorBody, TicketRequest, TicketResult};
use crate::tickets::{Scope, TICKET_TTL};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(issue))
}

/// Routes reached without the key, which check a credential themselves.
pub fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(authenticate))
}

/// The header a proxy puts the original request's path and query in.
const ORIGINAL_URI: &str = "x-original-uri";

/// Answers 200 when the request carries a credential: the API key, a ticket in the
/// `X-Original-URI` header's query (`?ticket=`, used up here and traded for a viewer session,
/// whose cookie the answer sets), or a viewer session cookie; 401 otherwise. Reached without
/// the key; answers nothing else.
#[utoipa::path(get, path = "/auth", tag = "auth",
    params(("x-original-uri" = Option<String>, Header,
        description = "the path and query of the request being checked, with `ticket=`")),
    responses(
        (status = 200, body = AuthResult),
        (status = 401, description = "no valid key, ticket or session", body = ErrorBody),
    ))]
pub async fn authenticate(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let answer = |method: &str, view_only: bool| AuthResult {
        status: "authenticated".into(),
        method: method.into(),
        view_only: view_only.to_string(),
    };
    let key_ok = match &state.settings.api_key {
        Some(key) => auth::presented_key_matches(&headers, key),
        None => true,
    };
    if key_ok {
        return Json(answer("key", false)).into_response();
    }
    let ticket = headers
        .get(ORIGINAL_URI)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<Uri>().ok())
        .and_then(|uri| auth::query_value(&uri, "ticket"));
    if let Some(ticket) = ticket {
        return match state.tickets.redeem(&ticket) {
            Ok(Some((secret, grant))) => {
                let mut response = Json(answer("ticket", grant.view_only())).into_response();
                let kind = if grant.scope == Scope::Terminal {
                    auth::TERMINAL
                } else {
                    auth::DESKTOP
                };
                if let Some(cookie) = auth::session_cookie(kind, &secret) {
                    response.headers_mut().insert(header::SET_COOKIE, cookie);
                }
                response
            }
            Ok(None) => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "the ticket is unknown, used or expired: ask for a new one (POST /tickets)",
            )
            .into_response(),
            Err(error) => ApiError::internal(error.to_string()).into_response(),
        };
    }
    for kind in [auth::DESKTOP, auth::TERMINAL] {
        if let Some(grant) = auth::cookie_value(&headers, kind.cookie)
            .and_then(|secret| state.tickets.session(&secret))
            .filter(|grant| kind.scopes.contains(&grant.scope))
        {
            return Json(answer("session", grant.view_only())).into_response();
        }
    }
    ApiError::unauthorized().into_response()
}

/// Issues a ticket that opens the remote desktop, or with `terminal` the terminal page, in a
/// browser once.
#[utoipa::path(post, path = "/tickets", tag = "auth",
    request_body = TicketRequest,
    responses(
        (status = 200, body = Envelope<TicketResult>),
        (status = 400, description = "malformed JSON", body = ErrorBody),
        (status = 422, description = "a field has a bad value", body = ErrorBody),
    ))]
pub async fn issue(
    State(state): State<AppState>,
    AioJson(request): AioJson<TicketRequest>,
) -> Result<Json<Envelope<TicketResult>>, ApiError> {
    let view_only = request.view_only.unwrap_or(false);
    let terminal = request.terminal.unwrap_or(false);
    let scope = match (terminal, view_only) {
        (true, true) => {
            return Err(ApiError::invalid(
                "terminal",
                "a terminal ticket cannot be view-only: a terminal types into a shell",
            ));
        }
        (true, false) => Scope::Terminal,
        (false, true) => Scope::DesktopViewOnly,
        (false, false) => Scope::Desktop,
    };
    let (ticket, _) = state
        .tickets
        .issue(scope)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let viewer_path = match scope {
        Scope::Terminal => format!("{}?ticket={ticket}", super::shell::terminal_page::PAGE),
        Scope::DesktopViewOnly => format!("/vnc/index.html?ticket={ticket}&view_only=true"),
        Scope::Desktop => format!("/vnc/index.html?ticket={ticket}"),
    };
    Ok(Json(Envelope::ok(TicketResult {
        viewer_path,
        ticket,
        expires_in: TICKET_TTL.as_secs(),
        view_only,
        terminal,
    })))
}
