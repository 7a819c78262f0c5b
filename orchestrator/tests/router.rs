//! The orchestrator's real router without a socket or Docker (`oneshot`, a backend that has no
//! containers, SQLite in a temporary directory): the OpenAPI document against the routes.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use clap::Parser;
use http_body_util::BodyExt;
use orchestrator::api::{AppState, router};
use orchestrator::auth::ApiKeys;
use orchestrator::backend::{Backend, BackendError, ContainerInfo, ContainerSpec, Started};
use orchestrator::config::ServeArgs;
use orchestrator::db::{Store, sqlite_url};
use orchestrator::keyring::Keyring;
use orchestrator::metrics::Metrics;
use orchestrator::sandboxes::Sandboxes;
use serde_json::Value;
use tower::ServiceExt;

const ADMIN_KEY: &str = "router-test-admin-key-0123456789";

/// Routes served on purpose without an OpenAPI description, and why.
const UNDOCUMENTED: &[(&str, &str)] = &[
    ("/v1/openapi.json", "the document itself"),
    ("/metrics", "Prometheus' text format, not JSON"),
    (
        "/v1/sandboxes/{id}/api",
        "sandboxd's own API, proxied: sandboxd's document describes it",
    ),
    (
        "/v1/sandboxes/{id}/api/{path}",
        "sandboxd's own API, proxied: sandboxd's document describes it",
    ),
    ("/v1/sandboxes/{id}/vnc", "the viewer page (a browser's)"),
    ("/v1/sandboxes/{id}/vnc/", "the viewer page (a browser's)"),
    ("/v1/sandboxes/{id}/vnc/session", "the viewer page's scope"),
    (
        "/v1/sandboxes/{id}/vnc/websockify",
        "the viewer's RFB WebSocket",
    ),
    ("/v1/sandboxes/{id}/cdp", "Chromium's DevTools, proxied"),
    (
        "/v1/sandboxes/{id}/cdp/{path}",
        "Chromium's DevTools, proxied",
    ),
    ("/assets/{path}", "the embedded viewer's files"),
];

/// A platform without containers: the router is built and asked, nothing is started.
struct NoContainers;

#[async_trait::async_trait]
impl Backend for NoContainers {
    async fn prepare(&self) -> Result<(), BackendError> {
        Ok(())
    }
    async fn start(&self, _: &ContainerSpec) -> Result<Started, BackendError> {
        Err(BackendError::Unavailable(
            "no containers in this test".into(),
        ))
    }
    async fn remove(&self, _: &str) -> Result<(), BackendError> {
        Ok(())
    }
    async fn list(&self) -> Result<Vec<ContainerInfo>, BackendError> {
        Ok(Vec::new())
    }
    async fn inspect(&self, _: &str) -> Result<Option<ContainerInfo>, BackendError> {
        Ok(None)
    }
    async fn logs_tail(&self, _: &str, _: usize) -> Result<String, BackendError> {
        Ok(String::new())
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

async fn app(data: &std::path::Path) -> axum::Router {
    let settings = Cli::try_parse_from(["orchestrator", "--data-dir", &data.display().to_string()])
        .expect("default serve flags")
        .serve
        .settings()
        .expect("default settings");
    let store = Store::connect(&sqlite_url(data))
        .await
        .expect("SQLite store");
    let keys = Arc::new(ApiKeys::new(store.clone()));
    keys.bootstrap(Some(ADMIN_KEY)).await.expect("admin key");
    let metrics = Arc::new(Metrics::new());
    let sandboxes = Sandboxes::new(
        store,
        Arc::new(NoContainers),
        Arc::new(settings),
        metrics.clone(),
        Keyring::from_bytes([7; 32]),
        "router-test".into(),
    );
    router(AppState::new(
        sandboxes,
        keys,
        metrics,
        "http://127.0.0.1:8090".into(),
    ))
}

/// Every path the router serves, from its route table (axum's `Debug` of a router lists its
/// paths; the fallback's own table is left out), wildcards written as plain parameters.
fn served_paths(app: &axum::Router) -> BTreeSet<String> {
    let text = format!("{app:?}");
    let table = text
        .split("fallback_router:")
        .next()
        .expect("split yields at least one part");
    let mut paths = BTreeSet::new();
    for (at, _) in table.match_indices("RouteId(") {
        let rest = &table[at..];
        let Some(quote) = rest.find("): \"") else {
            continue;
        };
        if rest[..quote].len() > "RouteId(".len() + 20 {
            continue; // not `RouteId(n): "path"`
        }
        let path = &rest[quote + 4..];
        let path = &path[..path.find('"').expect("a closing quote")];
        paths.insert(path.replace("{*", "{"));
    }
    assert!(paths.len() > 5, "axum's Debug output changed: {text}");
    paths
}

/// The methods served on `path`: the `Allow` header of the 405 a PATCH gets with the admin key
/// (no documented route takes PATCH), HEAD left out (axum serves it with GET).
async fn served_methods(app: &axum::Router, path: &str) -> BTreeSet<String> {
    let concrete: String = path
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                "x"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    let request = Request::patch(&concrete)
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .body(Body::empty())
        .expect("a request");
    let response = app.clone().oneshot(request).await.expect("an answer");
    assert_eq!(
        response.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "PATCH {concrete}"
    );
    let allow = response.headers()["allow"]
        .to_str()
        .expect("an ASCII Allow header")
        .to_ascii_lowercase();
    allow
        .split(',')
        .map(|method| method.trim().to_string())
        .filter(|method| method != "head")
        .collect()
}

/// The document describes exactly the routes the router serves, with their methods; what it
/// leaves out is listed in `UNDOCUMENTED` with the reason.
#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let data = tempfile::tempdir().expect("a temporary directory");
    let app = app(data.path()).await;
    let request = Request::get("/v1/openapi.json")
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .body(Body::empty())
        .expect("a request");
    let response = app.clone().oneshot(request).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    let doc: Value = serde_json::from_slice(&bytes).expect("JSON");
    let paths = doc["paths"].as_object().expect("paths");
    let documented: BTreeSet<String> = paths.keys().cloned().collect();
    let served = served_paths(&app);

    let not_served: Vec<_> = documented.difference(&served).collect();
    assert!(
        not_served.is_empty(),
        "documented but not served: {not_served:?}"
    );
    let undocumented: BTreeSet<String> = served.difference(&documented).cloned().collect();
    let expected: BTreeSet<String> = UNDOCUMENTED.iter().map(|(p, _)| p.to_string()).collect();
    assert_eq!(
        undocumented, expected,
        "served without a description (describe them, or list them in UNDOCUMENTED with why)"
    );

    for (path, item) in paths {
        let described: BTreeSet<String> = item
            .as_object()
            .expect("a path item")
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            served_methods(&app, path).await,
            described,
            "the methods of {path}"
        );
    }
}
