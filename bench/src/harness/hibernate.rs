//! Hibernation, snapshots and forks (issue 26), one run, each figure beside its baseline:
//!
//! - **wake vs cold create**: a sandbox with two tabs open is hibernated and woken
//!   (`POST .../wake` until its 200, and until both tabs are listed again), against
//!   `POST /v1/sandboxes` of a fresh one (cold: no warm pool). Goal: wake <= 1.0x cold.
//! - **snapshot**: `POST .../snapshots` of a sandbox holding `--files-mib` MiB of new files
//!   (incompressible), and the snapshot's size.
//! - **fork**: `POST .../fork {count: --forks}` against as many concurrent cold creates.
//! - **idle cost**: CPU over `--window-secs` of `--sandboxes` sandboxes idle, then paused (goal:
//!   0), from their cgroups; resident memory of the same sandboxes live, then hibernated (goal:
//!   0: no container is left), and the disk their kept homes take.
//!
//! `cargo run --release -p agentbox-bench -- hibernate --iterations 5 --sandboxes 20`

use std::time::{Duration, Instant};

use agentbox_bench::{
    ADMIN_KEY, OrchestratorServer as Server, Stats, arg, orchestrator_binary, print_header,
    print_row, sandbox_container,
};
use anyhow::{Context, bail};
use futures_util::future::join_all;
use serde_json::{Value, json};

struct Api<'a> {
    client: reqwest::Client,
    server: &'a Server,
}

