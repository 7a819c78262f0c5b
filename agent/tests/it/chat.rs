//! The OpenAI-compatible Chat Completions adapter driven by the loop against a test server
//! speaking that protocol: function tools, tool calls reassembled from fragments, the assistant
//! message and its reasoning sent back, tool results paired by id, screenshots as data URLs,
//! and the key header only when a key is configured.

use crate::common;

use std::sync::Arc;

use agent::gateway::HttpOptions;
use agent::model::chat::ChatModel;
use agent::{DesktopAction, Model, RunConfig, RunStatus, Secret};
use common::computer::RecordingComputer;
use common::provider::{ProviderServer, Reply};
use common::streams::{self, chat_call};
use serde_json::{Value, json};

fn model(server: &ProviderServer, key: Option<&str>) -> anyhow::Result<Arc<dyn Model>> {
    Ok(Arc::new(ChatModel::new(
        "Qwen/Qwen2.5-VL-7B-Instruct",
        key.map(Secret::new),
        &format!("{}/v1", server.url),
        None,
        HttpOptions::default(),
    )?))
}

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_curve_is_one_drag_and_the_conversation_goes_back_paired() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![
        Reply::sse(streams::chat(
            "Drawing the curve.",
            "The canvas is in the middle.",
            &[chat_call(
                "call_1",
                "computer",
                json!({"action": "drag", "path": [[100, 100], [140, 100], [140, 160]]}),
            )],
        )),
        Reply::sse(streams::chat("Finished.", "", &[])),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(
        computer.clone(),
        model(&server, None)?,
        RunConfig::new("draw"),
    );
    let outcome = run.outcome().await?;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.answer.as_deref(), Some("Finished."));

    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert!(
        requests[0].headers.get("authorization").is_none(),
        "no key, no header"
    );
    let first = &requests[0].body;
    assert_eq!(first["stream"], true);
    let names: Vec<&str> = first["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["computer", "bash", "text_editor", "request_human"]
    );
    let task = &messages(first)[1];
    assert!(
        task["content"][1]["image_url"]["url"]
            .as_str()
            .unwrap_or_default()
            .starts_with("data:image/png;base64,")
    );

    let actions = computer.actions();
    assert_eq!(actions.len(), 1, "the whole curve is one action");
    assert!(
        matches!(&actions[0], DesktopAction::DragPath { path, .. } if path.first() == Some(&[100.0, 100.0]) && path.last() == Some(&[140.0, 160.0]))
    );

    let second = messages(&requests[1].body);
    let assistant = &second[2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["reasoning_content"],
        "The canvas is in the middle."
    );
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "computer");
    let arguments: Value = serde_json::from_str(
        assistant["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap_or("{}"),
    )?;
    assert_eq!(
        arguments["path"],
        json!([[100, 100], [140, 100], [140, 160]])
    );
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], "call_1");
    // Tool messages are text; the screenshot follows in a user message.
    assert_eq!(second[4]["role"], "user");
    assert_eq!(second[4]["content"][1]["type"], "image_url");
    Ok(())
}

#[tokio::test]
async fn bad_arguments_are_answered_as_tool_errors_and_the_key_is_sent() -> anyhow::Result<()> {
    let broken = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_x\",\"type\":\"function\",\"function\":{\"name\":\"computer\",\"arguments\":\"{not json\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    let server = ProviderServer::start(vec![
        Reply::sse(broken.to_string()),
        Reply::sse(streams::chat("ok", "", &[])),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    common::start(
        computer.clone(),
        model(&server, Some("local-key"))?,
        RunConfig::new("t"),
    )
    .outcome()
    .await?;
    assert!(computer.actions().is_empty());
    let requests = server.requests();
    assert_eq!(
        requests[0]
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer local-key")
    );
    let second = messages(&requests[1].body);
    let tool = second
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_default();
    assert_eq!(tool["tool_call_id"], "call_x");
    assert!(
        tool["content"]
            .as_str()
            .unwrap_or_default()
            .contains("not JSON"),
        "{tool}"
    );
    Ok(())
}
