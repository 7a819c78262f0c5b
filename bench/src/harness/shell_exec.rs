//! Shell exec benchmark: `POST /v1/shell/exec {"command": "echo hi"}` with shells forked by
//! sandboxd's zygote (the default) against the same image with `SANDBOXD_SHELL_ZYGOTE=false`
//! (every ready shell started from scratch, as before), and `docker exec <id> echo hi`, in one
//! run.
//!
//! Two containers of the same image run side by side; each is measured in turn, in rounds, so
//! that drift in the machine's load reaches both. Three patterns, over one keep-alive
//! connection as an SDK client would use:
//! - back to back, a new session each call (what the capabilities benchmark measures);
//! - spaced 100 ms apart, a new session each call (an agent thinking between commands);
//! - back to back in one session (its state carried from command to command).
//!
//! `cargo run --release -p agentbox-bench -- shell-exec --iterations 50 --rounds 2`

use std::time::{Duration, Instant};

use agentbox_bench::{
    Stats, arg, docker, ensure_network, print_header, print_row, start_sandbox_with, wait_ready,
};
use anyhow::bail;

const KEY: &str = "bench-key-0123456789";
const FORKED: (&str, &str) = ("172.31.250.21", "forked by the zygote");
const FRESH: (&str, &str) = ("172.31.250.22", "started from scratch");

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 50);
    let rounds: usize = arg("--rounds", 2);
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    ensure_network()?;
    let names = [
        format!("agentbox-bench-exec-forked-{}", std::process::id()),
        format!("agentbox-bench-exec-fresh-{}", std::process::id()),
    ];
    start_sandbox_with(&names[0], FORKED.0, KEY, &image, &[])?;
    start_sandbox_with(
        &names[1],
        FRESH.0,
        KEY,
        &image,
        &["SANDBOXD_SHELL_ZYGOTE=false"],
    )?;
    let result = run(&names, iterations, rounds).await;
    for name in &names {
        let _ = docker(&["rm", "-f", name]);
    }
    result
}

#[derive(Clone, Copy)]
enum Pattern {
    BackToBack,
    Spaced,
    OneSession,
}

impl Pattern {
    fn label(self) -> &'static str {
        match self {
            Pattern::BackToBack => "back to back",
            Pattern::Spaced => "100 ms apart",
            Pattern::OneSession => "one session",
        }
    }
}

async fn run(names: &[String; 2], iterations: usize, rounds: usize) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(1)
        .build()?;
    let sandboxes = [FORKED, FRESH];
    for (ip, _) in sandboxes {
        wait_ready(&client, ip, KEY, Instant::now() + Duration::from_secs(120)).await?;
    }
    // Let the desktops settle before timing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "shell exec benchmark: `echo hi`, {iterations} calls x {rounds} rounds per row, two containers of one image"
    );
    let patterns = [Pattern::BackToBack, Pattern::Spaced, Pattern::OneSession];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); patterns.len() * sandboxes.len()];
    for round in 0..rounds {
        for (p, pattern) in patterns.iter().enumerate() {
            for (s, (ip, _)) in sandboxes.iter().enumerate() {
                let session = format!("bench-{round}-{p}");
                let times = time_execs(&client, ip, *pattern, &session, iterations).await?;
                samples[p * sandboxes.len() + s].extend(times);
            }
        }
    }
    let mut docker_exec = Vec::new();
    for i in 0..=iterations.min(20) {
        let started = Instant::now();
        let out = docker(&["exec", &names[0], "echo", "hi"])?;
        if out != "hi" {
            bail!("docker exec printed {out:?}");
        }
        if i > 0 {
            docker_exec.push(started.elapsed());
        }
    }
    println!();
    print_header();
    let mut medians = Vec::new();
    for (p, pattern) in patterns.iter().enumerate() {
        for (s, (_, how)) in sandboxes.iter().enumerate() {
            let stats = Stats::of(&samples[p * sandboxes.len() + s]);
            print_row(&format!("exec, {}, {how}", pattern.label()), &stats);
            medians.push(stats.median);
        }
    }
    let docker_stats = Stats::of(&docker_exec);
    print_row("docker exec <id> echo hi", &docker_stats);
    println!();
    for (p, pattern) in patterns.iter().enumerate() {
        let (forked, fresh) = (medians[p * 2], medians[p * 2 + 1]);
        println!(
            "exec {}: median {forked:.2} ms forked vs {fresh:.2} ms from scratch ({:.2}x); {:.1}x faster than docker exec (goal <= 3 ms)",
            pattern.label(),
            fresh / forked,
            docker_stats.median / forked,
        );
    }
    Ok(())
}

/// Times `iterations` calls of `echo hi` (after one untimed warm-up call).
async fn time_execs(
    client: &reqwest::Client,
    ip: &str,
    pattern: Pattern,
    session: &str,
    iterations: usize,
) -> anyhow::Result<Vec<Duration>> {
    let url = format!("http://{ip}:8080/v1/shell/exec");
    let mut times = Vec::with_capacity(iterations);
    for i in 0..=iterations {
        if matches!(pattern, Pattern::Spaced) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let body = match pattern {
            Pattern::OneSession => serde_json::json!({"id": session, "command": "echo hi"}),
            _ => serde_json::json!({"command": "echo hi"}),
        };
        let started = Instant::now();
        let response = client
            .post(&url)
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let answer: serde_json::Value = response.json().await?;
        let elapsed = started.elapsed();
        if status != 200 || answer["data"]["output"].as_str().map(str::trim) != Some("hi") {
            bail!("exec answered {status}: {answer}");
        }
        if i > 0 {
            times.push(elapsed);
        }
    }
    Ok(times)
}
