//! The OpenAPI document: generated from the route annotations and the wire types, served at
//! `GET /v1/openapi.json`. Never hand-edited.

use std::sync::Arc;

use axum::Json;
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::AppState;

pub fn base() -> OpenApi {
    utoipa::openapi::OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("Agentbox orchestrator")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "One sandbox container per task. Besides these routes, each sandbox's own \
                     API is proxied at /v1/sandboxes/{id}/api/{path} (any method, WebSocket \
                     too), its noVNC client at /v1/sandboxes/{id}/vnc/{path} (viewer token \
                     required) and CDP at /v1/sandboxes/{id}/cdp (API key or control token).",
                ))
                .build(),
        )
        .build()
}

/// Adds the bearer scheme and requires it on every operation but `/healthz`; documents the
/// answers the shared plumbing gives (401, and 400/413/422 for bad input).
pub fn finish(document: &mut OpenApi) {
    agentbox_http::openapi::require_security(
        document,
        vec![(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        )],
        &["/healthz"],
    );
    agentbox_http::openapi::document_plumbing_answers(document, "ErrorBody");
}

/// `GET /v1/openapi.json`.
pub fn routes(document: Arc<OpenApi>) -> axum::Router<AppState> {
    axum::Router::new().route(
        "/v1/openapi.json",
        axum::routing::get(move || {
            let document = document.clone();
            async move { Json(document.as_ref().clone()) }
        }),
    )
}
