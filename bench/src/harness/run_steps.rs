//! Per-step overhead of a computer-use run, excluding model time: capture + act + settle +
//! bookkeeping, measured on the acceptance task (seed 003's red triangle, `script:` provider,
//! so the model takes ~0 ms) through the orchestrator, side by side in the same run with:
//!
//! - **raw**: the same desktop actions (read from the same script file, placed by the script
//!   provider's own function) as bare calls straight to sandboxd, as the loop makes them
//!   (screenshot, action, `WAIT_SETTLED` with the loop's settle policy), nothing stored;
//! - **sleep 2 s**: the common reference loops' step (screenshot, action, a fixed 2-second
//!   sleep).
//!
//! A run's step = from one desktop action's `action.finished` event to the next one's, minus
//! that step's `model_ms`; SHELL and WAIT_SETTLED steps (whose time is the command's or the
//! wait's own) are left out. Goal: median <= 150 ms, p95 <= 400 ms, at most 25 ms above raw.
//!
//! `cargo build --release -p orchestrator && cargo run --release -p agentbox-bench -- run-steps --iterations 3`

use std::time::{Duration, Instant};

use agent::computer::sandboxd::wire_action;
use agent::model::script::{Script, place};
use agent::{DesktopAction, SettlePolicy, ToolRequest};
use agentbox_bench::{
    ADMIN_KEY, OrchestratorServer, Stats, arg, docker, orchestrator_binary, percentile,
    print_header, print_row,
};
use anyhow::{Context, bail};
use orchestrator::keyring::Keyring;
use serde_json::{Value, json};

/// The desktop actions of the acceptance task exactly as the run sends them: the script file
/// read by the agent's own parser, placed on the 1280x800 screen (fractions to pixels, strokes
/// made dense) by the script provider's own function, in sandboxd's wire form. The settle
/// waits are left out (the loop's own settle follows each action, here and in the run).
fn task_actions() -> anyhow::Result<Vec<Value>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/draw-red-triangle.json"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let script = Script::parse(&text)?;
    let mut actions = Vec::new();
    for step in &script.steps {
        let ToolRequest::Desktop { actions: planned } = &step.request else {
            continue;
        };
        for action in planned {
            if matches!(action, DesktopAction::WaitSettled { .. }) {
                continue;
            }
            let placed = place(action, script.coordinates, (1280, 800));
            actions.push(serde_json::to_value(wire_action(&placed, None))?);
        }
    }
    if actions.len() != 7 {
        bail!(
            "expected 7 desktop actions in the script, found {}",
            actions.len()
        );
    }
    Ok(actions)
}

