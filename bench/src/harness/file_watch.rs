//! File watch benchmark: how soon a client learns that a 1 MB file was written, through the
//! watch API against the obvious baseline, polling the directory listing at a fixed interval.
//!
//! Each iteration writes a new 1 MiB file through the shell API (`head -c 1048576
//! /dev/urandom > f`), then prints bash's `$EPOCHREALTIME`: the moment the file was complete
//! and closed. The container shares the host's clock, so the latency of each way of noticing
//! is the host's wall-clock time when the client first saw the complete file (1 MiB) minus that
//! moment:
//!
//! - watch, SSE: `GET /v1/file/watch/{id}/events` with `Accept: text/event-stream`, read as it
//!   arrives;
//! - watch, long poll: `POST /v1/file/watch/{id}/poll` with `timeout`, re-issued at once;
//! - baseline: `POST /v1/file/list` on the directory every `--interval-ms` (default 100 ms),
//!   looking for the file at its full size.
//!
//! Each way runs alone (one after the other), with the watcher at AIO's default `debounce`
//! (300 ms): the writer closing the file ends the coalescing window, so it is not waited out.
//!
//! `cargo run --release -p agentbox-bench -- file-watch --iterations 30`

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentbox_bench::{Stats, arg, docker, ensure_network, print_header, print_row, start_sandbox};
use anyhow::{Context, bail};
use serde_json::{Value, json};

const IP: &str = "172.31.250.13";
const KEY: &str = "bench-key-0123456789";
const DIR: &str = "/tmp/watch-bench";
const SIZE: u64 = 1 << 20;

/// When each file was first seen complete (host wall clock).
type Seen = Arc<Mutex<HashMap<String, SystemTime>>>;

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 30);
    let interval_ms: u64 = arg("--interval-ms", 100);
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    ensure_network()?;
    let name = format!("agentbox-bench-file-watch-{}", std::process::id());
    start_sandbox(&name, IP, KEY, &image)?;
    let result = run(iterations, Duration::from_millis(interval_ms)).await;
    let _ = docker(&["rm", "-f", &name]);
    result
}

struct Api {
    client: reqwest::Client,
    base: String,
}

impl Api {
    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if !status.is_success() {
            bail!("POST {path} answered {status}: {body}");
        }
        Ok(body)
    }

    /// Writes file `i` through the shell and returns when it was complete (container clock).
    async fn write(&self, i: usize, way: &str) -> anyhow::Result<SystemTime> {
        let command =
            format!("head -c {SIZE} /dev/urandom > {DIR}/{way}-{i}.bin && echo $EPOCHREALTIME");
        let body = self
            .post("/v1/shell/exec", json!({ "command": command }))
            .await?;
        let out = body["data"]["output"]
            .as_str()
            .unwrap_or("")
            .trim()
            .to_string();
        let seconds: f64 = out
            .lines()
            .last()
            .unwrap_or("")
            .parse()
            .with_context(|| format!("the write printed {out:?}"))?;
        Ok(UNIX_EPOCH + Duration::from_secs_f64(seconds))
    }
}

async fn run(iterations: usize, interval: Duration) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let api = Arc::new(Api {
        client,
        base: format!("http://{IP}:8080"),
    });
    wait_ready(&api).await?;
    api.post(
        "/v1/shell/exec",
        json!({ "command": format!("mkdir -p {DIR}") }),
    )
    .await?;
    println!(
        "file watch benchmark: {iterations} writes of 1 MiB per way, baseline polls every {} ms",
        interval.as_millis()
    );

    let sse = measure(&api, iterations, "sse", |seen| {
        let api = api.clone();
        tokio::spawn(async move { sse_reader(&api, seen).await })
    })
    .await?;
    let long_poll = measure(&api, iterations, "poll", |seen| {
        let api = api.clone();
        tokio::spawn(async move { poll_reader(&api, seen).await })
    })
    .await?;
    let listing = measure(&api, iterations, "list", |seen| {
        let api = api.clone();
        tokio::spawn(async move { list_reader(&api, seen, interval).await })
    })
    .await?;

    let rows = [
        ("watch: SSE /v1/file/watch/{id}/events", Stats::of(&sse)),
        (
            "watch: long poll /v1/file/watch/{id}/poll",
            Stats::of(&long_poll),
        ),
        (
            "baseline: POST /v1/file/list every interval",
            Stats::of(&listing),
        ),
    ];
    println!();
    print_header();
    for (name, stats) in &rows {
        print_row(name, stats);
    }
    println!();
    println!(
        "write-to-notice median: SSE {:.1} ms, long poll {:.1} ms, list polling at {} ms {:.1} ms; \
         SSE {:.1}x sooner than polling, long poll {:.1}x",
        rows[0].1.median,
        rows[1].1.median,
        interval.as_millis(),
        rows[2].1.median,
        rows[2].1.median / rows[0].1.median,
        rows[2].1.median / rows[1].1.median,
    );
    Ok(())
}

