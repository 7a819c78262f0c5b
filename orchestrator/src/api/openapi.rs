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
    document_busy_database(document);
    document_run_events(document);
    // Bodies are read with `super::extract::ApiJson`, which takes an empty body as `{}`.
    agentbox_http::openapi::optional_bodies_are_not_required(document);
    document_sandbox_statuses(document);
}

/// A sandbox's `status` (the field and the list filter) is one of [`SandboxStatus::ALL`]'s
/// names: listed from the one definition, not restated.
fn document_sandbox_statuses(document: &mut OpenApi) {
    use crate::db::SandboxStatus;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;
    let names: Vec<serde_json::Value> = SandboxStatus::ALL
        .iter()
        .map(|status| status.as_str().into())
        .collect();
    let with_names = |schema: &mut RefOr<Schema>| {
        if let RefOr::T(Schema::Object(object)) = schema {
            object.enum_values = Some(names.clone());
        }
    };
    if let Some(RefOr::T(Schema::Object(sandbox))) = document
        .components
        .as_mut()
        .and_then(|components| components.schemas.get_mut("Sandbox"))
        && let Some(status) = sandbox.properties.get_mut("status")
    {
        with_names(status);
    }
    if let Some(operation) = document
        .paths
        .paths
        .get_mut("/v1/sandboxes")
        .and_then(|item| item.get.as_mut())
    {
        for parameter in operation.parameters.iter_mut().flatten() {
            if let RefOr::T(parameter) = parameter
                && parameter.name == "status"
                && let Some(schema) = parameter.schema.as_mut()
            {
                with_names(schema);
            }
        }
    }
}

/// Lists the shapes of a run's events (`RunEventData`, the agent's [`agent::RunEvent`], and
/// what it is made of): a stored `RunEvent` is one of them with `seq` and `at`, its fields
/// carried loose on the wire so that a client meets a new event type as unknown, not as an
/// error.
fn document_run_events(document: &mut OpenApi) {
    use utoipa::{PartialSchema, ToSchema};
    let components = document.components.get_or_insert_with(Default::default);
    let mut schemas = Vec::new();
    agent::RunEvent::schemas(&mut schemas);
    schemas.push((
        agent::RunEvent::name().into_owned(),
        agent::RunEvent::schema(),
    ));
    for (name, schema) in schemas {
        components.schemas.entry(name).or_insert(schema);
    }
}

/// Every operation but `/healthz` reads or writes the database, which may be busy or away (see
/// `ApiError`'s `From<StoreError>`): a 503 with `Retry-After`, unless the route documents its
/// own 503 already.
fn document_busy_database(document: &mut OpenApi) {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};

    for (path, item) in document.paths.paths.iter_mut() {
        if path == "/healthz" {
            continue;
        }
        for operation in agentbox_http::openapi::operations_mut(item) {
            operation
                .responses
                .responses
                .entry("503".to_string())
                .or_insert_with(|| {
                    let mut answer = agentbox_http::openapi::error_answer(
                        "The database is busy (`database_busy`: another writer holds its \
                         lock; nothing was changed) or does not answer \
                         (`database_unavailable`). Ask again after `Retry-After` seconds.",
                        "ErrorBody",
                    );
                    if let RefOr::T(response) = &mut answer {
                        response.headers.insert(
                            "Retry-After".to_string(),
                            RefOr::T(
                                HeaderBuilder::new()
                                    .schema(Some(ObjectBuilder::new().schema_type(Type::Integer)))
                                    .description(Some("Seconds to wait before asking again."))
                                    .build(),
                            ),
                        );
                    }
                    answer
                });
        }
    }
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
