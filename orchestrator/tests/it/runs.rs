//! Computer-use runs end to end, with the real Docker Engine, the real sandbox image and the
//! `script:` provider: the acceptance task (a red triangle drawn in mtPaint, saved under
//! `~/outputs`, downloaded and checked pixel by pixel), idempotency, SSE resume with
//! `Last-Event-ID`, bad input, and `kill -9` of the orchestrator mid-run.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use common::{
    ADMIN_KEY, Options, Orchestrator, Ws, mouse_location, pointer_event, rfb_handshake, ws_connect,
    ws_url,
};
use futures_util::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{Value, json};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// One SSE event: (id, event name, data as JSON).
type Sse = (i64, String, Value);

/// Reads SSE events from `path` (after `last_event_id`) until `stop` says so or the stream
/// ends; returns what it read.
async fn read_sse(
    orchestrator: &Orchestrator,
    path: &str,
    last_event_id: Option<i64>,
    stop: impl Fn(&[Sse]) -> bool,
) -> anyhow::Result<Vec<Sse>> {
    let mut request = orchestrator
        .http
        .get(orchestrator.u(path))
        .bearer_auth(ADMIN_KEY)
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = request.send().await?;
    if response.status() != 200 {
        bail!("{path}: {}", response.status());
    }
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while let Some(chunk) = tokio::time::timeout_at(deadline.into(), body.next())
        .await
        .context("SSE timed out")?
    {
        buffer.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut id, mut name, mut data) = (None, String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().parse::<i64>()?);
                } else if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            // Comment-only blocks are heartbeats.
            if let Some(id) = id {
                events.push((id, name, serde_json::from_str(&data)?));
                if stop(&events) {
                    return Ok(events);
                }
            }
        }
    }
    Ok(events)
}

fn is_terminal(event: &Sse) -> bool {
    event.1 == "run.status"
        && matches!(
            event.2["status"].as_str(),
            Some("completed" | "failed" | "canceled")
        )
}

async fn post_run(
    orchestrator: &Orchestrator,
    body: Value,
    idempotency_key: Option<&str>,
) -> anyhow::Result<(u16, Value)> {
    let mut request = orchestrator
        .http
        .post(orchestrator.u("/v1/runs"))
        .bearer_auth(ADMIN_KEY)
        .json(&body);
    if let Some(key) = idempotency_key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

/// Runs the orchestrator's command line against `orchestrator`.
// The test drives the real binary, as a person would; std waits for it.
#[allow(clippy::disallowed_methods)]
fn cli(orchestrator: &Orchestrator, args: &[&str]) -> anyhow::Result<std::process::Output> {
    Ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(["--url", &orchestrator.url, "--api-key", ADMIN_KEY])
            .args(args)
            .output()?,
    )
}

