//! `/mcp` through the router (`oneshot`, no socket): the MCP handshake over streamable HTTP,
//! the tool list, file tools confined like the REST routes, the body bound and the Origin check.

use std::sync::Arc;
use std::time::Duration;

use agentbox_tests::router::{self, Call};
use axum::http::StatusCode;
use http_body_util::BodyExt;
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use serde_json::{Value, json};
use supervisor::{Supervisor, SupervisorConfig};
use tempfile::TempDir;

struct Fixture {
    root: TempDir,
    app: axum::Router,
}

impl Fixture {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let mut settings =
            Settings::from_lookup(|name| (name == "SANDBOX_AUTH").then(|| "none".to_string()))
                .unwrap();
        settings.file_roots = vec![root.path().to_path_buf()];
        settings.workspace = root.path().to_path_buf();
        settings.max_write_bytes = 4096;
        let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default()).unwrap());
        let app = router(AppState::new(
            supervisor,
            Arc::new(settings),
            Activity::new(),
        ));
        Self { root, app }
    }

    fn request(&self, session: Option<&str>, body: Vec<u8>) -> Call {
        let mut call = Call::post("/mcp")
            .header("host", "127.0.0.1:8080")
            .bytes("application/json", body)
            .header("accept", "application/json, text/event-stream");
        if let Some(session) = session {
            call = call
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-06-18");
        }
        call
    }

    /// Sends one JSON-RPC message; returns the status, the session id header and the first
    /// JSON-RPC message of the answer (plain JSON or the first SSE `data:` event).
    async fn send(
        &self,
        session: Option<&str>,
        message: Value,
    ) -> (StatusCode, Option<String>, Value) {
        // The answer may be an SSE stream that stays open: read it only up to the first message.
        let response = router::respond(
            &self.app,
            self.request(session, message.to_string().into_bytes()),
        )
        .await;
        let status = response.status();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_string());
        let mut body = response.into_body();
        let mut text = String::new();
        let answer = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.unwrap().into_data() {
                    text.push_str(&String::from_utf8_lossy(&data));
                }
                if let Ok(value) = serde_json::from_str::<Value>(&text) {
                    return value;
                }
                for line in text.lines() {
                    if let Some(data) = line.strip_prefix("data:")
                        && let Ok(value) = serde_json::from_str::<Value>(data.trim())
                    {
                        return value;
                    }
                }
            }
            Value::String(text)
        })
        .await
        .expect("an MCP answer within 20 s");
        (status, session, answer)
    }

    async fn session(&self) -> String {
        let (status, session, answer) = self
            .send(
                None,
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "agentbox-test", "version": "0"}}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert!(
            answer["result"]["capabilities"]["tools"].is_object(),
            "{answer}"
        );
        let session = session.expect("a session id");
        let (status, _, _) = self
            .send(
                Some(&session),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert!(status.is_success(), "{status}");
        session
    }

    async fn call(&self, session: &str, tool: &str, arguments: Value) -> Value {
        let (status, _, answer) = self
            .send(
                Some(session),
                json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer["result"].clone()
    }
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn tools_cover_shell_files_desktop_and_browser() {
    let fixture = Fixture::new();
    let session = fixture.session().await;
    let (_, _, answer) = fixture
        .send(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await;
    let names: Vec<&str> = answer["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for expected in [
        "screenshot",
        "desktop_action",
        "shell_exec",
        "file_read",
        "file_write",
        "file_list",
        "file_grep",
        "str_replace_editor",
        "browser_navigate",
        "browser_snapshot",
        "browser_click",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
}

#[tokio::test]
async fn file_tools_write_read_and_stay_confined() {
    let fixture = Fixture::new();
    let session = fixture.session().await;
    let path = fixture
        .root
        .path()
        .join("notes/a.txt")
        .display()
        .to_string();

    let written = fixture
        .call(
            &session,
            "file_write",
            json!({"file": path, "content": "héllo 世界\n"}),
        )
        .await;
    assert_ne!(written["isError"], json!(true), "{written}");
    assert_eq!(
        std::fs::read_to_string(fixture.root.path().join("notes/a.txt")).unwrap(),
        "héllo 世界\n"
    );

    let read = fixture
        .call(&session, "file_read", json!({"file": path}))
        .await;
    assert_eq!(text_of(&read), "héllo 世界\n", "{read}");

    let outside = fixture
        .call(&session, "file_read", json!({"file": "/etc/passwd"}))
        .await;
    assert_eq!(outside["isError"], json!(true), "{outside}");
    assert!(text_of(&outside).contains("outside"), "{outside}");

    let escape = format!("{}/../escape.txt", fixture.root.path().display());
    let refused = fixture
        .call(
            &session,
            "file_write",
            json!({"file": escape, "content": "x"}),
        )
        .await;
    assert_eq!(refused["isError"], json!(true), "{refused}");
    assert!(!fixture.root.path().join("../escape.txt").exists());

    let bad = fixture.call(&session, "file_read", json!({})).await;
    // A missing required field is refused by the tool-argument check, as a JSON-RPC error or an
    // error result depending on the rmcp version; either way nothing is read.
    assert!(bad.is_null() || bad["isError"] == json!(true), "{bad}");
}

#[tokio::test]
async fn an_oversize_body_gets_413_and_a_browser_origin_403() {
    let fixture = Fixture::new();
    // 4096-byte write limit: the body bound is max(2 * 4096 + 64 KiB, the default limit).
    let huge = vec![b' '; 64 << 20];
    let answer = router::send(&fixture.app, fixture.request(None, huge)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);

    let request = fixture
        .request(
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "page", "version": "0"}}})
            .to_string()
            .into_bytes(),
        )
        .header("origin", "https://evil.example");
    let answer = router::send(&fixture.app, request).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
}
