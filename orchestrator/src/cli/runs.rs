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
    println!("{} {}", run.id, status_name(run.status));
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
        if is_terminal(current.status) || Instant::now() > deadline {
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
            } else if is_terminal(page.status) {
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

fn is_terminal(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Completed | RunStatus::Failed | RunStatus::Canceled
    )
}

fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Queued => "queued",
        RunStatus::Running => "running",
        RunStatus::Paused => "paused",
        RunStatus::WaitingForInput => "waiting_for_input",
        RunStatus::Completed => "completed",
        RunStatus::Failed => "failed",
        RunStatus::Canceled => "canceled",
    }
}

fn text(event: &RunEvent, field: &str) -> String {
    match event.fields.get(field) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// What the action was, briefly: its name and the fields that say most.
fn action_summary(action: Option<&serde_json::Value>) -> String {
    let Some(action) = action else {
        return String::new();
    };
    let compact = action.to_string();
    if compact.len() > 120 {
        format!("{}…", compact.chars().take(120).collect::<String>())
    } else {
        compact
    }
}

/// One event as a line: `#seq [step n] type details`.
pub(super) fn format_event(event: &RunEvent) -> String {
    let step = event
        .fields
        .get("step")
        .and_then(serde_json::Value::as_u64)
        .map(|s| format!("[step {s}] "))
        .unwrap_or_default();
    let details = match event.kind.as_str() {
        "run.status" => {
            let mut line = text(event, "status");
            for field in ["reason", "answer"] {
                let value = text(event, field);
                if !value.is_empty() {
                    line.push_str(&format!(" — {value}"));
                }
            }
            line
        }
        "agent.message" | "agent.reasoning" => text(event, "text"),
        "action.started" => action_summary(event.fields.get("action")),
        "action.finished" => {
            let timings = event.fields.get("timings");
            let ms = |name: &str| {
                timings
                    .and_then(|t| t.get(name))
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0)
            };
            let mut line = format!(
                "{} {} (capture {} ms, model {} ms, action {} ms, settle {} ms)",
                text(event, "outcome"),
                action_summary(event.fields.get("action")),
                ms("capture_ms"),
                ms("model_ms"),
                ms("action_ms"),
                ms("settle_ms"),
            );
            let error = text(event, "error");
            if !error.is_empty() {
                line.push_str(&format!(" — {error}"));
            }
            line
        }
        "control.returned" => text(event, "note"),
        "input.requested" => text(event, "question"),
        "input.received" => text(event, "text"),
        "artifact.created" => format!("{} ({} bytes)", text(event, "name"), text(event, "size")),
        "artifact.skipped" => format!(
            "{} ({} bytes) not kept: {}",
            text(event, "name"),
            text(event, "size"),
            text(event, "reason")
        ),
        "error" => format!("{}: {}", text(event, "kind"), text(event, "message")),
        _ => String::new(),
    };
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
            status_name(run.status),
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
                json!({"step": 3, "outcome": "ok", "action": {"name": "computer"},
                       "timings": {"capture_ms": 12, "model_ms": 900, "action_ms": 5, "settle_ms": 140}})
            )),
            "#7 [step 3] action.finished ok {\"name\":\"computer\"} (capture 12 ms, model 900 ms, action 5 ms, settle 140 ms)"
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
                json!({"step": 2, "kind": "action_refused", "message": "stale"})
            )),
            "#4 [step 2] error action_refused: stale"
        );
    }
}