/// Red along the three edges of one triangle, white inside it and around it.
fn check_red_triangle(png: &[u8]) -> anyhow::Result<()> {
    let image = image::load_from_memory_with_format(png, image::ImageFormat::Png)?.to_rgb8();
    let red = |x: u32, y: u32| {
        let p = image.get_pixel(x, y);
        p[0] > 180 && p[1] < 80 && p[2] < 80
    };
    let white = |x: u32, y: u32| {
        let p = image.get_pixel(x, y);
        p[0] > 230 && p[1] > 230 && p[2] > 230
    };
    let (w, h) = image.dimensions();
    let mut reds = Vec::new();
    for y in 0..h {
        for x in 0..w {
            if red(x, y) {
                reds.push((x, y));
            } else if !white(x, y) {
                bail!(
                    "pixel ({x}, {y}) is neither red nor white: {:?}",
                    image.get_pixel(x, y)
                );
            }
        }
    }
    if reds.len() < 200 {
        bail!("only {} red pixels", reds.len());
    }
    let (x0, x1) = (
        reds.iter().map(|p| p.0).min().unwrap_or(0),
        reds.iter().map(|p| p.0).max().unwrap_or(0),
    );
    let (y0, y1) = (
        reds.iter().map(|p| p.1).min().unwrap_or(0),
        reds.iter().map(|p| p.1).max().unwrap_or(0),
    );
    if x1 - x0 < 40 || y1 - y0 < 40 {
        bail!("the red shape is too small: ({x0},{y0})-({x1},{y1})");
    }
    // Around it: the image's corners are white.
    for (x, y) in [(0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1)] {
        if !white(x, y) {
            bail!("corner ({x}, {y}) is not white");
        }
    }
    // The base: a red run across most of the width near the bottom.
    let base = (y1.saturating_sub(6)..=y1)
        .any(|y| (x0..=x1).filter(|&x| red(x, y)).count() as u32 > (x1 - x0) * 6 / 10);
    if !base {
        bail!("no red base line");
    }
    // Halfway down: red on the left edge, white inside, red on the right edge.
    let y = (y0 + y1) / 2;
    let row: Vec<u32> = (x0..=x1).filter(|&x| red(x, y)).collect();
    let (first, last) = (
        *row.first().context("no red at mid height")?,
        *row.last().context("no red at mid height")?,
    );
    if last - first < 15 {
        bail!("one edge only at mid height");
    }
    let inside = (first + last) / 2;
    if !white(inside, y) || !white(inside, (y + y1) / 2) {
        bail!("the triangle is not white inside");
    }
    Ok(())
}

/// The acceptance task with the script provider, the event stream resumed after a forced
/// disconnect, idempotency, the artifact kept and checked, bad input refused.
#[tokio::test]
async fn acceptance_task_draws_a_red_triangle() -> anyhow::Result<()> {
    let orchestrator = Orchestrator::start(Options {
        extra_args: vec!["--scripts-dir".into(), examples_dir().display().to_string()],
        ..Options::default()
    })?;
    let task = "Open the paint program, draw a red triangle, save it as PNG under ~/outputs";
    bad_input_is_refused_naming_the_problem_and_creates_nothing(&orchestrator, task).await?;
    let id = the_run_is_created_once_per_idempotency_key(&orchestrator, task).await?;
    let seqs =
        the_event_stream_resumes_after_a_disconnect_and_replays_once_ended(&orchestrator, &id)
            .await?;
    let run =
        the_record_and_the_png_are_kept_and_checked_pixel_by_pixel(&orchestrator, &id).await?;
    the_command_line_reads_the_same_log(&orchestrator, &id, &seqs).await?;
    terminal_states_never_change_and_runs_need_a_key(&orchestrator, &id).await?;
    the_artifact_outlives_the_sandbox(&orchestrator, &id, &run).await?;
    deleting_the_run_takes_its_record_events_artifacts_and_files(&orchestrator, &id).await?;
    Ok(())
}

async fn bad_input_is_refused_naming_the_problem_and_creates_nothing(
    orchestrator: &Orchestrator,
    task: &str,
) -> anyhow::Result<()> {
    // Bad input: each a 4xx naming the problem, nothing created.
    let huge = "x".repeat(100 * 1024);
    let cases = [
        (json!({"task": task, "model": "gemini:pro"}), 422, "model"),
        (
            json!({"task": task, "model": "anthropic:claude-sonnet-4-5"}),
            422,
            "ANTHROPIC_API_KEY",
        ),
        (
            json!({"task": "  ", "model": "script:draw-red-triangle.json"}),
            422,
            "task",
        ),
        (
            json!({"task": huge, "model": "script:draw-red-triangle.json"}),
            422,
            "task",
        ),
        (
            json!({"task": task, "model": "script:missing.json"}),
            422,
            "model",
        ),
        (
            json!({"task": task, "model": "script:/etc/passwd"}),
            422,
            "model",
        ),
        (
            json!({"task": task, "model": "script:draw-red-triangle.json", "limits": {"max_steps": 0}}),
            422,
            "max_steps",
        ),
        (
            json!({"task": task, "model": "script:draw-red-triangle.json", "colour": "red"}),
            422,
            "colour",
        ),
    ];
    for (body, status, needle) in &cases {
        let (got, answer) = post_run(orchestrator, body.clone(), None).await?;
        assert_eq!(got, *status, "{body:.80}: {answer}");
        assert!(answer.to_string().contains(needle), "{needle}: {answer}");
    }
    let (_, list) = orchestrator.get("/v1/runs").await?;
    assert_eq!(list["runs"], json!([]), "nothing half-created");
    Ok(())
}

