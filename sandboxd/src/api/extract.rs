//! Request extractors that answer bad input the way AIO's clients expect. The parsing is
//! `agentbox_http::body`'s (shared with the orchestrator); the error shape is [`ApiError`]'s.
//!
//! - [`AioJson`]: an empty body counts as `{}` (AIO's SDKs send no body when every field is
//!   omitted); malformed JSON is a 400; a body that does not fit the type is a 422 naming the
//!   field, in FastAPI's `detail` shape; a body over the route's limit is a 413.
//! - [`AioQuery`]: query strings, with the same 422 shape.

use agentbox_http::body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body of type `T`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AioJson<T>(pub T);

impl<T, S> FromRequest<S> for AioJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(AioJson(body::read_json(request, state).await?))
    }
}

/// Parses a JSON body already read, treating an empty body as `{}`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    Ok(body::parse_json(bytes)?)
}

/// Query parameters of type `T`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AioQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for AioQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(AioQuery(body::read_query(parts)?))
    }
}

/// The `Host` the client reached sandboxd at (host and port), so that reported URLs work as
/// given through the same port.
pub fn request_host(headers: &axum::http::HeaderMap) -> String {
    headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("localhost")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)] // Only parsed.
    struct Exec {
        command: String,
    }

    #[test]
    fn a_missing_field_is_a_422_in_fastapi_shape() {
        let err = parse_json::<Exec>(br#"{}"#).unwrap_err();
        assert_eq!(err.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            err.loc.as_deref(),
            Some(&["body".to_string(), "command".to_string()][..])
        );
        assert!(err.message.contains("command"), "{}", err.message);
    }

    #[test]
    fn malformed_json_is_a_400() {
        let err = parse_json::<Exec>(br#"{"command": "#).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(
            err.message.starts_with("malformed JSON body"),
            "{}",
            err.message
        );
    }
}

#[cfg(test)]
mod host_tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::request_host;

    #[test]
    fn host_keeps_the_port_the_client_used() {
        let mut headers = HeaderMap::new();
        assert_eq!(request_host(&headers), "localhost");
        headers.insert(header::HOST, HeaderValue::from_static("10.0.0.5:8080"));
        assert_eq!(request_host(&headers), "10.0.0.5:8080");
        headers.insert(header::HOST, HeaderValue::from_static("[fd00::1]:8080"));
        assert_eq!(request_host(&headers), "[fd00::1]:8080");
        headers.insert(header::HOST, HeaderValue::from_static("box.example"));
        assert_eq!(request_host(&headers), "box.example");
    }
}
