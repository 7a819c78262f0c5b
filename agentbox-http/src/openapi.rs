//! Finishing a generated OpenAPI document: security schemes, and which operations need them.

use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{SecurityRequirement, SecurityScheme};

/// Adds `schemes` to the document and requires any one of them on every operation whose path
/// is not in `public_paths`.
pub fn require_security(
    document: &mut OpenApi,
    schemes: Vec<(&str, SecurityScheme)>,
    public_paths: &[&str],
) {
    let components = document.components.get_or_insert_with(Default::default);
    let mut requirements = Vec::new();
    for (name, scheme) in schemes {
        components.add_security_scheme(name, scheme);
        requirements.push(SecurityRequirement::new(name, Vec::<String>::new()));
    }
    for (path, item) in document.paths.paths.iter_mut() {
        if public_paths.contains(&path.as_str()) {
            continue;
        }
        for operation in operations_mut(item) {
            operation.security = Some(requirements.clone());
        }
    }
}

/// Documents, on every operation, the answers the shared plumbing gives whatever the handler
/// does, unless the route documents them itself: 401 where a credential is required, 400, 413
/// and 422 where there is a JSON body ([`crate::body`]), 422 where there are query parameters.
/// With this, every status code an operation can return is in the document. `error_schema`
/// names the component of the server's error body (`ErrorBody`).
pub fn document_plumbing_answers(document: &mut OpenApi, error_schema: &str) {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::path::{Operation, ParameterIn};

    let add = |operation: &mut Operation, status: &str, description: &str| {
        operation
            .responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| error_answer(description, error_schema));
    };
    for item in document.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            if operation.security.as_ref().is_some_and(|s| !s.is_empty()) {
                add(operation, "401", "Missing or invalid credential.");
            }
            if operation.request_body.is_some() {
                add(operation, "400", "The body is not JSON.");
                add(
                    operation,
                    "413",
                    "The body is larger than this route accepts.",
                );
                add(
                    operation,
                    "422",
                    "A field is missing or has a bad value (the error names it).",
                );
            }
            let takes_json = operation
                .request_body
                .as_ref()
                .is_some_and(|body| match body {
                    RefOr::T(body) => body.content.contains_key("application/json"),
                    RefOr::Ref(_) => false,
                });
            if takes_json {
                add(
                    operation,
                    "415",
                    "The body is labelled as a form (text/plain, urlencoded or multipart), \
                     which any site can send: send application/json.",
                );
            }
            let has_query = operation.parameters.iter().flatten().any(|parameter| {
                matches!(parameter, RefOr::T(p) if p.parameter_in == ParameterIn::Query)
            });
            if has_query {
                add(
                    operation,
                    "422",
                    "A query parameter has a bad value (the error names it).",
                );
            }
        }
    }
}

/// Every operation of a path, whatever its method.
pub fn operations_mut(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.post,
        &mut item.put,
        &mut item.delete,
        &mut item.patch,
        &mut item.head,
        &mut item.options,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

/// A JSON error answer with the server's error body (`error_schema` names its component).
pub fn error_answer(
    description: &str,
    error_schema: &str,
) -> utoipa::openapi::RefOr<utoipa::openapi::Response> {
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(error_schema)))
                    .build(),
            )
            .build(),
    )
}

/// For servers whose JSON extractor takes an empty body as `{}` ([`crate::body`]): a body whose
/// schema requires no field may be left out, so it is documented as not required. (utoipa marks
/// every `request_body` required.)
pub fn optional_bodies_are_not_required(document: &mut OpenApi) {
    use std::collections::HashSet;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;
    let optional: HashSet<String> = document
        .components
        .as_ref()
        .map(|components| {
            components
                .schemas
                .iter()
                .filter_map(|(name, schema)| match schema {
                    RefOr::T(Schema::Object(object)) if object.required.is_empty() => {
                        Some(format!("#/components/schemas/{name}"))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    for item in document.paths.paths.values_mut() {
        for operation in operations_mut(item) {
            let Some(RefOr::T(body)) = operation.request_body.as_mut() else {
                continue;
            };
            let may_be_empty = body
                .content
                .get("application/json")
                .and_then(|json| match json {
                    RefOr::T(json) => json.schema.as_ref(),
                    RefOr::Ref(_) => None,
                })
                .is_some_and(|schema| match schema {
                    RefOr::Ref(reference) => optional.contains(&reference.ref_location),
                    RefOr::T(Schema::Object(object)) => object.required.is_empty(),
                    RefOr::T(_) => false,
                });
            if may_be_empty {
                body.required = Some(utoipa::openapi::Required::False);
            }
        }
    }
}