async fn the_run_is_created_once_per_idempotency_key(
    orchestrator: &Orchestrator,
    task: &str,
) -> anyhow::Result<String> {
    // The run, idempotently.
    let body = json!({"task": task, "model": "script:draw-red-triangle.json", "metadata": {"demo": "triangle"}});
    let (status, run) = post_run(orchestrator, body.clone(), Some("triangle-1")).await?;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().context("id")?.to_string();
    let (status, again) = post_run(orchestrator, body.clone(), Some("triangle-1")).await?;
    assert_eq!((status, again["id"].as_str()), (200, Some(id.as_str())));
    let (status, other) = post_run(
        orchestrator,
        json!({"task": "something else", "model": "script:draw-red-triangle.json"}),
        Some("triangle-1"),
    )
    .await?;
    assert_eq!(status, 409, "{other}");
    Ok(id)
}

async fn the_event_stream_resumes_after_a_disconnect_and_replays_once_ended(
    orchestrator: &Orchestrator,
    id: &str,
) -> anyhow::Result<Vec<i64>> {
    // Follow it; drop the connection after a few events and resume with Last-Event-ID.
    let path = format!("/v1/runs/{id}/events");
    let first = read_sse(orchestrator, &path, None, |events| events.len() >= 5).await?;
    let last = first.last().map(|e| e.0).context("no events")?;
    let rest = read_sse(orchestrator, &path, Some(last), |events| {
        events.last().is_some_and(is_terminal)
    })
    .await?;
    let all: Vec<&Sse> = first.iter().chain(rest.iter()).collect();
    let seqs: Vec<i64> = all.iter().map(|e| e.0).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let end = all.last().context("no end")?;
    assert_eq!(end.2["status"], "completed", "{:?}", end);
    assert_eq!(all[0].1, "run.status");
    assert_eq!(all[0].2["status"], "queued");
    let strokes = all
        .iter()
        .filter(|e| e.1 == "action.finished" && e.2["action"].to_string().contains("DRAG_PATH"))
        .count();
    assert_eq!(strokes, 3, "each edge is one DRAG_PATH");
    let created: Vec<&&Sse> = all.iter().filter(|e| e.1 == "artifact.created").collect();
    assert!(
        created
            .iter()
            .any(|e| e.2["name"] == "outputs/red-triangle.png"),
        "artifact events: {created:?}"
    );
    // The JSON page has the same events; a finished run's stream replays and ends.
    let (status, page) = orchestrator
        .get(&format!("/v1/runs/{id}/events?format=json&limit=1000"))
        .await?;
    assert_eq!(status, 200);
    assert_eq!(page["events"].as_array().map(Vec::len), Some(seqs.len()));
    assert_eq!(page["done"], true);
    let replay = read_sse(orchestrator, &path, Some(0), |_| false).await?;
    assert_eq!(replay.len(), seqs.len(), "the stream of an ended run ends");
    Ok(seqs)
}

async fn the_record_and_the_png_are_kept_and_checked_pixel_by_pixel(
    orchestrator: &Orchestrator,
    id: &str,
) -> anyhow::Result<Value> {
    // The run's record, and the PNG: downloadable, checked pixel by pixel.
    let (_, run) = orchestrator.get(&format!("/v1/runs/{id}")).await?;
    assert_eq!(run["status"], "completed");
    assert!(
        run["answer"]
            .as_str()
            .is_some_and(|a| a.contains("red-triangle.png"))
    );
    let (_, listed) = orchestrator.get("/v1/runs?metadata.demo=triangle").await?;
    assert_eq!(listed["runs"][0]["id"], id);
    let (_, artifacts) = orchestrator
        .get(&format!("/v1/runs/{id}/artifacts"))
        .await?;
    let names: Vec<&str> = artifacts["artifacts"]
        .as_array()
        .context("artifacts")?
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert!(names.contains(&"outputs/red-triangle.png"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("screenshots/")),
        "{names:?}"
    );
    let response = orchestrator
        .http
        .get(orchestrator.u(&format!("/v1/runs/{id}/artifacts/outputs/red-triangle.png")))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/png");
    assert_eq!(response.headers()["content-security-policy"], "sandbox");
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    let png = response.bytes().await?;
    check_red_triangle(&png)?;
    Ok(run)
}

