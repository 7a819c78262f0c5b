//! [`GatewayError`]: the three layers of failure of a model call (seed 002): the provider
//! refused the request (an HTTP status with its body), the provider reported an error inside an
//! accepted stream, or the connection failed. Keys never appear in them: bodies are scrubbed.

use std::time::Duration;

/// How much of an error body is kept.
pub const BODY_EXCERPT_CHARS: usize = 2000;

/// Where a transport error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportPhase {
    /// Before any answer: connecting, sending, waiting for the status line.
    Request,
    /// While reading the body (a dropped connection or an idle timeout mid-stream).
    Body,
}

impl std::fmt::Display for TransportPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportPhase::Request => "sending the request",
            TransportPhase::Body => "reading the answer",
        })
    }
}

/// A failed model call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    /// The provider answered with an error status.
    #[error("{provider} answered HTTP {status}{}: {}", provider_type.as_ref().map(|t| format!(" ({t})")).unwrap_or_default(), message.as_deref().unwrap_or(body_excerpt))]
    Http {
        provider: &'static str,
        status: u16,
        /// The provider's error type (`rate_limit_error`, `invalid_request_error`, ...).
        provider_type: Option<String>,
        /// The provider's error message.
        message: Option<String>,
        /// The start of the body, keys scrubbed.
        body_excerpt: String,
        /// What `retry-after` asked for, if anything.
        retry_after: Option<Duration>,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The provider reported an error inside the stream (`event: error`, `response.failed`).
    #[error("{provider} reported an error in the stream ({provider_type}): {message}")]
    Provider {
        provider: &'static str,
        provider_type: String,
        message: String,
        attempts: u32,
    },
    /// The connection failed, timed out, or was cut before the stream ended.
    #[error("{provider}: transport error while {phase}: {message} (after {attempts} attempts)")]
    Transport {
        provider: &'static str,
        phase: TransportPhase,
        timed_out: bool,
        message: String,
        attempts: u32,
    },
    /// The answer does not have the provider's shape.
    #[error("{provider} sent an answer that cannot be understood: {message}")]
    Protocol {
        provider: &'static str,
        message: String,
    },
    /// The endpoint uses https but this build has no TLS (the `tls` feature).
    #[error("{url} needs HTTPS, but the agent crate was built without its `tls` feature")]
    TlsNotCompiled { url: String },
}

impl GatewayError {
    /// The HTTP status, when the provider answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            GatewayError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Statuses worth another attempt: rate limits, server errors, Anthropic's 529 (overloaded).
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// Provider error types reported inside a stream that are worth another attempt.
pub fn retryable_provider_type(kind: &str) -> bool {
    matches!(
        kind,
        "overloaded_error"
            | "api_error"
            | "rate_limit_error"
            | "server_error"
            | "rate_limit_exceeded"
    )
}

/// The provider's error type and message from an error body: Anthropic's
/// `{"type":"error","error":{"type","message"}}` or OpenAI's `{"error":{"type"|"code","message"}}`.
pub fn parse_error_body(body: &str) -> (Option<String>, Option<String>) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return (None, None);
    };
    let error = value.get("error").unwrap_or(&value);
    let kind = error
        .get("type")
        .and_then(|v| v.as_str())
        .filter(|t| *t != "error")
        .or_else(|| error.get("code").and_then(|v| v.as_str()))
        .map(str::to_string);
    let message = error
        .get("message")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    (kind, message)
}

/// The first [`BODY_EXCERPT_CHARS`] characters of `body`, with `sk-...` style tokens masked.
pub fn excerpt(body: &str) -> String {
    let cut: String = body.chars().take(BODY_EXCERPT_CHARS).collect();
    mask_key_like(&cut)
}

/// Masks words that look like provider keys (`sk-...`, `sk-ant-...`), in case an error body
/// echoes one back.
pub fn mask_key_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("sk-") {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '*'))
            .unwrap_or(tail.len());
        out.push_str("sk-[redacted]");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_providers_error_bodies() {
        let anthropic =
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
        assert_eq!(
            parse_error_body(anthropic),
            (Some("rate_limit_error".into()), Some("slow down".into()))
        );
        let openai = r#"{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}"#;
        assert_eq!(
            parse_error_body(openai),
            (Some("invalid_request_error".into()), Some("bad".into()))
        );
        assert_eq!(parse_error_body("<html>"), (None, None));
    }

    #[test]
    fn key_like_words_are_masked() {
        assert_eq!(
            mask_key_like("Incorrect API key provided: sk-proj-abc***xyz. See"),
            "Incorrect API key provided: sk-[redacted]. See"
        );
        assert_eq!(mask_key_like("no keys here"), "no keys here");
    }
}
