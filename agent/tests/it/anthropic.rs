//! The Anthropic adapter driven by the loop against a test server speaking the Messages API:
//! what it sent (tool versions, display size, thinking blocks sent back with their signatures,
//! every tool_use answered by one tool_result, images trimmed to the limit) and what the
//! computer received (coordinates planned on an observation, mapped through its scale).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use agent::gateway::{HttpOptions, RetryPolicy};
use agent::model::anthropic::{AnthropicModel, AnthropicOptions};
use agent::{
    DesktopAction, EditCommand, ErrorKind, Limits, Model, RunConfig, RunEvent, RunStatus, Secret,
};
use common::computer::{Call, RecordingComputer};
use common::provider::{ProviderServer, Reply};
use common::streams::{self, anthropic_action, anthropic_final, text, thinking, tool_use};
use serde_json::{Value, json};

fn http() -> HttpOptions {
    HttpOptions {
        retry: RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(10),
            ..RetryPolicy::default()
        },
        ..HttpOptions::default()
    }
}

fn model(server: &ProviderServer, name: &str) -> anyhow::Result<Arc<dyn Model>> {
    Ok(Arc::new(AnthropicModel::new(
        name,
        Secret::new("sk-ant-test"),
        &server.url,
        AnthropicOptions::default(),
        http(),
    )?))
}

fn config(task: &str) -> RunConfig {
    RunConfig::new(task)
}

/// Every block of `message` of type `kind`.
fn blocks<'a>(message: &'a Value, kind: &str) -> Vec<&'a Value> {
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == kind)
        .collect()
}

/// All blocks of a request of type `kind`, tool_result contents included.
fn all_blocks(body: &Value, kind: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == kind {
                out.push(block.clone());
            }
            for inner in block["content"].as_array().into_iter().flatten() {
                if inner["type"] == kind {
                    out.push(inner.clone());
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn thinking_is_sent_back_and_coordinates_are_mapped_through_the_scale() -> anyhow::Result<()>
{
    let turn_one = streams::anthropic(
        &[
            thinking("The Paint icon is in the middle.", "c2lnbmF0dXJl"),
            text("Clicking it."),
            tool_use(
                "toolu_1",
                "computer",
                json!({"action": "left_click", "coordinate": [640, 360]}),
            ),
        ],
        "tool_use",
    );
    let server = ProviderServer::start(vec![
        Reply::sse(turn_one),
        Reply::sse(anthropic_final("Done.")),
    ])
    .await?;
    // A 1920x1080 screen is shown to the model as 1280x720.
    let computer = Arc::new(RecordingComputer::new((1920, 1080)));
    let run = common::start(
        computer.clone(),
        model(&server, "claude-opus-4-5")?,
        config("open paint"),
    );
    let outcome = run.outcome().await?;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.answer.as_deref(), Some("Done."));

    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2);
    let tools = &bodies[0]["tools"];
    assert_eq!(tools[0]["type"], "computer_20251124");
    assert_eq!(tools[0]["display_width_px"], 1280);
    assert_eq!(tools[0]["display_height_px"], 720);
    assert_eq!(tools[0]["enable_zoom"], true);
    assert_eq!(tools[1]["type"], "bash_20250124");
    assert_eq!(tools[2]["type"], "text_editor_20250728");
    assert_eq!(tools[2]["name"], "str_replace_based_edit_tool");
    assert_eq!(tools[3]["name"], "request_human");

    // The first request: the task and the first screenshot.
    let first = &bodies[0]["messages"][0];
    assert_eq!(blocks(first, "text")[0]["text"], "Task: open paint");
    assert_eq!(
        blocks(first, "image")[0]["source"]["media_type"],
        "image/png"
    );

    // The second request sends the assistant turn back unchanged, thinking and signature first.
    let messages = bodies[1]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(messages.len(), 3);
    let assistant = &messages[1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"][0],
        json!({"type": "thinking", "thinking": "The Paint icon is in the middle.", "signature": "c2lnbmF0dXJl"})
    );
    assert_eq!(assistant["content"][2]["id"], "toolu_1");
    assert_eq!(
        assistant["content"][2]["input"],
        json!({"action": "left_click", "coordinate": [640, 360]})
    );
    // ... and answers the tool_use with exactly one tool_result carrying the new screenshot.
    let results = blocks(&messages[2], "tool_result");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert!(
        results[0]["content"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "image")
    );

    // The click was planned on observation 1 and lands on the screen through its 1.5 scale.
    let clicks: Vec<Call> = computer
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Act { .. }))
        .collect();
    assert_eq!(
        clicks,
        vec![Call::Act {
            action: DesktopAction::Click {
                x: Some(640.0),
                y: Some(360.0),
                button: None,
                num_clicks: None,
                modifiers: None
            },
            observation: Some("1".into()),
            screen_points: vec![(960, 540)],
        }]
    );
    Ok(())
}