async fn the_command_line_reads_the_same_log(
    orchestrator: &Orchestrator,
    id: &str,
    seqs: &[i64],
) -> anyhow::Result<()> {
    // The command line reads the same log, one line per event with the step.
    let output = cli(orchestrator, &["run", "events", id])?;
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(printed.lines().count(), seqs.len(), "{printed}");
    assert!(printed.contains("run.status completed"), "{printed}");
    assert!(
        printed.contains("artifact.created outputs/red-triangle.png"),
        "{printed}"
    );
    let output = cli(orchestrator, &["run", "ls"])?;
    assert!(String::from_utf8_lossy(&output.stdout).contains(&format!("{id}\tcompleted")));
    Ok(())
}

async fn terminal_states_never_change_and_runs_need_a_key(
    orchestrator: &Orchestrator,
    id: &str,
) -> anyhow::Result<()> {
    // Terminal states never change.
    let (status, _) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/runs/{id}/cancel"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(status, 409);
    // Without a key: 401; another run id: 404.
    let (status, _) = orchestrator
        .call(Method::GET, "/v1/runs", None, None)
        .await?;
    assert_eq!(status, 401);
    let (status, _) = orchestrator.get("/v1/runs/run_nope").await?;
    assert_eq!(status, 404);
    Ok(())
}

async fn the_artifact_outlives_the_sandbox(
    orchestrator: &Orchestrator,
    id: &str,
    run: &Value,
) -> anyhow::Result<()> {
    // The artifact outlives the sandbox.
    let sandbox_id = run["sandbox_id"].as_str().context("sandbox_id")?;
    assert_eq!(orchestrator.delete(sandbox_id).await?, 204);
    let response = orchestrator
        .http
        .get(orchestrator.u(&format!("/v1/runs/{id}/artifacts/outputs/red-triangle.png")))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    Ok(())
}

async fn deleting_the_run_takes_its_record_events_artifacts_and_files(
    orchestrator: &Orchestrator,
    id: &str,
) -> anyhow::Result<()> {
    // Deleting the run takes its record, events and artifacts, and the disk space they took.
    let files = orchestrator.data_dir.join("artifacts").join(id);
    assert!(files.join("outputs/red-triangle.png").is_file());
    let delete = async || {
        orchestrator
            .call(
                Method::DELETE,
                &format!("/v1/runs/{id}"),
                Some(ADMIN_KEY),
                None,
            )
            .await
    };
    let (status, body) = delete().await?;
    assert_eq!(status, 204, "{body}");
    assert!(!files.exists(), "{} is still there", files.display());
    for path in [
        format!("/v1/runs/{id}"),
        format!("/v1/runs/{id}/events"),
        format!("/v1/runs/{id}/artifacts"),
        format!("/v1/runs/{id}/artifacts/outputs/red-triangle.png"),
    ] {
        let (status, _) = orchestrator.get(&path).await?;
        assert_eq!(status, 404, "{path}");
    }
    assert_eq!(delete().await?.0, 404, "deleted once");
    Ok(())
}

