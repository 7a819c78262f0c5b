//! Lifecycle hooks (`/v1/sandbox/hooks`): shell commands sandboxd runs as the agent's user when
//! the sandbox shuts down. AIO's `SandboxHook` and its registration request.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::names::name_enum;

name_enum! {
    /// When a hook runs. Only `shutdown` (SIGTERM to the container) exists.
    pub enum HookEvent, "event" {
        Shutdown = "shutdown",
    }
}

name_enum! {
    /// Where a hook comes from: `env` (`SANDBOX_SHUTDOWN_HOOKS` at start; cannot be removed)
    /// or `api`.
    pub enum HookSource, "source" {
        Env = "env",
        Api = "api",
    }
}

/// One registered hook.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SandboxHook {
    pub name: String,
    pub event: HookEvent,
    /// Run by `bash -c`, as the agent's user, in the workspace.
    pub command: String,
    /// Seconds the command may run before it is killed.
    pub timeout: f64,
    /// Lower runs earlier; hooks of the same priority run in parallel.
    pub priority: i64,
    pub source: HookSource,
}

/// `POST /v1/sandbox/hooks`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct RegisterHookRequest {
    /// Unique name: letters, digits, `.`, `_`, `-`; at most 64 characters. Registering an
    /// existing `api` hook's name replaces it.
    pub name: String,
    /// Default `shutdown`, the only event.
    pub event: Option<HookEvent>,
    /// The shell command (at most 16 KiB).
    pub command: String,
    /// Seconds, above 0 and at most 8 (default 5). Every hook's run together is bounded too,
    /// so the shutdown fits Docker's stop grace period.
    pub timeout: Option<f64>,
    /// Default 0; lower runs earlier.
    pub priority: Option<i64>,
}

/// `GET /v1/sandbox/hooks` query.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HookListQuery {
    /// Only hooks of this event.
    pub event: Option<String>,
}
