//! The model gateway: one streamed HTTP call to a provider, with the duties seed 002 lists.
//!
//! - Typed errors in three layers ([`GatewayError`]): an error status with the provider's error
//!   type and a scrubbed body excerpt; an error reported inside the stream; a transport error
//!   (before the answer or while reading it).
//! - Retries ([`RetryPolicy`]) on 408/409/429/5xx/529, on transport errors, and on retryable
//!   errors reported in the stream, with exponential back-off and jitter, honouring
//!   `retry-after` / `retry-after-ms`.
//! - **A connection dropped mid-stream is retried**: a model call has no side effect on the
//!   sandbox, so the whole request is sent again and the partial answer is thrown away (never
//!   half-used). Once the attempts are used up it is a [`GatewayError::Transport`] with
//!   [`TransportPhase::Body`].
//! - Timeouts: connect, whole request, and idle time between two chunks of the stream.
//! - The SSE body goes through [`crate::sse::SseDecoder`], so chunk boundaries do not matter;
//!   each provider's [`StreamAssembler`] rebuilds the answer from the events.

pub mod error;
pub mod retry;

use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

pub use error::{GatewayError, TransportPhase};
pub use retry::RetryPolicy;

use crate::secret::Secret;
use crate::sse::{SseDecoder, SseEvent};

/// Largest error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest streamed answer read (a model turn is far smaller; more is a broken stream).
pub const MAX_STREAM_BYTES: usize = 64 * 1024 * 1024;

/// Timeouts and retries of a gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    pub connect_timeout: Duration,
    /// The whole call: request, and the streamed answer to its end.
    pub request_timeout: Duration,
    /// Longest silence between two chunks of a streamed answer.
    pub idle_timeout: Duration,
    pub retry: RetryPolicy,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
        }
    }
}

/// Why an assembler rejected the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// The provider reported an error in the stream.
    Provider { kind: String, message: String },
    /// The stream ended before its final event (treated as a cut connection).
    Incomplete(String),
    /// An event that cannot be understood.
    Protocol(String),
}

/// Rebuilds one provider answer from its stream of events.
pub trait StreamAssembler: Send {
    type Output: Send;
    fn event(&mut self, event: SseEvent) -> Result<(), StreamError>;
    /// The stream ended: the answer, or [`StreamError::Incomplete`] if its end was never seen.
    fn finish(self) -> Result<Self::Output, StreamError>;
}

/// A successful call and what it took.
#[derive(Debug)]
pub struct CallReport<T> {
    pub output: T,
    pub attempts: u32,
    /// The waits before each retry.
    pub delays: Vec<Duration>,
}

/// An HTTP client for one provider.
pub struct Gateway {
    provider: &'static str,
    client: reqwest::Client,
    options: HttpOptions,
    /// Secrets scrubbed from error bodies.
    secrets: Vec<Secret>,
    rng: Mutex<fastrand::Rng>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("provider", &self.provider)
            .field("options", &self.options)
            .finish()
    }
}

/// A failed attempt and whether to try again.
struct Failure {
    error: GatewayError,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl Gateway {
    pub fn new(
        provider: &'static str,
        options: HttpOptions,
        secrets: Vec<Secret>,
    ) -> Result<Self, GatewayError> {
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| GatewayError::Protocol {
                provider,
                message: format!("cannot set up the HTTP client: {e}"),
            })?;
        Ok(Self {
            provider,
            client,
            options,
            secrets,
            rng: Mutex::new(fastrand::Rng::new()),
        })
    }

