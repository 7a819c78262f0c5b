//! Capability benchmark: the sandbox API against the tools agents use today, in the same
//! container and the same run.
//!
//! - screenshot: `GET /v1/browser/screenshot` (1280x800 PNG) against `import -window root png:-`
//!   (OpenAI sample path) and `scrot` + `convert` (Anthropic computer-use-demo path); the same
//!   route with `format=jpeg` (quality 80) against `import -window root jpeg:-`;
//! - click: `POST /v1/browser/actions` CLICK against `xdotool mousemove --sync X Y click 1`;
//!   MOVE_TO alone; and CLICK again once a settle wait has been asked for (from then on each
//!   action fingerprints the screen first, for the next wait);
//! - exec: `echo` through `POST /v1/shell/exec` against `docker exec <id> echo`.
//!
//! API calls are timed from the host over the container network (one keep-alive connection, as
//! an SDK client would use). The in-container tools are timed inside the container by a shell
//! loop (`date +%s%N` around each run), so `docker exec` overhead is not charged to them;
//! `docker exec` itself is timed from the host.
//!
//! The screen shows a page with text and a table (opened over CDP), not a blank desktop.
//!
//! `cargo run --release -p agentbox-bench -- capabilities --iterations 50`

use std::time::{Duration, Instant};

use agentbox_bench::{
    Stats, arg, docker, ensure_network, print_header, print_row, start_sandbox, wait_ready,
};
use anyhow::{Context, bail};

const IP: &str = "172.31.250.11";
const KEY: &str = "bench-key-0123456789";

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 50);
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    ensure_network()?;
    let name = format!("agentbox-bench-capabilities-{}", std::process::id());
    start_sandbox(&name, IP, KEY, &image)?;
    let result = run(&name, iterations).await;
    let _ = docker(&["rm", "-f", &name]);
    result
}

async fn run(container: &str, iterations: usize) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(1)
        .build()?;
    let api = format!("http://{IP}:8080");
    wait_ready(&client, IP, KEY, Instant::now() + Duration::from_secs(120)).await?;
    show_busy_page(&client).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    println!("capability benchmark: {iterations} iterations each, one container, 1280x800 screen");

    // Screenshots through the API.
    let (api_shot, png_bytes) = time_screenshots(&client, &api, iterations, "png").await?;
    let (api_jpeg, jpeg_bytes) = time_screenshots(&client, &api, iterations, "jpeg").await?;
    let import = time_in_container(
        container,
        iterations,
        "import -window root png:- > /dev/null",
    )?;
    let import_jpeg = time_in_container(
        container,
        iterations,
        "import -window root -quality 80 jpeg:- > /dev/null",
    )?;
    let scrot = time_in_container(
        container,
        iterations,
        "scrot -o /tmp/bench-shot.png && convert /tmp/bench-shot.png -resize 1280x800 png:- > /dev/null",
    )?;

    // Click and pointer moves through the API, on an empty part of the page, as a client that
    // never asks for a settle wait (most AIO clients) sends them.
    let api_click = time_actions(&client, &api, iterations, "CLICK").await?;
    let api_move = time_actions(&client, &api, iterations, "MOVE_TO").await?;
    let xdotool = time_in_container(
        container,
        iterations,
        // The target moves each time, as the API clicks' does: `--sync` waits for the pointer
        // to move, so a move to where it already is would wait forever.
        "xdotool mousemove --sync $((1100 + ${i:-0} % 5)) 710 click 1",
    )?;

    // echo through the API against docker exec.
    let mut api_exec = Vec::new();
    for i in 0..=iterations {
        let started = Instant::now();
        let response = client
            .post(format!("{api}/v1/shell/exec"))
            .bearer_auth(KEY)
            .json(&serde_json::json!({"command": "echo hi"}))
            .send()
            .await?;
        let status = response.status();
        let body: serde_json::Value = response.json().await?;
        if status != 200 || body["data"]["output"].as_str().map(str::trim) != Some("hi") {
            bail!("exec answered {status}: {body}");
        }
        if i > 0 {
            api_exec.push(started.elapsed());
        }
    }
    let mut docker_exec = Vec::new();
    for i in 0..=iterations {
        let started = Instant::now();
        let out = docker(&["exec", container, "echo", "hi"])?;
        if out != "hi" {
            bail!("docker exec printed {out:?}");
        }
        if i > 0 {
            docker_exec.push(started.elapsed());
        }
    }

    // Once a client has asked for a settle wait (as the orchestrator's agent loop does after
    // each action), every action first fingerprints the screen for the next wait.
    let response = client
        .post(format!("{api}/v1/browser/actions"))
        .bearer_auth(KEY)
        .json(&serde_json::json!({"action_type": "WAIT_SETTLED", "quiet_ms": 50}))
        .send()
        .await?;
    if response.status() != 200 {
        bail!("WAIT_SETTLED answered {}", response.status());
    }
    let settling_click = time_actions(&client, &api, iterations, "CLICK").await?;

    let rows = [
        (
            "screenshot: API GET /v1/browser/screenshot",
            Stats::of(&api_shot),
        ),
        ("screenshot: import -window root png:-", Stats::of(&import)),
        ("screenshot: scrot + convert", Stats::of(&scrot)),
        ("click: API POST /v1/browser/actions", Stats::of(&api_click)),
        (
            "click: xdotool mousemove --sync click 1",
            Stats::of(&xdotool),
        ),
        ("exec echo: API POST /v1/shell/exec", Stats::of(&api_exec)),
        ("exec echo: docker exec", Stats::of(&docker_exec)),
        (
            "screenshot: API ...?format=jpeg (q80)",
            Stats::of(&api_jpeg),
        ),
        (
            "screenshot: import -quality 80 jpeg:-",
            Stats::of(&import_jpeg),
        ),
        ("move: API POST /v1/browser/actions", Stats::of(&api_move)),
        (
            "click: API, settle waits in use (fingerprint)",
            Stats::of(&settling_click),
        ),
    ];
    println!();
    print_header();
    for (name, stats) in &rows {
        print_row(name, stats);
    }
    let ratio = |baseline: usize, ours: usize| rows[baseline].1.median / rows[ours].1.median;
    println!();
    println!(
        "API PNG size: {} KiB, JPEG size: {} KiB",
        png_bytes / 1024,
        jpeg_bytes / 1024
    );
    println!(
        "screenshot: median {:.1} ms (goal <= 20); {:.1}x faster than import (goal >= 3), {:.1}x faster than scrot+convert",
        rows[0].1.median,
        ratio(1, 0),
        ratio(2, 0)
    );
    println!(
        "jpeg screenshot: median {:.2} ms (goal <= 5); PNG/JPEG {:.2}; {:.1}x faster than import to JPEG",
        rows[7].1.median,
        ratio(0, 7),
        ratio(8, 7)
    );
    println!(
        "click: median {:.2} ms (goal <= 2); {:.1}x faster than xdotool (goal >= 20)",
        rows[3].1.median,
        ratio(4, 3)
    );
    println!(
        "exec: median {:.2} ms (goal <= 3); {:.1}x faster than docker exec (goal >= 10)",
        rows[5].1.median,
        ratio(6, 5)
    );
    println!(
        "move: median {:.2} ms (goal <= 2); click with settle waits in use: median {:.2} ms",
        rows[9].1.median, rows[10].1.median
    );
    Ok(())
}

