//! Shared pieces of the benchmark harnesses: statistics, docker helpers, a private network with
//! fixed addresses (so no `docker inspect` sits inside a timed section), and report printing.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// The benchmark network and the fixed address its containers get.
pub const NETWORK: &str = "agentbox-bench";
pub const SUBNET: &str = "172.31.250.0/24";

/// Runs `docker` and returns trimmed stdout, failing with stderr.
// A benchmark drives the host's docker CLI and times it; the bench process reaps nothing but
// its own children, so std waits for them.
#[allow(clippy::disallowed_methods)]
pub fn docker(args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("docker")
        .args(args)
        .output()
        .with_context(|| format!("running docker {args:?}"))?;
    if !output.status.success() {
        bail!(
            "docker {args:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The container of sandbox `sandbox_id`, found by its label (sandbox containers have no names).
pub fn sandbox_container(sandbox_id: &str) -> anyhow::Result<String> {
    let filter = format!("label=agentbox.sandbox_id={sandbox_id}");
    docker(&["ps", "-aq", "--no-trunc", "--filter", &filter])?
        .lines()
        .next()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no container for sandbox {sandbox_id}"))
}

/// Creates the benchmark network if it does not exist.
pub fn ensure_network() -> anyhow::Result<()> {
    if docker(&["network", "inspect", NETWORK]).is_err()
        && let Err(error) = docker(&["network", "create", "--subnet", SUBNET, NETWORK])
    {
        // Another harness running beside this one (the suite's smoke runs go in two lanes)
        // may have made it meanwhile.
        docker(&["network", "inspect", NETWORK]).map_err(|_| error)?;
    }
    Ok(())
}

/// `docker run` flags equal to the orchestrator's default per-sandbox limits
/// (`--memory-mib 2048 --cpus 1 --pids 1024 --shm-mib 512`, all capabilities dropped).
pub const SANDBOX_LIMITS: &[&str] = &[
    "--memory",
    "2048m",
    "--memory-swap",
    "2048m",
    "--cpus",
    "1",
    "--pids-limit",
    "1024",
    "--shm-size",
    "512m",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
];

/// `docker stats`' "used / limit" memory column, in MiB.
pub fn parse_mib(text: &str) -> Option<f64> {
    let used = text.split('/').next()?.trim();
    let (number, factor) = if let Some(n) = used.strip_suffix("GiB") {
        (n, 1024.0)
    } else if let Some(n) = used.strip_suffix("MiB") {
        (n, 1.0)
    } else if let Some(n) = used.strip_suffix("KiB") {
        (n, 1.0 / 1024.0)
    } else {
        return None;
    };
    number.trim().parse::<f64>().ok().map(|v| v * factor)
}

/// Starts a sandbox container from `image` named `name` (removing a leftover of the same name)
/// on the benchmark network at `ip`, with API key `key`; the caller removes it.
pub fn start_sandbox(name: &str, ip: &str, key: &str, image: &str) -> anyhow::Result<()> {
    start_sandbox_with(name, ip, key, image, &[])
}

/// [`start_sandbox`] with extra `NAME=VALUE` environment variables for sandboxd.
pub fn start_sandbox_with(
    name: &str,
    ip: &str,
    key: &str,
    image: &str,
    env: &[&str],
) -> anyhow::Result<()> {
    let _ = docker(&["rm", "-f", name]);
    let key = format!("SANDBOX_API_KEY={key}");
    let mut args = vec![
        "run",
        "-d",
        "--rm",
        "--name",
        name,
        "--network",
        NETWORK,
        "--ip",
        ip,
        "--label",
        "agentbox.bench=1",
        "-e",
        &key,
    ];
    for var in env {
        args.extend(["-e", var]);
    }
    args.push(image);
    docker(&args)?;
    Ok(())
}

/// Polls the sandbox at `ip`'s `/readyz` with `key` until it answers 200, or fails at `deadline`.
pub async fn wait_ready(
    client: &reqwest::Client,
    ip: &str,
    key: &str,
    deadline: std::time::Instant,
) -> anyhow::Result<()> {
    let url = format!("http://{ip}:8080/readyz");
    loop {
        let response = client.get(&url).bearer_auth(key).send().await;
        if matches!(&response, Ok(r) if r.status() == 200) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!("{url} not ready in time");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Summary statistics of a sample, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(samples: &[Duration]) -> Self {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        let pick = |q: f64| quantile_of_sorted(&ms, q);
        let median = if ms.is_empty() {
            f64::NAN
        } else if ms.len() % 2 == 1 {
            ms[ms.len() / 2]
        } else {
            (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
        };
        Self {
            n: ms.len(),
            median,
            p90: pick(0.9),
            p99: pick(0.99),
            min: ms.first().copied().unwrap_or(f64::NAN),
            max: ms.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Prints one row of a results table.
pub fn print_row(name: &str, stats: &Stats) {
    println!(
        "| {name:<44} | {:>4} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} |",
        stats.n, stats.median, stats.p90, stats.min, stats.max
    );
}

pub fn print_header() {
    println!(
        "| {:<44} | {:>4} | {:>9} | {:>9} | {:>9} | {:>9} |",
        "what", "n", "median ms", "p90 ms", "min ms", "max ms"
    );
    println!(
        "|{:-<46}|{:-<6}|{:-<11}|{:-<11}|{:-<11}|{:-<11}|",
        "", "", "", "", "", ""
    );
}

/// Reads `--name value` from the command line.
pub fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The orchestrator binary the harnesses start (`--orchestrator`), by default the one cargo built
/// beside this harness (the same target directory and profile, wherever `CARGO_TARGET_DIR`
/// points).
pub fn orchestrator_binary() -> String {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("orchestrator")))
        .map(|path| path.display().to_string())
        .unwrap_or_else(|| "target/release/orchestrator".to_string());
    arg("--orchestrator", beside)
}

/// The admin key of the orchestrators the benchmarks start.
pub const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdefghij";

/// `POST /v1/sandboxes` with an empty body as the admin: how long the answer took and the id.
pub async fn create_sandbox(
    client: &reqwest::Client,
    server: &OrchestratorServer,
) -> anyhow::Result<(Duration, String)> {
    let started = std::time::Instant::now();
    let response = client
        .post(format!("{}/v1/sandboxes", server.url))
        .bearer_auth(ADMIN_KEY)
        .json(&serde_json::json!({}))
        .send()
        .await?;
    let took = started.elapsed();
    let status = response.status();
    let body: Value = response.json().await?;
    if status != 201 {
        bail!("create answered {status}: {body}");
    }
    Ok((took, body["id"].as_str().context("id")?.to_string()))
}

/// A value of the orchestrator's Prometheus text at `/metrics` (`-1` when it cannot be read).
pub async fn metric(client: &reqwest::Client, server: &OrchestratorServer, name: &str) -> f64 {
    let Ok(response) = client
        .get(format!("{}/metrics", server.url))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
    else {
        return -1.0;
    };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1.0)
}

/// An orchestrator under test: the bench's own child, with its own instance, network and data
/// directory; killed, waited for and cleaned up (containers, network, data) on drop.
pub struct OrchestratorServer {
    child: Child,
    pub url: String,
    pub instance: String,
    pub network: String,
    data: std::path::PathBuf,
    /// Its log (JSON lines, the last [`LOG_LINES_KEPT`]).
    log: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

/// How many of an orchestrator's log lines a benchmark keeps.
const LOG_LINES_KEPT: usize = 200_000;

impl OrchestratorServer {
    /// Its data directory (the database, `master.key`, artifacts).
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data
    }

    /// Starts `binary serve` with `pool` warm sandboxes of `image` and `extra` flags.
    pub fn start(
        binary: &str,
        image: &str,
        pool: usize,
        tag: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        Self::start_in(binary, image, pool, tag, extra, &std::env::temp_dir())
    }

    /// [`Self::start`] with its data directory under `data_root` (e.g. a tmpfs, to tell the
    /// store's disk from the rest).
    pub fn start_in(
        binary: &str,
        image: &str,
        pool: usize,
        tag: &str,
        extra: &[String],
        data_root: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let instance = format!("bench-{tag}-{}", std::process::id());
        let data = data_root.join(format!("agentbox-{instance}"));
        let _ = std::fs::remove_dir_all(&data);
        let network = format!("agentbox-{instance}");
        Self::spawn(binary, image, pool, extra, &[], instance, network, data)
    }

    /// A replica named `replica` on the Postgres at `database_url`: of a new installation, or
    /// (`beside`) of another replica's (its instance, network and data directory).
    pub fn start_replica(
        binary: &str,
        image: &str,
        pool: usize,
        database_url: &str,
        replica: &str,
        beside: Option<&Self>,
    ) -> anyhow::Result<Self> {
        let (instance, network, data) = match beside {
            Some(peer) => (
                peer.instance.clone(),
                peer.network.clone(),
                peer.data.clone(),
            ),
            None => {
                let instance = format!("bench-replicas-{}", std::process::id());
                let data = std::env::temp_dir().join(format!("agentbox-{instance}"));
                let _ = std::fs::remove_dir_all(&data);
                (instance.clone(), format!("agentbox-{instance}"), data)
            }
        };
        Self::spawn(
            binary,
            image,
            pool,
            &["--replica".to_string(), replica.to_string()],
            &[("DATABASE_URL", database_url)],
            instance,
            network,
            data,
        )
    }

    #[allow(clippy::too_many_arguments)]
    // The orchestrator under test is the bench's own child, killed and waited for on drop.
    #[allow(clippy::disallowed_methods)]
    fn spawn(
        binary: &str,
        image: &str,
        pool: usize,
        extra: &[String],
        env: &[(&str, &str)],
        instance: String,
        network: String,
        data: std::path::PathBuf,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(binary);
        command.env_remove("DATABASE_URL");
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--instance",
                &instance,
                "--network",
                &network,
                "--image",
                image,
            ])
            .args([
                "--pool-size",
                &pool.to_string(),
                "--ready-timeout-secs",
                "600",
            ])
            .args(extra)
            .env("AGENTBOX_ADMIN_KEY", ADMIN_KEY)
            .env(
                "RUST_LOG",
                // The claim write's two parts are logged at debug (the claims benchmark).
                "warn,orchestrator=info,orchestrator::db=debug",
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| {
                format!("starting {binary} (build it: cargo build --release -p orchestrator)")
            })?;
        let stderr = child.stderr.take().context("stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("\"listening\"") {
                    let _ = tx.send(line.clone());
                }
                if let Ok(mut kept) = kept.lock() {
                    if kept.len() == LOG_LINES_KEPT {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .context("the orchestrator did not start")?;
        let value: Value = serde_json::from_str(&line)?;
        let url = format!("http://{}", value["addr"].as_str().context("addr")?);
        Ok(Self {
            child,
            url,
            instance,
            network,
            data,
            log,
        })
    }

    /// Its log lines (JSON) that contain `needle`, oldest first.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log
            .lock()
            .map(|log| log.iter().filter(|l| l.contains(needle)).cloned().collect())
            .unwrap_or_default()
    }
}

impl Drop for OrchestratorServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(ids) = docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=agentbox.instance={}", self.instance),
        ]) {
            for id in ids.lines().filter(|l| !l.is_empty()) {
                let _ = docker(&["rm", "-f", "-v", id]);
            }
        }
        if let Ok(networks) = docker(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label=agentbox.instance={}", self.instance),
        ]) {
            for network in networks.split_whitespace() {
                let _ = docker(&["network", "rm", network]);
            }
        }
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// The `q` quantile (0 to 1, nearest rank) of `samples`, in milliseconds.
pub fn percentile(samples: &[Duration], q: f64) -> f64 {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    quantile_of_sorted(&ms, q)
}

/// The `q` quantile (nearest rank) of ascending `ms`; NaN when empty.
fn quantile_of_sorted(ms: &[f64], q: f64) -> f64 {
    if ms.is_empty() {
        return f64::NAN;
    }
    let i = ((ms.len() as f64 - 1.0) * q).round() as usize;
    ms[i.min(ms.len() - 1)]
}
