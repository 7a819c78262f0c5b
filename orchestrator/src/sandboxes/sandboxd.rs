//! The orchestrator's client for sandboxd's own routes: readiness while a sandbox starts, and
//! the heartbeat (`GET /v1/activity`) that keeps its dead-man switch from firing and reports
//! work in flight.

use std::time::Duration;

use serde::Deserialize;

use crate::backend::SANDBOXD_PORT;

/// sandboxd's answer to the heartbeat.
#[derive(Debug, Clone, Deserialize)]
pub struct ActivityReport {
    pub in_flight: usize,
    #[allow(dead_code)]
    pub idle_secs: f64,
    /// Whether every required program is ready (older sandboxd versions do not say: assume so).
    #[serde(default = "assume_ready")]
    pub ready: bool,
    #[serde(default)]
    pub not_ready: Vec<String>,
}

fn assume_ready() -> bool {
    true
}

/// Talks to sandboxd over the sandbox network.
#[derive(Debug, Clone)]
pub struct SandboxdClient {
    http: reqwest::Client,
}

impl Default for SandboxdClient {
    fn default() -> Self {
        Self::new()
    }
}

impl SandboxdClient {
    pub fn new() -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(2))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            // Building a client without TLS or proxies only fails on a broken system resolver
            // setup; the default client has the same needs.
            .unwrap_or_default();
        Self { http }
    }

    fn url(address: &str, path: &str) -> String {
        format!("http://{address}:{SANDBOXD_PORT}{path}")
    }

    /// `GET /readyz`: `Ok(true)` when ready, `Ok(false)` when sandboxd answers "not yet",
    /// `Err` with a description when it does not answer.
    pub async fn ready(&self, address: &str, key: &str) -> Result<bool, String> {
        let response = self
            .http
            .get(Self::url(address, "/readyz"))
            .bearer_auth(key)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(response.status().is_success())
    }

    /// Like [`ready`](Self::ready), returning the body of a "not ready" answer.
    pub async fn readiness_message(&self, address: &str, key: &str) -> String {
        match self
            .http
            .get(Self::url(address, "/readyz"))
            .bearer_auth(key)
            .send()
            .await
        {
            Ok(response) => format!(
                "{} {}",
                response.status().as_u16(),
                response.text().await.unwrap_or_default()
            ),
            Err(error) => error.to_string(),
        }
    }

    /// The heartbeat.
    pub async fn activity(&self, address: &str, key: &str) -> Result<ActivityReport, String> {
        let response = self
            .http
            .get(Self::url(address, "/v1/activity"))
            .bearer_auth(key)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("heartbeat answered {}", response.status()));
        }
        response.json().await.map_err(|e| e.to_string())
    }
}