#[tokio::test]
async fn events_name_the_observation_timings_and_usage() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![
        Reply::sse(anthropic_action(
            "toolu_1",
            json!({"action": "left_click", "coordinate": [10, 20]}),
        )),
        Reply::sse(anthropic_final("ok")),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(
        computer.clone(),
        model(&server, "claude-opus-4-5")?,
        config("t"),
    );
    let sink = run.sink.clone();
    run.outcome().await?;
    let events = sink.events();
    let shots: Vec<String> = sink.screenshots().into_iter().map(|(m, _)| m.id).collect();
    let finished = events
        .iter()
        .find_map(|e| match e {
            RunEvent::ActionFinished {
                observation_id,
                screenshot,
                screen_points,
                timings,
                ..
            } => Some((
                observation_id.clone(),
                screenshot.clone(),
                screen_points.clone(),
                *timings,
            )),
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("no action.finished"))?;
    assert_eq!(
        finished.0.as_deref(),
        Some("1"),
        "planned on the first observation"
    );
    let after = finished
        .1
        .ok_or_else(|| anyhow::anyhow!("no screenshot after the action"))?;
    assert!(
        shots.contains(&after),
        "the sink got the screenshot before the event named it"
    );
    assert_eq!(finished.2, vec![(10, 20)]);
    let _ = finished.3.action_ms;
    let usage = events.iter().find_map(|e| match e {
        RunEvent::Usage { usage, .. } => Some(*usage),
        _ => None,
    });
    assert_eq!(
        usage.map(|u| (u.input_tokens, u.output_tokens, u.cache_read_input_tokens)),
        Some((100, 42, 7))
    );
    Ok(())
}

#[tokio::test]
async fn older_models_get_the_20250124_tool() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![Reply::sse(anthropic_final("ok"))]).await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    common::start(
        computer,
        model(&server, "claude-sonnet-4-5-20250929")?,
        config("t"),
    )
    .outcome()
    .await?;
    let request = &server.requests()[0];
    assert_eq!(
        request
            .headers
            .get("anthropic-beta")
            .and_then(|v| v.to_str().ok()),
        Some("computer-use-2025-01-24")
    );
    assert_eq!(request.body["tools"][0]["type"], "computer_20250124");
    assert!(request.body["tools"][0].get("enable_zoom").is_none());
    Ok(())
}

