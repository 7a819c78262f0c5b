//! Liveness (`/healthz`) and readiness (`/readyz`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use super::types::{Health, NotReady, Readiness};

/// Liveness: sandboxd answers. Needs no key and does not count as activity.
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// 200 only when every required program is ready; otherwise 503 naming the ones that are not.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let snapshot = state.supervisor.status();
    let not_ready: Vec<NotReady> = snapshot
        .iter()
        .filter(|p| p.required && p.state != supervisor::ProgramState::Ready)
        .map(|p| NotReady {
            name: p.name.clone(),
            state: p.state.as_str(),
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