/// `kill -9` of the orchestrator while an action runs: after the restart the run resumes from
/// its checkpoint, the action in flight is reported as of unknown outcome and not run again,
/// the run completes and its seq has no gap.
#[tokio::test]
async fn a_run_survives_kill_9_of_the_orchestrator() -> anyhow::Result<()> {
    let scripts = tempfile::tempdir()?;
    std::fs::write(
        scripts.path().join("steps.json"),
        serde_json::to_string(&json!([
            {"action": "SHELL", "command": "echo a >> ~/steps.log"},
            {"action": "SHELL", "command": "sleep 4; echo b >> ~/steps.log", "timeout_s": 30},
            {"action": "SHELL", "command": "echo c >> ~/steps.log"},
            {"action": "FINAL", "answer": "done"}
        ]))?,
    )?;
    std::fs::write(
        scripts.path().join("bad.json"),
        r#"[{"action": "FLY_TO", "x": 1}]"#,
    )?;
    std::fs::write(
        scripts.path().join("long.json"),
        serde_json::to_string(&json!([
            {"action": "SHELL", "command": "sleep 20; echo late >> ~/late.log", "timeout_s": 60},
            {"action": "SHELL", "command": "echo next >> ~/late.log"},
            {"action": "FINAL", "answer": "never"}
        ]))?,
    )?;
    let mut orchestrator = Orchestrator::start(Options {
        extra_args: vec![
            "--scripts-dir".into(),
            scripts.path().display().to_string(),
            "--run-lease-secs".into(),
            "3".into(),
        ],
        ..Options::default()
    })?;
    // A script with an unknown action is refused before anything is created.
    let (status, answer) = post_run(
        &orchestrator,
        json!({"task": "bad", "model": "script:bad.json"}),
        None,
    )
    .await?;
    assert_eq!(status, 422, "{answer}");
    assert!(answer.to_string().contains("FLY_TO"), "{answer}");
    let (status, run) = post_run(
        &orchestrator,
        json!({"task": "three steps", "model": "script:steps.json"}),
        None,
    )
    .await?;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().context("id")?.to_string();
    let path = format!("/v1/runs/{id}/events");
    // Until the sleeping step has started.
    read_sse(&orchestrator, &path, None, |events| {
        events
            .iter()
            .any(|e| e.1 == "action.started" && e.2["action"].to_string().contains("sleep 4"))
    })
    .await?;
    orchestrator.restart()?;
    let events = read_sse(&orchestrator, &path, Some(0), |events| {
        events.last().is_some_and(is_terminal)
    })
    .await?;
    let seqs: Vec<i64> = events.iter().map(|e| e.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no gap");
    let end = events.last().context("end")?;
    assert_eq!(end.2["status"], "completed", "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e.1 == "action.finished" && e.2["outcome"] == "unknown"),
        "the action in flight is reported as unknown: {events:#?}"
    );
    let sleeps = events
        .iter()
        .filter(|e| e.1 == "action.started" && e.2["action"].to_string().contains("sleep 4"))
        .count();
    assert_eq!(sleeps, 1, "not run twice");
    // In the sandbox: each step's line at most once.
    let (_, run) = orchestrator.get(&format!("/v1/runs/{id}")).await?;
    let sandbox_id = run["sandbox_id"].as_str().context("sandbox")?;
    let log = agentbox_tests::docker(&[
        "exec",
        &common::container_name(sandbox_id),
        "cat",
        "/home/agent/steps.log",
    ])?;
    for line in ["a", "c"] {
        assert_eq!(log.lines().filter(|l| *l == line).count(), 1, "{log}");
    }
    assert!(log.lines().filter(|l| *l == "b").count() <= 1, "{log}");

    // Cancel through the API while an action is in flight, in the same sandbox: the answer
    // says canceled, the log ends with that status and nothing after it, and the next step
    // never runs.
    let (status, long) = post_run(
        &orchestrator,
        json!({"task": "long", "model": "script:long.json", "sandbox_id": sandbox_id}),
        None,
    )
    .await?;
    assert_eq!(status, 201, "{long}");
    let long_id = long["id"].as_str().context("id")?.to_string();
    let long_path = format!("/v1/runs/{long_id}/events");
    read_sse(&orchestrator, &long_path, None, |events| {
        events.iter().any(|e| e.1 == "action.started")
    })
    .await?;
    let (status, canceled) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/runs/{long_id}/cancel"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(status, 200, "{canceled}");
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    let events = read_sse(&orchestrator, &long_path, Some(0), |events| {
        events.last().is_some_and(is_terminal)
    })
    .await?;
    let end = events.last().context("end")?;
    assert_eq!(end.2["status"], "canceled", "{events:#?}");
    assert!(
        !events.iter().any(|e| e.1 == "action.finished"),
        "nothing is written for the canceled action: {events:#?}"
    );
    // The stream ended at the terminal event; a replay after it is empty and stays so.
    let (_, page) = orchestrator
        .get(&format!("{long_path}?format=json&after_seq={}", end.0))
        .await?;
    assert_eq!(page["events"], json!([]), "{page}");
    let started = events.iter().filter(|e| e.1 == "action.started").count();
    assert_eq!(started, 1, "the next step never started: {events:#?}");
    Ok(())
}

/// 500 concurrent subscribers to one run each receive every event once, in order, and their
/// streams end after the terminal status. The run also saves an output larger than its
/// artifact budget (`--run-artifacts-mib 1`): it is not kept, and the log says why (the attack
/// review's finding: a run could keep 12.5 GiB with no total).
#[tokio::test]
async fn five_hundred_subscribers_see_every_event_in_order() -> anyhow::Result<()> {
    let scripts = tempfile::tempdir()?;
    let mut steps: Vec<Value> = (0..15)
        .map(|i| json!({"action": "SHELL", "command": format!("sleep 0.1; echo {i}")}))
        .collect();
    steps.push(json!({"action": "SHELL",
        "command": "mkdir -p ~/outputs && head -c 3145728 /dev/zero > ~/outputs/big.bin"}));
    steps.push(json!({"action": "FINAL", "answer": "counted"}));
    std::fs::write(
        scripts.path().join("count.json"),
        serde_json::to_string(&steps)?,
    )?;
    let orchestrator = Orchestrator::start(Options {
        extra_args: vec![
            "--scripts-dir".into(),
            scripts.path().display().to_string(),
            "--run-artifacts-mib".into(),
            "1".into(),
        ],
        ..Options::default()
    })?;
    let (status, run) = post_run(
        &orchestrator,
        json!({"task": "count", "model": "script:count.json"}),
        None,
    )
    .await?;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().context("id")?.to_string();
    let path = format!("/v1/runs/{id}/events");
    let subscribers = (0..500).map(|_| {
        read_sse(&orchestrator, &path, None, |events| {
            events.last().is_some_and(is_terminal)
        })
    });
    let results = futures_util::future::join_all(subscribers).await;
    let (_, page) = orchestrator
        .get(&format!("/v1/runs/{id}/events?format=json&limit=1000"))
        .await?;
    let expected: Vec<i64> = page["events"]
        .as_array()
        .context("events")?
        .iter()
        .filter_map(|e| e["seq"].as_i64())
        .collect();
    assert_eq!(expected, (1..=expected.len() as i64).collect::<Vec<_>>());
    assert_eq!(page["done"], true, "{page}");
    for (i, result) in results.into_iter().enumerate() {
        let events = result.with_context(|| format!("subscriber {i}"))?;
        let seqs: Vec<i64> = events.iter().map(|e| e.0).collect();
        assert_eq!(seqs, expected, "subscriber {i}");
    }
    // The big output: skipped with its reason, not kept.
    let all = page["events"].as_array().context("events")?;
    let skipped = all
        .iter()
        .find(|e| e["type"] == "artifact.skipped" && e["name"] == "outputs/big.bin")
        .with_context(|| format!("no artifact.skipped for big.bin in {page}"))?;
    assert_eq!(skipped["size"], 3_145_728);
    assert!(
        skipped["reason"]
            .as_str()
            .is_some_and(|r| r.contains("run's artifact budget")),
        "{skipped}"
    );
    let (_, artifacts) = orchestrator
        .get(&format!("/v1/runs/{id}/artifacts"))
        .await?;
    let artifacts = artifacts["artifacts"].as_array().context("artifacts")?;
    assert!(artifacts.iter().all(|a| a["name"] != "outputs/big.bin"));
    let kept: i64 = artifacts.iter().filter_map(|a| a["size"].as_i64()).sum();
    assert!(kept <= 1024 * 1024, "{kept} bytes kept");
    Ok(())
}

/// Seed 003's takeover: while the agent drives, a control viewer's pointer input is dropped;
/// after `takeover` (answered once the action in flight finished) it moves the pointer and
/// clicks through the VNC proxy; after `handback` it is dropped again and the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_opens_the_viewers_input_and_handback_closes_it() -> anyhow::Result<()> {
    let scripts = tempfile::tempdir()?;
    write_slow_script(scripts.path())?;
    let orchestrator = Orchestrator::start(Options {
        extra_args: vec!["--scripts-dir".into(), scripts.path().display().to_string()],
        ..Options::default()
    })?;
    let sandbox = orchestrator.create(json!({})).await?;
    let sandbox_id = sandbox["id"].as_str().context("id")?.to_string();
    agentbox_tests::docker(&[
        "exec",
        &common::container_name(&sandbox_id),
        "xdotool",
        "mousemove",
        "10",
        "10",
    ])?;
    let (status, run) = post_run(
        &orchestrator,
        json!({"task": "slow", "model": "script:slow.json", "sandbox_id": sandbox_id}),
        None,
    )
    .await?;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().context("id")?.to_string();
    a_second_run_on_the_sandbox_is_refused_while_this_one_is_active(&orchestrator, &sandbox_id)
        .await?;
    let path = format!("/v1/runs/{id}/events");
    read_sse(&orchestrator, &path, None, |events| {
        events.iter().any(|e| e.1 == "action.finished")
    })
    .await?;

    let mut viewer = a_control_viewer(&orchestrator, &sandbox_id).await?;
    the_viewers_pointer_is_dropped_while_the_agent_drives(&mut viewer, &sandbox_id).await?;
    takeover_pauses_the_run_and_opens_the_viewers_input(
        &orchestrator,
        &id,
        &sandbox_id,
        &mut viewer,
    )
    .await?;
    handback_resumes_the_run_and_closes_the_viewers_input(
        &orchestrator,
        &id,
        &sandbox_id,
        &mut viewer,
    )
    .await?;
    the_run_completes_and_the_desktop_is_the_persons_again(
        &orchestrator,
        &path,
        &sandbox_id,
        &mut viewer,
    )
    .await?;
    Ok(())
}

