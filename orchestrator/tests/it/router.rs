//! The orchestrator's real router without Docker (a backend that has no containers, SQLite in a
//! temporary directory): the OpenAPI document against the routes (`oneshot`, no socket), and
//! the command line's client commands against the router served on a loopback port.

use crate::in_process;

use std::collections::BTreeSet;

use agentbox_tests::router::{Call, send, served_methods, served_paths};
use axum::http::StatusCode;

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
    (
        "/.well-known/agent-card.json",
        "A2A's Agent Card: its shape is A2A's (the README's A2A section)",
    ),
    (
        "/a2a",
        "A2A's JSON-RPC endpoint: its methods are A2A's, not REST",
    ),
    (
        "/a2a/",
        "A2A's JSON-RPC endpoint: its methods are A2A's, not REST",
    ),
    ("/", "the web console's pages (a browser's)"),
    ("/sign-in", "the web console's pages (a browser's)"),
    ("/sandboxes", "the web console's pages (a browser's)"),
    ("/sandboxes/{id}", "the web console's pages (a browser's)"),
    ("/runs", "the web console's pages (a browser's)"),
    ("/runs/new", "the web console's pages (a browser's)"),
    ("/runs/{id}", "the web console's pages (a browser's)"),
    (
        "/console/session",
        "the web console's sign-in (its cookie is not an API credential for programs)",
    ),
    ("/console/models", "the web console's new-run form"),
    ("/share/runs/{id}", "a share link's page (a browser's)"),
    ("/share/runs/{id}/run", "a share link's page (a browser's)"),
    (
        "/share/runs/{id}/events",
        "a share link's page (a browser's)",
    ),
    (
        "/share/runs/{id}/websockify",
        "a share link's page (a browser's)",
    ),
    (
        "/share/runs/{id}/artifacts/{folder}/{file}",
        "a share link's page (a browser's)",
    ),
];

async fn app() -> in_process::InProcess {
    in_process::start(ADMIN_KEY, "http://127.0.0.1:8090", "router-test").await
}

/// The document describes exactly the routes the router serves, with their methods; what it
/// leaves out is listed in `UNDOCUMENTED` with the reason.
#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let fixture = app().await;
    let app = fixture.app.clone();
    let answer = send(&app, Call::get("/v1/openapi.json").bearer(ADMIN_KEY)).await;
    assert_eq!(answer.status, StatusCode::OK);
    let doc = answer.json();
    let paths = doc["paths"].as_object().expect("paths");
    let documented: BTreeSet<String> = paths.keys().cloned().collect();
    let served = served_paths(&app);
    assert!(served.len() > 5, "axum's route table lists {served:?}");

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
            served_methods(
                &app,
                path,
                &[("authorization", &format!("Bearer {ADMIN_KEY}"))]
            )
            .await,
            described,
            "the methods of {path}"
        );
    }
}

