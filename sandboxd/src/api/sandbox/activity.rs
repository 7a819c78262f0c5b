//! `GET /v1/activity`: the orchestrator's heartbeat.
//!
//! The heartbeat resets the dead-man switch (so a sandbox outlives its orchestrator only briefly)
//! but reports the activity that came before it: `track_activity` skips this route, and the
//! handler reads the counters first and marks activity after.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::types::ActivityReport;

/// The path, which `track_activity` leaves to the handler.
pub const PATH: &str = "/v1/activity";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(activity))
}

/// Work in flight, idle time (excluding this request) and readiness; then resets the idle
/// clock.
#[utoipa::path(get, path = "/v1/activity", tag = "health",
    responses((status = 200, body = ActivityReport)))]
pub async fn activity(State(state): State<AppState>) -> Json<ActivityReport> {
    let not_ready: Vec<String> = state
        .supervisor
        .status()
        .iter()
        .filter(|p| p.required && p.state != supervisor::ProgramState::Ready)
        .map(|p| format!("{} ({})", p.name, p.state.as_str()))
        .collect();
    let report = ActivityReport {
        in_flight: state.activity.in_flight(),
        idle_secs: state.activity.idle_for().as_secs_f64(),
        ready: not_ready.is_empty(),
        not_ready,
    };
    state.activity.touch();
    Json(report)
}
