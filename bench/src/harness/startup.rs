//! Startup benchmark: time from `docker run` to ready, sandboxd against the floor.
//!
//! - **sandboxd**: the image as shipped; ready = `GET /readyz` answers 200 (every program ready).
//! - **floor**: the same image with `bench/floor/plain-start.sh` as entrypoint, which launches the
//!   same programs with no supervision; ready = CDP `/json/version` answers through socat.
//!
//! Both arms run alternately in one run, on a private network with fixed addresses, polled every
//! 5 ms from the host. Also reports sandboxd's own RSS once ready and the container's memory.
//!
//! `cargo run --release -p agentbox-bench -- startup --iterations 15`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentbox_bench::{NETWORK, Stats, arg, docker, ensure_network, print_header, print_row};
use anyhow::{Context, bail};

const IP: &str = "172.31.250.10";
const KEY: &str = "bench-key-0123456789";

#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Sandboxd,
    Floor,
}

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 10);
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    let floor_script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("floor/plain-start.sh");
    ensure_network()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()?;

    println!("startup benchmark: {iterations} iterations per arm (+1 warm-up each), image {image}");
    let mut sandboxd = Vec::new();
    let mut floor = Vec::new();
    let mut rss_kib = Vec::new();
    let mut container_mib = Vec::new();
    for i in 0..=iterations {
        // Alternate which arm goes first, so drift on the machine hits both alike.
        let order = if i % 2 == 0 {
            [Arm::Sandboxd, Arm::Floor]
        } else {
            [Arm::Floor, Arm::Sandboxd]
        };
        for arm in order {
            let (took, memory) = run_once(&client, &image, &floor_script, arm).await?;
            if i == 0 {
                continue; // warm-up
            }
            match arm {
                Arm::Sandboxd => {
                    sandboxd.push(took);
                    if let Some((rss, container)) = memory {
                        rss_kib.push(rss);
                        container_mib.push(container);
                    }
                }
                Arm::Floor => floor.push(took),
            }
        }
        if i > 0 {
            eprintln!(
                "  iteration {i}: sandboxd {:.0} ms, floor {:.0} ms",
                sandboxd
                    .last()
                    .map_or(0.0, |d: &Duration| d.as_secs_f64() * 1000.0),
                floor
                    .last()
                    .map_or(0.0, |d: &Duration| d.as_secs_f64() * 1000.0)
            );
        }
    }
    let s = Stats::of(&sandboxd);
    let f = Stats::of(&floor);
    println!();
    print_header();
    print_row("docker run -> /readyz 200 (sandboxd)", &s);
    print_row("docker run -> CDP answers (plain script floor)", &f);
    println!();
    println!(
        "median ratio sandboxd/floor: {:.3} (goal <= 1.15)",
        s.median / f.median
    );
    rss_kib.sort_unstable();
    container_mib.sort_by(|a, b| a.total_cmp(b));
    if !rss_kib.is_empty() {
        println!(
            "sandboxd RSS once ready: median {:.1} MiB, max {:.1} MiB (goal <= 15 MiB)",
            rss_kib[rss_kib.len() / 2] as f64 / 1024.0,
            rss_kib[rss_kib.len() - 1] as f64 / 1024.0
        );
        println!(
            "container memory once ready (cgroup usage): median {:.0} MiB",
            container_mib[container_mib.len() / 2]
        );
    }
    Ok(())
}

/// One start of one arm: returns the time to ready and, for sandboxd, (its RSS in KiB, the
/// container's memory in MiB).
// The arm's `docker run` is the timed start itself: tokio waits for that child.
#[allow(clippy::disallowed_methods)]
async fn run_once(
    client: &reqwest::Client,
    image: &str,
    floor_script: &std::path::Path,
    arm: Arm,
) -> anyhow::Result<(Duration, Option<(u64, f64)>)> {
    let name = format!("agentbox-bench-startup-{}", std::process::id());
    let _ = docker(&["rm", "-f", &name]);
    let mount = format!("{}:/bench/plain-start.sh:ro", floor_script.display());
    let mut args = vec![
        "run",
        "-d",
        "--rm",
        "--name",
        &name,
        "--network",
        NETWORK,
        "--ip",
        IP,
    ];
    let key_env = format!("SANDBOX_API_KEY={KEY}");
    match arm {
        Arm::Sandboxd => args.extend(["-e", &key_env, image]),
        Arm::Floor => args.extend([
            "-v",
            &mount,
            "--entrypoint",
            "/bin/sh",
            image,
            "/bench/plain-start.sh",
        ]),
    }
    let url = match arm {
        Arm::Sandboxd => format!("http://{IP}:8080/readyz"),
        Arm::Floor => format!("http://{IP}:9222/json/version"),
    };

    let started = Instant::now();
    let mut run = tokio::process::Command::new("docker")
        .args(&args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("docker run")?;
    let deadline = started + Duration::from_secs(120);
    let took = loop {
        let response = client.get(&url).bearer_auth(KEY).send().await;
        if matches!(&response, Ok(r) if r.status() == 200) {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            let _ = docker(&["rm", "-f", &name]);
            bail!("{url} not ready after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let status = run.wait().await?;
    if !status.success() {
        bail!("docker run failed: {status}");
    }
    let memory = if arm == Arm::Sandboxd {
        let status = docker(&["exec", "-u", "root", &name, "cat", "/proc/1/status"])?;
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .context("VmRSS of sandboxd")?;
        let usage = docker(&[
            "exec",
            "-u",
            "root",
            &name,
            "sh",
            "-c",
            "cat /sys/fs/cgroup/memory/memory.usage_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.current",
        ])?;
        let container = usage.trim().parse::<f64>().unwrap_or(f64::NAN) / (1024.0 * 1024.0);
        Some((rss, container))
    } else {
        None
    };
    docker(&["rm", "-f", &name])?;
    Ok((took, memory))
}
