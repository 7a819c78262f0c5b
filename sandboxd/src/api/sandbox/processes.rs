//! The supervisor's state table and per-program control.

use agentbox_http::timestamp::rfc3339;
use axum::Json;
use axum::extract::{Path, State};
use supervisor::{ExitStatus, ProgramStatus};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::types::{Envelope, ErrorBody, ExitInfo, ProcessInfo, ProcessTable};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(restart))
        .routes(routes!(start))
        .routes(routes!(stop))
}

/// The supervisor's state table, plus how many orphans sandboxd has reaped.
#[utoipa::path(get, path = "/v1/processes", tag = "processes",
    responses((status = 200, body = Envelope<ProcessTable>)))]
pub async fn list(State(state): State<AppState>) -> Json<Envelope<ProcessTable>> {
    let programs = state.supervisor.status().iter().map(process_info).collect();
    Json(Envelope::ok(ProcessTable {
        programs,
        reaped_orphans: supervisor::reaper().orphans_reaped(),
    }))
}

/// Stops the program if it runs and starts it again; its dependents follow once it is ready.
#[utoipa::path(post, path = "/v1/processes/{name}/restart", tag = "processes",
    params(("name" = String, Path, description = "program name")),
    responses(
        (status = 200, body = Envelope<ProcessInfo>),
        (status = 404, description = "no such program", body = ErrorBody),
    ))]
pub async fn restart(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Envelope<ProcessInfo>>, ApiError> {
    state.supervisor.restart_program(&name).await?;
    current(&state, &name)
}

/// Starts a stopped, exited or fatal program (clearing its failure count).
#[utoipa::path(post, path = "/v1/processes/{name}/start", tag = "processes",
    params(("name" = String, Path, description = "program name")),
    responses(
        (status = 200, body = Envelope<ProcessInfo>),
        (status = 404, description = "no such program", body = ErrorBody),
    ))]
pub async fn start(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Envelope<ProcessInfo>>, ApiError> {
    state.supervisor.start_program(&name).await?;
    current(&state, &name)
}

/// Stops the program (stop signal, then SIGKILL to its group after its stop-wait) and keeps it stopped.
#[utoipa::path(post, path = "/v1/processes/{name}/stop", tag = "processes",
    params(("name" = String, Path, description = "program name")),
    responses(
        (status = 200, body = Envelope<ProcessInfo>),
        (status = 404, description = "no such program", body = ErrorBody),
    ))]
pub async fn stop(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Envelope<ProcessInfo>>, ApiError> {
    state.supervisor.stop_program(&name).await?;
    current(&state, &name)
}

fn current(state: &AppState, name: &str) -> Result<Json<Envelope<ProcessInfo>>, ApiError> {
    state
        .supervisor
        .status()
        .iter()
        .find(|p| p.name == name)
        .map(|p| Json(Envelope::ok(process_info(p))))
        .ok_or_else(|| ApiError::not_found(format!("no program named {name:?}")))
}

fn process_info(p: &ProgramStatus) -> ProcessInfo {
    ProcessInfo {
        name: p.name.clone(),
        state: p.state.as_str().into(),
        pid: p.pid,
        restarts: p.restarts,
        failures: p.failures,
        uptime_secs: p
            .uptime()
            .map(|d| (d.as_secs_f64() * 1000.0).round() / 1000.0),
        started_at: p.started_at.map(rfc3339),
        ready_at: p.ready_at.map(rfc3339),
        last_exit: p.last_exit.map(|exit| ExitInfo {
            code: match exit {
                ExitStatus::Code(code) => Some(code),
                ExitStatus::Signal { .. } => None,
            },
            signal: match exit {
                ExitStatus::Signal { signal, .. } => Some(signal),
                ExitStatus::Code(_) => None,
            },
            description: exit.to_string(),
        }),
        last_error: p.last_error.clone(),
        waiting_for: p.waiting_for.clone(),
        depends_on: p.depends_on.clone(),
        required: p.required,
    }
}
