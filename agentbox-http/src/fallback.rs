//! The answers for requests no route takes: an unknown path (404) and a known path with a
//! method it does not serve (405). Each server renders a [`RouteError`] in its own error shape;
//! [`crate::plumbing::wrap`] installs both handlers with the server's error type:
//!
//! ```ignore
//! router
//!     .fallback(agentbox_http::fallback::not_found::<ApiError>)
//!     .method_not_allowed_fallback(agentbox_http::fallback::method_not_allowed::<ApiError>)
//! ```

use axum::extract::Request;
use axum::http::{Method, StatusCode};

/// A request that matched no route.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RouteError {
    #[error("no route {method} {path}")]
    NotFound { method: Method, path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: Method, path: String },
}

impl RouteError {
    /// The status code this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
        }
    }
}

/// Fallback handler for unknown paths.
pub async fn not_found<E: From<RouteError>>(request: Request) -> E {
    E::from(RouteError::NotFound {
        method: request.method().clone(),
        path: request.uri().path().to_owned(),
    })
}

/// Fallback handler for a known path asked with another method.
pub async fn method_not_allowed<E: From<RouteError>>(request: Request) -> E {
    E::from(RouteError::MethodNotAllowed {
        method: request.method().clone(),
        path: request.uri().path().to_owned(),
    })
}