#[tokio::test]
async fn images_are_trimmed_to_the_limit_oldest_first() -> anyhow::Result<()> {
    let click = |id: &str| {
        Reply::sse(anthropic_action(
            id,
            json!({"action": "left_click", "coordinate": [5, 5]}),
        ))
    };
    let server = ProviderServer::start(vec![
        click("toolu_1"),
        click("toolu_2"),
        click("toolu_3"),
        click("toolu_4"),
        Reply::sse(anthropic_final("ok")),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let mut config = config("click around");
    config.limits = Limits {
        max_images: 2,
        ..Limits::default()
    };
    common::start(computer, model(&server, "claude-opus-4-5")?, config)
        .outcome()
        .await?;
    let bodies = server.bodies();
    let last = bodies.last().cloned().unwrap_or_default();
    assert_eq!(all_blocks(&last, "image").len(), 2, "two images kept");
    let texts: Vec<String> = all_blocks(&last, "text")
        .into_iter()
        .filter_map(|b| b["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        texts.contains(&"Task: click around".to_string()),
        "the task text stays"
    );
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("omitted to save context"))
            .count(),
        3,
        "the three oldest screenshots are replaced by a note: {texts:?}"
    );
    // Every tool_use is answered exactly once.
    let uses: Vec<String> = all_blocks(&last, "tool_use")
        .into_iter()
        .filter_map(|b| b["id"].as_str().map(str::to_string))
        .collect();
    let answered: Vec<String> = all_blocks(&last, "tool_result")
        .into_iter()
        .filter_map(|b| b["tool_use_id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(uses, answered);
    for body in &bodies {
        assert!(all_blocks(body, "image").len() <= 2);
    }
    Ok(())
}

#[tokio::test]
async fn out_of_range_coordinates_are_refused_not_clamped() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![
        Reply::sse(anthropic_action(
            "toolu_1",
            json!({"action": "left_click", "coordinate": [5000, 10]}),
        )),
        Reply::sse(anthropic_final("gave up")),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(
        computer.clone(),
        model(&server, "claude-opus-4-5")?,
        config("t"),
    );
    let sink = run.sink.clone();
    run.outcome().await?;
    assert!(
        computer.actions().is_empty(),
        "nothing was sent to the computer"
    );
    let second = &server.bodies()[1];
    let result = &all_blocks(second, "tool_result")[0];
    assert_eq!(result["is_error"], true);
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("(5000, 10)") && text.contains("outside the 1280x800 screenshot"),
        "{text}"
    );
    assert!(sink.events().iter().any(|e| matches!(
        e,
        RunEvent::Error {
            kind: ErrorKind::ActionRefused,
            fatal: false,
            ..
        }
    )));
    Ok(())
}

#[tokio::test]
async fn the_same_action_without_effect_is_warned_about_then_fails_the_run() -> anyhow::Result<()> {
    let click = || {
        Reply::sse(anthropic_action(
            "toolu_x",
            json!({"action": "left_click", "coordinate": [100, 100]}),
        ))
    };
    let server = ProviderServer::start((0..6).map(|_| click()).collect()).await?;
    let computer = Arc::new(RecordingComputer::inert((1280, 800)));
    let run = common::start(
        computer.clone(),
        model(&server, "claude-opus-4-5")?,
        config("t"),
    );
    let sink = run.sink.clone();
    let outcome = run.outcome().await?;
    assert_eq!(outcome.status, RunStatus::Failed);
    let reason = outcome.reason.unwrap_or_default();
    assert!(reason.contains("repeated 5 times"), "{reason}");
    assert_eq!(computer.actions().len(), 5);
    // The model was warned at the third and fourth repetition.
    let bodies = server.bodies();
    let warned = |body: &Value| {
        all_blocks(body, "tool_result")
            .last()
            .and_then(|r| {
                r["content"][0]["text"]
                    .as_str()
                    .map(|t| t.contains("repeated the same action"))
            })
            .unwrap_or(false)
    };
    assert!(!warned(&bodies[2]));
    assert!(warned(&bodies[3]) && warned(&bodies[4]));
    let last = sink.events().last().cloned();
    assert!(matches!(
        last,
        Some(RunEvent::RunStatus {
            status: RunStatus::Failed,
            ..
        })
    ));
    Ok(())
}

#[tokio::test]
async fn bash_editor_zoom_and_drags_reach_the_computer() -> anyhow::Result<()> {
    let turn = streams::anthropic(
        &[
            tool_use("toolu_b", "bash", json!({"command": "ls ~/outputs"})),
            tool_use(
                "toolu_e",
                "str_replace_based_edit_tool",
                json!({"command": "create", "path": "/home/agent/notes.txt", "file_text": "hi"}),
            ),
            tool_use(
                "toolu_z",
                "computer",
                json!({"action": "zoom", "region": [0, 0, 320, 200]}),
            ),
            tool_use(
                "toolu_d",
                "computer",
                json!({"action": "left_click_drag", "start_coordinate": [100, 100], "coordinate": [300, 100]}),
            ),
        ],
        "tool_use",
    );
    let server =
        ProviderServer::start(vec![Reply::sse(turn), Reply::sse(anthropic_final("ok"))]).await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    common::start(
        computer.clone(),
        model(&server, "claude-opus-4-5")?,
        config("t"),
    )
    .outcome()
    .await?;
    let calls = computer.calls();
    assert!(calls.contains(&Call::Shell {
        command: "ls ~/outputs".into(),
        restart: false
    }));
    assert!(calls.contains(&Call::Edit(EditCommand::Create {
        path: "/home/agent/notes.txt".into(),
        file_text: "hi".into()
    })));
    assert!(calls.contains(&Call::Zoom {
        region: [0.0, 0.0, 320.0, 200.0]
    }));
    // The drag is one stroke: one DRAG_PATH, densified.
    let drags: Vec<DesktopAction> = computer
        .actions()
        .into_iter()
        .filter(|a| matches!(a, DesktopAction::DragPath { .. }))
        .collect();
    assert_eq!(drags.len(), 1);
    assert!(matches!(&drags[0], DesktopAction::DragPath { path, .. } if path.len() == 11));
    let second = &server.bodies()[1];
    let results = all_blocks(second, "tool_result");
    let ids: Vec<&str> = results
        .iter()
        .filter_map(|r| r["tool_use_id"].as_str())
        .collect();
    assert_eq!(ids, vec!["toolu_b", "toolu_e", "toolu_z", "toolu_d"]);
    assert!(
        results[0]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("[exit code 0]")
    );
    // The zoom's image and the screenshot after the drag are in the results.
    assert!(
        results[2]["content"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "image")
    );
    assert!(
        results[3]["content"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "image")
    );
    Ok(())
}
