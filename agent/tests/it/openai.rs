//! The OpenAI Responses adapter driven by the loop against a test server speaking the
//! Responses API: computer calls (single and batched), computer_call_output with the
//! screenshot, reasoning items sent back with their encrypted content, and safety checks that
//! are acknowledged only with the person's approval.

use crate::common;

use std::sync::Arc;

use agent::gateway::HttpOptions;
use agent::model::openai::{OpenAiModel, OpenAiOptions};
use agent::{DesktopAction, Model, Phase, RunConfig, RunEvent, RunStatus, Secret};
use common::computer::RecordingComputer;
use common::provider::{ProviderServer, Reply};
use common::streams::{
    self, openai_computer_call, openai_function_call, openai_message, openai_reasoning,
};
use serde_json::{Value, json};

fn model(server: &ProviderServer, name: &str) -> anyhow::Result<Arc<dyn Model>> {
    Ok(Arc::new(OpenAiModel::new(
        name,
        Secret::new("sk-proj-test"),
        &server.url,
        OpenAiOptions::default(),
        HttpOptions::default(),
    )?))
}

fn items_of(body: &Value, kind: &str) -> Vec<Value> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == kind)
        .cloned()
        .collect()
}

#[tokio::test]
async fn batched_actions_run_and_reasoning_goes_back_with_the_screenshot() -> anyhow::Result<()> {
    let reasoning = openai_reasoning("rs_1", "Open the menu, then type.", "gAAAA-opaque");
    let call = json!({
        "type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
        "pending_safety_checks": [],
        "actions": [
            {"type": "click", "button": "right", "x": 512, "y": 320},
            {"type": "type", "text": "hello"},
            {"type": "keypress", "keys": ["ENTER"]}
        ]
    });
    let server = ProviderServer::start(vec![
        Reply::sse(streams::openai(&[reasoning.clone(), call.clone()])),
        Reply::sse(streams::openai(&[openai_message("msg_1", "All done.")])),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(
        computer.clone(),
        model(&server, "computer-use-preview")?,
        RunConfig::new("type hello"),
    );
    let sink = run.sink.clone();
    let outcome = run.outcome().await?;
    assert_eq!(outcome.answer.as_deref(), Some("All done."));

    let bodies = server.bodies();
    let first = &bodies[0];
    assert_eq!(server.requests()[0].path, "/responses");
    assert_eq!(
        first["tools"][0],
        json!({"type": "computer_use_preview", "display_width": 1024, "display_height": 640, "environment": "linux"})
    );
    assert_eq!(first["store"], false);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(first["truncation"], "auto");
    assert_eq!(first["input"][0]["content"][1]["type"], "input_image");

    // The screen is 1280x800, shown as 1024x640: the right click lands at 1.25 scale.
    let actions = computer.actions();
    assert_eq!(actions.len(), 3);
    assert!(matches!(
        &actions[0],
        DesktopAction::Click {
            button: Some(agent::Button::Right),
            ..
        }
    ));
    assert_eq!(
        actions[2],
        DesktopAction::Press {
            key: "ENTER".into()
        }
    );
    let points = sink.events().iter().find_map(|e| match e {
        RunEvent::ActionFinished { screen_points, .. } => Some(screen_points.clone()),
        _ => None,
    });
    assert_eq!(points, Some(vec![(640, 400)]));

    let second = &bodies[1];
    let input = second["input"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        input[1], reasoning,
        "the reasoning item goes back unchanged"
    );
    assert_eq!(input[2], call, "the computer call goes back unchanged");
    let output = &input[3];
    assert_eq!(output["type"], "computer_call_output");
    assert_eq!(output["call_id"], "call_1");
    assert_eq!(output["output"]["type"], "computer_screenshot");
    assert!(
        output["output"]["image_url"]
            .as_str()
            .unwrap_or_default()
            .starts_with("data:image/png;base64,")
    );
    assert!(output.get("acknowledged_safety_checks").is_none());
    Ok(())
}

#[tokio::test]
async fn safety_checks_wait_for_the_person_and_are_acknowledged_only_on_approval()
-> anyhow::Result<()> {
    let check = json!([{"id": "sc_1", "code": "malicious_instructions", "message": "The page asks to ignore the user."}]);
    let server = ProviderServer::start(vec![
        Reply::sse(streams::openai(&[openai_computer_call(
            "cu_1",
            "call_1",
            json!({"type": "click", "button": "left", "x": 10, "y": 10}),
            check.clone(),
        )])),
        Reply::sse(streams::openai(&[openai_message("msg_1", "ok")])),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1024, 768)));
    let run = common::start(
        computer.clone(),
        model(&server, "computer-use-preview")?,
        RunConfig::new("t"),
    );
    common::wait_phase(&run.control, |p| matches!(p, Phase::WaitingForInput { .. })).await?;
    assert!(
        computer.actions().is_empty(),
        "nothing runs before the person answers"
    );
    assert_eq!(server.requests().len(), 1);
    run.control.answer("approve").await?;
    let sink = run.sink.clone();
    run.outcome().await?;
    assert_eq!(computer.actions().len(), 1);
    let output = &items_of(&server.bodies()[1], "computer_call_output")[0];
    assert_eq!(output["acknowledged_safety_checks"], check);
    let events = sink.events();
    assert!(events.iter().any(|e| matches!(e, RunEvent::InputRequested { kind: agent::event::InputKind::SafetyCheck, safety_checks, .. } if safety_checks.len() == 1)));
    assert!(events.iter().any(|e| matches!(
        e,
        RunEvent::InputReceived {
            approved: Some(true),
            ..
        }
    )));
    assert_eq!(
        common::statuses(&events),
        vec![
            RunStatus::Running,
            RunStatus::WaitingForInput,
            RunStatus::Running,
            RunStatus::Completed
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_declined_safety_check_runs_nothing_and_tells_the_model() -> anyhow::Result<()> {
    let check = json!([{"id": "sc_1", "code": "irrelevant_domain", "message": "Unexpected site."}]);
    let server = ProviderServer::start(vec![
        Reply::sse(streams::openai(&[openai_computer_call(
            "cu_1",
            "call_1",
            json!({"type": "click", "button": "left", "x": 10, "y": 10}),
            check,
        )])),
        Reply::sse(streams::openai(&[openai_message("msg_1", "stopping")])),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1024, 768)));
    let run = common::start(
        computer.clone(),
        model(&server, "computer-use-preview")?,
        RunConfig::new("t"),
    );
    common::wait_phase(&run.control, |p| matches!(p, Phase::WaitingForInput { .. })).await?;
    run.control.answer("No, do not go there.").await?;
    run.outcome().await?;
    assert!(computer.actions().is_empty());
    let second = &server.bodies()[1];
    let output = &items_of(second, "computer_call_output")[0];
    assert!(
        output.get("acknowledged_safety_checks").is_none(),
        "never acknowledged without approval"
    );
    let note = second["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["role"] == "user")
        .filter_map(|i| i["content"][0]["text"].as_str())
        .next_back()
        .unwrap_or_default()
        .to_string();
    assert!(
        note.contains("did not approve") && note.contains("No, do not go there."),
        "{note}"
    );
    Ok(())
}

#[tokio::test]
async fn request_human_is_a_function_answered_by_the_person() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![
        Reply::sse(streams::openai(&[openai_function_call(
            "fc_1",
            "call_h",
            "request_human",
            &json!({"question": "Which colour?"}),
        )])),
        Reply::sse(streams::openai(&[openai_message("msg_1", "ok")])),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(computer, model(&server, "gpt-5.4")?, RunConfig::new("t"));
    common::wait_phase(&run.control, |p| matches!(p, Phase::WaitingForInput { .. })).await?;
    run.control.answer("red").await?;
    run.outcome().await?;
    let bodies = server.bodies();
    assert_eq!(
        bodies[0]["tools"][0],
        json!({"type": "computer"}),
        "gpt-5.4 gets the GA tool"
    );
    let output = &items_of(&bodies[1], "function_call_output")[0];
    assert_eq!(output["call_id"], "call_h");
    assert_eq!(output["output"], "The person answered: red");
    Ok(())
}
