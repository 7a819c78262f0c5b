//! The router without a socket (`oneshot`): auth, error shapes, the OpenAPI document.

use std::collections::BTreeSet;
use std::sync::Arc;

use agentbox_tests::router::{Call, call, send, served_methods, served_paths};
use axum::http::{Method, StatusCode};
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use supervisor::{Supervisor, SupervisorConfig};

fn app(key: Option<&str>) -> axum::Router {
    let mut settings =
        Settings::from_lookup(|name| (name == "SANDBOX_AUTH").then(|| "none".to_string())).unwrap();
    settings.api_key = key.map(str::to_owned);
    let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default()).unwrap());
    router(AppState::new(
        supervisor,
        Arc::new(settings),
        Activity::new(),
    ))
}

#[tokio::test]
async fn the_key_is_required_everywhere_but_healthz() {
    let app = app(Some("k1"));
    let (status, body) = call(&app, Call::get("/healthz")).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    for path in [
        "/readyz",
        "/v1/processes",
        "/v1/sandbox",
        "/v1/openapi.json",
    ] {
        let (status, body) = call(&app, Call::get(path)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(body["success"], false);
    }
    for (header, value, expected) in [
        ("authorization", "Bearer k1", StatusCode::OK),
        ("x-aio-api-key", "k1", StatusCode::OK),
        ("authorization", "Bearer k2", StatusCode::UNAUTHORIZED),
        ("authorization", "k1", StatusCode::UNAUTHORIZED),
    ] {
        let request = Call::get("/v1/processes").header(header, value);
        assert_eq!(call(&app, request).await.0, expected, "{header}: {value}");
    }
}

/// AIO's sub-request check answers 200 for the key, a ticket (once) or the session it opened,
/// and 401 for anything else, without the key being needed to reach it.
#[tokio::test]
async fn auth_answers_only_for_a_credential() {
    let app = app(Some("k1"));
    let (status, body) = call(
        &app,
        Call::get("/auth").header("authorization", "Bearer k1"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["status"].as_str(), body["method"].as_str()),
        (Some("authenticated"), Some("key"))
    );
    for attempt in [
        Call::get("/auth"),
        Call::get("/auth").header("authorization", "Bearer k2"),
        Call::get("/auth").header("x-original-uri", "/vnc/index.html?ticket=forged"),
        Call::get("/auth").header("cookie", "sandboxd_viewer=forged"),
    ] {
        assert_eq!(call(&app, attempt).await.0, StatusCode::UNAUTHORIZED);
    }
    let (_, issued) = call(
        &app,
        Call::post("/tickets")
            .header("authorization", "Bearer k1")
            .json(&serde_json::json!({"view_only": true})),
    )
    .await;
    let ticket = issued["data"]["ticket"]
        .as_str()
        .expect("a ticket")
        .to_string();
    let original = format!("/vnc/index.html?ticket={ticket}");
    let answer = send(&app, Call::get("/auth").header("x-original-uri", &original)).await;
    assert_eq!(answer.status, StatusCode::OK);
    let body = answer.json();
    assert_eq!(
        (body["method"].as_str(), body["view_only"].as_str()),
        (Some("ticket"), Some("true"))
    );
    let cookie = answer
        .header("set-cookie")
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_string();
    let again = call(&app, Call::get("/auth").header("x-original-uri", &original)).await;
    assert_eq!(again.0, StatusCode::UNAUTHORIZED, "a ticket is used once");
    let (status, body) = call(&app, Call::get("/auth").header("cookie", &cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["method"].as_str(), body["view_only"].as_str()),
        (Some("session"), Some("true"))
    );
    // The session opens the viewer, not the API.
    let api = call(&app, Call::get("/v1/sandbox").header("cookie", &cookie)).await;
    assert_eq!(api.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn unknown_routes_and_programs_get_json_errors() {
    let app = app(None);
    let (status, body) = call(&app, Call::get("/v1/nothing-here")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("/v1/nothing-here")
    );
    let (status, body) = call(&app, Call::post("/v1/processes/ghost/restart")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["message"].as_str().unwrap().contains("ghost"));
    let (status, body) = call(&app, Call::delete("/v1/processes")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["success"], false);
}

/// Issue 28: an unknown path answered 404 and a known one 405 before the key was checked, so a
/// caller without the key could map which routes exist. Without the key every such request now
/// gets the same 401 as a keyed route; with it, the 404 and 405 as before.
#[tokio::test]
async fn a_request_no_route_takes_needs_the_key_first() {
    let app = app(Some("k1"));
    let probes = [
        (Method::GET, "/v1/nothing-here", StatusCode::NOT_FOUND),
        (
            Method::GET,
            "/v1/processes/ghost/extra/segments",
            StatusCode::NOT_FOUND,
        ),
        (
            Method::DELETE,
            "/v1/processes",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (Method::POST, "/healthz", StatusCode::METHOD_NOT_ALLOWED),
    ];
    for (method, path, keyed_status) in probes {
        let probe = || Call::new(method.clone(), path);
        let (status, body) = call(&app, probe()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {body}");
        assert_eq!(body["success"], false, "{method} {path}");
        let wrong = call(&app, probe().header("authorization", "Bearer k2")).await;
        assert_eq!(wrong.0, StatusCode::UNAUTHORIZED, "{method} {path}");
        let keyed = call(&app, probe().header("authorization", "Bearer k1")).await;
        assert_eq!(keyed.0, keyed_status, "{method} {path}: {}", keyed.1);
    }
    let (status, _) = call(&app, Call::get("/healthz")).await;
    assert_eq!(status, StatusCode::OK, "liveness stays open");
}

/// Issue 28: a JSON body labelled as a form (what any site's form can send) is refused with 415,
/// and nothing is written; labelled as JSON, the same write goes through.
#[tokio::test]
async fn a_json_body_labelled_as_a_form_changes_nothing() {
    let app = app(Some("k1"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("forged.txt");
    let body = serde_json::json!({"file": file, "content": "forged"}).to_string();
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, answer) = call(
            &app,
            Call::post("/v1/file/write")
                .bearer("k1")
                .bytes(content_type, body.clone()),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type}: {answer}"
        );
        assert!(!file.exists(), "{content_type}: the file was written");
    }
    let (status, answer) = call(
        &app,
        Call::post("/v1/file/write")
            .bearer("k1")
            .bytes("application/json", body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        std::fs::read_to_string(&file).ok().as_deref(),
        Some("forged")
    );
}

#[tokio::test]
async fn readyz_with_no_programs_is_ready() {
    let (status, body) = call(&app(None), Call::get("/readyz")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["ready"], true);
}

/// Routes served on purpose without an OpenAPI description, and why.
const UNDOCUMENTED: &[(&str, &str)] = &[
    ("/v1/openapi.json", "the document itself"),
    ("/v1/docs", "an HTML page rendered from the document"),
    (
        "/cdp",
        "Chromium's DevTools HTTP endpoints and WebSocket, relayed as they are",
    ),
    (
        "/cdp/",
        "Chromium's DevTools HTTP endpoints and WebSocket, relayed as they are",
    ),
    (
        "/cdp/{path}",
        "Chromium's DevTools HTTP endpoints and WebSocket, relayed as they are",
    ),
    ("/mcp", "the MCP server, which lists its own tools"),
    ("/terminal", "the terminal page (HTML) for a browser"),
    ("/terminal/", "the terminal page (HTML) for a browser"),
    (
        "/terminal/ws",
        "the terminal page's WebSocket, /v1/shell/ws's (documented there) under the page's path",
    ),
    (
        "/terminal/{file}",
        "the terminal page's script and xterm.js's files",
    ),
    ("/mcp/", "the MCP server, which lists its own tools"),
    (
        "/mcp/{__private__axum_nest_tail_param}",
        "the MCP server, which lists its own tools",
    ),
    (
        "/vnc",
        "noVNC's page and files for the remote desktop viewer",
    ),
    (
        "/vnc/",
        "noVNC's page and files for the remote desktop viewer",
    ),
    (
        "/vnc/{path}",
        "noVNC's page and files, and the viewer's RFB WebSocket",
    ),
    ("/websockify", "the RFB WebSocket for VNC clients"),
];

/// The document describes exactly the routes the router serves, with their methods; what it
/// leaves out is listed in `UNDOCUMENTED` with the reason.
#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let app = app(None);
    let (status, doc) = call(&app, Call::get("/v1/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    // AIO's operations sandboxd does not serve are documented with their 501; the families
    // unsupported by design have catch-all routes, the planned ones are the fallback's.
    let not_supported = |item: &serde_json::Value| {
        item.as_object().unwrap().values().all(|operation| {
            operation["tags"]
                .as_array()
                .is_some_and(|tags| tags.iter().any(|t| t == "not supported"))
        })
    };
    let in_unsupported_family = |path: &str| {
        sandboxd::api::unsupported::UNSUPPORTED
            .iter()
            .any(|family| {
                family
                    .prefixes
                    .iter()
                    .any(|prefix| path.starts_with(prefix))
            })
    };
    let documented: BTreeSet<String> = paths
        .iter()
        .filter(|(_, item)| !not_supported(item))
        .map(|(path, _)| path.clone())
        .collect();
    let served: BTreeSet<String> = served_paths(&app)
        .into_iter()
        .filter(|path| !in_unsupported_family(path))
        .collect();
    assert!(served.len() > 10, "axum's route table lists {served:?}");

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

    let mut answered_501 = 0;
    for (path, item) in paths {
        let described: BTreeSet<String> = item.as_object().unwrap().keys().cloned().collect();
        if !not_supported(item) {
            assert_eq!(
                served_methods(&app, path, &[]).await,
                described,
                "the methods of {path}"
            );
            continue;
        }
        for method in described {
            let concrete = path.replace('{', "x-").replace('}', "");
            let request = Call::new(method.to_uppercase().parse().unwrap(), concrete.clone());
            let (status, body) = call(&app, request).await;
            assert_eq!(
                status,
                StatusCode::NOT_IMPLEMENTED,
                "{method} {concrete}: {body}"
            );
            let message = body["message"].as_str().unwrap();
            assert!(
                message.contains("not supported by sandboxd") && message.contains(&concrete),
                "{method} {concrete}: {body}"
            );
            answered_501 += 1;
        }
    }
    // Every operation of the 501 families, and only those, is documented as 501.
    let listed: usize = sandboxd::api::unsupported::UNSUPPORTED
        .iter()
        .chain(sandboxd::api::unsupported::PLANNED)
        .map(|family| family.operations.len())
        .sum();
    assert!(listed > 0);
    assert_eq!(answered_501, listed, "operations answering 501");
    assert!(doc["paths"]["/healthz"]["get"]["security"].is_null());
    assert!(doc["paths"]["/auth"]["get"]["security"].is_null());
    assert!(doc["paths"]["/v1/processes"]["get"]["security"].is_array());
    assert!(doc["components"]["schemas"]["ProcessInfo"].is_object());
}

#[tokio::test]
async fn the_heartbeat_reports_work_in_flight_but_not_itself() {
    let mut settings =
        Settings::from_lookup(|name| (name == "SANDBOX_AUTH").then(|| "none".to_string())).unwrap();
    settings.api_key = Some("k1".into());
    let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default()).unwrap());
    let activity = Activity::new();
    let app = router(AppState::new(
        supervisor,
        Arc::new(settings),
        activity.clone(),
    ));
    let heartbeat = || Call::get("/v1/activity").bearer("k1");
    let (status, body) = call(&app, heartbeat()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["in_flight"], 0, "{body}");
    // A long-lived session (a terminal, say) is in flight.
    let session = activity.hold();
    let (_, body) = call(&app, heartbeat()).await;
    assert_eq!(body["in_flight"], 1, "{body}");
    drop(session);
    let (_, body) = call(&app, heartbeat()).await;
    assert_eq!(body["in_flight"], 0);
    assert!(body["idle_secs"].as_f64().unwrap() < 5.0);
    // The heartbeat needs the key.
    let (status, _) = call(&app, Call::get("/v1/activity")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// The desktop's and the browser page's screenshots read `quality` by one rule: 1 to 100, for
/// any format, refused with the same answer.
#[tokio::test]
async fn both_screenshot_routes_refuse_a_bad_quality_alike() {
    let app = app(None);
    for quality in ["0", "101", "300", "-1"] {
        let mut answers = Vec::new();
        for route in ["/v1/browser/screenshot", "/v1/browser/page/screenshot"] {
            for format in ["jpeg", "png"] {
                let (status, body) = call(
                    &app,
                    Call::get(format!("{route}?format={format}&quality={quality}")),
                )
                .await;
                assert_eq!(
                    status,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "{route} {quality}"
                );
                assert_eq!(
                    body["detail"][0]["loc"],
                    serde_json::json!(["query", "quality"]),
                    "{route} {quality}: {body}"
                );
                answers.push(body["message"].clone());
            }
        }
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
        assert_eq!(
            answers[0],
            format!("quality must be from 1 to 100, got {quality}")
        );
    }
}

/// `detail.runtime.nodejs` lists Node.js when `node` (or `nodejs`) is on PATH, with the version
/// it reports, and is empty otherwise.
#[tokio::test]
async fn the_sandbox_context_reports_node_when_it_is_installed() {
    let (status, body) = call(&app(None), Call::get("/v1/sandbox")).await;
    assert_eq!(status, StatusCode::OK);
    let nodejs = body["detail"]["runtime"]["nodejs"].as_array().unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let installed = ["node", "nodejs"].iter().any(|name| {
        std::env::split_paths(&path).any(|dir| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(dir.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    });
    if !installed {
        assert!(nodejs.is_empty(), "{body}");
        return;
    }
    assert_eq!(nodejs.len(), 1, "{body}");
    let version = nodejs[0]["ver"].as_str().unwrap_or_default();
    assert!(
        version.starts_with(|c: char| c.is_ascii_digit()),
        "node's version: {body}"
    );
    assert!(nodejs[0]["bin"].as_str().is_some(), "{body}");
}

#[tokio::test]
async fn aio_paths_sandboxd_does_not_serve_answer_501_saying_why() {
    let app = app(None);
    for (method, path, says) in [
        ("GET", "/v1/sandbox/observe/status", "observability"),
        ("DELETE", "/v1/proxy/mappings/anything/below", "egress"),
        ("GET", "/v1/sandbox/observe/metrics", "observability"),
        ("PUT", "/v1/proxy/upstream", "egress"),
        ("GET", "/v1/browser/proxy.pac", "egress"),
    ] {
        let what = format!("{method} {path}");
        let (status, body) = call(&app, Call::new(method.parse().unwrap(), path)).await;
        assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{what}: {body}");
        assert_eq!(body["success"], false, "{what}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(says), "{what}: {message}");
    }
    // Neighbours of those paths are still plain 404s.
    for path in ["/v1/proxyx", "/v1/jupyterlab", "/v1/sandbox/observer"] {
        let (status, _) = call(&app, Call::get(path)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    // The key is still required first.
    let keyed = app_with_key();
    let (status, _) = call(&keyed, Call::get("/v1/proxy/upstream")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

fn app_with_key() -> axum::Router {
    app(Some("k1"))
}

#[tokio::test]
async fn shutdown_hooks_are_registered_checked_and_removed() {
    let app = app(None);
    for (body, field) in [
        (serde_json::json!({"command": "true"}), "name"),
        (
            serde_json::json!({"name": "a b", "command": "true"}),
            "name",
        ),
        (serde_json::json!({"name": "x"}), "command"),
        (serde_json::json!({"name": "x", "command": " "}), "command"),
        (
            serde_json::json!({"name": "x", "command": "true", "timeout": 0}),
            "timeout",
        ),
        (
            serde_json::json!({"name": "x", "command": "true", "event": "boot"}),
            "event",
        ),
    ] {
        let (status, answer) = call(&app, Call::post("/v1/sandbox/hooks").json(&body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(
            answer["detail"][0]["loc"],
            serde_json::json!(["body", field]),
            "{answer}"
        );
    }
    let (_, listed) = call(&app, Call::get("/v1/sandbox/hooks")).await;
    assert_eq!(listed["data"], serde_json::json!([]));
    let body = serde_json::json!({"name": "save", "command": "echo bye", "priority": 2});
    let (status, answer) = call(&app, Call::post("/v1/sandbox/hooks").json(&body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["data"]["source"], "api");
    assert_eq!(answer["data"]["event"], "shutdown");
    assert_eq!(answer["data"]["timeout"], 5.0);
    let (_, listed) = call(&app, Call::get("/v1/sandbox/hooks?event=shutdown")).await;
    assert_eq!(listed["data"][0]["name"], "save");
    let (status, _) = call(&app, Call::get("/v1/sandbox/hooks?event=boot")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = call(&app, Call::delete("/v1/sandbox/hooks/save")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, Call::delete("/v1/sandbox/hooks/save")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
