//! Several orchestrator replicas on one Postgres (issue 25): the same control-plane load from
//! `--clients` concurrent clients against one replica and against two (the clients spread
//! over both), in one run, the two arms alternated round by round. Both replicas, Postgres and
//! the clients share this machine, so the ratio says what a second process buys on the same
//! cores (the database's work is the same in both arms), not what a second machine would.
//!
//! Each client repeats `--requests` times: list the sandboxes (`GET /v1/sandboxes`), read one
//! (`GET /v1/sandboxes/{id}`) and mint a viewer token for it (`POST .../tokens`, a write),
//! over `--sandboxes` running sandboxes. Reported per arm: requests per second and the latency
//! of each request (median, p99); then the ratio of the throughputs.
//!
//! `agentbox-bench replicas --clients 200 --requests 10 --rounds 3 --sandboxes 4`

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentbox_bench::{
    ADMIN_KEY, OrchestratorServer as Server, Stats, arg, orchestrator_binary, percentile,
};
use agentbox_tests::postgres::Postgres;
use anyhow::{Context, bail};

/// One arm's round: every client's requests, and how long the round took.
struct Round {
    samples: Vec<Duration>,
    wall: Duration,
}

async fn round(
    http: &reqwest::Client,
    urls: &[String],
    sandboxes: &[String],
    clients: usize,
    requests: usize,
) -> anyhow::Result<Round> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let http = http.clone();
        let base = urls[client % urls.len()].clone();
        let sandbox = sandboxes[client % sandboxes.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(requests * 3);
            for _ in 0..requests {
                for (method, path, body) in [
                    (reqwest::Method::GET, "/v1/sandboxes".to_string(), None),
                    (
                        reqwest::Method::GET,
                        format!("/v1/sandboxes/{sandbox}"),
                        None,
                    ),
                    (
                        reqwest::Method::POST,
                        format!("/v1/sandboxes/{sandbox}/tokens"),
                        Some(serde_json::json!({"scope": "view", "ttl_secs": 60})),
                    ),
                ] {
                    let asked = Instant::now();
                    let mut request = http
                        .request(method, format!("{base}{path}"))
                        .bearer_auth(ADMIN_KEY);
                    if let Some(body) = body {
                        request = request.json(&body);
                    }
                    let response = request.send().await?;
                    let status = response.status();
                    let _ = response.bytes().await?;
                    if !status.is_success() {
                        bail!("{path} answered {status}");
                    }
                    samples.push(asked.elapsed());
                }
            }
            Ok::<_, anyhow::Error>(samples)
        }));
    }
    let mut samples = Vec::with_capacity(clients * requests * 3);
    for task in tasks {
        samples.extend(task.await??);
    }
    Ok(Round {
        samples,
        wall: started.elapsed(),
    })
}

pub async fn main() -> anyhow::Result<()> {
    let clients: usize = arg("--clients", 200);
    let requests: usize = arg("--requests", 10);
    let rounds: usize = arg("--rounds", 3);
    let sandbox_count: usize = arg("--sandboxes", 4);
    let binary = orchestrator_binary();
    let image = std::env::var("AGENTBOX_SANDBOX_IMAGE")
        .unwrap_or_else(|_| "agentbox/sandbox:latest".into());
    eprintln!(
        "replicas benchmark: {clients} clients x {requests} x 3 requests, {rounds} rounds per arm, {sandbox_count} sandboxes"
    );

    let postgres = Postgres::start()?;
    postgres.wait_accepting().await?;
    let first = Server::start_replica(&binary, &image, 0, &postgres.url(), "rep-1", None)?;
    let second = Server::start_replica(&binary, &image, 0, &postgres.url(), "rep-2", Some(&first))?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut sandboxes = Vec::new();
    for _ in 0..sandbox_count.max(1) {
        let (_, id) = agentbox_bench::create_sandbox(&http, &first).await?;
        sandboxes.push(id);
    }
    let sandboxes = Arc::new(sandboxes);

    let one = [first.url.clone()];
    let two = [first.url.clone(), second.url.clone()];
    let mut arms: [(&str, Vec<Duration>, Duration, usize); 2] = [
        ("one replica", Vec::new(), Duration::ZERO, 0),
        ("two replicas", Vec::new(), Duration::ZERO, 0),
    ];
    for r in 0..rounds.max(1) {
        for (arm, urls) in [(0, &one[..]), (1, &two[..])] {
            let done = round(&http, urls, &sandboxes, clients, requests).await?;
            eprintln!(
                "  round {} {}: {:.0} requests/s",
                r + 1,
                arms[arm].0,
                done.samples.len() as f64 / done.wall.as_secs_f64()
            );
            arms[arm].3 += done.samples.len();
            arms[arm].1.extend(done.samples);
            arms[arm].2 += done.wall;
        }
    }

    println!();
    println!(
        "| arm | requests | requests/s | median ms | p99 ms | max ms |\n|---|---|---|---|---|---|"
    );
    let mut throughput = [0.0; 2];
    for (i, (name, samples, wall, count)) in arms.iter().enumerate() {
        let stats = Stats::of(samples);
        throughput[i] = *count as f64 / wall.as_secs_f64();
        println!(
            "| {name} | {count} | {:.0} | {:.1} | {:.1} | {:.1} |",
            throughput[i],
            stats.median,
            percentile(samples, 0.99),
            stats.max
        );
    }
    println!(
        "\ntwo replicas / one replica, requests per second: {:.2} (same machine: {} cores)",
        throughput[1] / throughput[0],
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for id in sandboxes.iter() {
        let _ = http
            .delete(format!("{}/v1/sandboxes/{id}", second.url))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .context("deleting a sandbox")?;
    }
    drop(second);
    drop(first);
    Ok(())
}
