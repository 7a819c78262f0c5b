//! `orchestrator run`: start a run (`run "<task>" --model <m> [--follow]`), list, show,
//! cancel, take over, hand back, answer. Following prints the live-desktop link, then the
//! events in a readable form with a step counter, until the run ends.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::{Args, Subcommand};
use reqwest::Method;

use super::{Client, NO_BODY, parse_pair};
use crate::api::types::{
    CreateRunRequest, CreateTokenRequest, HandbackRequest, Run, RunEvent, RunEventPage,
    RunInputRequest, RunLimitsRequest, RunList, RunStatus, Token,
};
use crate::tokens::Scope;

/// How often `--follow` reads new events.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct RunArgs {
    #[command(subcommand)]
    command: Option<RunCommand>,
    /// The task, in words (starts a run).
    task: Option<String>,
    /// `anthropic:<model>`, `openai:<model>`, `openai-chat:<model>` or `script:<file>`.
    #[arg(long)]
    model: Option<String>,
    /// Drive this sandbox of yours instead of taking one.
    #[arg(long)]
    sandbox: Option<String>,
    #[arg(long)]
    max_steps: Option<u32>,
    #[arg(long)]
    max_seconds: Option<u64>,
    /// KEY=VALUE (repeatable)
    #[arg(long = "metadata", value_parser = parse_pair)]
    metadata: Vec<(String, String)>,
    /// Makes retrying the command safe.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Print the live-desktop link and the events until the run ends.
    #[arg(long)]
    follow: bool,
}

#[derive(Debug, Subcommand)]
enum RunCommand {
    /// List runs, newest first.
    Ls {
        #[arg(long)]
        status: Option<String>,
    },
    /// One run, as JSON.
    Show { id: String },
    /// Print a run's events (and follow it with --follow).
    Events {
        id: String,
        #[arg(long)]
        follow: bool,
    },
    /// Cancel a run.
    Cancel { id: String },
    /// Take control from the agent (the run pauses once its action in flight finishes).
    Takeover { id: String },
    /// Give control back to the agent.
    Handback {
        id: String,
        /// What you did, for the model.
        #[arg(long)]
        note: Option<String>,
    },
    /// Answer the agent's question.
    Input { id: String, text: String },
}

pub(super) async fn run(client: &Client, args: RunArgs) -> anyhow::Result<ExitCode> {
    let Some(command) = args.command else {
        return start(client, args).await;
    };
    match command {
        RunCommand::Ls { status } => {
            let path = match status {
                Some(status) => format!("/v1/runs?status={status}"),
                None => "/v1/runs".into(),
            };
            let list: RunList = client.send(Method::GET, &path, NO_BODY).await?.decode()?;
            print!("{}", run_table(&list));
            Ok(ExitCode::SUCCESS)
        }
        RunCommand::Show { id } => {
            let answer = client
                .send(Method::GET, &format!("/v1/runs/{id}"), NO_BODY)
                .await?;
            println!("{}", answer.pretty()?);
            Ok(ExitCode::SUCCESS)
        }
        RunCommand::Events { id, follow } => follow_events(client, &id, follow).await,
        RunCommand::Cancel { id } => control(client, &id, "cancel", NO_BODY).await,
        RunCommand::Takeover { id } => control(client, &id, "takeover", NO_BODY).await,
        RunCommand::Handback { id, note } => {
            control(client, &id, "handback", Some(&HandbackRequest { note })).await
        }
        RunCommand::Input { id, text } => {
            control(client, &id, "input", Some(&RunInputRequest { text })).await
        }
    }
}

async fn control<B: serde::Serialize>(
    client: &Client,
    id: &str,
    verb: &str,
    body: Option<&B>,
) -> anyhow::Result<ExitCode> {
    let run: Run = client
        .send(Method::POST, &format!("/v1/runs/{id}/{verb}"), body)
        .await?
        .decode()?;
    println!("{} {}", run.id, run.status.as_str());
    Ok(ExitCode::SUCCESS)
}

