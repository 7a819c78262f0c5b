//! Pause and resume (issue 26), one run, both arms alternating:
//!
//! - **orchestrator**: `POST /v1/sandboxes/{id}/pause` until its 200; `POST .../resume` until
//!   its 200 (the sandbox thawed and its sandboxd answering); and, on a sandbox created with
//!   `auto_resume`, a call through the API proxy to a paused sandbox until it answers (the
//!   thaw included).
//! - **floor**: the same image started with `docker run`, then `docker pause`, and
//!   `docker unpause` until its `/readyz` answers 200: what the platform itself costs.
//!
//! Each resume follows a pause held for `--hold-ms` (default 1000). E2B reports resuming a
//! paused sandbox in about a second.
//!
//! `cargo run --release -p agentbox-bench -- pause --iterations 20`

use std::time::{Duration, Instant};

use agentbox_bench::{
    ADMIN_KEY, OrchestratorServer as Server, Stats, arg, docker, ensure_network,
    orchestrator_binary, print_header, print_row, start_sandbox, wait_ready,
};
use anyhow::{Context, bail};
use serde_json::{Value, json};

const FLOOR_IP: &str = "172.31.250.12";
const FLOOR_KEY: &str = "floor-key-0123456789";

async fn post(client: &reqwest::Client, url: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response = client.post(url).bearer_auth(ADMIN_KEY).send().await?;
    let took = started.elapsed();
    let status = response.status();
    if status != 200 {
        bail!("{url} answered {status}: {}", response.text().await?);
    }
    Ok(took)
}

async fn create(client: &reqwest::Client, server: &Server, body: Value) -> anyhow::Result<String> {
    let response = client
        .post(format!("{}/v1/sandboxes", server.url))
        .bearer_auth(ADMIN_KEY)
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    let answer: Value = response.json().await?;
    if status != 201 {
        bail!("create answered {status}: {answer}");
    }
    Ok(answer["id"].as_str().context("id")?.to_string())
}

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 20);
    let hold = Duration::from_millis(arg("--hold-ms", 1000));
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    ensure_network()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let poll = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()?;
    println!(
        "pause benchmark: image {image}, {iterations} pauses and resumes per arm, each held {} ms",
        hold.as_millis()
    );
    let server = Server::start(&orchestrator_binary(), &image, 0, "pause", &[])?;
    let plain = create(&client, &server, json!({})).await?;
    let auto = create(&client, &server, json!({"auto_resume": true})).await?;
    let floor = format!("agentbox-bench-pause-floor-{}", std::process::id());
    start_sandbox(&floor, FLOOR_IP, FLOOR_KEY, &image)?;
    let outcome = async {
        wait_ready(&poll, FLOOR_IP, FLOOR_KEY, Instant::now() + Duration::from_secs(120)).await?;
        let sandbox = |id: &str, what: &str| format!("{}/v1/sandboxes/{id}/{what}", server.url);
        let (mut pauses, mut resumes, mut auto_calls) = (Vec::new(), Vec::new(), Vec::new());
        let (mut floor_pauses, mut floor_resumes) = (Vec::new(), Vec::new());
        for i in 0..=iterations {
            for arm in 0..2 {
                if (arm == 0) == (i % 2 == 0) {
                    let paused = post(&client, &sandbox(&plain, "pause")).await?;
                    tokio::time::sleep(hold).await;
                    let resumed = post(&client, &sandbox(&plain, "resume")).await?;
                    post(&client, &sandbox(&auto, "pause")).await?;
                    tokio::time::sleep(hold).await;
                    let started = Instant::now();
                    let answer = client
                        .get(sandbox(&auto, "api/v1/sandbox"))
                        .bearer_auth(ADMIN_KEY)
                        .send()
                        .await?;
                    let called = started.elapsed();
                    if answer.status() != 200 {
                        bail!("the auto-resumed call answered {}", answer.status());
                    }
                    if i > 0 {
                        pauses.push(paused);
                        resumes.push(resumed);
                        auto_calls.push(called);
                    }
                } else {
                    let started = Instant::now();
                    docker(&["pause", &floor])?;
                    let paused = started.elapsed();
                    tokio::time::sleep(hold).await;
                    let started = Instant::now();
                    docker(&["unpause", &floor])?;
                    wait_ready(&poll, FLOOR_IP, FLOOR_KEY, started + Duration::from_secs(60))
                        .await?;
                    if i > 0 {
                        floor_pauses.push(paused);
                        floor_resumes.push(started.elapsed());
                    }
                }
            }
        }
        println!();
        print_header();
        let rows = [
            ("POST /pause -> 200", &pauses),
            ("docker pause (floor)", &floor_pauses),
            ("POST /resume -> 200, sandboxd answering", &resumes),
            ("docker unpause -> /readyz 200 (floor)", &floor_resumes),
            ("call to a paused auto_resume sandbox", &auto_calls),
        ];
        for (name, samples) in rows {
            print_row(name, &Stats::of(samples));
        }
        let ratio = Stats::of(&resumes).median / Stats::of(&floor_resumes).median;
        println!(
            "\nresume median ratio orchestrator/floor: {ratio:.2}; auto-resumed call median {:.1} ms",
            Stats::of(&auto_calls).median
        );
        Ok(())
    }
    .await;
    let _ = docker(&["rm", "-f", &floor]);
    drop(server);
    outcome
}
