//! Liveness, readiness, the heartbeat and the sandbox's context: `/healthz`, `/readyz`,
//! `/v1/activity`, `/v1/sandbox`.

use reqwest::{Method, StatusCode};

use super::SandboxClient;
use crate::error::ClientError;
use crate::types::{ActivityReport, Health, Readiness, SandboxContext};

impl SandboxClient {
    /// `GET /healthz`: sandboxd answers (no key needed).
    pub async fn healthz(&self) -> Result<Health, ClientError> {
        const OPERATION: &str = "healthz";
        let response = self
            .send(OPERATION, self.request(Method::GET, "/healthz"))
            .await?;
        self.json(OPERATION, response).await
    }

    /// `GET /readyz`, bounded by [`ClientConfig::readiness_timeout`](super::ClientConfig).
    /// "Not ready" (503) is an answer, not an error: `ready` is false and `message` names the
    /// programs that are not ready. Any other error status is [`ClientError::Status`].
    pub async fn readyz(&self) -> Result<Readiness, ClientError> {
        const OPERATION: &str = "readyz";
        let request = self
            .request(Method::GET, "/readyz")
            .timeout(self.readiness_timeout);
        let response = request
            .send()
            .await
            .map_err(|source| ClientError::Transport {
                operation: OPERATION,
                source,
            })?;
        let status = response.status();
        if !(status.is_success() || status == StatusCode::SERVICE_UNAVAILABLE) {
            return Err(super::status_error(OPERATION, response).await);
        }
        let readiness: Readiness = self.json(OPERATION, response).await?;
        if readiness.ready != status.is_success() {
            return Err(ClientError::Decode {
                operation: OPERATION,
                reason: format!("status {status} with `ready: {}`", readiness.ready),
            });
        }
        Ok(readiness)
    }

    /// `GET /v1/activity`: the heartbeat. It resets sandboxd's idle dead-man switch and reports
    /// the work in flight before it.
    pub async fn activity(&self) -> Result<ActivityReport, ClientError> {
        const OPERATION: &str = "activity";
        let response = self
            .send(OPERATION, self.request(Method::GET, "/v1/activity"))
            .await?;
        self.json(OPERATION, response).await
    }

    /// `GET /v1/sandbox`: the home directory, workspace, version and installed runtimes.
    pub async fn sandbox_context(&self) -> Result<SandboxContext, ClientError> {
        self.envelope("sandbox context", self.request(Method::GET, "/v1/sandbox"))
            .await
    }
}
