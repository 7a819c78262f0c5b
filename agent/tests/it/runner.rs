//! The loop's control rules, with a recording computer and real adapters (the script provider,
//! or the Anthropic adapter against a Messages-API test server): takeover waits for the
//! in-flight action, hand-back forces a fresh screenshot and a note, stale actions are refused,
//! nothing is emitted after a cancel, request_human waits for the answer, a resumed run reports
//! the in-flight action as "outcome unknown" and never replays it, limits end runs.

use crate::common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use agent::model::anthropic::{AnthropicModel, AnthropicOptions};
use agent::{
    ActionOutcome, Checkpoint, DesktopAction, ErrorKind, EventSink, Limits, Model, ModelOptions,
    ModelSpec, Phase, RecordingSink, RunConfig, RunError, RunEvent, RunStatus, Runner, Secret,
    build_model,
};
use base64::Engine;
use common::computer::{Call, RecordingComputer};
use common::provider::{ProviderServer, Reply};
use common::streams::{self, anthropic_action, anthropic_final, tool_use};
use serde_json::{Value, json};

fn anthropic(server: &ProviderServer) -> anyhow::Result<Arc<dyn Model>> {
    Ok(Arc::new(AnthropicModel::new(
        "claude-opus-4-5",
        Secret::new("sk-ant-test"),
        &server.url,
        AnthropicOptions::default(),
        agent::gateway::HttpOptions::default(),
    )?))
}

/// A script model from `steps` (kept alive by the returned file).
fn script(steps: Value) -> anyhow::Result<(Arc<dyn Model>, tempfile::NamedTempFile)> {
    let mut file = tempfile::NamedTempFile::new()?;
    file.write_all(steps.to_string().as_bytes())?;
    let spec = ModelSpec::parse(&format!("script:{}", file.path().display()))?;
    Ok((build_model(&spec, &ModelOptions::default())?, file))
}

/// Yields to every other task many times: whatever could happen next has had its chance.
async fn let_others_run() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
}

fn last_user_message(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rfind(|m| m["role"] == "user")
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn the_shipped_script_draws_three_strokes_and_saves() -> anyhow::Result<()> {
    let spec = ModelSpec::parse(&format!(
        "script:{}/../examples/draw-red-triangle.json",
        env!("CARGO_MANIFEST_DIR")
    ))?;
    let model = build_model(&spec, &ModelOptions::default())?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(
        computer.clone(),
        model,
        RunConfig::new("draw a red triangle"),
    );
    let sink = run.sink.clone();
    let outcome = run.outcome().await?;
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.reason);
    assert!(
        outcome
            .answer
            .unwrap_or_default()
            .contains("red-triangle.png")
    );

    let calls = computer.calls();
    // Scripts see the full screen.
    assert!(
        calls
            .iter()
            .all(|c| !matches!(c, Call::Observe { bounds, .. } if *bounds != (None, None)))
    );
    let shells: Vec<String> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Shell { command, .. } => Some(command.clone()),
            _ => None,
        })
        .collect();
    assert!(shells[0].contains("mtpaint") && shells[0].contains("~/outputs"));
    let strokes: Vec<Vec<(i32, i32)>> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Act {
                action: DesktopAction::DragPath { .. },
                screen_points,
                ..
            } => Some(screen_points.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(strokes.len(), 3, "three strokes, each one action");
    assert_eq!(
        strokes[0].first(),
        strokes[2].last(),
        "the triangle is closed"
    );
    assert_eq!(
        strokes[0].first(),
        Some(&(666, 288)),
        "fractions of the 1280x800 screen"
    );
    assert!(computer.actions().contains(&DesktopAction::Hotkey {
        keys: vec!["ctrl".into(), "s".into()]
    }));
    // Every desktop action names its observation, and screenshots reach the sink first.
    let shots: Vec<String> = sink.screenshots().into_iter().map(|(m, _)| m.id).collect();
    for event in sink.events() {
        if let RunEvent::ActionFinished {
            action: agent::ToolRequest::Desktop { .. },
            observation_id,
            screenshot,
            outcome,
            ..
        } = event
        {
            assert_eq!(outcome, ActionOutcome::Ok);
            assert!(observation_id.is_some_and(|id| shots.contains(&id)));
            assert!(screenshot.is_some_and(|id| shots.contains(&id)));
        }
    }
    // Every call's `action.started` is stored in one write with the checkpoint naming that
    // call in flight, and no checkpoint naming a call in flight is stored any other way.
    let started: Vec<String> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            RunEvent::ActionStarted { call_id, .. } => Some(call_id),
            _ => None,
        })
        .collect();
    let together: Vec<String> = sink
        .checkpointed()
        .into_iter()
        .map(|(event, checkpoint)| match event {
            RunEvent::ActionStarted { call_id, .. } => {
                assert_eq!(checkpoint.in_flight.as_deref(), Some(call_id.as_str()));
                call_id
            }
            other => panic!("a checkpoint came with {other:?}"),
        })
        .collect();
    assert_eq!(together, started);
    let in_flight = sink
        .checkpoints()
        .iter()
        .filter(|c| c.in_flight.is_some())
        .count();
    assert_eq!(in_flight, started.len());
    Ok(())
}

