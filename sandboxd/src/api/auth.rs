//! API key check: `Authorization: Bearer <key>` or `X-AIO-API-Key: <key>`, compared in constant
//! time. Without a configured key every request passes.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;

pub async fn require_api_key(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    match &state.settings.api_key {
        Some(key) if !presented_key_matches(request.headers(), key) => {
            ApiError::unauthorized().into_response()
        }
        _ => next.run(request).await,
    }
}

fn presented_key_matches(headers: &HeaderMap, key: &str) -> bool {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let aio = headers
        .get("x-aio-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    [bearer, aio]
        .into_iter()
        .flatten()
        .any(|presented| bool::from(presented.as_bytes().ct_eq(key.as_bytes())))
}