/// Times `iterations` desktop actions of `action_type` at points that change each time (after
/// one warm-up).
async fn time_actions(
    client: &reqwest::Client,
    api: &str,
    iterations: usize,
    action_type: &str,
) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::new();
    for i in 0..=iterations {
        let body = serde_json::json!({
            "action_type": action_type, "x": 1100.0 + (i % 5) as f64, "y": 700.0
        });
        let started = Instant::now();
        let response = client
            .post(format!("{api}/v1/browser/actions"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let _ = response.bytes().await?;
        if status != 200 {
            bail!("{action_type} answered {status}");
        }
        if i > 0 {
            times.push(started.elapsed());
        }
    }
    Ok(times)
}

/// Times `iterations` screenshots in `format` (after one warm-up); returns the times and the
/// size of the last image.
async fn time_screenshots(
    client: &reqwest::Client,
    api: &str,
    iterations: usize,
    format: &str,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let (magic, url): (&[u8], String) = match format {
        "jpeg" => (
            b"\xff\xd8",
            format!("{api}/v1/browser/screenshot?format=jpeg"),
        ),
        _ => (b"\x89PNG", format!("{api}/v1/browser/screenshot")),
    };
    let mut times = Vec::new();
    let mut bytes = 0;
    for i in 0..=iterations {
        let started = Instant::now();
        let response = client.get(&url).bearer_auth(KEY).send().await?;
        if response.status() != 200 {
            bail!("{format} screenshot answered {}", response.status());
        }
        let width = header(&response, "x-image-width");
        let body = response.bytes().await?;
        if i > 0 {
            times.push(started.elapsed());
        }
        bytes = body.len();
        if !body.starts_with(magic) || width != "1280" {
            bail!("not a 1280-wide {format} (width {width})");
        }
    }
    Ok((times, bytes))
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Opens a page with text and a table in Chromium, over CDP, so screenshots are not blank.
async fn show_busy_page(client: &reqwest::Client) -> anyhow::Result<()> {
    let mut rows = String::new();
    for i in 0..40 {
        rows.push_str(&format!(
            "<tr><td>{i}</td><td>Lorem ipsum dolor sit amet {i}</td><td>{}</td><td>consectetur adipiscing elit</td></tr>",
            i * 37 % 101
        ));
    }
    let html = format!(
        "<html><body style='font-family:sans-serif'><h1>Quarterly report</h1><p>{}</p><table border=1>{rows}</table></body></html>",
        "The quick brown fox jumps over the lazy dog. ".repeat(20)
    );
    let url = format!("data:text/html,{}", urlencode(&html));
    let response = client
        .put(format!("http://{IP}:8080/cdp/json/new?{url}"))
        .bearer_auth(KEY)
        .send()
        .await
        .context("opening a page over CDP")?;
    if !response.status().is_success() {
        bail!("CDP /json/new answered {}", response.status());
    }
    Ok(())
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Times `command` `iterations` times inside the container (after one warm-up run).
fn time_in_container(
    container: &str,
    iterations: usize,
    command: &str,
) -> anyhow::Result<Vec<Duration>> {
    let script = format!(
        "{command}; for i in $(seq {iterations}); do s=$(date +%s%N); {command}; e=$(date +%s%N); echo $(( (e - s) / 1000 )); done"
    );
    let out = docker(&["exec", container, "sh", "-c", &script])?;
    let samples: Vec<Duration> = out
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .map(Duration::from_micros)
        .collect();
    if samples.len() != iterations {
        bail!("{command}: got {} timings, output: {out}", samples.len());
    }
    Ok(samples)
}
