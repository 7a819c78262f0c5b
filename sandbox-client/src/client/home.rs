//! The home archive: `POST /v1/sandbox/home/archive` written into any `AsyncWrite` as it
//! arrives (never held whole), and `POST /v1/sandbox/home/release`.

use std::time::Duration;

use reqwest::Method;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::SandboxClient;
use crate::error::ClientError;
use crate::types::{HomeArchiveRequest, HomeReleased};

impl SandboxClient {
    /// Streams the home's archive into `out`, refused with [`ClientError::TooLarge`] past
    /// `limit` bytes; `timeout` bounds the whole transfer. Returns the bytes written. An archive
    /// that ends early (sandboxd failed while writing it) is an error: what `out` got is not an
    /// archive and must be dropped.
    pub async fn home_archive<W: AsyncWrite + Unpin>(
        &self,
        request: &HomeArchiveRequest,
        out: &mut W,
        limit: u64,
        timeout: Duration,
    ) -> Result<u64, ClientError> {
        const OPERATION: &str = "home archive";
        let request = self
            .request(Method::POST, "/v1/sandbox/home/archive")
            .timeout(timeout)
            .json(request);
        let mut response = self.send(OPERATION, request).await?;
        let mut written = 0u64;
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|source| ClientError::Transport {
                    operation: OPERATION,
                    source,
                })?;
            let Some(chunk) = chunk else { break };
            written += chunk.len() as u64;
            if written > limit {
                return Err(ClientError::TooLarge {
                    operation: OPERATION,
                    limit,
                });
            }
            out.write_all(&chunk)
                .await
                .map_err(|e| ClientError::Decode {
                    operation: OPERATION,
                    reason: format!("writing the archive: {e}"),
                })?;
        }
        out.flush().await.map_err(|e| ClientError::Decode {
            operation: OPERATION,
            reason: format!("writing the archive: {e}"),
        })?;
        Ok(written)
    }

    /// Releases a sandbox held after its archive (`keep_held`).
    pub async fn home_release(&self) -> Result<HomeReleased, ClientError> {
        self.post_json(
            "home release",
            "/v1/sandbox/home/release",
            &serde_json::json!({}),
        )
        .await
    }
}
