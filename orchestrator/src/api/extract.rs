//! Request extractors that answer bad input in the API's error shape: malformed JSON is a 400,
//! a body that does not fit the type a 422 naming the field, an oversized body a 413; an empty
//! body counts as `{}`.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body of type `T`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        "request body is larger than this route accepts",
                    )
                } else {
                    ApiError::bad_request(format!(
                        "cannot read the request body: {}",
                        rejection.body_text()
                    ))
                }
            })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses a JSON body, treating an empty body as `{}`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let trimmed = bytes.trim_ascii();
    let body: &[u8] = if trimmed.is_empty() { b"{}" } else { trimmed };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("malformed JSON body: {inner}"))
        } else if path == "." {
            ApiError::invalid(format!("invalid request body: {inner}"))
        } else {
            ApiError::invalid(format!("invalid `{path}`: {inner}"))
        }
    })?;
    deserializer
        .end()
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
    Ok(value)
}
