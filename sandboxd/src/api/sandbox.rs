//! `GET /v1/sandbox`: who and where the agent is, in AIO's shape.

use axum::Json;
use axum::extract::State;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::types::SandboxResponse;
use crate::system_info;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(context))
}

/// Home dir, workspace, version and system details. The context is both in `data` and at the
/// top level, where AIO's SDK reads it.
#[utoipa::path(get, path = "/v1/sandbox", tag = "sandbox",
    responses((status = 200, body = SandboxResponse)))]
pub async fn context(State(state): State<AppState>) -> Json<SandboxResponse> {
    let context = system_info::gather(state.settings.clone()).await;
    Json(SandboxResponse {
        success: true,
        message: "Operation successful".into(),
        data: context.clone(),
        context,
    })
}
