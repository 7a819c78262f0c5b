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
    /// Whether every required program is ready (what `/readyz` says), so the heartbeat also
    /// tells the orchestrator when the sandbox degrades and recovers. Always sent; a client
    /// reading an older sandboxd that does not send it assumes ready.
    #[serde(default = "assume_ready")]
    #[schema(required = true)]
    pub ready: bool,
    /// The required programs that are not ready, as `name (state)`.
    #[serde(default)]
    #[schema(required = true)]
    pub not_ready: Vec<String>,
}

fn assume_ready() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_sandboxd_without_readiness_counts_as_ready() {
        let report: ActivityReport =
            serde_json::from_str(r#"{"in_flight": 2, "idle_secs": 0.5}"#).unwrap();
        assert_eq!((report.in_flight, report.ready), (2, true));
        assert!(report.not_ready.is_empty());
    }
}
