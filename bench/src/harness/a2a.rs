//! A2A benchmark: what the A2A layer adds over the runs API, on one orchestrator, the same
//! runs, in one run of the harness (the conformance executor drives the runs: no sandbox, no
//! model, so only the layers are measured).
//!
//! 1. **to the first `working`**: A2A `SendStreamingMessage` until its stream shows the task
//!    working (or past it: the stream opens with the task as it is by then), against `POST /v1/runs` followed by the run's SSE
//!    events until `run.status running`. Arms alternate. Goal: A2A adds <= 5 ms at the median.
//! 2. **per-event latency**: one conversing run followed at once by an A2A `SubscribeToTask`
//!    stream and the runs API's SSE stream; each answer (through the runs API) makes the run
//!    write `input.received`, `running`, `input.requested`, `waiting_for_input`; timed from
//!    the answer's request to each stream's sight of the `input-required` (A2A) /
//!    `waiting_for_input` (REST) that follows it.
//! 3. **fan-out**: `--streams` (200) `SubscribeToTask` streams on one task, `--answers` turns;
//!    every stream must see every status update in the same order and end with `canceled`.
//!    Reported: the time from the cancel to the last stream's end, and whether all agreed.
//!
//! `cargo run --release -p agentbox-bench -- a2a --iterations 50 --streams 200`

use std::time::{Duration, Instant};

use agentbox_bench::{
    ADMIN_KEY, OrchestratorServer as Server, Stats, arg, print_header, print_row,
};
use anyhow::{Context, bail};
use serde_json::{Value, json};

/// An SSE response read event by event (`data:` lines as JSON).
struct SseReader {
    response: reqwest::Response,
    buffer: String,
}

impl SseReader {
    fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next `data:` payload, `None` at the end of the stream.
    async fn next(&mut self) -> anyhow::Result<Option<Value>> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let data: String = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Ok(Some(serde_json::from_str(&data)?));
            }
            match self.response.chunk().await? {
                Some(bytes) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                None => return Ok(None),
            }
        }
    }
}

fn message_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn a2a(
    client: &reqwest::Client,
    server: &Server,
    method: &str,
    params: Value,
) -> anyhow::Result<reqwest::Response> {
    let response = client
        .post(format!("{}/a2a", server.url))
        .bearer_auth(ADMIN_KEY)
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await?;
    if response.status() != 200 {
        bail!("{method} answered {}", response.status());
    }
    Ok(response)
}

fn state_of(event: &Value) -> Option<&str> {
    let result = &event["result"];
    result["statusUpdate"]["status"]["state"]
        .as_str()
        .or_else(|| result["task"]["status"]["state"].as_str())
}

/// A2A: SendStreamingMessage until the `working` update; returns the time and the task id.
async fn a2a_first_working(
    client: &reqwest::Client,
    server: &Server,
) -> anyhow::Result<(Duration, String)> {
    let started = Instant::now();
    let params = json!({"message": {"messageId": message_id("bench"), "role": "ROLE_USER",
        "parts": [{"text": "benchmark"}], "metadata": {"model": "conformance"}}});
    let mut stream = SseReader::new(a2a(client, server, "SendStreamingMessage", params).await?);
    let mut task_id = None;
    let mut last = Value::Null;
    while let Some(event) = stream.next().await? {
        last = event.clone();
        if let Some(id) = event["result"]["task"]["id"].as_str() {
            task_id = Some(id.to_string());
        }
        // The stream opens with the task as it is now, which may be past `working` already.
        if matches!(
            state_of(&event),
            Some("TASK_STATE_WORKING" | "TASK_STATE_INPUT_REQUIRED")
        ) {
            return Ok((
                started.elapsed(),
                task_id.context("no task before working")?,
            ));
        }
    }
    bail!("the stream ended before `working` (last: {last})")
}

