//! AIO's operations that sandboxd does not serve, answered `501 Not Implemented` with a message
//! naming what is missing and why, never a bare 404: a client written for AIO learns that the
//! feature is absent rather than that it mistyped a path.
//!
//! - [`UNSUPPORTED`]: families that do not fit a single-tenant sandbox behind an orchestrator
//!   (observe, the egress proxy). Their paths have routes here that take every method and
//!   every sub-path. (Hooks, skills, captcha detection and page screencasts are served:
//!   `api::sandbox::hooks`, `api::sandbox::skills`, `api::browser::captcha`, `api::browser::recording`.)
//! - [`PLANNED`]: families sandboxd will serve but does not yet (none today). They have no
//!   routes, so that adding the real ones never collides with these: the 404 fallback answers
//!   501 for their paths instead (see [`planned`]).
//!
//! Both lists' operations (as AIO's SDK calls them) are documented with their 501 in the
//! OpenAPI document ([`document`]), unless a real route documents the operation already.

use axum::extract::Request;
use axum::http::StatusCode;
use utoipa::openapi::OpenApi;
use utoipa::openapi::path::{
    HttpMethod, Operation, OperationBuilder, ParameterBuilder, ParameterIn,
};

use super::AppState;
use super::error::ApiError;

/// A family of AIO operations sandboxd does not serve.
#[derive(Debug)]
pub struct Family {
    /// What it is, as the message names it.
    pub name: &'static str,
    /// Paths it owns: each, and everything below it.
    pub prefixes: &'static [&'static str],
    /// Why it is not served.
    pub reason: &'static str,
    /// AIO's operations in it (method, path as AIO's OpenAPI spells it), for the document.
    pub operations: &'static [(&'static str, &'static str)],
}

/// Not served by design.
pub const UNSUPPORTED: &[Family] = &[
    Family {
        name: "sandbox observability (/v1/sandbox/observe)",
        prefixes: &["/v1/sandbox/observe"],
        reason: "an Agentbox sandbox is single-tenant and set up by its orchestrator: sandboxd logs to stdout (JSON) and the orchestrator keeps runs' events; /v1/sandbox and /v1/processes report the sandbox's state",
        operations: &[("GET", "/v1/sandbox/observe/status")],
    },
    Family {
        name: "the egress proxy (/v1/proxy, /v1/browser/proxy.pac)",
        prefixes: &["/v1/proxy", "/v1/browser/proxy.pac"],
        reason: "an Agentbox sandbox is single-tenant and set up by its orchestrator: egress rules are enforced outside the container, where code in the sandbox cannot change them, so they are not configurable from inside",
        operations: &[
            ("GET", "/v1/proxy/health"),
            ("GET", "/v1/proxy/diagnose"),
            ("GET", "/v1/proxy/excludes"),
            ("POST", "/v1/proxy/excludes"),
            ("DELETE", "/v1/proxy/excludes"),
            ("GET", "/v1/proxy/mappings"),
            ("POST", "/v1/proxy/mappings"),
            ("DELETE", "/v1/proxy/mappings/{source}"),
            ("GET", "/v1/proxy/upstream"),
            ("PUT", "/v1/proxy/upstream"),
            ("DELETE", "/v1/proxy/upstream"),
            ("GET", "/v1/browser/proxy.pac"),
        ],
    },
];

/// Planned, not served yet: none today (issue 11's families are all served or listed in
/// [`UNSUPPORTED`]). A family added here answers 501 until its routes exist.
pub const PLANNED: &[Family] = &[];

/// Routes for [`UNSUPPORTED`]: every method on each prefix and everything below it.
pub fn routes() -> axum::Router<AppState> {
    let mut router = axum::Router::new();
    for family in UNSUPPORTED {
        for prefix in family.prefixes {
            router = router
                .route(prefix, axum::routing::any(not_supported))
                .route(
                    &format!("{prefix}/{{*rest}}"),
                    axum::routing::any(not_supported),
                );
        }
    }
    router
}

