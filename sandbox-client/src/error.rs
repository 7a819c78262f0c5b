//! What a [`SandboxClient`](crate::SandboxClient) call can fail with: the base URL, the
//! transport, an error answer (AIO's envelope parsed), an operation that reported failure in a
//! 2xx envelope, an answer that cannot be read, or one over the size limit.
//!
//! No variant ever carries the API key: it travels in a header, never in a URL or a message.

use reqwest::StatusCode;

/// A failed call. `operation` names the call (`"shell exec"`, `"readyz"`...).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The base URL is not an absolute `http(s)` URL.
    #[error("invalid sandboxd base URL {url:?}: {reason}")]
    BaseUrl { url: String, reason: String },
    /// The HTTP client could not be built (TLS or resolver set-up).
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    /// No answer: connection refused or reset, timeout, a body cut short.
    #[error("{operation}: no answer from sandboxd: {source}")]
    Transport {
        operation: &'static str,
        #[source]
        source: reqwest::Error,
    },
    /// sandboxd (or a proxy in front of it) answered with an error status.
    #[error("{operation}: sandboxd answered {status}: {message}")]
    Status {
        operation: &'static str,
        status: StatusCode,
        /// The envelope's `message` (or the start of a body that is not an envelope).
        message: String,
        /// For 422: where the problem is, as sandboxd reports it (`["body", "button"]`,
        /// `["query", "format"]`).
        loc: Option<Vec<String>>,
    },
    /// A 2xx answer whose envelope says `success: false`: the request was valid, the operation
    /// itself failed (a script threw, there was no previous page...).
    #[error("{operation}: {message}")]
    Failed {
        operation: &'static str,
        message: String,
        hint: Option<String>,
    },
    /// The answer is not what the route returns.
    #[error("{operation}: cannot read sandboxd's answer: {reason}")]
    Decode {
        operation: &'static str,
        reason: String,
    },
    /// The answer's body is larger than [`ClientConfig::max_body_bytes`](crate::ClientConfig).
    #[error("{operation}: the answer is larger than {limit} bytes")]
    TooLarge { operation: &'static str, limit: u64 },
}

impl ClientError {
    /// The HTTP status of an error answer.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// For a 422: the field at fault, as a dotted path without its location (`button`,
    /// `format`, `path.0`).
    pub fn field(&self) -> Option<String> {
        let ClientError::Status { loc: Some(loc), .. } = self else {
            return None;
        };
        let rest = match loc.first().map(String::as_str) {
            Some("body" | "query" | "path" | "header") => &loc[1..],
            _ => &loc[..],
        };
        (!rest.is_empty()).then(|| rest.join("."))
    }

    /// True when the call timed out (the request or connection timeout passed).
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Transport { source, .. } if source.is_timeout())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(loc: Option<&[&str]>) -> ClientError {
        ClientError::Status {
            operation: "test",
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: "bad".into(),
            loc: loc.map(|l| l.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn the_field_drops_the_location() {
        assert_eq!(
            status(Some(&["body", "button"])).field().as_deref(),
            Some("button")
        );
        assert_eq!(
            status(Some(&["query", "format"])).field().as_deref(),
            Some("format")
        );
        assert_eq!(
            status(Some(&["body", "path", "0"])).field().as_deref(),
            Some("path.0")
        );
        assert_eq!(status(Some(&["body"])).field(), None);
        assert_eq!(status(None).field(), None);
        assert_eq!(
            status(None).status(),
            Some(StatusCode::UNPROCESSABLE_ENTITY)
        );
    }
}
