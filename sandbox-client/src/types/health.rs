//! Liveness and readiness.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /healthz`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
}

/// `GET /readyz`: 200 when every required program is ready, else 503.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    /// Required programs that are not ready, with their states.
    pub not_ready: Vec<NotReady>,
    pub message: String,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct NotReady {
    pub name: String,
    pub state: String,
}