/// The runs API: create, then follow the events until `running`.
async fn rest_first_working(
    client: &reqwest::Client,
    server: &Server,
) -> anyhow::Result<(Duration, String)> {
    let started = Instant::now();
    let created: Value = client
        .post(format!("{}/v1/runs", server.url))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"task": "benchmark", "model": "conformance"}))
        .send()
        .await?
        .json()
        .await?;
    let id = created["id"].as_str().context("run id")?.to_string();
    let mut stream = SseReader::new(rest_events(client, server, &id).await?);
    while let Some(event) = stream.next().await? {
        if event["type"] == "run.status" && event["status"] == "running" {
            return Ok((started.elapsed(), id));
        }
    }
    bail!("the events ended before `running`")
}

async fn rest_events(
    client: &reqwest::Client,
    server: &Server,
    id: &str,
) -> anyhow::Result<reqwest::Response> {
    let response = client
        .get(format!("{}/v1/runs/{id}/events", server.url))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await?;
    if response.status() != 200 {
        bail!("events answered {}", response.status());
    }
    Ok(response)
}

async fn cancel(client: &reqwest::Client, server: &Server, id: &str) -> anyhow::Result<()> {
    client
        .post(format!("{}/v1/runs/{id}/cancel", server.url))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await?;
    Ok(())
}

async fn answer(
    client: &reqwest::Client,
    server: &Server,
    id: &str,
    text: &str,
) -> anyhow::Result<()> {
    let response = client
        .post(format!("{}/v1/runs/{id}/input", server.url))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"text": text}))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!(
            "input answered {}: {}",
            response.status(),
            response.text().await?
        );
    }
    Ok(())
}

