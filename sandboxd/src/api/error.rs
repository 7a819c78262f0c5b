//! The one error type of the HTTP layer: a status code and a message, rendered in AIO's envelope
//! (and, for 422, FastAPI's `detail` list, which AIO's SDKs parse).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::types::{ErrorBody, ValidationDetail};

/// An error answer. Its message names what was wrong (the field, the program, the path).
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// For 422: where the problem is (`["body", "field"]`).
    pub loc: Option<Vec<String>>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            loc: None,
        }
    }

    /// 400: the request cannot be understood (malformed JSON, contradictory fields).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 422: a body field is missing or has a bad value. `field` is its name in the body.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::invalid_at(vec!["body".to_string(), field.to_string()], message)
    }

    /// 422 at an explicit location.
    pub fn invalid_at(loc: Vec<String>, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: message.into(),
            loc: Some(loc),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "missing or invalid API key: send `Authorization: Bearer <key>` or `X-AIO-API-Key: <key>`",
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), message = %self.message, "request failed");
        }
        let detail = self.loc.map(|loc| {
            vec![ValidationDetail {
                loc,
                msg: self.message.clone(),
                kind: "value_error".into(),
            }]
        });
        let body = ErrorBody {
            success: false,
            message: self.message,
            data: None,
            detail,
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<agentbox_http::body::BodyError> for ApiError {
    fn from(error: agentbox_http::body::BodyError) -> Self {
        match error {
            agentbox_http::body::BodyError::Invalid { loc, message } => {
                Self::invalid_at(loc, message)
            }
            other => Self::new(other.status(), other.to_string()),
        }
    }
}

impl From<supervisor::SupervisorError> for ApiError {
    fn from(error: supervisor::SupervisorError) -> Self {
        use supervisor::SupervisorError as E;
        let status = match &error {
            E::UnknownProgram(_) => StatusCode::NOT_FOUND,
            E::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, error.to_string())
    }
}
