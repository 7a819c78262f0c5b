//! The one error type of the REST API: a status code and `{error: {code, message}}` (plus
//! `logs` when a sandbox failed to start). Library errors map to it here and nowhere else.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::types::{ErrorBody, ErrorDetail};
use crate::auth::KeyError;
use crate::backend::BackendError;
use crate::db::StoreError;
use crate::runs::RunError;
use crate::sandboxes::SandboxError;
use crate::validate::Invalid;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub logs: Option<String>,
    /// For 422: where the bad value is (`["body", "field"]`).
    pub loc: Option<Vec<String>>,
    /// For 503: when to ask again, in seconds (`Retry-After`).
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            logs: None,
            loc: None,
            retry_after: None,
        }
    }

    /// A 503 to ask again after `retry_after` seconds (sent as `Retry-After`).
    pub fn try_again(code: &'static str, message: impl Into<String>, retry_after: u32) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
        }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        tracing::error!(error = %message, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error (see the orchestrator's log)",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
                logs: self.logs,
                loc: self.loc,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<agentbox_http::body::BodyError> for ApiError {
    fn from(error: agentbox_http::body::BodyError) -> Self {
        use agentbox_http::body::BodyError;
        match error {
            BodyError::Invalid { loc, message } => Self {
                loc: Some(loc),
                ..Self::invalid(message)
            },
            BodyError::TooLarge => {
                Self::new(error.status(), "payload_too_large", error.to_string())
            }
            BodyError::Malformed(_) | BodyError::Unreadable { .. } => {
                Self::new(error.status(), "bad_request", error.to_string())
            }
            BodyError::FormContentType(_) => {
                Self::new(error.status(), "unsupported_media_type", error.to_string())
            }
        }
    }
}

impl From<agentbox_http::fallback::RouteError> for ApiError {
    fn from(error: agentbox_http::fallback::RouteError) -> Self {
        use agentbox_http::fallback::RouteError;
        let code = match error {
            RouteError::NotFound { .. } => "not_found",
            RouteError::MethodNotAllowed { .. } => "method_not_allowed",
        };
        Self::new(error.status(), code, error.to_string())
    }
}

impl From<SandboxError> for ApiError {
    fn from(error: SandboxError) -> Self {
        match error {
            SandboxError::Invalid(_) => ApiError::invalid(error.to_string()),
            SandboxError::NotFound(_)
            | SandboxError::TokenNotFound { .. }
            | SandboxError::SnapshotNotFound(_)
            | SandboxError::ProfileNotFound(_)
            | SandboxError::ShareLinkNotFound { .. } => ApiError::not_found(error.to_string()),
            SandboxError::Conflict(message) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message)
            }
            SandboxError::NotReady { reason, logs } => ApiError {
                logs: Some(logs),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "sandbox_not_ready",
                    format!("the sandbox did not become ready and was removed: {reason}"),
                )
            },
            SandboxError::Unresponsive(message) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "sandbox_unresponsive",
                message,
            ),
            SandboxError::Backend(BackendError::ImageMissing(image)) => ApiError::invalid(format!(
                "invalid `image`: image {image} is not present on the server"
            )),
            SandboxError::Backend(BackendError::Unsupported(what)) => ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "not_supported_by_backend",
                BackendError::Unsupported(what).to_string(),
            ),
            SandboxError::Backend(error @ BackendError::NoCapacity(_)) => {
                ApiError::try_again("no_capacity", error.to_string(), 10)
            }
            SandboxError::Backend(error) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "backend_unavailable",
                error.to_string(),
            ),
            SandboxError::Quota { .. } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                error.to_string(),
            ),
            SandboxError::Task(message) => ApiError::internal(message),
            SandboxError::Store(error) => ApiError::from(error),
        }
    }
}

impl From<RunError> for ApiError {
    fn from(error: RunError) -> Self {
        match error {
            RunError::Invalid(Invalid { ref field, .. }) => {
                let loc = match field.as_str() {
                    "Idempotency-Key" => vec!["header".to_string(), field.clone()],
                    _ => std::iter::once("body")
                        .chain(field.split('.'))
                        .map(str::to_string)
                        .collect(),
                };
                ApiError {
                    loc: Some(loc),
                    ..ApiError::invalid(error.to_string())
                }
            }
            RunError::NotFound(_) => ApiError::not_found(error.to_string()),
            RunError::Conflict(message) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            RunError::Timeout(_) => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", error.to_string())
            }
            RunError::Sandbox(error) => error.into(),
            RunError::Store(error) => ApiError::from(error),
            RunError::Artifact(error) => ApiError::internal(error),
            RunError::Relayed(message) => ApiError::internal(message),
        }
    }
}

impl ApiError {
    /// The database does not answer ([`crate::db::Store::is_unreachable`]): the request was
    /// not attempted.
    pub fn database_unreachable() -> Self {
        ApiError::try_again(
            "database_unavailable",
            "the database does not answer: nothing was done; ask again shortly",
            2,
        )
    }
}

/// A busy database is a 503 to ask again shortly (nothing was changed), and so is one that
/// went away during the call; any other store failure is the orchestrator's own (500, logged).
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        if error.is_unavailable() {
            tracing::warn!(%error, "database unavailable");
            return ApiError::try_again(
                "database_unavailable",
                "the database went away during the call: ask again shortly (a write it was \
                 making is either whole or not made)",
                2,
            );
        }
        if error.is_busy() {
            tracing::warn!(%error, "database busy");
            return ApiError::try_again(
                "database_busy",
                "the database is busy (another writer holds its lock, or no connection came free in time): nothing was changed; ask again shortly",
                1,
            );
        }
        ApiError::internal(error)
    }
}

impl From<KeyError> for ApiError {
    fn from(error: KeyError) -> Self {
        match error {
            KeyError::BadName => ApiError::invalid(format!("invalid `name`: {error}")),
            KeyError::WeakAdminKey => ApiError::invalid(error.to_string()),
            KeyError::Store(error) => ApiError::from(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing sandbox and a missing token are told apart by their variant: a sandbox id that
    /// happens to start with "token" is still a sandbox.
    #[test]
    fn missing_sandboxes_and_tokens_are_404s_that_say_which() {
        let sandbox = ApiError::from(SandboxError::NotFound("token-shaped".into()));
        assert_eq!(
            (sandbox.status, sandbox.code, sandbox.message.as_str()),
            (
                StatusCode::NOT_FOUND,
                "not_found",
                "no sandbox token-shaped"
            )
        );
        let token = ApiError::from(SandboxError::TokenNotFound {
            sandbox_id: "sbx-1".into(),
            token_id: "tok-2".into(),
        });
        assert_eq!(
            (token.status, token.code, token.message.as_str()),
            (
                StatusCode::NOT_FOUND,
                "not_found",
                "no token tok-2 of sandbox sbx-1"
            )
        );
    }
}
