//! Creates and deletes by the hundred over two orchestrator replicas on one Postgres (issue
//! 25's concurrency check, too heavy for the suite, whose two-replica test does it with 16):
//! `--clients` clients at once, each creating a sandbox through one replica (client `i`
//! through replica `i % 2`) and deleting it through the other; a create refused for capacity
//! (503 with `Retry-After`) or for the key's quota (429: 20 live sandboxes per key, counted
//! over both replicas) is asked again after a wait. Then, with both replicas still
//! running: every create answered 201 named a sandbox no other create got, every delete
//! answered 204, the database lists none of this run's sandboxes as live and the engine has
//! no container of the instance left.
//!
//! Sandboxes live from their create's answer to their delete's, and the quota keeps at most 20
//! alive or starting at once, whatever the number of clients. While the clients run, the
//! harness counts the instance's containers every 200 ms: the most seen is reported (the
//! quota held across replicas if it never passes 20).
//!
//! `agentbox-bench churn --clients 200`

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentbox_bench::{ADMIN_KEY, OrchestratorServer as Server, Stats, arg, docker, percentile};
use agentbox_tests::postgres::Postgres;
use anyhow::{Context, bail, ensure};

/// One client's create and delete.
struct Churned {
    id: String,
    create: Duration,
    delete: Duration,
    /// Creates refused for capacity before the one that made the sandbox.
    refused: usize,
}

async fn churn(
    http: reqwest::Client,
    create_at: String,
    delete_at: String,
) -> anyhow::Result<Churned> {
    let asked = Instant::now();
    let mut refused = 0;
    let id = loop {
        let response = http
            .post(format!("{create_at}/v1/sandboxes"))
            .bearer_auth(ADMIN_KEY)
            .json(&serde_json::json!({}))
            .send()
            .await?;
        let status = response.status().as_u16();
        let retry = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        match (status, retry) {
            (201, _) => break body["id"].as_str().context("id")?.to_string(),
            (503, Some(secs)) if refused < 1000 => {
                refused += 1;
                tokio::time::sleep(Duration::from_secs(secs.clamp(1, 10))).await;
            }
            // The key's quota (20 live sandboxes, counted over both replicas): asked again
            // once one of the others may have been deleted.
            (429, _) if body["error"]["code"] == "quota_exceeded" && refused < 1000 => {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            _ => bail!("create answered {status}: {body}"),
        }
    };
    let create = asked.elapsed();
    let asked = Instant::now();
    let response = http
        .delete(format!("{delete_at}/v1/sandboxes/{id}"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await?;
    let status = response.status().as_u16();
    ensure!(status == 204, "delete {id} answered {status}");
    Ok(Churned {
        id,
        create,
        delete: asked.elapsed(),
        refused,
    })
}

pub async fn main() -> anyhow::Result<()> {
    let clients: usize = arg("--clients", 200);
    let binary = agentbox_bench::orchestrator_binary();
    let image = std::env::var("AGENTBOX_SANDBOX_IMAGE")
        .unwrap_or_else(|_| "agentbox/sandbox:latest".into());
    eprintln!(
        "churn: {clients} clients, each a create through one replica and a delete through the other"
    );

    let postgres = Postgres::start()?;
    postgres.wait_accepting().await?;
    let first = Server::start_replica(&binary, &image, 0, &postgres.url(), "churn-1", None)?;
    let second =
        Server::start_replica(&binary, &image, 0, &postgres.url(), "churn-2", Some(&first))?;
    let urls = Arc::new([first.url.clone(), second.url.clone()]);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(900))
        .build()?;

    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (http, urls) = (http.clone(), urls.clone());
            tokio::spawn(async move {
                churn(http, urls[i % 2].clone(), urls[(i + 1) % 2].clone()).await
            })
        })
        .collect();
    let instance_filter = format!("label=agentbox.instance={}", first.instance);
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (watching, filter) = (watching.clone(), instance_filter.clone());
        tokio::task::spawn_blocking(move || {
            let mut most = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(list) = docker(&["ps", "-q", "--filter", &filter]) {
                    most = most.max(list.lines().count());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            most
        })
    };
    let mut done = Vec::with_capacity(clients);
    let mut failures = Vec::new();
    for task in tasks {
        match task.await? {
            Ok(churned) => done.push(churned),
            Err(error) => failures.push(format!("{error:#}")),
        }
    }
    let wall = started.elapsed();
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.await?;

    // The checks, with both replicas still up.
    let ids: BTreeSet<&str> = done.iter().map(|c| c.id.as_str()).collect();
    let list: serde_json::Value = http
        .get(format!("{}/v1/sandboxes", first.url))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await?
        .json()
        .await?;
    let live_rows = list["sandboxes"].as_array().map_or(0, Vec::len);
    let containers = docker(&["ps", "-aq", "--filter", &instance_filter])?
        .lines()
        .count();
    let creates: Vec<Duration> = done.iter().map(|c| c.create).collect();
    let deletes: Vec<Duration> = done.iter().map(|c| c.delete).collect();
    let (created, deleted) = (Stats::of(&creates), Stats::of(&deletes));

    println!();
    println!(
        "| clients | created | distinct ids | deleted | failed | refused, asked again | most containers at once | live rows after | containers after | wall s | creates/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {clients} | {} | {} | {} | {} | {} | {most} | {live_rows} | {containers} | {:.1} | {:.2} |",
        done.len(),
        ids.len(),
        done.len(),
        failures.len(),
        done.iter().map(|c| c.refused).sum::<usize>(),
        wall.as_secs_f64(),
        done.len() as f64 / wall.as_secs_f64()
    );
    println!(
        "\ncreate (asked to answered, waits included): median {:.0} ms, p99 {:.0} ms; delete: median {:.0} ms, p99 {:.0} ms",
        created.median,
        percentile(&creates, 0.99),
        deleted.median,
        percentile(&deletes, 0.99)
    );
    for failure in failures.iter().take(5) {
        println!("failure: {failure}");
    }
    drop(second);
    drop(first);
    ensure!(
        failures.is_empty() && ids.len() == clients && live_rows == 0 && containers == 0,
        "the replicas and the engine disagree: {} failures, {} distinct sandboxes of {clients}, {live_rows} live rows, {containers} containers left",
        failures.len(),
        ids.len()
    );
    Ok(())
}
