//! The answers for requests no route takes: an unknown path (404) and a known path with a
//! method it does not serve (405). Each server renders a [`RouteError`] in its own error shape;
//! [`crate::plumbing::wrap`] installs both handlers with the server's error type:
//!
//! ```ignore
//! router
//!     .fallback(agentbox_http::fallback::not_found::<ApiError>)
//!     .method_not_allowed_fallback(agentbox_http::fallback::method_not_allowed::<ApiError>)
//! ```
//!
//! Both answers carry [`Unrouted`] in their extensions, so that a layer around them can put a
//! credential check first: a caller without one then cannot tell which routes exist.

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// Marks a response as one of this module's answers (no route took the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unrouted;

/// `error` as a response marked [`Unrouted`].
fn unrouted<E: From<RouteError> + IntoResponse>(error: RouteError) -> Response {
    let mut response = E::from(error).into_response();
    response.extensions_mut().insert(Unrouted);
    response
}

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
pub async fn not_found<E: From<RouteError> + IntoResponse>(request: Request) -> Response {
    unrouted::<E>(RouteError::NotFound {
        method: request.method().clone(),
        path: request.uri().path().to_owned(),
    })
}

/// Fallback handler for a known path asked with another method.
pub async fn method_not_allowed<E: From<RouteError> + IntoResponse>(request: Request) -> Response {
    unrouted::<E>(RouteError::MethodNotAllowed {
        method: request.method().clone(),
        path: request.uri().path().to_owned(),
    })
}
