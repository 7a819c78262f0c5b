//! Liveness (`/healthz`) and readiness (`/readyz`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::types::{Health, NotReady, Readiness};

/// Routes that need no key.
pub fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(healthz))
}

pub fn protected_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(readyz))
}

/// Liveness: sandboxd answers. Needs no key and does not count as activity.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "sandboxd is alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// 200 only when every required program is ready; otherwise 503 naming the ones that are not.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "every required program is ready", body = Readiness),
        (status = 503, description = "some required program is not ready", body = Readiness),
    ))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let snapshot = state.supervisor.status();
    let not_ready: Vec<NotReady> = snapshot
        .iter()
        .filter(|p| p.required && p.state != supervisor::ProgramState::Ready)
        .map(|p| NotReady {
            name: p.name.clone(),
            state: p.state.as_str().into(),
        })
        .collect();
    let ready = not_ready.is_empty();
    let message = if ready {
        "all required programs are ready".to_string()
    } else {
        let names: Vec<String> = not_ready
            .iter()
            .map(|p| format!("{} ({})", p.name, p.state))
            .collect();
        format!("not ready: {}", names.join(", "))
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(Readiness {
            ready,
            not_ready,
            message,
        }),
    )
}
