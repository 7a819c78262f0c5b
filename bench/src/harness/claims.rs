//! Warm-pool claim latency over many claims (issue 28 §4): `POST /v1/sandboxes` answered from
//! the warm pool, at least 1,000 times per arm, spread over time: bursts of claims a few tens of
//! milliseconds apart (each claim sets off its refill, which runs while the next claims are
//! made, as on a busy server), then the claimed sandboxes deleted and the pool refilled.
//!
//! Two arms in one run, bursts alternating so drift hits both alike: the orchestrator binary
//! under test and a baseline binary (`--baseline-binary`, e.g. a build of the commit before a
//! change). Each claim's own steps (quota lock, count, the member's row written) are read from
//! the orchestrator's log, so the slow claims say where they waited. Background load: spinning
//! threads (`--load-threads`, default 1: one of two cores busy, as during a CI run). A burst
//! starts once every arm's pool is full (`--overlap-arms`: only its own arm's), so the other
//! arm's refill is not part of the load.
//!
//! Pool members run a lean programs file (Xvfb only): what a member runs does not change the
//! claim path, and refilling 1,000 full desktops would take most of an hour.
//!
//! `cargo run --release -p agentbox-bench -- claims --claims 1000 --baseline-binary /tmp/orchestrator-old`
//! (`--current-data-root /dev/shm` keeps the current arm's database on a tmpfs).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentbox_bench::{
    ADMIN_KEY, OrchestratorServer as Server, Stats, arg, docker, ensure_network, metric,
    orchestrator_binary,
};
use anyhow::{Context, bail};
use serde_json::Value;

/// Where sandboxd reads its programs in the image.
const PROGRAMS_FILE: &str = "/etc/sandboxd/programs.toml";

/// One arm: a binary, its server, and what its claims measured.
struct Arm {
    name: String,
    server: Server,
    latencies: Vec<Duration>,
}

/// The image `image` with only its supervisor settings and Xvfb in the programs file, built as
/// `<image>-claims-bench`.
fn lean_image(image: &str) -> anyhow::Result<String> {
    let programs = docker(&["run", "--rm", "--entrypoint", "cat", image, PROGRAMS_FILE])?;
    let mut sections = programs.split("[[program]]");
    let head = sections.next().context("a programs file")?;
    let xvfb = sections
        .find(|section| section.contains("name = \"xvfb\""))
        .context("no xvfb program in the image's programs file")?;
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("programs.toml"),
        format!("{head}[[program]]{xvfb}"),
    )?;
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!("FROM {image}\nCOPY programs.toml {PROGRAMS_FILE}\n"),
    )?;
    let tag = format!("{image}-claims-bench");
    docker(&["build", "-q", "-t", &tag, &dir.path().display().to_string()])?;
    Ok(tag)
}

