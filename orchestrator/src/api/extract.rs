//! Request extractors that answer bad input in the API's error shape. The parsing is
//! `agentbox_http::body`'s (shared with sandboxd): malformed JSON is a 400, a body that does not
//! fit the type a 422 naming the field (`error.loc`), an oversized body a 413; an empty body
//! counts as `{}`.

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