/// Runs one way of noticing: starts its reader, writes the files one by one (a pause of a
/// varying length between, so writes fall at every phase of a polling interval), and returns
/// each file's latency.
async fn measure(
    api: &Api,
    iterations: usize,
    way: &str,
    start: impl FnOnce(Seen) -> tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<Vec<Duration>> {
    let seen: Seen = Arc::new(Mutex::new(HashMap::new()));
    let reader = start(seen.clone());
    // Let the reader settle (the stream open, the first poll sent).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut latencies = Vec::new();
    for i in 0..=iterations {
        let done = api.write(i, way).await?;
        let name = format!("{way}-{i}.bin");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let noticed = loop {
            if let Some(at) = seen
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .get(&name)
            {
                break *at;
            }
            if reader.is_finished() || tokio::time::Instant::now() > deadline {
                reader.abort();
                bail!("{way}: {name} was not noticed within 10 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // The first write warms the paths up.
        if i > 0 {
            latencies.push(noticed.duration_since(done).unwrap_or(Duration::ZERO));
        }
        // 0..97 ms, varying: a phase of the polling interval not tied to the writes.
        tokio::time::sleep(Duration::from_millis((i as u64 * 37) % 97)).await;
    }
    reader.abort();
    Ok(latencies)
}

fn note(seen: &Seen, event: &Value) {
    let complete = event["size"].as_u64() == Some(SIZE)
        && matches!(event["type"].as_str(), Some("create" | "write"));
    if let (true, Some(rel)) = (complete, event["relative_path"].as_str())
        && let Ok(mut seen) = seen.lock()
    {
        seen.entry(rel.to_string()).or_insert_with(SystemTime::now);
    }
}

async fn create_watch(api: &Api) -> anyhow::Result<String> {
    let watch = api
        .post("/v1/file/watch", json!({ "path": DIR, "recursive": false }))
        .await?;
    watch["watcher_id"]
        .as_str()
        .map(str::to_string)
        .context("no watcher_id")
}

async fn sse_reader(api: &Api, seen: Seen) -> anyhow::Result<()> {
    let id = create_watch(api).await?;
    let mut response = api
        .client
        .get(format!("{}/v1/file/watch/{id}/events", api.base))
        .bearer_auth(KEY)
        .header("accept", "text/event-stream")
        .timeout(Duration::from_secs(3600))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("events answered {}", response.status());
    }
    let mut buffer = String::new();
    while let Some(chunk) = response.chunk().await? {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let message: String = buffer.drain(..end + 2).collect();
            let data: String = message
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if message.lines().any(|l| l == "event: file_change")
                && let Ok(event) = serde_json::from_str::<Value>(&data)
            {
                note(&seen, &event);
            }
        }
    }
    Ok(())
}

async fn poll_reader(api: &Api, seen: Seen) -> anyhow::Result<()> {
    let id = create_watch(api).await?;
    let mut cursor = 0;
    loop {
        let answer = api
            .post(
                &format!("/v1/file/watch/{id}/poll"),
                json!({ "since": cursor, "timeout": 30, "limit": 1000 }),
            )
            .await?;
        cursor = answer["cursor"].as_u64().unwrap_or(cursor);
        for event in answer["events"].as_array().into_iter().flatten() {
            note(&seen, event);
        }
    }
}

async fn list_reader(api: &Api, seen: Seen, interval: Duration) -> anyhow::Result<()> {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let answer = api
            .post(
                "/v1/file/list",
                json!({ "path": DIR, "include_size": true }),
            )
            .await?;
        let now = SystemTime::now();
        for file in answer["data"]["files"].as_array().into_iter().flatten() {
            if file["size"].as_u64() == Some(SIZE)
                && let (Some(name), Ok(mut seen)) = (file["name"].as_str(), seen.lock())
            {
                seen.entry(name.to_string()).or_insert(now);
            }
        }
    }
}

async fn wait_ready(api: &Api) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(response) = api
            .client
            .get(format!("{}/readyz", api.base))
            .bearer_auth(KEY)
            .send()
            .await
            && response.status().is_success()
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the sandbox did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