    /// Refuses an https URL when this build cannot speak TLS, so the problem shows before a run.
    pub fn check_url(url: &str) -> Result<(), GatewayError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(GatewayError::Protocol {
                provider: "gateway",
                message: format!("the base URL must start with http:// or https://, got {url:?}"),
            });
        }
        if url.starts_with("https://") && !cfg!(feature = "tls") {
            return Err(GatewayError::TlsNotCompiled {
                url: url.to_string(),
            });
        }
        Ok(())
    }

    /// POSTs `body` as JSON to `url` and assembles the streamed answer, retrying per the policy.
    pub async fn post_stream<A: StreamAssembler>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &serde_json::Value,
        make: impl Fn() -> A,
    ) -> Result<CallReport<A::Output>, GatewayError> {
        let policy = self.options.retry;
        let mut delays = Vec::new();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let failure = match self.attempt(url, headers, body, make()).await {
                Ok(output) => {
                    return Ok(CallReport {
                        output,
                        attempts: attempt,
                        delays,
                    });
                }
                Err(failure) => failure,
            };
            let error = with_attempts(failure.error, attempt);
            if !failure.retryable || attempt >= policy.max_attempts.max(1) {
                return Err(error);
            }
            let delay = {
                // The lock only guards the generator; a poisoned one is still usable.
                let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                policy.delay(attempt, failure.retry_after, &mut rng)
            };
            let Some(delay) = delay else {
                return Err(error);
            };
            tracing::warn!(
                provider = self.provider,
                attempt,
                delay_ms = delay.as_millis() as u64,
                error = %error,
                "model call failed; retrying"
            );
            delays.push(delay);
            tokio::time::sleep(delay).await;
        }
    }

    async fn attempt<A: StreamAssembler>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &serde_json::Value,
        mut assembler: A,
    ) -> Result<A::Output, Failure> {
        let provider = self.provider;
        let response = self
            .client
            .post(url)
            .headers(headers.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .timeout(self.options.request_timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| Failure {
                error: transport(provider, TransportPhase::Request, &e),
                retryable: true,
                retry_after: None,
            })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry::retry_after(response.headers());
            let text = self.read_error_body(response).await;
            let (provider_type, message) = error::parse_error_body(&text);
            return Err(Failure {
                error: GatewayError::Http {
                    provider,
                    status: status.as_u16(),
                    provider_type,
                    message: message.map(|m| self.scrub(&m)),
                    body_excerpt: error::excerpt(&self.scrub(&text)),
                    retry_after,
                    attempts: 0,
                },
                retryable: error::retryable_status(status.as_u16()),
                retry_after,
            });
        }
        let mut stream = response.bytes_stream();
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let mut received = 0usize;
        loop {
            let next = tokio::time::timeout(self.options.idle_timeout, stream.next()).await;
            let chunk = match next {
                Err(_) => {
                    return Err(Failure {
                        error: GatewayError::Transport {
                            provider,
                            phase: TransportPhase::Body,
                            timed_out: true,
                            message: format!(
                                "no data for {} s",
                                self.options.idle_timeout.as_secs_f64()
                            ),
                            attempts: 0,
                        },
                        retryable: true,
                        retry_after: None,
                    });
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(Failure {
                        error: transport(provider, TransportPhase::Body, &e),
                        retryable: true,
                        retry_after: None,
                    });
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            received += chunk.len();
            if received > MAX_STREAM_BYTES {
                return Err(Failure {
                    error: GatewayError::Protocol {
                        provider,
                        message: format!("the answer is larger than {MAX_STREAM_BYTES} bytes"),
                    },
                    retryable: false,
                    retry_after: None,
                });
            }
            decoder.push(&chunk, &mut events).map_err(|e| Failure {
                error: GatewayError::Protocol {
                    provider,
                    message: e.to_string(),
                },
                retryable: false,
                retry_after: None,
            })?;
            for event in events.drain(..) {
                assembler.event(event).map_err(|e| self.stream_failure(e))?;
            }
        }
        assembler.finish().map_err(|e| self.stream_failure(e))
    }

    fn stream_failure(&self, error: StreamError) -> Failure {
        let provider = self.provider;
        match error {
            StreamError::Provider { kind, message } => Failure {
                retryable: error::retryable_provider_type(&kind),
                error: GatewayError::Provider {
                    provider,
                    provider_type: kind,
                    message: self.scrub(&message),
                    attempts: 0,
                },
                retry_after: None,
            },
            StreamError::Incomplete(message) => Failure {
                error: GatewayError::Transport {
                    provider,
                    phase: TransportPhase::Body,
                    timed_out: false,
                    message,
                    attempts: 0,
                },
                retryable: true,
                retry_after: None,
            },
            StreamError::Protocol(message) => Failure {
                error: GatewayError::Protocol { provider, message },
                retryable: false,
                retry_after: None,
            },
        }
    }

    async fn read_error_body(&self, response: reqwest::Response) -> String {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Ok(Some(Ok(chunk))) =
            tokio::time::timeout(self.options.idle_timeout, stream.next()).await
        {
            let room = MAX_ERROR_BODY.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
        String::from_utf8_lossy(&body).into_owned()
    }

    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.secrets {
            text = secret.scrub(&text);
        }
        error::mask_key_like(&text)
    }
}

/// A header value that is never printed (`Debug` of the header map hides it).
pub fn sensitive_header(value: &str) -> Option<HeaderValue> {
    let mut header = HeaderValue::from_str(value).ok()?;
    header.set_sensitive(true);
    Some(header)
}

/// Inserts a header whose value is known to be valid ASCII.
pub fn insert_header(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

fn transport(
    provider: &'static str,
    phase: TransportPhase,
    error: &reqwest::Error,
) -> GatewayError {
    let mut message = if error.is_timeout() {
        "timed out".to_string()
    } else if error.is_connect() {
        "connection failed".to_string()
    } else {
        "connection error".to_string()
    };
    // The error's own Display includes the URL; only its causes are kept.
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    GatewayError::Transport {
        provider,
        phase,
        timed_out: error.is_timeout(),
        message,
        attempts: 0,
    }
}

fn with_attempts(error: GatewayError, attempts: u32) -> GatewayError {
    match error {
        GatewayError::Http {
            provider,
            status,
            provider_type,
            message,
            body_excerpt,
            retry_after,
            ..
        } => GatewayError::Http {
            provider,
            status,
            provider_type,
            message,
            body_excerpt,
            retry_after,
            attempts,
        },
        GatewayError::Provider {
            provider,
            provider_type,
            message,
            ..
        } => GatewayError::Provider {
            provider,
            provider_type,
            message,
            attempts,
        },
        GatewayError::Transport {
            provider,
            phase,
            timed_out,
            message,
            ..
        } => GatewayError::Transport {
            provider,
            phase,
            timed_out,
            message,
            attempts,
        },
        other => other,
    }
}
