//! Code execution benchmark: a Python `print(1)` on a warm Jupyter kernel through
//! `POST /v1/jupyter/execute` against the obvious baseline, `docker exec <id> python3 -c
//! 'print(1)'`, and a stateless Node run through `POST /v1/nodejs/execute` against
//! `docker exec <id> node -e 'console.log(1)'`, in the same container and the same run. The
//! first Jupyter call (which starts the kernel) is reported apart.
//!
//! `cargo run --release -p agentbox-bench -- code-exec --iterations 30`

use std::time::{Duration, Instant};

use agentbox_bench::{Stats, arg, docker, ensure_network, print_header, print_row, start_sandbox};
use anyhow::bail;

const IP: &str = "172.31.250.12";
const KEY: &str = "bench-key-0123456789";

pub async fn main() -> anyhow::Result<()> {
    let iterations: usize = arg("--iterations", 30);
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    ensure_network()?;
    let name = format!("agentbox-bench-code-{}", std::process::id());
    start_sandbox(&name, IP, KEY, &image)?;
    let result = run(&name, iterations).await;
    let _ = docker(&["rm", "-f", &name]);
    result
}

/// One API call; checks that it printed `1`.
async fn call(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
    stdout_of: fn(&serde_json::Value) -> Option<String>,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response = client.post(url).bearer_auth(KEY).json(body).send().await?;
    let status = response.status();
    let answer: serde_json::Value = response.json().await?;
    let elapsed = started.elapsed();
    if status != 200 || stdout_of(&answer).as_deref() != Some("1\n") {
        bail!("{url} answered {status}: {answer}");
    }
    Ok(elapsed)
}

fn jupyter_stdout(answer: &serde_json::Value) -> Option<String> {
    answer["data"]["outputs"][0]["text"]
        .as_str()
        .map(str::to_string)
}

fn node_stdout(answer: &serde_json::Value) -> Option<String> {
    answer["data"]["stdout"].as_str().map(str::to_string)
}

async fn run(container: &str, iterations: usize) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(1)
        .build()?;
    let api = format!("http://{IP}:8080");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = client
            .get(format!("{api}/readyz"))
            .bearer_auth(KEY)
            .send()
            .await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the sandbox did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("code execution benchmark: {iterations} iterations each, one container");

    let jupyter = format!("{api}/v1/jupyter/execute");
    let print = serde_json::json!({"code": "print(1)"});
    let cold = call(&client, &jupyter, &print, jupyter_stdout).await?;
    let mut warm = Vec::new();
    for _ in 0..iterations {
        warm.push(call(&client, &jupyter, &print, jupyter_stdout).await?);
    }
    let mut docker_python = Vec::new();
    for i in 0..=iterations {
        let started = Instant::now();
        let out = docker(&["exec", container, "python3", "-c", "print(1)"])?;
        if out != "1" {
            bail!("docker exec python3 printed {out:?}");
        }
        if i > 0 {
            docker_python.push(started.elapsed());
        }
    }

    let node = format!("{api}/v1/nodejs/execute");
    let log = serde_json::json!({"code": "console.log(1)"});
    let mut api_node = Vec::new();
    for i in 0..=iterations {
        let elapsed = call(&client, &node, &log, node_stdout).await?;
        if i > 0 {
            api_node.push(elapsed);
        }
    }
    let mut docker_node = Vec::new();
    for i in 0..=iterations {
        let started = Instant::now();
        let out = docker(&["exec", container, "node", "-e", "console.log(1)"])?;
        if out != "1" {
            bail!("docker exec node printed {out:?}");
        }
        if i > 0 {
            docker_node.push(started.elapsed());
        }
    }

    let rows = [
        ("python print(1): API /v1/jupyter/execute", Stats::of(&warm)),
        (
            "python print(1): docker exec python3 -c",
            Stats::of(&docker_python),
        ),
        (
            "node console.log(1): API /v1/nodejs/execute",
            Stats::of(&api_node),
        ),
        (
            "node console.log(1): docker exec node -e",
            Stats::of(&docker_node),
        ),
    ];
    print_header();
    for (name, stats) in &rows {
        print_row(name, stats);
    }
    println!(
        "jupyter print(1): median {:.1} ms on a warm kernel, {:.1}x faster than docker exec python3 -c ({:.1} ms); first call with the kernel's start {:.0} ms",
        rows[0].1.median,
        rows[1].1.median / rows[0].1.median,
        rows[1].1.median,
        cold.as_secs_f64() * 1000.0
    );
    println!(
        "node console.log(1): median {:.1} ms stateless, {:.2}x docker exec node -e ({:.1} ms)",
        rows[2].1.median,
        rows[3].1.median / rows[2].1.median,
        rows[3].1.median
    );
    Ok(())
}