async fn start(client: &Client, args: RunArgs) -> anyhow::Result<ExitCode> {
    let Some(task) = args.task else {
        bail!("give the task in words: orchestrator run \"<task>\" --model <model>");
    };
    let Some(model) = args.model else {
        bail!("--model is required (anthropic:<m>, openai:<m>, openai-chat:<m> or script:<file>)");
    };
    let request = CreateRunRequest {
        task,
        model,
        sandbox_id: args.sandbox,
        limits: Some(RunLimitsRequest {
            max_steps: args.max_steps,
            max_seconds: args.max_seconds,
            max_images: None,
        }),
        metadata: Some(args.metadata.into_iter().collect::<BTreeMap<_, _>>()),
    };
    let run: Run = client
        .send_with_headers(
            Method::POST,
            "/v1/runs",
            Some(&request),
            args.idempotency_key
                .iter()
                .map(|key| ("idempotency-key", key.as_str())),
        )
        .await?
        .decode()?;
    println!("{}", run.id);
    if !args.follow {
        eprintln!("events: {}", run.urls.events);
        return Ok(ExitCode::SUCCESS);
    }
    // The live desktop, once the run has its sandbox.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let current: Run = client
            .send(Method::GET, &format!("/v1/runs/{}", run.id), NO_BODY)
            .await?
            .decode()?;
        if let Some(sandbox) = &current.sandbox_id {
            let token: Token = client
                .send(
                    Method::POST,
                    &format!("/v1/sandboxes/{sandbox}/tokens"),
                    Some(&CreateTokenRequest {
                        scope: Scope::View,
                        ttl_secs: Some(3600),
                    }),
                )
                .await?
                .decode()?;
            eprintln!("watch it live: {}", token.viewer_url);
            break;
        }
        if current.status.is_terminal() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
    follow_events(client, &run.id, true).await
}

