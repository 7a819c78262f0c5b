//! Request extractors that answer bad input in the API's error shape. The parsing is
//! `agentbox_http::body`'s (shared with sandboxd): malformed JSON is a 400, a body that does not
//! fit the type a 422 naming the field (`error.loc`), an oversized body a 413; an empty body
//! counts as `{}`.

use std::collections::BTreeMap;
use std::str::FromStr;

use agentbox_http::body;
use axum::extract::{FromRequest, Request};
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
        Ok(ApiJson(body::read_json(request, state).await?))
    }
}

/// The query of a list route: `status=` (parsed as `S`) and any number of `metadata.KEY=VALUE`;
/// anything else is a 422 naming the parameter.
pub fn list_query<S>(query: Option<&str>) -> Result<(Option<S>, BTreeMap<String, String>), ApiError>
where
    S: FromStr<Err = String>,
{
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
    let mut status = None;
    let mut metadata = BTreeMap::new();
    for (name, value) in pairs {
        if name == "status" {
            status = Some(value.parse::<S>().map_err(|e| ApiError {
                loc: Some(vec!["query".into(), "status".into()]),
                ..ApiError::invalid(format!("invalid `status`: {e}"))
            })?);
        } else if let Some(key) = name.strip_prefix("metadata.") {
            metadata.insert(key.to_string(), value);
        } else {
            return Err(ApiError::invalid(format!(
                "invalid query parameter `{name}`: use status or metadata.KEY"
            )));
        }
    }
    Ok((status, metadata))
}