/// A script of 60 quarter-second shell steps and a final answer, as `slow.json` in `dir`.
fn write_slow_script(dir: &std::path::Path) -> anyhow::Result<()> {
    let mut steps: Vec<Value> = (0..60)
        .map(|i| json!({"action": "SHELL", "command": format!("sleep 0.25; echo {i}")}))
        .collect();
    steps.push(json!({"action": "FINAL", "answer": "done"}));
    std::fs::write(dir.join("slow.json"), serde_json::to_string(&steps)?)?;
    Ok(())
}

/// A control viewer of the sandbox's desktop through the VNC proxy, past the RFB handshake.
async fn a_control_viewer(orchestrator: &Orchestrator, sandbox_id: &str) -> anyhow::Result<Ws> {
    let token = orchestrator.token(sandbox_id, "control").await?;
    let url = ws_url(&orchestrator.u(&format!(
        "/v1/sandboxes/{sandbox_id}/vnc/websockify?token={}",
        token["token"].as_str().context("token")?
    )));
    let mut viewer = ws_connect(&url, None, Some("binary")).await?;
    let mut pending = Vec::new();
    rfb_handshake(&mut viewer, &mut pending).await?;
    Ok(viewer)
}

async fn a_second_run_on_the_sandbox_is_refused_while_this_one_is_active(
    orchestrator: &Orchestrator,
    sandbox_id: &str,
) -> anyhow::Result<()> {
    // A second run on the same sandbox is refused while this one is active.
    let (status, _) = post_run(
        orchestrator,
        json!({"task": "other", "model": "script:slow.json", "sandbox_id": sandbox_id}),
        None,
    )
    .await?;
    assert_eq!(status, 409);
    Ok(())
}