#[tokio::test]
async fn takeover_waits_for_the_action_in_flight_and_hand_back_sends_a_fresh_screenshot()
-> anyhow::Result<()> {
    let server = ProviderServer::start(vec![
        Reply::sse(anthropic_action(
            "toolu_1",
            json!({"action": "left_click", "coordinate": [10, 10]}),
        )),
        Reply::sse(anthropic_final("done")),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let (started, release) = computer.hold_next_action();
    let run = common::start(computer.clone(), anthropic(&server)?, RunConfig::new("t"));
    started.await?;

    let control = run.control.clone();
    let takeover = tokio::spawn(async move { control.take_over().await });
    let_others_run().await;
    assert!(
        !takeover.is_finished(),
        "take_over resolved while an action was in flight"
    );
    assert_eq!(run.control.phase(), Phase::Running);
    let _ = release.send(());
    takeover.await??;
    assert_eq!(run.control.phase(), Phase::Paused);

    // Paused: nothing is issued.
    let actions = computer.actions().len();
    let observations = computer.observation_ids();
    let_others_run().await;
    assert_eq!(computer.actions().len(), actions);
    assert_eq!(computer.observation_ids(), observations);
    assert_eq!(server.requests().len(), 1);

    run.control
        .hand_back(Some("I closed a popup".into()))
        .await?;
    let sink = run.sink.clone();
    let outcome = run.outcome().await?;
    assert_eq!(outcome.status, RunStatus::Completed);

    // The next model call starts from a screenshot taken after the hand-back, with a note.
    let fresh = computer
        .observation_ids()
        .last()
        .cloned()
        .unwrap_or_default();
    assert!(!observations.contains(&fresh));
    let second = &server.bodies()[1];
    let message = last_user_message(second);
    let content = message["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(content[0]["type"], "tool_result");
    assert_eq!(content[0]["tool_use_id"], "toolu_1");
    let note = content[1]["text"].as_str().unwrap_or_default();
    assert!(
        note.contains("handed it back") && note.contains("I closed a popup"),
        "{note}"
    );
    let image = base64::engine::general_purpose::STANDARD
        .decode(content[2]["source"]["data"].as_str().unwrap_or_default())?;
    let (fresh_meta, fresh_bytes) = sink
        .screenshots()
        .last()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no screenshot"))?;
    assert_eq!(fresh_meta.id, fresh);
    assert_eq!(image, fresh_bytes.to_vec());

    let events = sink.events();
    let kinds = common::kinds(&events);
    let taken = kinds.iter().position(|k| *k == "control.taken");
    let returned = kinds.iter().position(|k| *k == "control.returned");
    let finished = kinds.iter().position(|k| *k == "action.finished");
    assert!(finished < taken && taken < returned, "{kinds:?}");
    assert_eq!(
        common::statuses(&events),
        vec![
            RunStatus::Running,
            RunStatus::Paused,
            RunStatus::Running,
            RunStatus::Completed
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_takeover_during_a_model_call_pauses_at_once_and_the_model_is_asked_again()
-> anyhow::Result<()> {
    // The first answer arrives while a person holds control: it was written from the old
    // screen, so it does not end the run; the model is asked again with the fresh screenshot.
    let server = ProviderServer::start(vec![
        Reply::Delayed(
            Duration::from_millis(300),
            Box::new(Reply::sse(anthropic_final(
                "finished (from the old screen)",
            ))),
        ),
        Reply::sse(anthropic_final("finished (after the person)")),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(computer.clone(), anthropic(&server)?, RunConfig::new("t"));
    for _ in 0..500 {
        if !server.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    run.control.take_over().await?;
    assert_eq!(
        server.requests().len(),
        1,
        "paused while the model call goes on"
    );
    // Let the first answer arrive while paused.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!run.handle.is_finished());
    run.control
        .hand_back(Some("moved the window".into()))
        .await?;
    let outcome = run.outcome().await?;
    assert_eq!(
        outcome.answer.as_deref(),
        Some("finished (after the person)")
    );
    let second = &server.bodies()[1];
    let message = last_user_message(second);
    let note = message["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        note.contains("handed it back") && note.contains("moved the window"),
        "{note}"
    );
    assert_eq!(message["content"][1]["type"], "image");
    assert_eq!(
        computer.observation_ids().len(),
        2,
        "the first screenshot and the hand-back's"
    );
    Ok(())
}

#[tokio::test]
async fn actions_planned_before_a_takeover_are_refused_as_stale() -> anyhow::Result<()> {
    let turn = streams::anthropic(
        &[
            tool_use(
                "toolu_a",
                "computer",
                json!({"action": "left_click", "coordinate": [10, 10]}),
            ),
            tool_use(
                "toolu_b",
                "computer",
                json!({"action": "left_click", "coordinate": [20, 20]}),
            ),
        ],
        "tool_use",
    );
    let server =
        ProviderServer::start(vec![Reply::sse(turn), Reply::sse(anthropic_final("done"))]).await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let (started, release) = computer.hold_next_action();
    let run = common::start(computer.clone(), anthropic(&server)?, RunConfig::new("t"));
    started.await?;
    let control = run.control.clone();
    let takeover = tokio::spawn(async move { control.take_over().await });
    let_others_run().await;
    let _ = release.send(());
    takeover.await??;
    run.control.hand_back(None).await?;
    let sink = run.sink.clone();
    run.outcome().await?;

    assert_eq!(computer.actions().len(), 1, "only the first click ran");
    let message = last_user_message(&server.bodies()[1]);
    let results: Vec<Value> = message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .cloned()
        .collect();
    assert_eq!(results.len(), 2, "both calls are answered");
    assert_eq!(results[1]["tool_use_id"], "toolu_b");
    assert_eq!(results[1]["is_error"], true);
    let text = results[1]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("planned on screenshot 1") && text.contains("is newer"),
        "{text}"
    );
    assert!(sink.events().iter().any(|e| matches!(
        e,
        RunEvent::Error {
            kind: ErrorKind::ActionRefused,
            ..
        }
    )));
    Ok(())
}

#[tokio::test]
async fn nothing_is_emitted_after_a_cancel_mid_action() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![
        Reply::sse(anthropic_action(
            "toolu_1",
            json!({"action": "left_click", "coordinate": [10, 10]}),
        )),
        Reply::sse(anthropic_final("never")),
    ])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let (started, release) = computer.hold_next_action();
    let run = common::start(computer.clone(), anthropic(&server)?, RunConfig::new("t"));
    started.await?;
    run.control.cancel().await?;
    let events = run.sink.events();
    assert!(matches!(
        events.last(),
        Some(RunEvent::RunStatus {
            status: RunStatus::Canceled,
            ..
        })
    ));
    let _ = release.send(());
    let_others_run().await;
    let sink = run.sink.clone();
    let outcome = run.outcome().await?;
    assert_eq!(outcome.status, RunStatus::Canceled);
    assert_eq!(sink.events(), events, "nothing after the canceled status");
    assert_eq!(server.requests().len(), 1);
    assert!(matches!(run_phase_after(&sink), Some(RunStatus::Canceled)));
    Ok(())
}

fn run_phase_after(sink: &RecordingSink) -> Option<RunStatus> {
    common::statuses(&sink.events()).last().copied()
}

#[tokio::test]
async fn nothing_is_emitted_after_a_cancel_mid_model_call() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![Reply::Delayed(
        Duration::from_secs(60),
        Box::new(Reply::sse(anthropic_final("too late"))),
    )])
    .await?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(computer, anthropic(&server)?, RunConfig::new("t"));
    for _ in 0..500 {
        if !server.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.requests().len(), 1, "the model call is in flight");
    run.control.cancel().await?;
    let events = run.sink.events();
    let sink = run.sink.clone();
    assert_eq!(run.outcome().await?.status, RunStatus::Canceled);
    assert_eq!(sink.events(), events);
    assert_eq!(
        common::statuses(&events),
        vec![RunStatus::Running, RunStatus::Canceled]
    );
    Ok(())
}

#[tokio::test]
async fn request_human_waits_for_the_answer() -> anyhow::Result<()> {
    let (model, _file) = script(json!([
        {"action": "REQUEST_HUMAN", "question": "Which colour?"},
        {"action": "FINAL", "answer": "done"}
    ]))?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let run = common::start(computer, model, RunConfig::new("t"));
    // A takeover at any point (here, at the start) pauses; after the hand-back the question
    // is still waiting for its answer.
    run.control.take_over().await?;
    run.control.hand_back(None).await?;
    common::wait_phase(&run.control, |p| matches!(p, Phase::WaitingForInput { .. })).await?;
    run.control.answer("red").await?;
    let sink = run.sink.clone();
    let outcome = run.outcome().await?;
    assert_eq!(outcome.answer.as_deref(), Some("done"));
    let events = sink.events();
    assert!(events.iter().any(
        |e| matches!(e, RunEvent::InputRequested { question, .. } if question == "Which colour?")
    ));
    assert!(events.iter().any(
        |e| matches!(e, RunEvent::InputReceived { text, approved: None, .. } if text == "red")
    ));
    Ok(())
}

#[tokio::test]
async fn a_resumed_script_reports_the_action_in_flight_as_unknown_and_never_replays_it()
-> anyhow::Result<()> {
    let steps = json!([
        {"action": "SHELL", "command": "echo one"},
        {"action": "CLICK", "x": 10, "y": 10},
        {"action": "SHELL", "command": "echo two"},
        {"action": "FINAL", "answer": "resumed"}
    ]);
    let (model, _file) = script(steps)?;
    let first = Arc::new(RecordingComputer::new((1280, 800)));
    let (started, _release) = first.hold_next_action();
    let run = common::start(first.clone(), model, RunConfig::new("t"));
    started.await?;
    let checkpoint: Checkpoint = run
        .sink
        .last_checkpoint()
        .ok_or_else(|| anyhow::anyhow!("no checkpoint"))?;
    run.handle.abort(); // The controller dies with the click in flight.
    assert_eq!(checkpoint.in_flight.as_deref(), Some("script-1"));
    // It survives a round trip through JSON, as an orchestrator stores it.
    let checkpoint: Checkpoint = serde_json::from_str(&serde_json::to_string(&checkpoint)?)?;

    // The same script file, as after a restart.
    let spec = ModelSpec::parse(&format!("script:{}", _file.path().display()))?;
    let model = build_model(&spec, &ModelOptions::default())?;
    let second = Arc::new(RecordingComputer::new((1280, 800)).starting_after(100));
    let sink = Arc::new(RecordingSink::new());
    let runner = Runner::new(
        second.clone(),
        model,
        sink.clone() as Arc<dyn EventSink>,
        RunConfig::new("t"),
    );
    let outcome = runner.resume(checkpoint).await?;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.answer.as_deref(), Some("resumed"));
    assert!(second.actions().is_empty(), "the click is not replayed");
    let shells: Vec<String> = second
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Shell { command, .. } => Some(command),
            _ => None,
        })
        .collect();
    assert_eq!(shells, vec!["echo two".to_string()]);
    assert!(sink.events().iter().any(|e| matches!(
        e,
        RunEvent::ActionFinished { call_id, outcome: ActionOutcome::Unknown, .. } if call_id == "script-1"
    )));
    Ok(())
}

#[tokio::test]
async fn a_resumed_model_run_is_told_the_outcome_is_unknown_and_sees_a_fresh_screenshot()
-> anyhow::Result<()> {
    let server = ProviderServer::start(vec![Reply::sse(anthropic_action(
        "toolu_1",
        json!({"action": "left_click", "coordinate": [10, 10]}),
    ))])
    .await?;
    let first = Arc::new(RecordingComputer::new((1280, 800)));
    let (started, _release) = first.hold_next_action();
    let run = common::start(first, anthropic(&server)?, RunConfig::new("t"));
    started.await?;
    let checkpoint = run
        .sink
        .last_checkpoint()
        .ok_or_else(|| anyhow::anyhow!("no checkpoint"))?;
    run.handle.abort();

    let server = ProviderServer::start(vec![Reply::sse(anthropic_final("ok"))]).await?;
    let second = Arc::new(RecordingComputer::new((1280, 800)).starting_after(100));
    let sink = Arc::new(RecordingSink::new());
    let runner = Runner::new(
        second.clone(),
        anthropic(&server)?,
        sink as Arc<dyn EventSink>,
        RunConfig::new("t"),
    );
    assert_eq!(
        runner.resume(checkpoint).await?.status,
        RunStatus::Completed
    );
    assert!(second.actions().is_empty());
    let body = &server.bodies()[0];
    let message = last_user_message(body);
    let content = message["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(content[0]["tool_use_id"], "toolu_1");
    assert!(
        content[0]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Outcome unknown")
    );
    assert!(
        content[1]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("restarted")
    );
    assert_eq!(content[2]["type"], "image");
    // The images from before the restart are not in the checkpoint: only the fresh one is sent.
    let images = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "image")
        .count();
    assert_eq!(images, 1);
    Ok(())
}

#[tokio::test]
async fn step_and_time_limits_end_the_run() -> anyhow::Result<()> {
    let (model, _file) = script(json!([
        {"action": "SCREENSHOT"}, {"action": "SCREENSHOT"}, {"action": "SCREENSHOT"}
    ]))?;
    let mut config = RunConfig::new("t");
    config.limits = Limits {
        max_steps: 2,
        ..Limits::default()
    };
    let run = common::start(Arc::new(RecordingComputer::new((1280, 800))), model, config);
    let sink = run.sink.clone();
    let outcome = run.outcome().await?;
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(
        outcome
            .reason
            .unwrap_or_default()
            .contains("step limit of 2")
    );
    let events = sink.events();
    let tail = &events[events.len() - 2..];
    assert!(matches!(
        &tail[0],
        RunEvent::Error {
            kind: ErrorKind::Limit,
            fatal: true,
            ..
        }
    ));
    assert!(matches!(
        &tail[1],
        RunEvent::RunStatus {
            status: RunStatus::Failed,
            ..
        }
    ));

    let server = ProviderServer::start(vec![Reply::Delayed(
        Duration::from_secs(60),
        Box::new(Reply::sse(anthropic_final("late"))),
    )])
    .await?;
    let mut config = RunConfig::new("t");
    config.limits.max_seconds = 1;
    let outcome = common::start(
        Arc::new(RecordingComputer::new((1280, 800))),
        anthropic(&server)?,
        config,
    )
    .outcome()
    .await?;
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(
        outcome
            .reason
            .unwrap_or_default()
            .contains("time limit of 1 seconds")
    );
    Ok(())
}

#[tokio::test]
async fn a_failing_script_step_fails_the_run_and_bad_config_changes_nothing() -> anyhow::Result<()>
{
    let (model, _file) = script(json!([
        {"action": "SHELL", "command": "exit 3"},
        {"action": "FINAL", "answer": "unreachable"}
    ]))?;
    let outcome = common::start(
        Arc::new(RecordingComputer::new((1280, 800))),
        model,
        RunConfig::new("t"),
    )
    .outcome()
    .await?;
    assert_eq!(outcome.status, RunStatus::Failed);
    let reason = outcome.reason.unwrap_or_default();
    assert!(
        reason.contains("script step 0 (SHELL) failed") && reason.contains("[exit code 3]"),
        "{reason}"
    );

    let (model, _file) = script(json!([{"action": "FINAL", "answer": "x"}]))?;
    let computer = Arc::new(RecordingComputer::new((1280, 800)));
    let sink = Arc::new(RecordingSink::new());
    let runner = Runner::new(
        computer.clone(),
        model,
        sink.clone() as Arc<dyn EventSink>,
        RunConfig::new("   "),
    );
    match runner.run().await {
        Err(RunError::Config(error)) => assert_eq!(error.field, "task"),
        other => panic!("{other:?}"),
    }
    assert!(sink.events().is_empty());
    assert!(computer.calls().is_empty());
    Ok(())
}
