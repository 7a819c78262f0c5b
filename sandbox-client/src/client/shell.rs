//! Shell sessions: `POST /v1/shell/exec`, `/view`, `/wait`, `/kill`.

use std::time::Duration;

use super::SandboxClient;
use crate::error::ClientError;
use crate::types::{
    ShellCommandResult, ShellExecRequest, ShellKillResult, ShellSessionRequest, ShellViewResult,
    ShellWaitRequest, ShellWaitResult,
};

/// Time allowed on top of a command's own limits for the call around it.
const SHELL_MARGIN: Duration = Duration::from_secs(10);

impl SandboxClient {
    /// Runs a command (in session `request.id`, created when absent or unknown). The answer
    /// comes when it ends, at `timeout` (`running`), at `no_change_timeout`, or at once with
    /// `async_mode`. The call's own timeout covers the longest of the command's limits.
    pub async fn shell_exec(
        &self,
        request: &ShellExecRequest,
    ) -> Result<ShellCommandResult, ClientError> {
        let limits = [
            request.timeout,
            request.hard_timeout,
            request.no_change_timeout,
        ];
        let http = self
            .request(reqwest::Method::POST, "/v1/shell/exec")
            .json(request)
            .timeout(self.longest(&limits));
        self.envelope("shell exec", http).await
    }

    /// The session's latest command: its output so far and its status.
    pub async fn shell_view(&self, id: &str) -> Result<ShellViewResult, ClientError> {
        let body = ShellSessionRequest { id: id.to_string() };
        self.post_json("shell view", "/v1/shell/view", &body).await
    }

    /// Waits for the session's command to end, at most `seconds` (or `max_wait_seconds`).
    pub async fn shell_wait(
        &self,
        request: &ShellWaitRequest,
    ) -> Result<ShellWaitResult, ClientError> {
        let http = self
            .request(reqwest::Method::POST, "/v1/shell/wait")
            .json(request)
            .timeout(self.longest(&[request.seconds, request.max_wait_seconds]));
        self.envelope("shell wait", http).await
    }

    /// Ends the session's running command and every process it started.
    pub async fn shell_kill(&self, id: &str) -> Result<ShellKillResult, ClientError> {
        let body = ShellSessionRequest { id: id.to_string() };
        self.post_json("shell kill", "/v1/shell/kill", &body).await
    }

    /// The request timeout, or the longest of `limits` (seconds) plus a margin when longer.
    fn longest(&self, limits: &[Option<f64>]) -> Duration {
        limits
            .iter()
            .flatten()
            .filter(|secs| secs.is_finite() && **secs > 0.0)
            .map(|secs| Duration::from_secs_f64(secs.min(86_400.0)) + SHELL_MARGIN)
            .fold(self.request_timeout, Duration::max)
    }
}