async fn the_viewers_pointer_is_dropped_while_the_agent_drives(
    viewer: &mut Ws,
    sandbox_id: &str,
) -> anyhow::Result<()> {
    // The agent drives: the person's pointer does not reach the desktop.
    viewer.send(pointer_event(321, 234)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        mouse_location(sandbox_id)?,
        (10, 10),
        "refused before takeover"
    );
    Ok(())
}

async fn takeover_pauses_the_run_and_opens_the_viewers_input(
    orchestrator: &Orchestrator,
    id: &str,
    sandbox_id: &str,
    viewer: &mut Ws,
) -> anyhow::Result<()> {
    let (status, paused) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/runs/{id}/takeover"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(
        (status, paused["status"].as_str()),
        (200, Some("paused")),
        "{paused}"
    );
    // A run that has not ended cannot be deleted.
    let (status, refused) = orchestrator
        .call(
            Method::DELETE,
            &format!("/v1/runs/{id}"),
            Some(ADMIN_KEY),
            None,
        )
        .await?;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cancel it first")),
        "{refused}"
    );
    viewer.send(pointer_event(321, 234)).await?;
    // A click: button 1 down and up.
    let click = |buttons: u8| {
        let mut m = vec![5u8, buttons];
        m.extend(321u16.to_be_bytes());
        m.extend(234u16.to_be_bytes());
        tokio_tungstenite::tungstenite::Message::Binary(m.into())
    };
    viewer.send(click(1)).await?;
    viewer.send(click(0)).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while mouse_location(sandbox_id)? != (321, 234) {
        if Instant::now() > deadline {
            bail!("the person's pointer did not arrive after takeover");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Paused: no action runs.
    let (_, before) = orchestrator.get(&format!("/v1/runs/{id}")).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, after) = orchestrator.get(&format!("/v1/runs/{id}")).await?;
    assert_eq!(
        before["last_seq"], after["last_seq"],
        "nothing happens while paused"
    );
    Ok(())
}