/// Prints the events (and, following, new ones until the end); exits 0 if the run completed.
async fn follow_events(client: &Client, id: &str, follow: bool) -> anyhow::Result<ExitCode> {
    let mut after = 0;
    loop {
        let page: RunEventPage = client
            .send(
                Method::GET,
                &format!("/v1/runs/{id}/events?format=json&after_seq={after}&limit=1000"),
                NO_BODY,
            )
            .await?
            .decode()?;
        for event in &page.events {
            println!("{}", format_event(event));
        }
        after = page.next_after_seq;
        if page.done || (!follow && page.events.is_empty()) {
            return Ok(if page.status == RunStatus::Completed {
                ExitCode::SUCCESS
            } else if page.status.is_terminal() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
        if page.events.is_empty() {
            tokio::time::sleep(FOLLOW_EVERY).await;
        }
    }
}

/// What the action was, briefly: its JSON, cut at 120 characters.
fn action_summary(action: &agent::ToolRequest) -> String {
    let compact = serde_json::to_string(action).unwrap_or_default();
    if compact.chars().count() > 120 {
        format!("{}…", compact.chars().take(120).collect::<String>())
    } else {
        compact
    }
}

/// The event as the agent's type, or `None` for a type this CLI does not know (a newer server).
fn typed(event: &RunEvent) -> Option<agent::RunEvent> {
    let mut object = event.fields.clone();
    object.insert("type".into(), serde_json::Value::String(event.kind.clone()));
    serde_json::from_value(serde_json::Value::Object(object)).ok()
}

/// One event as a line: `#seq [step n] type details`.
pub(super) fn format_event(event: &RunEvent) -> String {
    use agent::RunEvent as E;
    let (step, details) = match typed(event) {
        None => (None, String::new()),
        Some(E::RunStatus {
            status,
            reason,
            answer,
        }) => {
            let mut line = status.as_str().to_string();
            for value in [reason, answer].into_iter().flatten() {
                line.push_str(&format!(" — {value}"));
            }
            (None, line)
        }
        Some(E::AgentMessage { step, text } | E::AgentReasoning { step, text }) => {
            (Some(step), text)
        }
        Some(E::ActionStarted { step, action, .. }) => (Some(step), action_summary(&action)),
        Some(E::ActionFinished {
            step,
            action,
            outcome,
            error,
            timings,
            ..
        }) => {
            let outcome = serde_json::to_value(outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let mut line = format!(
                "{outcome} {} (capture {} ms, model {} ms, action {} ms, settle {} ms)",
                action_summary(&action),
                timings.capture_ms,
                timings.model_ms,
                timings.action_ms,
                timings.settle_ms,
            );
            if let Some(error) = error {
                line.push_str(&format!(" — {error}"));
            }
            (Some(step), line)
        }
        Some(E::ControlTaken {}) => (None, String::new()),
        Some(E::ControlReturned { note }) => (None, note.unwrap_or_default()),
        Some(E::InputRequested { question, .. }) => (None, question),
        Some(E::InputReceived { text, .. }) => (None, text),
        Some(E::ArtifactCreated { name, size, .. }) => (None, format!("{name} ({size} bytes)")),
        Some(E::ArtifactSkipped { name, size, reason }) => {
            (None, format!("{name} ({size} bytes) not kept: {reason}"))
        }
        Some(E::RemoteSubmitted { agent, message_id }) => {
            (None, format!("{agent} (message {message_id})"))
        }
        Some(E::RemoteTask {
            task_id,
            state,
            message,
            ..
        }) => {
            let mut line = format!("{} {state}", task_id.as_deref().unwrap_or("(no task)"));
            if let Some(message) = message {
                line.push_str(&format!(" — {message}"));
            }
            (None, line)
        }
        Some(
            E::SandboxPaused { sandbox_id, reason }
            | E::SandboxResumed { sandbox_id, reason }
            | E::SandboxHibernated { sandbox_id, reason }
            | E::SandboxWoken { sandbox_id, reason },
        ) => (None, format!("{sandbox_id}: {reason}")),
        Some(E::Error {
            step,
            kind,
            message,
            ..
        }) => (step, format!("{}: {message}", kind.as_str())),
        Some(E::Usage { step, total, .. }) => (
            Some(step),
            format!(
                "{} tokens in, {} out so far",
                total.input_tokens, total.output_tokens
            ),
        ),
    };
    let step = step.map(|s| format!("[step {s}] ")).unwrap_or_default();
    format!("#{} {step}{} {details}", event.seq, event.kind)
        .trim_end()
        .to_string()
}

fn run_table(list: &RunList) -> String {
    let mut out = String::new();
    for run in &list.runs {
        let task: String = run.task.chars().take(50).collect();
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            run.id,
            run.status.as_str(),
            run.created_at,
            run.model,
            task.replace(['\n', '\t'], " ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: i64, kind: &str, fields: serde_json::Value) -> RunEvent {
        RunEvent {
            seq,
            at: "2026-12-01T00:00:00.000Z".into(),
            kind: kind.into(),
            fields: fields.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn events_read_as_one_line_with_the_step() {
        assert_eq!(
            format_event(&event(1, "run.status", json!({"status": "queued"}))),
            "#1 run.status queued"
        );
        assert_eq!(
            format_event(&event(
                7,
                "action.finished",
                json!({"step": 3, "call_id": "c1", "outcome": "ok",
                       "action": {"kind": "screenshot"},
                       "timings": {"capture_ms": 12, "model_ms": 900, "action_ms": 5, "settle_ms": 140}})
            )),
            "#7 [step 3] action.finished ok {\"kind\":\"screenshot\"} (capture 12 ms, model 900 ms, action 5 ms, settle 140 ms)"
        );
        assert_eq!(
            format_event(&event(
                9,
                "run.status",
                json!({"status": "completed", "answer": "a triangle"})
            )),
            "#9 run.status completed — a triangle"
        );
        assert_eq!(
            format_event(&event(
                4,
                "error",
                json!({"step": 2, "kind": "action_refused", "message": "stale", "fatal": false})
            )),
            "#4 [step 2] error action_refused: stale"
        );
        assert_eq!(
            format_event(&event(
                5,
                "artifact.skipped",
                json!({"name": "outputs/big.bin", "size": 9, "reason": "over budget"})
            )),
            "#5 artifact.skipped outputs/big.bin (9 bytes) not kept: over budget"
        );
        // A type this CLI does not know still reads as its seq and type.
        assert_eq!(
            format_event(&event(6, "sandbox.moved", json!({"to": "elsewhere"}))),
            "#6 sandbox.moved"
        );
    }
}
