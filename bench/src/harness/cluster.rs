//! The Swarm backend on one node and on three (issue 25): cold-create throughput and warm-pool
//! claim latency through the stack of `compose.swarm.yaml`, on a local cluster of
//! Docker-in-Docker nodes (`scripts/cluster-up.sh`, with a prefix and subnet of its own,
//! removed at the end).
//!
//! The two arms are the same cluster, alternated round by round: "one node" drains nodes 2 and
//! 3 (`docker node update --availability drain`: the scheduler places nothing there and
//! shuts down what ran there, so the pool is made again on node 1), "three nodes" makes them
//! active again. Each round, once the pool is full and nothing is being made: `--claims` warm
//! claims one after another (each sandbox deleted, the pool let refill before the next), then
//! `--creates` cold creates at once (a placement preference, so the pool cannot serve them),
//! timed from the first request to the last `201`; the sandboxes are deleted after.
//!
//! Every node of the local cluster shares this machine's cores, so "three nodes" here gives
//! the scheduler more places but no more CPU: the ratio shows what spreading costs or saves
//! when the machine is the same, not what three machines would give.
//!
//! `agentbox-bench cluster --rounds 2 --creates 6 --claims 5 --pool 3`
//! (the images built: images/build.sh, images/build-orchestrator.sh, and run as root)

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use agentbox_bench::{Stats, arg, docker, percentile};
use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

const PREFIX: &str = "agentbox-bench-node";
const SUBNET: &str = "10.213.66.0/24";

/// The benchmark's cluster, removed on drop.
struct Cluster {
    root: PathBuf,
    cache: tempfile::TempDir,
    url: String,
    admin_key: String,
    http: reqwest::Client,
}

impl Cluster {
    // The harness reaps nothing but its own children: std waits for the script itself.
    #[allow(clippy::disallowed_methods)]
    fn script(&self, name: &str, pool: usize) -> anyhow::Result<()> {
        let output = Command::new(self.root.join("scripts").join(name))
            .env("AGENTBOX_CLUSTER_PREFIX", PREFIX)
            .env("AGENTBOX_CLUSTER_SUBNET", SUBNET)
            .env("AGENTBOX_CLUSTER_SKIP_BUILD", "1")
            .env("AGENTBOX_CACHE", self.cache.path())
            .env("AGENTBOX_HEARTBEAT_SECS", "2")
            .env("AGENTBOX_REPLICAS", "1")
            .env("AGENTBOX_POOL_SIZE", pool.to_string())
            .env("AGENTBOX_SANDBOX_MEMORY_MIB", "1024")
            // Each node has two CPUs: reservations of a fifth of one let the pool and a
            // burst fit on node 1 alone.
            .env("AGENTBOX_SANDBOX_CPUS", "0.2")
            .output()
            .with_context(|| format!("running scripts/{name}"))?;
        ensure!(
            output.status.success(),
            "scripts/{name} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    fn up(pool: usize) -> anyhow::Result<Self> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("the workspace root")?
            .to_path_buf();
        let mut cluster = Self {
            root,
            cache: tempfile::tempdir()?,
            url: String::new(),
            admin_key: String::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(180))
                .build()?,
        };
        let _ = cluster.script("cluster-down.sh", pool);
        let started = Instant::now();
        cluster.script("cluster-up.sh", pool)?;
        eprintln!("  cluster up in {:.0} s", started.elapsed().as_secs_f64());
        cluster.admin_key = std::fs::read_to_string(
            cluster
                .cache
                .path()
                .join(format!("cluster-{PREFIX}"))
                .join("admin-key"),
        )?
        .trim()
        .to_string();
        let ip = docker(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{PREFIX}-net\").IPAddress}}}}"),
            &format!("{PREFIX}1"),
        ])?;
        cluster.url = format!("http://{ip}:8090");
        Ok(cluster)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.admin_key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Creates a sandbox; its id and how long the create took.
    async fn create(&self, body: Value) -> anyhow::Result<(String, Duration)> {
        let asked = Instant::now();
        let (status, answer) = self
            .call(reqwest::Method::POST, "/v1/sandboxes", Some(body))
            .await?;
        let took = asked.elapsed();
        if status != 201 {
            bail!("create: {status} {answer}");
        }
        Ok((answer["id"].as_str().context("id")?.to_string(), took))
    }

    async fn delete(&self, id: &str) -> anyhow::Result<()> {
        let (status, answer) = self
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/sandboxes/{id}"),
                None,
            )
            .await?;
        ensure!(status == 204, "delete {id}: {status} {answer}");
        Ok(())
    }

    /// `docker` on the manager (node 1).
    fn manager(args: &[&str]) -> anyhow::Result<String> {
        let node = format!("{PREFIX}1");
        let mut full = vec!["exec", node.as_str(), "docker"];
        full.extend_from_slice(args);
        docker(&full)
    }

    /// Drains nodes 2 and 3 (`one`) or makes them active again.
    fn nodes(one: bool) -> anyhow::Result<()> {
        let availability = if one { "drain" } else { "active" };
        for n in [2, 3] {
            Self::manager(&[
                "node",
                "update",
                "--availability",
                availability,
                &format!("{PREFIX}{n}"),
            ])?;
        }
        Ok(())
    }

    /// Waits (180 s at most) until the pool holds `pool` ready members on usable nodes and no
    /// sandbox is being made or lost.
    async fn settle(&self, pool: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let (_, view) = self.call(reqwest::Method::GET, "/v1/cluster", None).await?;
            let ready: u64 = view["nodes"]
                .as_array()
                .map(|nodes| {
                    nodes
                        .iter()
                        .filter(|n| n["availability"] == "active")
                        .filter_map(|n| n["pool_members"].as_u64())
                        .sum()
                })
                .unwrap_or(0);
            let services =
                Self::manager(&["service", "ls", "--filter", "label=agentbox.managed=true"])?
                    .lines()
                    .count()
                    .saturating_sub(1);
            if ready == pool as u64 && services == pool {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "the pool did not settle at {pool}: {ready} ready members, {services} services"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.script("cluster-down.sh", 0);
    }
}