async fn handback_resumes_the_run_and_closes_the_viewers_input(
    orchestrator: &Orchestrator,
    id: &str,
    sandbox_id: &str,
    viewer: &mut Ws,
) -> anyhow::Result<()> {
    let (status, resumed) = orchestrator
        .call(
            Method::POST,
            &format!("/v1/runs/{id}/handback"),
            Some(ADMIN_KEY),
            Some(json!({"note": "moved the pointer"})),
        )
        .await?;
    assert_eq!(
        (status, resumed["status"].as_str()),
        (200, Some("running")),
        "{resumed}"
    );
    viewer.send(pointer_event(50, 60)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        mouse_location(sandbox_id)?,
        (321, 234),
        "refused after handback"
    );
    Ok(())
}

async fn the_run_completes_and_the_desktop_is_the_persons_again(
    orchestrator: &Orchestrator,
    path: &str,
    sandbox_id: &str,
    viewer: &mut Ws,
) -> anyhow::Result<()> {
    let events = read_sse(orchestrator, path, Some(0), |events| {
        events.last().is_some_and(is_terminal)
    })
    .await?;
    assert_eq!(events.last().context("end")?.2["status"], "completed");
    let kinds: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    let taken = kinds
        .iter()
        .position(|k| *k == "control.taken")
        .context("taken")?;
    let returned = kinds
        .iter()
        .position(|k| *k == "control.returned")
        .context("returned")?;
    assert!(taken < returned);
    assert_eq!(events[returned].2["note"], "moved the pointer");
    // The run is over: the desktop is the person's again.
    viewer.send(pointer_event(70, 80)).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while mouse_location(sandbox_id)? != (70, 80) {
        if Instant::now() > deadline {
            bail!("the pointer is not the person's after the run ended");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
