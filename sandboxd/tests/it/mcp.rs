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

/// The REST view (`/v1/mcp/*`) lists the same tools as `tools/list`, AIO's names among them.
#[tokio::test]
async fn the_rest_view_lists_the_mcp_tools_with_aios_names() {
    let fixture = Fixture::new();
    let (status, servers) = router::call(&fixture.app, Call::get("/v1/mcp/servers")).await;
    assert_eq!(status, StatusCode::OK, "{servers}");
    assert_eq!(servers["data"], json!(["sandbox"]));

    let (status, listed) = router::call(&fixture.app, Call::get("/v1/mcp/sandbox/tools")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let mut rest: Vec<String> = listed["data"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .map(|t| {
            assert!(t["inputSchema"].is_object(), "{t}");
            t["name"].as_str().unwrap().to_string()
        })
        .collect();
    let session = fixture.session().await;
    let (_, _, answer) = fixture
        .send(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await;
    let mut mcp: Vec<String> = answer["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    rest.sort();
    mcp.sort();
    assert_eq!(rest, mcp);
    // AIO Sandbox's MCP tools, all 33 (issue 27), and the older names of three of them.
    for aio in [
        "sandbox_get_context",
        "sandbox_get_packages",
        "sandbox_execute_code",
        "sandbox_execute_bash",
        "sandbox_file_operations",
        "sandbox_str_replace_editor",
        "sandbox_convert_to_markdown",
        "sandbox_get_browser_info",
        "sandbox_browser_screenshot",
        "sandbox_browser_execute_action",
        "browser_navigate",
        "browser_go_back",
        "browser_go_forward",
        "browser_close",
        "browser_close_tab",
        "browser_press_key",
        "browser_get_markdown",
        "browser_get_text",
        "browser_read_links",
        "browser_get_download_list",
        "browser_click",
        "browser_hover",
        "browser_select",
        "browser_form_input_fill",
        "browser_get_clickable_elements",
        "browser_scroll",
        "browser_evaluate",
        "browser_vision_screen_capture",
        "browser_vision_screen_click",
        "browser_new_tab",
        "browser_tab_list",
        "browser_switch_tab",
        "browser_screenshot",
        "browser_get_info",
        "browser_gui_screenshot",
        "browser_gui_execute_action",
    ] {
        assert!(rest.iter().any(|n| n == aio), "{aio} missing from {rest:?}");
    }

    // Every listed tool can be called through the REST view (none answers 404).
    for name in &rest {
        let answer = tokio::time::timeout(
            Duration::from_secs(30),
            router::call(
                &fixture.app,
                Call::post(format!("/v1/mcp/sandbox/tools/{name}")).json(&json!({})),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} did not answer within 30 s"));
        assert_ne!(answer.0, StatusCode::NOT_FOUND, "{name}: {}", answer.1);
    }
}

#[tokio::test]
async fn the_rest_view_calls_tools_confined_like_the_rest_routes() {
    let fixture = Fixture::new();
    let path = fixture.root.path().join("m/a.txt").display().to_string();
    let (status, written) = router::call(
        &fixture.app,
        Call::post("/v1/mcp/sandbox/tools/file_write")
            .json(&json!({"file": path, "content": "via rest\n"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{written}");
    assert_eq!(written["success"], json!(true), "{written}");
    assert_eq!(written["data"]["isError"], json!(false), "{written}");

    let (_, read) = router::call(
        &fixture.app,
        Call::post("/v1/mcp/sandbox/tools/file_read").json(&json!({"file": path})),
    )
    .await;
    assert_eq!(read["data"]["content"][0]["type"], json!("text"), "{read}");
    assert_eq!(read["data"]["content"][0]["text"], json!("via rest\n"));

    // AIO's editor name is the same tool.
    let (_, viewed) = router::call(
        &fixture.app,
        Call::post("/v1/mcp/sandbox/tools/sandbox_str_replace_editor")
            .json(&json!({"command": "view", "path": path})),
    )
    .await;
    assert!(
        viewed["data"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("via rest"),
        "{viewed}"
    );

    // Outside the roots: the tool ran and refused; the envelope says so.
    let (status, refused) = router::call(
        &fixture.app,
        Call::post("/v1/mcp/sandbox/tools/file_read").json(&json!({"file": "/etc/passwd"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{refused}");
    assert_eq!(refused["success"], json!(false), "{refused}");
    assert_eq!(refused["data"]["isError"], json!(true), "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("/etc/passwd"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_rest_view_names_unknown_servers_tools_and_bad_fields() {
    let fixture = Fixture::new();
    let (status, answer) = router::call(&fixture.app, Call::get("/v1/mcp/browser/tools")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("\"browser\""));

    let (status, answer) = router::call(
        &fixture.app,
        Call::post("/v1/mcp/sandbox/tools/no_such_tool").json(&json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("\"no_such_tool\"")
    );

    let (status, answer) = router::call(
        &fixture.app,
        Call::post("/v1/mcp/sandbox/tools/file_read").json(&json!({"file": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(
        answer["detail"][0]["loc"],
        json!(["body", "file"]),
        "{answer}"
    );

    let (status, answer) = router::call(
        &fixture.app,
        Call::post("/v1/mcp/sandbox/tools/sandbox_execute_bash").json(&json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(
        answer["detail"][0]["loc"],
        json!(["body", "cmd"]),
        "{answer}"
    );
}
