//! The browser routes without a browser (`oneshot`): the OpenAPI document, validation, the URL
//! policy (checked before any connection), and the answer when Chromium does not run.
//! The calls that need Chromium are tested end to end in `tests/tests/browser_api.rs`.

use std::sync::Arc;

use agentbox_tests::router::{Call, call};
use axum::http::StatusCode;
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use serde_json::{Value, json};
use supervisor::{Supervisor, SupervisorConfig};

/// An app whose "Chromium" address has nothing listening.
fn app() -> axum::Router {
    let settings = Settings::from_lookup(|name| match name {
        "SANDBOXD_BROWSER_CDP_ADDR" => Some("127.0.0.1:1".into()),
        "SANDBOX_AUTH" => Some("none".into()),
        _ => None,
    })
    .unwrap();
    let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default()).unwrap());
    router(AppState::new(
        supervisor,
        Arc::new(settings),
        Activity::new(),
    ))
}

fn post(path: &str, body: Value) -> Call {
    Call::post(path).json(&body)
}

#[tokio::test]
async fn the_openapi_document_lists_the_browser_routes() {
    let app = app();
    let (status, doc) = call(&app, Call::get("/v1/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/v1/browser/info",
        "/v1/browser/page/navigate",
        "/v1/browser/page/snapshot",
        "/v1/browser/page/screenshot",
        "/v1/browser/page/wait",
        "/v1/browser/tabs",
        "/v1/browser/tabs/{index}",
        "/v1/browser/tabs/{index}/activate",
    ] {
        assert!(paths.contains_key(path), "{path} missing");
    }
    // The desktop's routes share the `/v1/browser` prefix (AIO's paths) and the document.
    assert!(paths.contains_key("/v1/browser/screenshot"));
    assert!(paths.contains_key("/v1/browser/actions"));
    assert!(doc["components"]["schemas"]["PageSnapshot"].is_object());
}

#[tokio::test]
async fn bad_input_is_422_naming_the_field() {
    let app = app();
    for (path, body, field) in [
        ("/v1/browser/page/navigate", json!({}), "url"),
        (
            "/v1/browser/page/navigate",
            json!({"url": "http://1.1.1.1/", "wait_until": "later"}),
            "wait_until",
        ),
        (
            "/v1/browser/page/navigate",
            json!({"url": "http://1.1.1.1/", "timeout": -1}),
            "timeout",
        ),
        ("/v1/browser/page/click", json!({"x": 10}), "y"),
        (
            "/v1/browser/page/click",
            json!({"selector": "#a", "click_count": 4}),
            "click_count",
        ),
        (
            "/v1/browser/page/type",
            json!({"text": "abc", "delay": 5000}),
            "delay",
        ),
        (
            "/v1/browser/page/scroll",
            json!({"direction": "sideways"}),
            "direction",
        ),
        ("/v1/browser/page/evaluate", json!({}), "expression"),
        (
            "/v1/browser/page/wait",
            json!({"type": "selector"}),
            "selector",
        ),
        ("/v1/browser/page/hot_key", json!({"keys": []}), "keys"),
    ] {
        let (status, answer) = call(&app, post(path, body.clone())).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path} {body}: {answer}"
        );
        assert_eq!(
            answer["detail"][0]["loc"],
            json!(["body", field]),
            "{path} {body}: {answer}"
        );
        assert!(
            answer["message"].as_str().unwrap().contains(field),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn the_url_policy_answers_before_any_connection() {
    let app = app();
    for (url, reason) in [
        ("file:///etc/passwd", "file: scheme"),
        ("javascript:alert(1)", "javascript: scheme"),
        ("http://127.0.0.1:8000/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://[fd00::1]/", "unique local"),
    ] {
        let (status, answer) = call(
            &app,
            post("/v1/browser/page/navigate", json!({ "url": url })),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{url}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains(url) && message.contains(reason),
            "{message}"
        );
    }
}

#[tokio::test]
async fn without_chromium_the_browser_routes_answer_503() {
    let app = app();
    let (status, answer) = call(
        &app,
        post(
            "/v1/browser/page/navigate",
            json!({"url": "http://1.1.1.1/"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains("not running"),
        "{answer}"
    );
    let (status, _) = call(&app, Call::get("/v1/browser/info")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, _) = call(&app, Call::get("/v1/browser/tabs")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn network_config_and_restart_refuse_bad_input_before_any_connection() {
    let app = app();
    let (_, doc) = call(&app, Call::get("/v1/openapi.json")).await;
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/v1/browser/network/requests",
        "/v1/browser/network/export_har",
        "/v1/browser/network/headers",
        "/v1/browser/network/scoped_headers",
        "/v1/browser/network/route",
        "/v1/browser/config",
        "/v1/browser/restart",
    ] {
        assert!(paths.contains_key(path), "{path} missing");
        let operation = paths[path].as_object().unwrap().values().next().unwrap();
        assert_ne!(operation["tags"][0], "not supported", "{path}");
    }
    // Chromium is not running: each answer below comes from the checks alone.
    for (path, body, loc) in [
        (
            "/v1/browser/network/headers",
            json!({"headers": {"bad name": "x"}}),
            json!(["body", "headers", "bad name"]),
        ),
        (
            "/v1/browser/network/headers",
            json!({"headers": {"X-A": "line\nbreak"}}),
            json!(["body", "headers", "X-A"]),
        ),
        (
            "/v1/browser/network/scoped_headers",
            json!({"origin": "ftp://x", "headers": {}}),
            json!(["body", "origin"]),
        ),
        (
            "/v1/browser/network/route",
            json!({"url_pattern": "**/x"}),
            json!(["body", "response"]),
        ),
        (
            "/v1/browser/network/route",
            json!({"url_pattern": "**/x", "abort": true, "response": {"body": "x"}}),
            json!(["body", "abort"]),
        ),
        (
            "/v1/browser/network/route",
            json!({"url_pattern": "**/x", "response": {"status": 700}}),
            json!(["body", "response", "status"]),
        ),
        (
            "/v1/browser/network/route",
            json!({"url_pattern": " ", "abort": true}),
            json!(["body", "url_pattern"]),
        ),
        (
            "/v1/browser/network/export_har",
            json!({"save_path": ""}),
            json!(["body", "save_path"]),
        ),
        (
            "/v1/browser/config",
            json!({"timezone": "UTC"}),
            json!(["body", "timezone"]),
        ),
        (
            "/v1/browser/config",
            json!({"resolution": {"width": 50, "height": 600}}),
            json!(["body", "resolution", "width"]),
        ),
        (
            "/v1/browser/config",
            json!({"user_agent": ""}),
            json!(["body", "user_agent"]),
        ),
        (
            "/v1/browser/restart",
            json!({"mode": "hard", "url_allowlist": ["https://example.com"]}),
            json!(["body", "url_allowlist"]),
        ),
        (
            "/v1/browser/restart",
            json!({"mode": "sideways"}),
            json!(["body", "mode"]),
        ),
        (
            "/v1/browser/page/wait",
            json!({"type": "response"}),
            json!(["body", "url_pattern"]),
        ),
        (
            "/v1/browser/page/wait",
            json!({"type": "download", "save_path": " "}),
            json!(["body", "save_path"]),
        ),
    ] {
        let (status, answer) = call(&app, post(path, body.clone())).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path} {body}: {answer}"
        );
        assert_eq!(answer["detail"][0]["loc"], loc, "{path} {body}: {answer}");
    }
    let (status, answer) = call(&app, Call::get("/v1/browser/network/requests?limit=0")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["detail"][0]["loc"], json!(["query", "limit"]));
    let (status, answer) = call(
        &app,
        Call::delete("/v1/browser/network/route").json(&json!({"url_pattern": "**/none"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("**/none"));
    // Valid input needs the browser: 503 while it does not run, and the rules stay unchanged.
    let (status, _) = call(
        &app,
        post(
            "/v1/browser/network/route",
            json!({"url_pattern": "**/x", "abort": true}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, _) = call(
        &app,
        Call::delete("/v1/browser/network/route").json(&json!({"url_pattern": "**/x"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
