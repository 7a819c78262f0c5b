//! `POST /tickets` (AIO's path): a single-use ticket for a browser, traded for a viewer session
//! cookie on first use (see [`crate::tickets`]).

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::AioJson;
use super::types::{Envelope, ErrorBody, TicketRequest, TicketResult};
use crate::tickets::TICKET_TTL;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(issue))
}

/// Issues a ticket that opens the remote desktop in a browser once.
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
    let (ticket, _) = state
        .tickets
        .issue(view_only)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let view = if view_only { "&view_only=true" } else { "" };
    Ok(Json(Envelope::ok(TicketResult {
        viewer_path: format!("/vnc/index.html?ticket={ticket}{view}"),
        ticket,
        expires_in: TICKET_TTL.as_secs(),
        view_only,
    })))
}