impl Api<'_> {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.server.url))
            .bearer_auth(ADMIN_KEY);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// A POST that must answer `expected`; how long it took and its answer.
    async fn post(
        &self,
        path: &str,
        body: Value,
        expected: u16,
    ) -> anyhow::Result<(Duration, Value)> {
        let started = Instant::now();
        let (status, answer) = self.call(reqwest::Method::POST, path, Some(body)).await?;
        let took = started.elapsed();
        if status != expected {
            bail!("POST {path} answered {status}: {answer}");
        }
        Ok((took, answer))
    }

    async fn create(&self) -> anyhow::Result<(Duration, String)> {
        let (took, answer) = self.post("/v1/sandboxes", json!({}), 201).await?;
        Ok((took, answer["id"].as_str().context("id")?.to_string()))
    }

    async fn delete(&self, id: &str) -> anyhow::Result<()> {
        let (status, answer) = self
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/sandboxes/{id}"),
                None,
            )
            .await?;
        if status != 204 {
            bail!("delete {id} answered {status}: {answer}");
        }
        Ok(())
    }

    async fn shell(&self, id: &str, command: &str) -> anyhow::Result<String> {
        let (_, answer) = self
            .post(
                &format!("/v1/sandboxes/{id}/api/v1/shell/exec"),
                json!({ "command": command, "timeout": 120 }),
                200,
            )
            .await?;
        Ok(answer["data"]["output"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    async fn eval(&self, id: &str, expression: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/api/v1/browser/page/evaluate"),
            Some(json!({ "expression": expression })),
        )
        .await
        .map(|(_, answer)| answer["data"].clone())
        .unwrap_or(Value::Null)
    }

    async fn tab_count(&self, id: &str) -> usize {
        match self
            .call(
                reqwest::Method::GET,
                &format!("/v1/sandboxes/{id}/api/v1/browser/tabs"),
                None,
            )
            .await
        {
            Ok((200, tabs)) => tabs["data"]
                .as_array()
                .map(|tabs| {
                    tabs.iter()
                        .filter(|t| {
                            t["url"]
                                .as_str()
                                .is_some_and(|u| u.starts_with("http://127.0.0.1:8765/"))
                        })
                        .count()
                })
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// Two tabs on pages served inside the sandbox (navigated by script: the browser API's URL
    /// policy keeps its own navigation off loopback).
    async fn open_two_tabs(&self, id: &str) -> anyhow::Result<()> {
        self.shell(
            id,
            "mkdir -p ~/site && echo one > ~/site/one.html && echo two > ~/site/two.html && \
             (setsid python3 -m http.server 8765 --bind 127.0.0.1 -d ~/site >/dev/null 2>&1 &) \
             && for i in $(seq 50); do curl -sf http://127.0.0.1:8765/one.html >/dev/null && \
             break; sleep 0.1; done",
        )
        .await?;
        for (n, page) in ["one", "two"].into_iter().enumerate() {
            if n == 1 {
                self.post(
                    &format!("/v1/sandboxes/{id}/api/v1/browser/tabs"),
                    json!({}),
                    200,
                )
                .await?;
            }
            let url = format!("http://127.0.0.1:8765/{page}.html");
            let _ = self.eval(id, &format!("location.href = '{url}'; 1")).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.eval(id, "location.href").await != json!(url) {
                if Instant::now() > deadline {
                    bail!("the tab did not open {url}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}

/// Nanoseconds of CPU a container used so far (its cgroup, v1 or v2).
fn cpu_ns(container: &str) -> anyhow::Result<u64> {
    let v1 = format!("/sys/fs/cgroup/cpuacct/docker/{container}/cpuacct.usage");
    if let Ok(text) = std::fs::read_to_string(&v1) {
        return Ok(text.trim().parse()?);
    }
    let v2 = format!("/sys/fs/cgroup/system.slice/docker-{container}.scope/cpu.stat");
    let text = std::fs::read_to_string(&v2).with_context(|| format!("reading {v2}"))?;
    let usec: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .context("usage_usec")?
        .trim()
        .parse()?;
    Ok(usec * 1000)
}

/// Resident bytes of a container (its cgroup's usage less its inactive file cache).
fn memory_bytes(container: &str) -> anyhow::Result<u64> {
    let base = format!("/sys/fs/cgroup/memory/docker/{container}");
    if let Ok(usage) = std::fs::read_to_string(format!("{base}/memory.usage_in_bytes")) {
        let usage: u64 = usage.trim().parse()?;
        let stat = std::fs::read_to_string(format!("{base}/memory.stat"))?;
        let inactive: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix("total_inactive_file "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        return Ok(usage.saturating_sub(inactive));
    }
    let base = format!("/sys/fs/cgroup/system.slice/docker-{container}.scope");
    let usage: u64 = std::fs::read_to_string(format!("{base}/memory.current"))?
        .trim()
        .parse()?;
    let stat = std::fs::read_to_string(format!("{base}/memory.stat"))?;
    let inactive: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("inactive_file "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok(usage.saturating_sub(inactive))
}

/// CPU (percent of one core) the containers used together over `window`.
async fn cpu_percent(containers: &[String], window: Duration) -> anyhow::Result<f64> {
    let before: Vec<u64> = containers
        .iter()
        .map(|c| cpu_ns(c))
        .collect::<Result<_, _>>()?;
    tokio::time::sleep(window).await;
    let after: Vec<u64> = containers
        .iter()
        .map(|c| cpu_ns(c))
        .collect::<Result<_, _>>()?;
    let used: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    Ok(used as f64 / window.as_nanos() as f64 * 100.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 5);
    let sandboxes: usize = arg("--sandboxes", 20);
    let forks: usize = arg("--forks", 10);
    let files_mib: usize = arg("--files-mib", 100);
    let window = Duration::from_secs(arg("--window-secs", 10));
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    println!(
        "hibernate benchmark: image {image}, {iterations} wakes and cold creates, a snapshot of \
         {files_mib} MiB of new files, a fork of {forks}, {sandboxes} sandboxes idle/paused/hibernated"
    );
    let extra = vec![
        "--max-sandboxes-per-key".to_string(),
        "0".to_string(),
        "--disk-mib".to_string(),
        (files_mib as u64 * 2 + 256).to_string(),
        "--memory-mib".to_string(),
        "1024".to_string(),
    ];
    let server = Server::start(&orchestrator_binary(), &image, 0, "hibernate", &extra)?;
    let api = Api {
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()?,
        server: &server,
    };

    // Wake against cold create, alternating.
    let (_, sleeper) = api.create().await?;
    api.open_two_tabs(&sleeper).await?;
    let (mut colds, mut wakes, mut wakes_with_tabs, mut hibernations) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..=iterations {
        for arm in 0..2 {
            if (arm == 0) == (i % 2 == 0) {
                let (took, id) = api.create().await?;
                api.delete(&id).await?;
                if i > 0 {
                    colds.push(took);
                }
            } else {
                let (hibernated, _) = api
                    .post(
                        &format!("/v1/sandboxes/{sleeper}/hibernate"),
                        json!({}),
                        200,
                    )
                    .await?;
                let started = Instant::now();
                api.post(&format!("/v1/sandboxes/{sleeper}/wake"), json!({}), 200)
                    .await?;
                let woken = started.elapsed();
                while api.tab_count(&sleeper).await < 2 {
                    if started.elapsed() > Duration::from_secs(60) {
                        bail!("the tabs did not come back after a wake");
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let with_tabs = started.elapsed();
                if i > 0 {
                    hibernations.push(hibernated);
                    wakes.push(woken);
                    wakes_with_tabs.push(with_tabs);
                }
            }
        }
    }

    // A snapshot of a sandbox with new files.
    api.shell(
        &sleeper,
        &format!(
            "mkdir -p ~/workspace/data && for i in $(seq {files_mib}); do \
             head -c 1048576 /dev/urandom > ~/workspace/data/f$i; done; du -sm ~/workspace/data"
        ),
    )
    .await?;
    let mut snapshots = Vec::new();
    let mut snapshot_bytes = 0;
    let mut snapshot_id = String::new();
    for _ in 0..iterations.max(1) {
        let (took, snapshot) = api
            .post(
                &format!("/v1/sandboxes/{sleeper}/snapshots"),
                json!({}),
                201,
            )
            .await?;
        snapshots.push(took);
        snapshot_bytes = snapshot["size_bytes"].as_i64().unwrap_or(0);
        if !snapshot_id.is_empty() {
            api.call(
                reqwest::Method::DELETE,
                &format!("/v1/snapshots/{snapshot_id}"),
                None,
            )
            .await?;
        }
        snapshot_id = snapshot["id"].as_str().unwrap_or_default().to_string();
    }
    api.shell(&sleeper, "rm -rf ~/workspace/data").await?;

    // A fork against as many cold creates at once.
    let started = Instant::now();
    let (fork_took, forked) = api
        .post(
            &format!("/v1/sandboxes/{sleeper}/fork"),
            json!({ "count": forks }),
            201,
        )
        .await?;
    let forked: Vec<String> = forked["sandboxes"]
        .as_array()
        .context("sandboxes")?
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect();
    let _ = started;
    join_all(forked.iter().map(|id| api.delete(id))).await;
    let started = Instant::now();
    let cold: Vec<_> = join_all((0..forks).map(|_| api.create())).await;
    let cold_many = started.elapsed();
    for result in cold {
        api.delete(&result?.1).await?;
    }

    // Idle cost: CPU idle vs paused, memory live vs hibernated.
    let made: Vec<_> = join_all((0..sandboxes).map(|_| api.create())).await;
    let ids: Vec<String> = made
        .into_iter()
        .map(|r| r.map(|(_, id)| id))
        .collect::<Result<_, _>>()?;
    let containers: Vec<String> = ids
        .iter()
        .map(|id| sandbox_container(id))
        .collect::<Result<_, _>>()?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_cpu = cpu_percent(&containers, window).await?;
    let live_memory: u64 = containers
        .iter()
        .map(|c| memory_bytes(c))
        .collect::<Result<Vec<_>, _>>()?
        .iter()
        .sum();
    for id in &ids {
        api.post(&format!("/v1/sandboxes/{id}/pause"), json!({}), 200)
            .await?;
    }
    let paused_cpu = cpu_percent(&containers, window).await?;
    let started = Instant::now();
    for id in &ids {
        api.post(&format!("/v1/sandboxes/{id}/hibernate"), json!({}), 200)
            .await?;
    }
    let hibernate_all = started.elapsed();
    // The hibernated sandboxes' containers that are left (none should be).
    let left: Vec<String> = ids
        .iter()
        .filter_map(|id| sandbox_container(id).ok())
        .collect();
    let containers_left = left.len();
    let resident_left: u64 = left.iter().filter_map(|c| memory_bytes(c).ok()).sum();
    let kept_disk: u64 = std::fs::read_dir(server.data_dir().join("homes"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);

    println!();
    print_header();
    let rows = [
        ("cold create -> 201 (baseline)", &colds),
        ("wake -> 200", &wakes),
        ("wake -> both tabs back", &wakes_with_tabs),
        ("hibernate -> 200", &hibernations),
        ("snapshot -> 201", &snapshots),
    ];
    for (name, samples) in rows {
        print_row(name, &Stats::of(samples));
    }
    let cold = Stats::of(&colds).median;
    println!(
        "\nwake median / cold create median: {:.2} (tabs back: {:.2}); goal <= 1.0",
        Stats::of(&wakes).median / cold,
        Stats::of(&wakes_with_tabs).median / cold
    );
    println!(
        "snapshot of {files_mib} MiB of new files: median {:.0} ms, {:.1} MiB",
        Stats::of(&snapshots).median,
        snapshot_bytes as f64 / 1048576.0
    );
    println!(
        "fork of {forks}: {:.0} ms; {forks} concurrent cold creates: {:.0} ms; ratio {:.2}",
        ms(fork_took),
        ms(cold_many),
        ms(fork_took) / ms(cold_many)
    );
    println!(
        "{sandboxes} sandboxes over {} s: idle {idle_cpu:.2}% of a core, paused {paused_cpu:.3}% (goal 0)",
        window.as_secs()
    );
    println!(
        "{sandboxes} sandboxes resident: live {:.0} MiB, hibernated {:.0} MiB in {containers_left} containers (goal 0); \
         their kept homes {:.1} MiB on disk; hibernating them all took {:.1} s",
        live_memory as f64 / 1048576.0,
        resident_left as f64 / 1048576.0,
        kept_disk as f64 / 1048576.0,
        hibernate_all.as_secs_f64()
    );
    for id in ids.iter().chain([&sleeper]) {
        let _ = api.delete(id).await;
    }
    drop(server);
    Ok(())
}
