//! Orchestrator benchmark, one run, four measurements:
//!
//! 1. **cold create**: `POST /v1/sandboxes` (no pool) until the 201 (the sandbox is ready),
//!    against the floor: `docker run` of the same image until `/readyz` answers 200 (as in the
//!    startup benchmark). Alternated, so drift hits both arms alike. Goal: median ratio <= 1.25.
//! 2. **warm-pool claim**: `POST /v1/sandboxes` with a ready pool member waiting (the pool is
//!    refilled before each claim). Goal: median <= 20 ms, p99 <= 50 ms.
//! 3. **idle memory** with 20 sandboxes running (`docker stats`, page cache excluded). Goal:
//!    <= 200 MiB each; the total is reported.
//! 4. **control plane**: `GET /v1/sandboxes` from 200 concurrent clients on loopback (with the
//!    20 sandboxes listed): p50, p99, requests per second.
//!
//! `cargo build --release -p orchestrator && cargo run --release -p agentbox-bench -- orchestrator --iterations 10`

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentbox_bench::{
    ADMIN_KEY, NETWORK, OrchestratorServer as Server, SANDBOX_LIMITS, Stats, arg, docker,
    ensure_network, metric, orchestrator_binary, parse_mib, print_header, print_row,
};
use anyhow::bail;

const FLOOR_IP: &str = "172.31.250.11";

async fn create(client: &reqwest::Client, server: &Server) -> anyhow::Result<(Duration, String)> {
    agentbox_bench::create_sandbox(client, server).await
}

async fn delete(client: &reqwest::Client, server: &Server, id: &str) -> anyhow::Result<()> {
    client
        .delete(format!("{}/v1/sandboxes/{id}", server.url))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await?;
    Ok(())
}