/// Waits until each of `servers` has a full pool.
async fn wait_full(
    client: &reqwest::Client,
    servers: &[(&str, &Server)],
    pool: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    for (name, server) in servers {
        while metric(client, server, "agentbox_pool_ready").await < pool as f64 {
            if Instant::now() > deadline {
                bail!("{name}: the pool did not refill");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// One burst on `arm` (whose pool is full): makes `count` claims `gap` apart, deletes them.
async fn burst(
    client: &reqwest::Client,
    arm: &mut Arm,
    count: usize,
    gap: Duration,
) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for _ in 0..count {
        let (took, id) = agentbox_bench::create_sandbox(client, &arm.server)
            .await
            .with_context(|| arm.name.to_string())?;
        arm.latencies.push(took);
        ids.push(id);
        tokio::time::sleep(gap).await;
    }
    let deletes = ids.iter().map(|id| {
        client
            .delete(format!("{}/v1/sandboxes/{id}", arm.server.url))
            .bearer_auth(ADMIN_KEY)
            .send()
    });
    for result in futures_util::future::join_all(deletes).await {
        result?;
    }
    Ok(())
}

/// The claim step times (ms) the server logged: (quota wait, count, claim write, total).
fn steps(server: &Server) -> Vec<[f64; 4]> {
    server
        .log_lines("sandbox claimed from the warm pool")
        .iter()
        .filter_map(|line| {
            let value: Value = serde_json::from_str(line).ok()?;
            let fields = value.get("fields").unwrap_or(&value);
            let get = |name: &str| fields.get(name).and_then(Value::as_f64);
            Some([
                get("quota_wait_ms")?,
                // Counted by the claim's own write since issue 28 (no step of its own).
                get("count_ms").unwrap_or(0.0),
                get("claim_ms")?,
                get("total_ms")?,
            ])
        })
        .collect()
}

/// The claim write's two parts the server logged (ms): (waiting for the writer, the statement).
fn write_parts(server: &Server) -> Vec<[f64; 2]> {
    server
        .log_lines("claim written")
        .iter()
        .filter_map(|line| {
            let value: Value = serde_json::from_str(line).ok()?;
            let fields = value.get("fields").unwrap_or(&value);
            let get = |name: &str| fields.get(name).and_then(Value::as_f64);
            Some([get("writer_wait_ms")?, get("write_ms")?])
        })
        .collect()
}

/// A table row with the tail: n, p50, p90, p99, max.
fn row(name: &str, stats: &Stats) {
    println!(
        "| {name:<48} | {:>5} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2} |",
        stats.n, stats.median, stats.p90, stats.p99, stats.max
    );
}

fn header() {
    println!(
        "| {:<48} | {:>5} | {:>7} | {:>7} | {:>7} | {:>7} |",
        "what (ms)", "n", "p50", "p90", "p99", "max"
    );
    println!(
        "|{:-<50}|{:-<7}|{:-<9}|{:-<9}|{:-<9}|{:-<9}|",
        "", "", "", "", "", ""
    );
}

fn ms(samples: &[f64]) -> Vec<Duration> {
    samples
        .iter()
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .collect()
}

pub async fn main() -> anyhow::Result<()> {
    let claims: usize = arg("--claims", 1000);
    let pool: usize = arg("--pool", 10);
    let gap_ms: u64 = arg("--gap-ms", 50);
    let load_threads: usize = arg("--load-threads", 1);
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    let baseline: String = arg("--baseline-binary", String::new());
    // Where the current arm keeps its data (default: the temp dir, as the baseline): a tmpfs
    // here tells the store's disk from everything else.
    let current_data_root: String = arg("--current-data-root", String::new());
    let overlap_arms = std::env::args().any(|a| a == "--overlap-arms");
    ensure_network()?;
    let lean = lean_image(&image)?;
    println!(
        "claims benchmark: {claims} warm-pool claims per arm in bursts of {pool} ({gap_ms} ms apart), \
         pool of {pool} members of {lean}, {load_threads} spinning thread(s) of background load"
    );
    let mut binaries = vec![("current".to_string(), orchestrator_binary())];
    if !baseline.is_empty() {
        binaries.insert(0, ("baseline".to_string(), baseline));
    }
    // The default per-key quota stays on (its count is a step of every claim): a burst's
    // claims are deleted before the next burst.
    let extra = vec!["--max-concurrent-starts".to_string(), pool.to_string()];
    let mut arms = Vec::new();
    for (name, binary) in binaries {
        let root = if name == "current" && !current_data_root.is_empty() {
            std::path::PathBuf::from(&current_data_root)
        } else {
            std::env::temp_dir()
        };
        let server = Server::start_in(
            &binary,
            &lean,
            pool,
            &format!("claims-{name}"),
            &extra,
            &root,
        )?;
        arms.push(Arm {
            name,
            server,
            latencies: Vec::new(),
        });
    }

    let spinning = Arc::new(AtomicBool::new(true));
    let load: Vec<_> = (0..load_threads)
        .map(|_| {
            let spinning = spinning.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while spinning.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let gap = Duration::from_millis(gap_ms);
    let started = Instant::now();
    while arms.iter().any(|arm| arm.latencies.len() < claims) {
        for i in 0..arms.len() {
            let left = claims.saturating_sub(arms[i].latencies.len());
            if left == 0 {
                continue;
            }
            // Each arm is one orchestrator on this machine: by default a burst starts once every
            // arm's pool is full, so one arm's refill (ten container starts after its burst's
            // deletes) does not run under the other arm's claims, which no refill policy of a
            // single orchestrator could see or avoid. `--overlap-arms` keeps the earlier shape
            // (only the burst's own arm waited), for comparison with older figures.
            let waited: Vec<(&str, &Server)> = if overlap_arms {
                vec![(arms[i].name.as_str(), &arms[i].server)]
            } else {
                arms.iter().map(|a| (a.name.as_str(), &a.server)).collect()
            };
            wait_full(&client, &waited, pool).await?;
            burst(&client, &mut arms[i], left.min(pool), gap).await?;
        }
        let done: usize = arms.iter().map(|arm| arm.latencies.len()).sum();
        eprintln!(
            "  {done} claims in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    spinning.store(false, Ordering::Relaxed);
    for thread in load {
        let _ = thread.join();
    }

    println!();
    header();
    for arm in &arms {
        row(
            &format!("POST /v1/sandboxes, warm-pool claim ({})", arm.name),
            &Stats::of(&arm.latencies),
        );
    }
    println!();
    for arm in &arms {
        let logged = steps(&arm.server);
        if logged.is_empty() {
            println!("{}: the orchestrator logged no claim steps", arm.name);
            continue;
        }
        println!(
            "{}: steps inside the orchestrator ({} claims logged)",
            arm.name,
            logged.len()
        );
        for (i, step) in [
            "quota lock wait",
            "count live sandboxes",
            "claim (row written)",
            "total",
        ]
        .iter()
        .enumerate()
        {
            let samples: Vec<f64> = logged.iter().map(|s| s[i]).collect();
            row(&format!("  {step}"), &Stats::of(&ms(&samples)));
        }
        // The write's own two parts (servers that log them).
        let parts = write_parts(&arm.server);
        if !parts.is_empty() {
            for (i, part) in [
                "    of which: waiting for the writer",
                "    of which: the statement",
            ]
            .iter()
            .enumerate()
            {
                let samples: Vec<f64> = parts.iter().map(|p| p[i]).collect();
                row(part, &Stats::of(&ms(&samples)));
            }
        }
        // The slowest claims, step by step.
        let mut slow = logged.clone();
        slow.sort_by(|a, b| b[3].total_cmp(&a[3]));
        for s in slow.iter().take(5) {
            println!(
                "  slow claim: total {:.1} ms = quota wait {:.1} + count {:.1} + claim {:.1}",
                s[3], s[0], s[1], s[2]
            );
        }
    }
    if let [baseline, current] = &arms[..] {
        let (b, c) = (
            Stats::of(&baseline.latencies),
            Stats::of(&current.latencies),
        );
        println!();
        println!(
            "claim p99 {:.1} ms (baseline {:.1} ms, ratio {:.2}); median {:.1} ms (baseline {:.1} ms); goal p99 < 10 ms",
            c.p99,
            b.p99,
            c.p99 / b.p99,
            c.median,
            b.median
        );
    }
    Ok(())
}
