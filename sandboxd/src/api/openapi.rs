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

/// Adds the security schemes and makes every operation but `/healthz` and `/auth` (which
/// checks a key, ticket or session itself) require one of them;
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
        &["/healthz", "/auth"],
    );
    agentbox_http::openapi::document_plumbing_answers(document, "ErrorBody");
    document_browser_answers(document);
    envelope_data_is_nullable(document);
    // Bodies are read with `super::extract::AioJson`, which takes an empty body as `{}`.
    agentbox_http::openapi::optional_bodies_are_not_required(document);
}

/// AIO's envelope answers `success: false` with `data: null` and a 2xx status when the
/// operation itself failed (no previous page, an expression that threw): every envelope's `data`
/// is documented as the type or null. (utoipa drops `Option`'s null inside a generic.)
fn envelope_data_is_nullable(document: &mut OpenApi) {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    let Some(components) = document.components.as_mut() else {
        return;
    };
    for (name, schema) in components.schemas.iter_mut() {
        if !name.starts_with("Envelope") {
            continue;
        }
        let RefOr::T(Schema::Object(envelope)) = schema else {
            continue;
        };
        let Some(data) = envelope.properties.get_mut("data") else {
            continue;
        };
        if matches!(data, RefOr::T(Schema::OneOf(_))) {
            continue; // Already a choice (`Envelope<Option<T>>`, whose null utoipa keeps).
        }
        let nullable = OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .item(data.clone())
            .build();
        *data = RefOr::T(Schema::OneOf(nullable));
    }
}

/// What any browser route may answer besides its own documented cases, because each drives
/// Chromium over CDP: 503 while Chromium is not running (it crashed, or was stopped through
/// `/v1/processes`) until the supervisor has it back; 409 when the tab closed or the page
/// navigated while the command ran (another client, or the page itself); 502 when the browser
/// rejected the command; 504 when it did not finish in time. A route's own description of one
/// of these codes is kept.
fn document_browser_answers(document: &mut OpenApi) {
    let answers = [
        (
            "503",
            "The browser is not running; the supervisor restarts it, retry shortly.",
        ),
        (
            "409",
            "The tab closed or the page navigated while the command ran; check the page and try again.",
        ),
        ("502", "The browser rejected the command."),
        ("504", "The command did not finish in time."),
    ]
    .map(|(code, description)| {
        (
            code,
            agentbox_http::openapi::error_answer(description, "ErrorBody"),
        )
    });
    for (path, item) in document.paths.paths.iter_mut() {
        if !path.starts_with("/v1/browser/") {
            continue;
        }
        for operation in agentbox_http::openapi::operations_mut(item) {
            for (code, answer) in &answers {
                operation
                    .responses
                    .responses
                    .entry((*code).to_string())
                    .or_insert_with(|| answer.clone());
            }
        }
    }
}

/// `GET /v1/openapi.json`. The document is generated per request instead of kept: it is asked
/// for rarely, and holding it would cost every sandbox its memory for nothing.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route(
        "/v1/openapi.json",
        axum::routing::get(|State(_): State<AppState>| async {
            super::openapi_json().await.map(Json)
        }),
    )
}