/// The family `path` belongs to in `families`.
fn family_of<'a>(families: &'a [Family], path: &str) -> Option<&'a Family> {
    families.iter().find(|family| {
        family.prefixes.iter().any(|prefix| {
            path.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    })
}

fn answer(family: &Family, method: &str, path: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        format!(
            "{method} {path}: {} is not supported by sandboxd: {}",
            family.name, family.reason
        ),
    )
}

async fn not_supported(request: Request) -> ApiError {
    let path = request.uri().path();
    match family_of(UNSUPPORTED, path) {
        Some(family) => answer(family, request.method().as_str(), path),
        // Unreachable: the routes are made from the same prefixes.
        None => ApiError::not_found(format!("no route {} {path}", request.method())),
    }
}

/// The 501 for a path no route took that belongs to a [`PLANNED`] family.
pub fn planned(method: &str, path: &str) -> Option<ApiError> {
    family_of(PLANNED, path).map(|family| answer(family, method, path))
}

/// Documents every operation of both lists with its 501, unless a route documents it already.
pub fn document(document: &mut OpenApi) {
    let reply = agentbox_http::openapi::error_answer(
        "Not supported by sandboxd; the message says what and why.",
        "ErrorBody",
    );
    for family in UNSUPPORTED.iter().chain(PLANNED) {
        for (method, path) in family.operations {
            let Some(method) = http_method(method) else {
                continue;
            };
            let item = document.paths.paths.entry(path.to_string()).or_default();
            let slot = match method {
                HttpMethod::Get => &mut item.get,
                HttpMethod::Post => &mut item.post,
                HttpMethod::Put => &mut item.put,
                HttpMethod::Delete => &mut item.delete,
                HttpMethod::Patch => &mut item.patch,
                _ => continue,
            };
            if slot.is_some() {
                continue;
            }
            *slot = Some(operation(family, path, reply.clone()));
        }
    }
}

fn operation(
    family: &Family,
    path: &str,
    reply: utoipa::openapi::RefOr<utoipa::openapi::Response>,
) -> Operation {
    let parameters = path
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(utoipa::openapi::Required::True)
                .schema(Some(
                    utoipa::openapi::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::Type::String),
                ))
                .build()
        })
        .collect::<Vec<_>>();
    OperationBuilder::new()
        .tag("not supported")
        .summary(Some(format!("Not supported: {}", family.name)))
        .description(Some(format!(
            "Answers 501: {} is not supported by sandboxd: {}.",
            family.name, family.reason
        )))
        .parameters(Some(parameters))
        .response("501", reply)
        .build()
}

fn http_method(method: &str) -> Option<HttpMethod> {
    Some(match method {
        "GET" => HttpMethod::Get,
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "DELETE" => HttpMethod::Delete,
        "PATCH" => HttpMethod::Patch,
        _ => return None,
    })
}

/// A path no route took: AIO's paths that sandboxd will serve but does not yet get a 501 saying
/// so ([`planned`]), others the plain 404 or 405.
impl From<agentbox_http::fallback::RouteError> for ApiError {
    fn from(error: agentbox_http::fallback::RouteError) -> Self {
        use agentbox_http::fallback::RouteError;
        // AIO's paths that sandboxd will serve but does not yet: 501 saying so, not 404.
        if let RouteError::NotFound { method, path } = &error
            && let Some(answer) = planned(method.as_str(), path)
        {
            return answer;
        }
        Self::new(error.status(), error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_belong_to_their_family_only_at_segment_boundaries() {
        assert!(family_of(UNSUPPORTED, "/v1/proxy").is_some());
        assert!(family_of(UNSUPPORTED, "/v1/proxy/excludes/x").is_some());
        assert!(family_of(UNSUPPORTED, "/v1/proxyx").is_none());
        assert!(family_of(UNSUPPORTED, "/v1/skills").is_none());
        for family in PLANNED {
            for (method, path) in family.operations {
                assert!(planned(method, path).is_some(), "{method} {path}");
            }
        }
        assert!(planned("POST", "/v1/shell/exec").is_none());
    }
}
