//! [`SandboxClient`]: sandboxd's API over HTTP with typed requests and answers.
//!
//! One client talks to one sandboxd (a base URL and its key). It is cheap to clone; clones and
//! clients made with [`SandboxClient::with_http`] from one [`reqwest::Client`] share its
//! connection pool, so a program talking to many sandboxes keeps one pool.
//!
//! Every call sends `Authorization: Bearer <key>` and is bounded by a timeout. JSON answers
//! arrive in AIO's envelope `{success, message, data, hint}`: the client returns `data`, turns
//! `success: false` into [`ClientError::Failed`] and an error status into
//! [`ClientError::Status`] with the envelope's message and, for 422, the field at fault.
//!
//! Layout: this module holds the client, its configuration and the request plumbing; the
//! calls are grouped by resource in [`health`], [`desktop`], [`shell`], [`files`] and
//! [`browser`].

pub mod browser;
pub mod desktop;
pub mod files;
pub mod health;
pub mod home;
pub mod shell;

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use desktop::Screenshot;

use crate::error::ClientError;
use crate::types::{Envelope, ErrorBody};

/// Most bytes of an error answer read to find its message.
const MAX_ERROR_BODY: u64 = 64 * 1024;
/// Most characters of a body that is not an envelope quoted in an error.
const QUOTED_BODY_CHARS: usize = 500;

/// Timeouts, pooling and limits.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Limit on a whole call (connect, send, answer) unless the call sets its own.
    pub request_timeout: Duration,
    /// Limit on opening a connection.
    pub connect_timeout: Duration,
    /// Limit on `readyz`: readiness is polled, and a slow answer is a "not yet".
    pub readiness_timeout: Duration,
    /// How long an idle pooled connection is kept.
    pub pool_idle_timeout: Duration,
    /// Largest answer body read (downloads, screenshots, JSON).
    pub max_body_bytes: u64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(2),
            readiness_timeout: Duration::from_secs(2),
            pool_idle_timeout: Duration::from_secs(30),
            max_body_bytes: 512 * 1024 * 1024,
        }
    }
}

impl ClientConfig {
    /// A pooled HTTP client with these timeouts, to share between [`SandboxClient`]s.
    pub fn http_client(&self) -> Result<reqwest::Client, ClientError> {
        reqwest::Client::builder()
            .timeout(self.request_timeout)
            .connect_timeout(self.connect_timeout)
            .pool_idle_timeout(self.pool_idle_timeout)
            .build()
            .map_err(ClientError::Build)
    }
}

/// A typed client for one sandboxd.
#[derive(Clone)]
pub struct SandboxClient {
    http: reqwest::Client,
    /// `http://host:port`, without a trailing slash; paths are appended to it.
    base: Arc<str>,
    /// sandboxd's API key; `None` when it runs without one.
    key: Option<Arc<str>>,
    readiness_timeout: Duration,
    request_timeout: Duration,
    max_body_bytes: u64,
}

impl std::fmt::Debug for SandboxClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxClient")
            .field("base", &self.base)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl SandboxClient {
    /// A client for the sandboxd at `base_url` (`http://10.0.0.5:8080`) with the default
    /// [`ClientConfig`] and a pool of its own.
    pub fn new(base_url: &str, key: Option<&str>) -> Result<Self, ClientError> {
        Self::with_config(base_url, key, &ClientConfig::default())
    }

    /// Like [`new`](Self::new), with `config`.
    pub fn with_config(
        base_url: &str,
        key: Option<&str>,
        config: &ClientConfig,
    ) -> Result<Self, ClientError> {
        Self::with_http(config.http_client()?, base_url, key, config)
    }

    /// A client that sends through `http` (its pool and default timeouts, typically made by
    /// [`ClientConfig::http_client`]); `config` gives the readiness timeout and body limit.
    pub fn with_http(
        http: reqwest::Client,
        base_url: &str,
        key: Option<&str>,
        config: &ClientConfig,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            http,
            base: normalize_base(base_url)?.into(),
            key: key.map(Arc::from),
            readiness_timeout: config.readiness_timeout,
            request_timeout: config.request_timeout,
            max_body_bytes: config.max_body_bytes,
        })
    }

    /// The base URL calls go to, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// A request to `path` with the key.
    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Sends `request`; an error status becomes [`ClientError::Status`].
    async fn send(
        &self,
        operation: &'static str,
        request: RequestBuilder,
    ) -> Result<Response, ClientError> {
        let response = request
            .send()
            .await
            .map_err(|source| ClientError::Transport { operation, source })?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(status_error(operation, response).await)
    }

    /// `POST path` with a JSON body; the envelope's `data`.
    async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        operation: &'static str,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let request = self.request(Method::POST, path).json(body);
        self.envelope(operation, request).await
    }

    /// Sends `request` and returns its envelope's `data`.
    async fn envelope<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        request: RequestBuilder,
    ) -> Result<T, ClientError> {
        let response = self.send(operation, request).await?;
        let envelope: Envelope<T> = self.json(operation, response).await?;
        if !envelope.success {
            return Err(ClientError::Failed {
                operation,
                message: envelope.message,
                hint: envelope.hint,
            });
        }
        envelope.data.ok_or_else(|| ClientError::Decode {
            operation,
            reason: "the envelope has no `data`".into(),
        })
    }

    /// The body of `response` as JSON of type `T`.
    async fn json<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        response: Response,
    ) -> Result<T, ClientError> {
        let bytes = read_body(operation, response, self.max_body_bytes).await?;
        serde_json::from_slice(&bytes).map_err(|error| ClientError::Decode {
            operation,
            reason: error.to_string(),
        })
    }

    /// The body of `response`, at most [`ClientConfig::max_body_bytes`].
    async fn bytes(
        &self,
        operation: &'static str,
        response: Response,
    ) -> Result<Vec<u8>, ClientError> {
        read_body(operation, response, self.max_body_bytes).await
    }
}

