//! `/v1/sandbox/hooks`: AIO's lifecycle hooks, served by [`crate::hooks`]: shell commands run as
//! the agent's user when the sandbox shuts down. Hooks from the environment cannot be removed.

use axum::Json;
use axum::extract::{Path, State};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{AioJson, AioQuery};
use crate::api::types::{
    Envelope, ErrorBody, HookEvent, HookListQuery, HookSource, RegisterHookRequest, SandboxHook,
};
use crate::api::validate::{self, SecondsRange};
use crate::hooks::{self, Hook, HookError, Source};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, register))
        .routes(routes!(remove))
}

/// The registered hooks, in the order they run (priority, then name).
#[utoipa::path(get, path = "/v1/sandbox/hooks", tag = "sandbox",
    params(HookListQuery),
    responses(
        (status = 200, body = Envelope<Vec<SandboxHook>>),
        (status = 422, description = "an unknown `event`", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<HookListQuery>,
) -> Result<Json<Envelope<Vec<SandboxHook>>>, ApiError> {
    if let Some(event) = query.event.as_deref()
        && event.trim() != "shutdown"
    {
        return Err(ApiError::invalid_at(
            vec!["query".into(), "event".into()],
            format!("`event` must be `shutdown` (the only event), got {event:?}"),
        ));
    }
    Ok(Json(Envelope::ok(
        state.hooks.list().into_iter().map(wire).collect(),
    )))
}

/// Registers a shutdown hook: `bash -c <command>`, run as the agent's user in the workspace
/// when the container is stopped, before the programs are. Lower `priority` runs first; the
/// same priority runs in parallel. Each is killed at its `timeout`, and all of them together
/// get at most 6 s, so the stop fits Docker's 10 s grace period. An `api` hook of the same
/// name is replaced.
#[utoipa::path(post, path = "/v1/sandbox/hooks", tag = "sandbox",
    request_body = RegisterHookRequest,
    responses(
        (status = 200, body = Envelope<SandboxHook>),
        (status = 409, description = "the name is an environment hook's, or 64 hooks are registered", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid (the message names it)", body = ErrorBody),
    ))]
pub async fn register(
    State(state): State<AppState>,
    AioJson(request): AioJson<RegisterHookRequest>,
) -> Result<Json<Envelope<SandboxHook>>, ApiError> {
    let timeout = validate::optional_seconds(
        "timeout",
        request.timeout,
        SecondsRange::above(0.0, hooks::MAX_TIMEOUT.as_secs_f64()),
    )?;
    let hook = hooks::hook(
        &request.name,
        &request.command,
        timeout,
        request.priority,
        Source::Api,
    )
    .map_err(hook_error)?;
    let hook = state.hooks.register(hook).map_err(hook_error)?;
    let mut envelope = Envelope::ok(wire(hook));
    envelope.message = "Hook registered".into();
    Ok(Json(envelope))
}

/// Removes an `api` hook (environment hooks cannot be removed).
#[utoipa::path(delete, path = "/v1/sandbox/hooks/{name}", tag = "sandbox",
    params(("name" = String, Path, description = "the hook's name")),
    responses(
        (status = 200, body = Envelope<SandboxHook>),
        (status = 403, description = "an environment hook", body = ErrorBody),
        (status = 404, description = "no such hook", body = ErrorBody),
    ))]
pub async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Envelope<SandboxHook>>, ApiError> {
    let hook = state.hooks.remove(&name).map_err(|error| match error {
        HookError::FromEnv(_) => ApiError::forbidden(error.to_string()),
        other => hook_error(other),
    })?;
    let mut envelope = Envelope::ok(wire(hook));
    envelope.message = "Hook removed".into();
    Ok(Json(envelope))
}

fn wire(hook: Hook) -> SandboxHook {
    SandboxHook {
        name: hook.name,
        event: HookEvent::Shutdown,
        command: hook.command,
        timeout: hook.timeout.as_secs_f64(),
        priority: hook.priority,
        source: match hook.source {
            Source::Env => HookSource::Env,
            Source::Api => HookSource::Api,
        },
    }
}

fn hook_error(error: HookError) -> ApiError {
    let message = error.to_string();
    match error {
        HookError::Invalid { field, .. } => ApiError::invalid(field, message),
        HookError::NotFound(_) => ApiError::not_found(message),
        HookError::FromEnv(_) | HookError::Full => ApiError::conflict(message),
    }
}
