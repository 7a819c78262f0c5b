//! The OpenAPI document: generated from the route annotations and the wire types, served at
//! `GET /v1/openapi.json`. Never hand-edited.

use axum::Json;
use axum::extract::State;
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::AppState;

/// The document's fixed parts: title, version, security schemes.
pub fn base() -> OpenApi {
    utoipa::openapi::OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("sandboxd")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "The Agentbox sandbox API (AIO Sandbox compatible). JSON answers use the \
                     envelope {success, message, data}.",
                ))
                .build(),
        )
        .build()
}

/// Adds the security schemes and makes every operation but `/healthz` require one of them;
/// documents the answers the shared plumbing gives (401, and 400/413/422 for bad input).
pub fn finish(document: &mut OpenApi) {
    agentbox_http::openapi::require_security(
        document,
        vec![
            (
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            ),
            (
                "aio_api_key",
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-AIO-API-Key"))),
            ),
        ],
        &["/healthz"],
    );
    agentbox_http::openapi::document_plumbing_answers(document, "ErrorBody");
}

/// `GET /v1/openapi.json`. The document is generated per request instead of kept: it is asked
/// for rarely, and holding it would cost every sandbox its memory for nothing.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route(
        "/v1/openapi.json",
        axum::routing::get(|State(_): State<AppState>| async { Json(super::openapi_document()) }),
    )
}
