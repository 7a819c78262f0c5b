//! The orchestrator's heartbeat.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /v1/activity`: what the sandbox is doing, for the orchestrator's idle reaper.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ActivityReport {
    /// Requests and long-lived sessions (terminals, WebSockets) in progress, not counting this
    /// heartbeat.
    pub in_flight: usize,
    /// Seconds since the last activity before this heartbeat (0 while something is in flight).
    pub idle_secs: f64,
}
