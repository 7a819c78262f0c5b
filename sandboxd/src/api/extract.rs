//! Request extractors that answer bad input the way AIO's clients expect.
//!
//! - [`AioJson`]: an empty body counts as `{}` (AIO's SDKs send no body when every field is
//!   omitted); malformed JSON is a 400; a body that does not fit the type is a 422 naming the
//!   field, in FastAPI's `detail` shape; a body over the route's limit is a 413.
//! - [`AioQuery`]: query strings, with the same 422 shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
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
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(status, "request body is larger than this route accepts")
                } else {
                    ApiError::new(
                        status,
                        format!("cannot read the request body: {}", rejection.body_text()),
                    )
                }
            })?;
        parse_json(&bytes).map(AioJson)
    }
}

/// Parses a JSON body, treating an empty (or all-whitespace) body as `{}`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let trimmed = bytes.trim_ascii();
    let body: &[u8] = if trimmed.is_empty() { b"{}" } else { trimmed };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("malformed JSON body: {inner}"))
        } else {
            let mut loc = vec!["body".to_string()];
            loc.extend(path.split('.').filter(|s| !s.is_empty()).map(str::to_owned));
            // A missing field is reported at its parent: name the field itself.
            let text = inner.to_string();
            if let Some(field) = text
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next())
            {
                loc.push(field.to_string());
            }
            let message = if path == "." {
                format!("invalid request body: {inner}")
            } else {
                format!("invalid field `{path}`: {inner}")
            };
            ApiError::invalid_at(loc, message)
        }
    })?;
    deserializer
        .end()
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
    Ok(value)
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

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| AioQuery(value))
            .map_err(|rejection| {
                ApiError::invalid_at(
                    vec!["query".to_string()],
                    format!("invalid query string: {}", rejection.body_text()),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Exec {
        command: String,
        timeout: Option<f64>,
        #[serde(default)]
        nested: Option<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        depth: u32,
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    struct AllOptional {
        id: Option<String>,
    }

    #[test]
    fn empty_bodies_are_empty_objects() {
        assert_eq!(
            parse_json::<AllOptional>(b"").unwrap(),
            AllOptional::default()
        );
        assert_eq!(
            parse_json::<AllOptional>(b"  \n").unwrap(),
            AllOptional::default()
        );
    }

    #[test]
    fn nulls_and_unknown_fields_are_accepted() {
        let exec: Exec = parse_json(br#"{"command":"ls","timeout":null,"extra":1}"#).unwrap();
        assert_eq!(exec.command, "ls");
        assert_eq!(exec.timeout, None);
    }

    #[test]
    fn errors_name_the_field() {
        let err = parse_json::<Exec>(br#"{"command":"ls","timeout":"soon"}"#).unwrap_err();
        assert_eq!(err.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err.message.contains("`timeout`"), "{}", err.message);
        let err = parse_json::<Exec>(br#"{"command":"ls","nested":{"depth":-1}}"#).unwrap_err();
        assert!(err.message.contains("`nested.depth`"), "{}", err.message);
        let err = parse_json::<Exec>(br#"{}"#).unwrap_err();
        assert_eq!(err.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err.message.contains("command"), "{}", err.message);
        assert_eq!(
            err.loc.as_deref(),
            Some(&["body".to_string(), "command".to_string()][..])
        );
        let err = parse_json::<Exec>(br#"{"command": "#).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        let err = parse_json::<Exec>(br#"{"command":"ls"} trailing"#).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
    }
}