/// Runs the orchestrator's command line against `url` with the admin key; returns whether it
/// succeeded, its stdout and its stderr.
// The test drives the real binary, as a person would; std waits for it.
#[allow(clippy::disallowed_methods)]
async fn command_line(url: &str, args: &[&str]) -> (bool, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    command
        .args(args)
        .env("AGENTBOX_URL", url)
        .env("AGENTBOX_API_KEY", ADMIN_KEY);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the command's thread")
        .expect("the orchestrator binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The command line reads the API's answers through its wire types: keys are created, listed
/// and revoked, an empty sandbox list prints its header, and a refusal prints the server's
/// status and message.
#[tokio::test]
async fn the_command_line_prints_the_apis_answers() {
    let fixture = app().await;
    let app = fixture.app.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (ok, key, err) = command_line(&url, &["keys", "create", "ci"]).await;
    assert!(ok, "{err}");
    let key = key.trim();
    assert!(key.len() > 20, "the key's text: {key:?}");
    let key_id = err
        .strip_prefix("key id ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the key's id on stderr: {err:?}"))
        .to_string();
    assert!(err.ends_with(" (shown once: store it now)\n"), "{err:?}");

    let (ok, table, err) = command_line(&url, &["keys", "ls"]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "ID                         ADMIN  CREATED                   REVOKED                   NAME"
    );
    let ci = lines
        .iter()
        .find(|line| line.starts_with(&key_id))
        .unwrap_or_else(|| panic!("{key_id} listed: {table}"));
    let fields: Vec<&str> = ci.split_whitespace().collect();
    assert_eq!(
        (fields[1], fields[3], fields[4]),
        ("false", "-", "ci"),
        "{ci}"
    );
    assert_eq!(lines.len(), 3, "the admin key and ci: {table}");

    let (ok, table, err) = command_line(&url, &["sandbox", "ls"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        table,
        "ID                         STATUS    CREATED                   EXPIRES                   METADATA\n"
    );
    let (ok, json, err) = command_line(&url, &["sandbox", "ls", "--json"]).await;
    assert!(ok, "{err}");
    assert_eq!(json, "{\n  \"sandboxes\": []\n}\n");

    let (ok, out, err) = command_line(&url, &["keys", "rm", &key_id]).await;
    assert!(ok, "{err}");
    assert_eq!(out, format!("revoked {key_id}\n"));
    let (_, table, _) = command_line(&url, &["keys", "ls"]).await;
    assert!(
        table
            .lines()
            .any(|line| line.starts_with(&key_id) && !line.contains(" - ")),
        "revoked with a time: {table}"
    );

    let (ok, out, err) = command_line(&url, &["token", "sbx-none"]).await;
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.starts_with("orchestrator: 404 Not Found: "),
        "the server's status and message: {err:?}"
    );
}

/// A database locked from outside (a backup, a `sqlite3` shell holding a write transaction):
/// a write answers 503 with `Retry-After` once the busy timeout has passed (not a 500 after ten
/// seconds), changes nothing, and the same call succeeds once the lock is gone.
#[tokio::test]
async fn a_locked_database_answers_503_with_retry_after_and_changes_nothing() {
    use sqlx::Connection;

    let fixture = app().await;
    let create = || {
        Call::post("/v1/keys")
            .bearer(ADMIN_KEY)
            .json(&serde_json::json!({"name": "while-locked"}))
    };
    let names = || async {
        let answer = send(&fixture.app, Call::get("/v1/keys").bearer(ADMIN_KEY)).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        answer.json()["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|key| key["name"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };

    let url = orchestrator::db::sqlite_url(fixture.data.path());
    let mut holder = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("a second connection to the database");
    // Takes the write lock and keeps it until the rollback.
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut holder)
        .await
        .expect("the write lock");
    let answer = send(&fixture.app, create()).await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        answer.body
    );
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(answer.json()["error"]["code"], "database_busy");
    // Readers go on meanwhile (WAL), and see nothing of the refused write.
    assert!(!names().await.contains(&"while-locked".to_string()));

    sqlx::query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("the lock released");
    let answer = send(&fixture.app, create()).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{:?}", answer.body);
    assert_eq!(
        names()
            .await
            .iter()
            .filter(|name| *name == "while-locked")
            .count(),
        1
    );
}

/// `GET /v1/cluster`: the admin key sees the backend's machines; a tenant's key is refused.
#[tokio::test]
async fn the_cluster_view_is_for_admin_keys_only() {
    let fixture = app().await;
    let answer = send(&fixture.app, Call::get("/v1/cluster").bearer(ADMIN_KEY)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    let cluster = answer.json();
    assert_eq!(cluster["backend"], "docker");
    assert_eq!(cluster["nodes"][0]["state"], "ready", "{cluster}");
    assert!(
        cluster["nodes"][0]["free_memory_mib"].is_null(),
        "{cluster}"
    );
    assert_eq!(cluster["nodes"][0]["sandboxes"], serde_json::json!([]));

    let created = send(
        &fixture.app,
        Call::post("/v1/keys")
            .bearer(ADMIN_KEY)
            .json(&serde_json::json!({"name": "tenant"})),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let tenant = created.json()["key"].as_str().expect("key").to_string();
    let answer = send(&fixture.app, Call::get("/v1/cluster").bearer(&tenant)).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{:?}", answer.body);
}