async fn call(
    client: &reqwest::Client,
    key: &str,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let mut request = client.request(method, url).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        bail!("{url}: {status}: {text}");
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// One desktop-action step of a run: its whole time (model time excluded) and the part spent
/// in sandboxd's calls (capture, action, settle, as the loop timed them).
struct RunStep {
    total: Duration,
    calls: Duration,
    capture: Duration,
    action: Duration,
    settle: Duration,
}

/// One run of the acceptance task; returns each desktop-action step.
async fn run_task(
    client: &reqwest::Client,
    server: &OrchestratorServer,
    sandbox: &str,
) -> anyhow::Result<Vec<RunStep>> {
    let run = call(
        client,
        ADMIN_KEY,
        reqwest::Method::POST,
        &format!("{}/v1/runs", server.url),
        Some(json!({
            "task": "Open the paint program, draw a red triangle, save it as PNG under ~/outputs",
            "model": "script:draw-red-triangle.json",
            "sandbox_id": sandbox,
        })),
    )
    .await?;
    let id = run["id"].as_str().context("run id")?.to_string();
    let deadline = Instant::now() + Duration::from_secs(300);
    let page = loop {
        let page = call(
            client,
            ADMIN_KEY,
            reqwest::Method::GET,
            &format!("{}/v1/runs/{id}/events?format=json&limit=1000", server.url),
            None,
        )
        .await?;
        if page["done"] == true {
            break page;
        }
        if Instant::now() > deadline {
            bail!("the run did not finish");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let events = page["events"].as_array().context("events")?;
    let end = events.last().context("no events")?;
    if end["status"] != "completed" {
        bail!("the run did not complete: {end}");
    }
    let at = |event: &Value| -> anyhow::Result<i64> {
        let text = event["at"].as_str().context("at")?;
        // RFC 3339 with milliseconds: the seconds and millis are enough within one run.
        let time = text.get(11..23).context("time of day")?;
        let (hms, millis) = time.split_once('.').context("millis")?;
        let mut parts = hms.split(':').map(|p| p.parse::<i64>());
        let (h, m, s) = (
            parts.next().context("h")??,
            parts.next().context("m")??,
            parts.next().context("s")??,
        );
        Ok(((h * 60 + m) * 60 + s) * 1000 + millis.parse::<i64>()?)
    };
    let mut steps = Vec::new();
    let mut previous: Option<i64> = None;
    for event in events.iter().filter(|e| e["type"] == "action.finished") {
        let text = event["action"].to_string();
        let at = at(event)?;
        let desktop = ["PRESS", "DRAG_PATH", "HOTKEY"]
            .iter()
            .any(|name| text.contains(&format!("\"{name}\"")));
        if desktop && let Some(previous) = previous {
            let timing = |name: &str| event["timings"][name].as_i64().unwrap_or(0);
            let ms = (at - previous - timing("model_ms")).max(0);
            let calls = timing("capture_ms") + timing("action_ms") + timing("settle_ms");
            let millis = |ms: i64| Duration::from_millis(ms.max(0) as u64);
            if std::env::var_os("RUN_STEPS_VERBOSE").is_some() {
                eprintln!(
                    "{:>4} ms  capture {:>3}  action {:>3}  settle {:>3}  {}",
                    ms,
                    timing("capture_ms"),
                    timing("action_ms"),
                    timing("settle_ms"),
                    text.chars().take(60).collect::<String>()
                );
            }
            steps.push(RunStep {
                total: millis(ms),
                calls: millis(calls),
                capture: millis(timing("capture_ms")),
                action: millis(timing("action_ms")),
                settle: millis(timing("settle_ms")),
            });
        }
        previous = Some(at);
    }
    if steps.len() != 7 {
        bail!("expected 7 desktop steps, found {}", steps.len());
    }
    Ok(steps)
}

/// sandboxd of `sandbox` as the run's loop reaches it: the container's address on the sandbox
/// network and the sandbox's own key (derived from the orchestrator's master key, which the
/// bench, its parent, can read).
fn direct(server: &OrchestratorServer, sandbox: &str) -> anyhow::Result<(String, String)> {
    let address = docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        &agentbox_bench::sandbox_container(sandbox)?,
    ])?;
    let keyring = Keyring::load_or_create(&server.data_dir().join("master.key"))?;
    Ok((
        format!("http://{}:8080", address.trim()),
        keyring.sandbox_key(sandbox),
    ))
}

/// The same actions as bare calls straight to sandboxd (as the loop makes them): screenshot,
/// action, then settle or a fixed sleep.
async fn bare_steps(
    client: &reqwest::Client,
    server: &OrchestratorServer,
    sandbox: &str,
    sleep: Option<Duration>,
) -> anyhow::Result<Vec<Duration>> {
    let (api, key) = direct(server, sandbox)?;
    // The loop's own settle policy.
    let settle = SettlePolicy::default();
    let mut steps = Vec::new();
    for action in task_actions()? {
        let started = Instant::now();
        let response = client
            .get(format!("{api}/v1/browser/screenshot?format=png"))
            .bearer_auth(&key)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("screenshot: {}", response.status());
        }
        response.bytes().await?;
        call(
            client,
            &key,
            reqwest::Method::POST,
            &format!("{api}/v1/browser/actions"),
            Some(action),
        )
        .await?;
        match sleep {
            Some(sleep) => tokio::time::sleep(sleep).await,
            None => {
                call(
                    client,
                    &key,
                    reqwest::Method::POST,
                    &format!("{api}/v1/browser/actions"),
                    Some(json!({
                        "action_type": "WAIT_SETTLED",
                        "quiet_ms": settle.quiet.as_millis() as u64,
                        "timeout_ms": settle.timeout.as_millis() as u64,
                    })),
                )
                .await?;
            }
        }
        steps.push(started.elapsed());
    }
    Ok(steps)
}

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 3);
    let binary = orchestrator_binary();
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let server = OrchestratorServer::start(
        &binary,
        &image,
        0,
        "steps",
        &["--scripts-dir".into(), examples.display().to_string()],
    )?;
    let client = reqwest::Client::new();
    let (mut run, mut raw, mut slept) = (Vec::new(), Vec::new(), Vec::new());
    let mut bookkeeping = Vec::new();
    let (mut capture, mut action, mut settle) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations {
        let sandbox = call(
            &client,
            ADMIN_KEY,
            reqwest::Method::POST,
            &format!("{}/v1/sandboxes", server.url),
            Some(json!({})),
        )
        .await?;
        let id = sandbox["id"].as_str().context("sandbox id")?.to_string();
        for step in run_task(&client, &server, &id).await? {
            run.push(step.total);
            bookkeeping.push(step.total.saturating_sub(step.calls));
            capture.push(step.capture);
            action.push(step.action);
            settle.push(step.settle);
        }
        // mtPaint is open on the same canvas: the same actions, bare.
        raw.extend(bare_steps(&client, &server, &id, None).await?);
        slept.extend(bare_steps(&client, &server, &id, Some(Duration::from_secs(2))).await?);
        call(
            &client,
            ADMIN_KEY,
            reqwest::Method::DELETE,
            &format!("{}/v1/sandboxes/{id}", server.url),
            None,
        )
        .await?;
        eprintln!("iteration {} of {iterations} done", i + 1);
    }
    println!(
        "\nper-step overhead, model time excluded ({iterations} runs of the acceptance task, 7 desktop steps each)"
    );
    print_header();
    print_row("agentbox run step", &Stats::of(&run));
    print_row("raw sandboxd calls", &Stats::of(&raw));
    print_row("fixed 2 s sleep loop", &Stats::of(&slept));
    print_row("  run: screenshot", &Stats::of(&capture));
    print_row("  run: action", &Stats::of(&action));
    print_row("  run: settle (WAIT_SETTLED)", &Stats::of(&settle));
    print_row("  run: the rest (bookkeeping)", &Stats::of(&bookkeeping));
    let (median, p95) = (Stats::of(&run).median, percentile(&run, 0.95));
    let raw_median = Stats::of(&raw).median;
    println!(
        "\nrun step: median {median:.1} ms (goal <= 150), p95 {p95:.1} ms (goal <= 400); \
         {:.1} ms above raw (goal <= 25); {:.1}x faster than the 2 s sleep loop",
        median - raw_median,
        Stats::of(&slept).median / median
    );
    Ok(())
}
