//! Per-step overhead of a computer-use run, excluding model time: capture + act + settle +
//! bookkeeping, measured on the acceptance task (seed 003's red triangle, `script:` provider,
//! so the model takes ~0 ms) through the orchestrator, side by side in the same run with:
//!
//! - **raw**: the same desktop actions as bare sandboxd calls through the orchestrator's proxy
//!   (screenshot, action, `WAIT_SETTLED` with the loop's settle policy), nothing stored;
//! - **sleep 2 s**: the common reference loops' step (screenshot, action, a fixed 2-second
//!   sleep).
//!
//! A run's step = from one desktop action's `action.finished` event to the next one's, minus
//! that step's `model_ms`; SHELL and WAIT_SETTLED steps (whose time is the command's or the
//! wait's own) are left out. Goal: median <= 150 ms, p95 <= 400 ms, at most 25 ms above raw.
//!
//! `cargo build --release -p orchestrator && cargo run --release -p agentbox-bench --bin run-steps -- --iterations 3`

use std::time::{Duration, Instant};

use agentbox_bench::{
    ADMIN_KEY, OrchestratorServer, Stats, arg, percentile, print_header, print_row,
};
use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The desktop actions of the acceptance task, as sandboxd takes them (fractions of the
/// 1280x800 screen turned into pixels, as the script provider does).
fn task_actions() -> Vec<Value> {
    let px = |x: f64, y: f64| json!([(x * 1280.0).round(), (y * 800.0).round()]);
    vec![
        json!({"action_type": "PRESS", "key": "bracketright"}),
        json!({"action_type": "PRESS", "key": "bracketleft"}),
        json!({"action_type": "PRESS", "key": "F4"}),
        json!({"action_type": "DRAG_PATH", "path": [px(0.52, 0.36), px(0.45, 0.62)], "step_ms": 5}),
        json!({"action_type": "DRAG_PATH", "path": [px(0.45, 0.62), px(0.59, 0.62)], "step_ms": 5}),
        json!({"action_type": "DRAG_PATH", "path": [px(0.59, 0.62), px(0.52, 0.36)], "step_ms": 5}),
        json!({"action_type": "HOTKEY", "keys": ["ctrl", "s"]}),
    ]
}

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let mut request = client.request(method, url).bearer_auth(ADMIN_KEY);
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

/// One run of the acceptance task; returns the overhead of each desktop-action step.
async fn run_task(
    client: &reqwest::Client,
    server: &OrchestratorServer,
    sandbox: &str,
) -> anyhow::Result<Vec<Duration>> {
    let run = call(
        client,
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
            let model = event["timings"]["model_ms"].as_i64().unwrap_or(0);
            let ms = (at - previous - model).max(0);
            steps.push(Duration::from_millis(ms as u64));
        }
        previous = Some(at);
    }
    if steps.len() != 7 {
        bail!("expected 7 desktop steps, found {}", steps.len());
    }
    Ok(steps)
}

/// The same actions as bare calls: screenshot, action, then settle or a fixed sleep.
async fn bare_steps(
    client: &reqwest::Client,
    server: &OrchestratorServer,
    sandbox: &str,
    sleep: Option<Duration>,
) -> anyhow::Result<Vec<Duration>> {
    let api = format!("{}/v1/sandboxes/{sandbox}/api", server.url);
    let mut steps = Vec::new();
    for action in task_actions() {
        let started = Instant::now();
        let response = client
            .get(format!("{api}/v1/browser/screenshot?format=png"))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("screenshot: {}", response.status());
        }
        response.bytes().await?;
        call(
            client,
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
                    reqwest::Method::POST,
                    &format!("{api}/v1/browser/actions"),
                    Some(
                        json!({"action_type": "WAIT_SETTLED", "quiet_ms": 100, "timeout_ms": 3000}),
                    ),
                )
                .await?;
            }
        }
        steps.push(started.elapsed());
    }
    Ok(steps)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 3);
    let binary: String = arg("--orchestrator", "target/release/orchestrator".to_string());
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
    for i in 0..iterations {
        let sandbox = call(
            &client,
            reqwest::Method::POST,
            &format!("{}/v1/sandboxes", server.url),
            Some(json!({})),
        )
        .await?;
        let id = sandbox["id"].as_str().context("sandbox id")?.to_string();
        run.extend(run_task(&client, &server, &id).await?);
        // mtPaint is open on the same canvas: the same actions, bare.
        raw.extend(bare_steps(&client, &server, &id, None).await?);
        slept.extend(bare_steps(&client, &server, &id, Some(Duration::from_secs(2))).await?);
        call(
            &client,
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