/// Checks `base_url` and drops its trailing slashes.
fn normalize_base(base_url: &str) -> Result<String, ClientError> {
    let invalid = |reason: &str| ClientError::BaseUrl {
        url: base_url.to_string(),
        reason: reason.to_string(),
    };
    let url = reqwest::Url::parse(base_url).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.host_str().is_none() {
        return Err(invalid("it has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("it must not have a query or a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "it must not carry credentials (the key goes in its own argument)",
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// Reads a body chunk by chunk, failing once it passes `limit` bytes.
async fn read_body(
    operation: &'static str,
    mut response: Response,
    limit: u64,
) -> Result<Vec<u8>, ClientError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(ClientError::TooLarge { operation, limit });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|source| ClientError::Transport { operation, source })?
    {
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(ClientError::TooLarge { operation, limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error answer as [`ClientError::Status`]: sandboxd's envelope (with FastAPI's `detail` for
/// 422), the orchestrator's `{"error": {"message"}}`, or the start of the body as text.
async fn status_error(operation: &'static str, response: Response) -> ClientError {
    let status = response.status();
    let body = match read_body(operation, response, MAX_ERROR_BODY).await {
        Ok(body) => body,
        Err(ClientError::TooLarge { .. }) => {
            return ClientError::Status {
                operation,
                status,
                message: format!("an error body larger than {MAX_ERROR_BODY} bytes"),
                loc: None,
            };
        }
        Err(error) => return error,
    };
    let (message, loc) = error_message(status, &body);
    ClientError::Status {
        operation,
        status,
        message,
        loc,
    }
}

/// The message (and 422 location) of an error body.
fn error_message(status: StatusCode, body: &[u8]) -> (String, Option<Vec<String>>) {
    if let Ok(envelope) = serde_json::from_slice::<ErrorBody>(body) {
        let loc = envelope
            .detail
            .and_then(|detail| detail.into_iter().next())
            .map(|detail| detail.loc);
        return (envelope.message, loc);
    }
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body)
        && let Some(message) = value
            .pointer("/error/message")
            .or_else(|| value.get("message"))
            .and_then(|m| m.as_str())
    {
        return (message.to_string(), None);
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return (
            status
                .canonical_reason()
                .unwrap_or("no message")
                .to_string(),
            None,
        );
    }
    (text.chars().take(QUOTED_BODY_CHARS).collect(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        assert_eq!(
            normalize_base("http://10.0.0.5:8080/").unwrap(),
            "http://10.0.0.5:8080"
        );
        assert_eq!(
            normalize_base("https://box.example/api/sbx-1").unwrap(),
            "https://box.example/api/sbx-1"
        );
        for bad in [
            "10.0.0.5:8080",
            "ftp://10.0.0.5",
            "http://h/?a=1",
            "http://user:pw@h/",
            "",
        ] {
            assert!(
                matches!(normalize_base(bad), Err(ClientError::BaseUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn error_bodies_of_every_shape_give_a_message() {
        let aio = br#"{"success":false,"message":"button must be left","data":null,
            "detail":[{"loc":["body","button"],"msg":"button must be left","type":"value_error"}]}"#;
        assert_eq!(
            error_message(StatusCode::UNPROCESSABLE_ENTITY, aio),
            (
                "button must be left".to_string(),
                Some(vec!["body".to_string(), "button".to_string()])
            )
        );
        let orchestrator = br#"{"error":{"code":"unauthorized","message":"no key"}}"#;
        assert_eq!(
            error_message(StatusCode::UNAUTHORIZED, orchestrator).0,
            "no key"
        );
        assert_eq!(
            error_message(StatusCode::BAD_GATEWAY, b"upstream gone\n").0,
            "upstream gone"
        );
        assert_eq!(error_message(StatusCode::BAD_GATEWAY, b"").0, "Bad Gateway");
        let long = "x".repeat(5000);
        assert_eq!(
            error_message(StatusCode::BAD_GATEWAY, long.as_bytes())
                .0
                .len(),
            QUOTED_BODY_CHARS
        );
    }

    #[test]
    fn debug_never_shows_the_key() {
        let client = SandboxClient::new("http://127.0.0.1:1", Some("secret-key")).unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("secret-key"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