/// One arm's measurements over every round.
#[derive(Default)]
struct Arm {
    claims: Vec<Duration>,
    creates: Vec<Duration>,
    /// Wall time of each round's burst, and the creates in it.
    bursts: Vec<(Duration, usize)>,
}

pub async fn main() -> anyhow::Result<()> {
    let rounds: usize = arg("--rounds", 2);
    let creates: usize = arg("--creates", 6);
    let claims: usize = arg("--claims", 5);
    let pool: usize = arg("--pool", 3).max(1);
    eprintln!(
        "cluster benchmark: {rounds} rounds per arm, {claims} claims and {creates} cold creates at once per round, pool {pool}"
    );
    let cluster = Cluster::up(pool)?;
    let mut arms = [Arm::default(), Arm::default()];
    let names = ["one node", "three nodes"];
    for round in 0..rounds.max(1) {
        for (a, one) in [(0, true), (1, false)] {
            Cluster::nodes(one)?;
            cluster.settle(pool).await?;
            for _ in 0..claims {
                let (id, took) = cluster.create(json!({})).await?;
                arms[a].claims.push(took);
                cluster.delete(&id).await?;
                cluster.settle(pool).await?;
            }
            let burst = Instant::now();
            let made = futures_util::future::join_all((0..creates).map(|_| {
                cluster.create(
                    json!({ "placement": { "preferences": ["node.labels.agentbox.zone"] } }),
                )
            }))
            .await;
            let wall = burst.elapsed();
            let mut ids = Vec::new();
            for made in made {
                let (id, took) = made?;
                arms[a].creates.push(took);
                ids.push(id);
            }
            arms[a].bursts.push((wall, ids.len()));
            eprintln!(
                "  round {} {}: {} creates in {:.1} s, claims median {:.1} ms",
                round + 1,
                names[a],
                ids.len(),
                wall.as_secs_f64(),
                Stats::of(&arms[a].claims).median
            );
            for id in &ids {
                cluster.delete(id).await?;
            }
        }
    }
    Cluster::nodes(false)?;

    println!();
    println!(
        "| arm | creates | creates/s | create median s | create max s | claims | claim median ms | claim p90 ms | claim max ms |\n|---|---|---|---|---|---|---|---|---|"
    );
    let mut throughput = [0.0; 2];
    let mut claim_median = [0.0; 2];
    for (a, arm) in arms.iter().enumerate() {
        let (wall, count) = arm
            .bursts
            .iter()
            .fold((Duration::ZERO, 0), |(w, c), (wall, n)| (w + *wall, c + n));
        throughput[a] = count as f64 / wall.as_secs_f64();
        let created = Stats::of(&arm.creates);
        let claimed = Stats::of(&arm.claims);
        claim_median[a] = claimed.median;
        println!(
            "| {} | {count} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {:.1} | {:.1} |",
            names[a],
            throughput[a],
            created.median / 1000.0,
            created.max / 1000.0,
            claimed.n,
            claimed.median,
            percentile(&arm.claims, 0.9),
            claimed.max,
        );
    }
    println!(
        "\nthree nodes / one node: create throughput {:.2}, claim median {:.2} (one machine: {} cores shared by every node)",
        throughput[1] / throughput[0],
        claim_median[1] / claim_median[0],
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(())
}
