//! The orchestrator's calls to sandboxd's own routes, through `sandbox_client`: readiness while a
//! sandbox starts, the heartbeat (`GET /v1/activity`) that keeps its dead-man switch from
//! firing and reports work in flight, and the home archive of hibernation and snapshots. One
//! connection pool serves every sandbox.
//!
//! The lifecycle holds these calls as a [`SandboxProbe`] (`Arc<dyn SandboxProbe>`), so tests
//! can answer them without a container; [`SandboxdClient`] is the real one.

use std::time::Duration;

use sandbox_client::{ClientConfig, ClientError, SandboxClient};

use crate::backend::SANDBOXD_PORT;

pub use sandbox_client::types::{ActivityReport, HomeArchiveRequest};

/// How long a home archive may take to arrive (a full home of a few GiB over the bridge).
const ARCHIVE_TIMEOUT: Duration = Duration::from_secs(600);

/// What the lifecycle asks a sandbox's sandboxd: whether it is ready, and the heartbeat.
#[async_trait::async_trait]
pub trait SandboxProbe: Send + Sync {
    /// `GET /readyz`: `Ok(true)` when ready, `Ok(false)` when sandboxd answers "not yet" (or
    /// anything but a readiness report, such as a refused key), `Err` when it does not answer.
    async fn ready(&self, address: &str, key: &str) -> Result<bool, ClientError>;
    /// Like [`ready`](Self::ready), describing the answer: the status and sandboxd's message
    /// (which names the programs that are not ready), or why there was none.
    async fn readiness_message(&self, address: &str, key: &str) -> String;
    /// The heartbeat, `GET /v1/activity`.
    async fn activity(&self, address: &str, key: &str) -> Result<ActivityReport, ClientError>;
    /// `POST /v1/sandbox/home/archive`, written into `out` as it arrives, refused past `limit`
    /// bytes. Returns the bytes written; an error means `out` holds no whole archive.
    async fn archive_home(
        &self,
        address: &str,
        key: &str,
        request: &HomeArchiveRequest,
        out: &mut tokio::fs::File,
        limit: u64,
    ) -> Result<u64, ClientError>;
    /// `POST /v1/sandbox/home/release`: gives back a sandbox held after its archive.
    async fn release_home(&self, address: &str, key: &str) -> Result<bool, ClientError>;
}

/// Talks to sandboxd over the sandbox network.
#[derive(Debug, Clone)]
pub struct SandboxdClient {
    /// The pool shared by the per-sandbox clients.
    http: reqwest::Client,
    config: ClientConfig,
}

impl Default for SandboxdClient {
    fn default() -> Self {
        Self::new()
    }
}

impl SandboxdClient {
    pub fn new() -> Self {
        let config = ClientConfig {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            readiness_timeout: Duration::from_secs(2),
            pool_idle_timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        };
        let http = config
            .http_client()
            // Building a client without TLS or proxies only fails on a broken system resolver
            // setup; the default client has the same needs.
            .unwrap_or_default();
        Self { http, config }
    }

    /// The client for the sandboxd at `address` with its key.
    fn sandbox(&self, address: &str, key: &str) -> Result<SandboxClient, ClientError> {
        SandboxClient::with_http(
            self.http.clone(),
            &format!("http://{address}:{SANDBOXD_PORT}"),
            Some(key),
            &self.config,
        )
    }
}

#[async_trait::async_trait]
impl SandboxProbe for SandboxdClient {
    async fn ready(&self, address: &str, key: &str) -> Result<bool, ClientError> {
        match self.sandbox(address, key)?.readyz().await {
            Ok(readiness) => Ok(readiness.ready),
            Err(ClientError::Status { .. } | ClientError::Decode { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn readiness_message(&self, address: &str, key: &str) -> String {
        let answer = match self.sandbox(address, key) {
            Ok(sandbox) => sandbox.readyz().await,
            Err(error) => Err(error),
        };
        match answer {
            Ok(readiness) if readiness.ready => format!("200 {}", readiness.message),
            Ok(readiness) => format!("503 {}", readiness.message),
            Err(error) => error.to_string(),
        }
    }

    async fn activity(&self, address: &str, key: &str) -> Result<ActivityReport, ClientError> {
        self.sandbox(address, key)?.activity().await
    }

    async fn archive_home(
        &self,
        address: &str,
        key: &str,
        request: &HomeArchiveRequest,
        out: &mut tokio::fs::File,
        limit: u64,
    ) -> Result<u64, ClientError> {
        self.sandbox(address, key)?
            .home_archive(request, out, limit, ARCHIVE_TIMEOUT)
            .await
    }

    async fn release_home(&self, address: &str, key: &str) -> Result<bool, ClientError> {
        Ok(self.sandbox(address, key)?.home_release().await?.released)
    }
}