// The baseline's `docker run` is the timed start itself: tokio waits for that child.
#[allow(clippy::disallowed_methods)]
async fn floor_once(client: &reqwest::Client, image: &str) -> anyhow::Result<Duration> {
    let name = format!("agentbox-bench-floor-{}", std::process::id());
    let _ = docker(&["rm", "-f", &name]);
    let started = Instant::now();
    let mut run = tokio::process::Command::new("docker")
        .args([
            "run",
            "-d",
            "--rm",
            "--name",
            &name,
            "--network",
            NETWORK,
            "--ip",
            FLOOR_IP,
            "-e",
            "SANDBOX_API_KEY=floor-key-0123456789",
        ])
        // The same limits and hardening the orchestrator gives each sandbox by default (its
        // `serve` flags), so both arms boot with one CPU: the floor is "docker run per task"
        // done as the README recommends, not an unlimited container.
        .args(SANDBOX_LIMITS)
        .arg(image)
        .stdout(Stdio::null())
        .spawn()?;
    let url = format!("http://{FLOOR_IP}:8080/readyz");
    let took = loop {
        let response = client
            .get(&url)
            .bearer_auth("floor-key-0123456789")
            .send()
            .await;
        if matches!(&response, Ok(r) if r.status() == 200) {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = docker(&["rm", "-f", &name]);
            bail!("floor container not ready after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    run.wait().await?;
    docker(&["rm", "-f", &name])?;
    Ok(took)
}

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 10);
    let claims: usize = arg("--claims", 20);
    let running: usize = arg("--running", 20);
    let clients: usize = arg("--clients", 200);
    let per_client: usize = arg("--requests-per-client", 25);
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    let binary = orchestrator_binary();
    ensure_network()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let poll = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()?;
    println!(
        "orchestrator benchmark: image {image}, {iterations} cold creates per arm, {claims} pool claims, {running} running, {clients} clients x {per_client} GETs"
    );

    // 1. Cold create vs docker run floor.
    let server = Server::start(&binary, &image, 0, "cold", &[])?;
    let mut cold = Vec::new();
    let mut floor = Vec::new();
    for i in 0..=iterations {
        let order_cold_first = i % 2 == 0;
        for arm in 0..2 {
            let is_cold = (arm == 0) == order_cold_first;
            if is_cold {
                let (took, id) = create(&client, &server).await?;
                delete(&client, &server, &id).await?;
                if i > 0 {
                    cold.push(took);
                }
            } else {
                let took = floor_once(&poll, &image).await?;
                if i > 0 {
                    floor.push(took);
                }
            }
        }
        if i > 0 {
            eprintln!(
                "  iteration {i}: orchestrator {:.0} ms, docker run floor {:.0} ms",
                cold.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
                floor.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0)
            );
        }
    }

    // 3 and 4 use the same server: 20 running sandboxes.
    eprintln!("  starting {running} sandboxes");
    let creates = (0..running).map(|_| create(&client, &server));
    let mut ids = Vec::new();
    for result in futures_util::future::join_all(creates).await {
        ids.push(result?.1);
    }
    tokio::time::sleep(Duration::from_secs(15)).await; // let start-up work settle
    let containers = ids
        .iter()
        .map(|id| agentbox_bench::sandbox_container(id))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let stats = docker(&[
        "stats",
        "--no-stream",
        "--no-trunc",
        "--format",
        "{{.ID}}\t{{.MemUsage}}",
    ])?;
    let mut per_sandbox: Vec<f64> = stats
        .lines()
        .filter(|l| {
            containers
                .iter()
                .any(|container| l.starts_with(&format!("{container}\t")))
        })
        .filter_map(|l| parse_mib(l.split('\t').nth(1)?))
        .collect();
    per_sandbox.sort_by(|a, b| a.total_cmp(b));

    eprintln!("  control plane: {clients} clients");
    let url = Arc::new(format!("{}/v1/sandboxes", server.url));
    let list_client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .timeout(Duration::from_secs(60))
        .build()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let url = url.clone();
        let client = list_client.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let t = Instant::now();
                let response = client
                    .get(url.as_str())
                    .bearer_auth(ADMIN_KEY)
                    .send()
                    .await?;
                let status = response.status();
                let _ = response.bytes().await?;
                if status != 200 {
                    bail!("GET /v1/sandboxes answered {status}");
                }
                samples.push(t.elapsed());
            }
            Ok::<_, anyhow::Error>(samples)
        }));
    }
    let mut list_samples = Vec::new();
    for task in tasks {
        list_samples.extend(task.await??);
    }
    let wall = started.elapsed();
    for id in &ids {
        delete(&client, &server, id).await?;
    }
    drop(server);

    // 2. Warm-pool claims.
    let server = Server::start(&binary, &image, 2, "pool", &[])?;
    let mut claim_samples = Vec::new();
    for i in 0..claims {
        let deadline = Instant::now() + Duration::from_secs(300);
        while metric(&client, &server, "agentbox_pool_ready").await < 2.0 {
            if Instant::now() > deadline {
                bail!("the pool did not refill");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (took, id) = create(&client, &server).await?;
        claim_samples.push(took);
        delete(&client, &server, &id).await?;
        eprintln!("  claim {}: {:.1} ms", i + 1, took.as_secs_f64() * 1000.0);
    }
    drop(server);

    let c = Stats::of(&cold);
    let f = Stats::of(&floor);
    let w = Stats::of(&claim_samples);
    let l = Stats::of(&list_samples);
    println!();
    print_header();
    print_row("POST /v1/sandboxes -> 201 ready (cold)", &c);
    print_row("docker run --cpus 1 ... -> /readyz (floor)", &f);
    print_row("POST /v1/sandboxes (warm-pool claim)", &w);
    print_row(
        &format!("GET /v1/sandboxes, {clients} concurrent clients"),
        &l,
    );
    println!();
    println!(
        "cold create median ratio orchestrator/floor: {:.3} (goal <= 1.25)",
        c.median / f.median
    );
    println!(
        "warm-pool claim: median {:.1} ms (goal <= 20), p99 {:.1} ms (goal <= 50)",
        w.median, w.p99
    );
    if !per_sandbox.is_empty() {
        let total: f64 = per_sandbox.iter().sum();
        println!(
            "idle memory, {} sandboxes running: median {:.0} MiB, max {:.0} MiB per sandbox (goal <= 200), total {:.0} MiB",
            per_sandbox.len(),
            per_sandbox[per_sandbox.len() / 2],
            per_sandbox[per_sandbox.len() - 1],
            total
        );
    }
    println!(
        "GET /v1/sandboxes ({} listed), {clients} clients: p50 {:.1} ms, p99 {:.1} ms, {:.0} requests/s",
        ids.len(),
        l.median,
        l.p99,
        list_samples.len() as f64 / wall.as_secs_f64()
    );
    Ok(())
}