/// Waits until a conversing run asks (its status is `waiting_for_input`).
async fn until_asking(client: &reqwest::Client, server: &Server, id: &str) -> anyhow::Result<()> {
    for _ in 0..500 {
        let run: Value = client
            .get(format!("{}/v1/runs/{id}", server.url))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await?
            .json()
            .await?;
        if run["status"] == "waiting_for_input" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("run {id} never asked")
}

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 50);
    let turns: usize = arg("--turns", 30);
    let streams: usize = arg("--streams", 200);
    let answers: usize = arg("--answers", 5);
    let binary = agentbox_bench::orchestrator_binary();
    let server = Server::start(
        &binary,
        "agentbox/sandbox:latest",
        0,
        "a2a",
        &["--a2a-conformance".to_string()],
    )?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .pool_max_idle_per_host(streams + 16)
        .build()?;
    println!(
        "A2A benchmark: {iterations} tasks per arm, {turns} turns, {streams} streams x {answers} answers (conformance executor, no sandbox)"
    );

    // 1. To the first `working`, arms alternating (one warm-up each, not counted).
    let (mut a2a_times, mut rest_times) = (Vec::new(), Vec::new());
    for i in 0..=iterations {
        for arm in 0..2 {
            let a2a_arm = (arm == 0) == (i % 2 == 0);
            let (took, id) = if a2a_arm {
                a2a_first_working(&client, &server).await?
            } else {
                rest_first_working(&client, &server).await?
            };
            cancel(&client, &server, &id).await?;
            if i > 0 {
                if a2a_arm {
                    a2a_times.push(took)
                } else {
                    rest_times.push(took)
                }
            }
        }
    }

    // 2. Per-event latency on one run, both streams open.
    let (_, id) = rest_first_working(&client, &server).await?;
    until_asking(&client, &server, &id).await?;
    let mut a2a_stream =
        SseReader::new(a2a(&client, &server, "SubscribeToTask", json!({"id": id})).await?);
    let mut rest_stream = SseReader::new(rest_events(&client, &server, &id).await?);
    // Both streams first catch up to now.
    loop {
        let event = a2a_stream.next().await?.context("a2a stream ended")?;
        if state_of(&event) == Some("TASK_STATE_INPUT_REQUIRED") {
            break;
        }
    }
    loop {
        let event = rest_stream.next().await?.context("rest stream ended")?;
        if event["type"] == "run.status" && event["status"] == "waiting_for_input" {
            break;
        }
    }
    let (mut a2a_event, mut rest_event) = (Vec::new(), Vec::new());
    for turn in 0..turns {
        let started = Instant::now();
        answer(&client, &server, &id, &format!("turn {turn}")).await?;
        let (a, r) = tokio::join!(
            async {
                loop {
                    match a2a_stream.next().await {
                        Ok(Some(event))
                            if state_of(&event) == Some("TASK_STATE_INPUT_REQUIRED") =>
                        {
                            return Ok(started.elapsed());
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => bail!("a2a stream ended"),
                        Err(e) => return Err(e),
                    }
                }
            },
            async {
                loop {
                    match rest_stream.next().await {
                        Ok(Some(event))
                            if event["type"] == "run.status"
                                && event["status"] == "waiting_for_input" =>
                        {
                            return Ok(started.elapsed());
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => bail!("rest stream ended"),
                        Err(e) => return Err(e),
                    }
                }
            }
        );
        a2a_event.push(a?);
        rest_event.push(r?);
    }
    cancel(&client, &server, &id).await?;

    // 3. Fan-out: many subscriptions on one task.
    let (_, id) = rest_first_working(&client, &server).await?;
    until_asking(&client, &server, &id).await?;
    let mut readers = Vec::with_capacity(streams);
    for _ in 0..streams {
        readers.push(SseReader::new(
            a2a(&client, &server, "SubscribeToTask", json!({"id": id})).await?,
        ));
    }
    let collectors: Vec<_> = readers
        .into_iter()
        .map(|mut reader| {
            tokio::spawn(async move {
                let mut states = Vec::new();
                while let Ok(Some(event)) = reader.next().await {
                    if let Some(state) = event["result"]["statusUpdate"]["status"]["state"].as_str()
                    {
                        states.push(state.to_string());
                    }
                }
                (states, Instant::now())
            })
        })
        .collect();
    for turn in 0..answers {
        answer(&client, &server, &id, &format!("fan-out {turn}")).await?;
        until_asking(&client, &server, &id).await?;
    }
    let canceled_at = Instant::now();
    cancel(&client, &server, &id).await?;
    let mut sequences = Vec::new();
    let mut last_end = canceled_at;
    for collector in collectors {
        let (states, ended) = collector.await?;
        last_end = last_end.max(ended);
        sequences.push(states);
    }
    let first = sequences.first().cloned().unwrap_or_default();
    let agreed = sequences.iter().all(|s| *s == first);
    let ended_canceled = sequences
        .iter()
        .all(|s| s.last().map(String::as_str) == Some("TASK_STATE_CANCELED"));

    println!();
    print_header();
    let rows = [
        (
            "first working: A2A SendStreamingMessage",
            Stats::of(&a2a_times),
        ),
        (
            "first working: POST /v1/runs + events",
            Stats::of(&rest_times),
        ),
        (
            "answer to next ask: A2A SubscribeToTask",
            Stats::of(&a2a_event),
        ),
        (
            "answer to next ask: runs API events",
            Stats::of(&rest_event),
        ),
    ];
    for (name, stats) in &rows {
        print_row(name, stats);
    }
    println!();
    println!(
        "A2A adds {:+.2} ms to the first `working` (median), {:+.2} ms per event (median)",
        rows[0].1.median - rows[1].1.median,
        rows[2].1.median - rows[3].1.median
    );
    println!(
        "fan-out: {streams} streams, {} updates each, same order on all: {agreed}, all ended `canceled`: {ended_canceled}; last stream ended {:.1} ms after the cancel",
        first.len(),
        last_end.duration_since(canceled_at).as_secs_f64() * 1000.0
    );
    if !agreed || !ended_canceled {
        bail!("the streams did not all see the same updates in order");
    }
    Ok(())
}
