//! Liveness (`/healthz`, no key) and Prometheus metrics (`/metrics`, admin key).

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::types::Health;
use crate::auth::Caller;

pub fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(healthz))
}

pub fn metrics_routes() -> axum::Router<AppState> {
    axum::Router::new().route("/metrics", axum::routing::get(metrics))
}

/// Liveness: the orchestrator answers.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// Prometheus text format.
async fn metrics(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<impl IntoResponse, ApiError> {
    if !caller.is_admin {
        return Err(ApiError::forbidden("metrics need an admin key"));
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    ))
}
