//! The Swarm backend on a real three-node Docker Swarm built inside the test: Docker-in-Docker
//! nodes of the project's own `agentbox/swarm-node` image on a private network, the sandbox and
//! orchestrator images loaded into each (`scripts/cluster-up.sh`, the command a person trying it
//! out runs), the stack of `compose.swarm.yaml` deployed: Postgres, two orchestrator replicas
//! and the front, the one address every call goes to.
//!
//! Node 1 is the Swarm's one manager and nodes 2 and 3 are workers, so losing or cutting off a
//! node never stalls the managers' Raft for an election.
//!
//! Heavy (three engines, 1.8 GB saved once and loaded three times): one test, run alone
//! (`.config/nextest.toml`), and the cluster removed at the end however the test ends.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agentbox_tests::docker;
use anyhow::{Context, bail, ensure};
use reqwest::Method;
use serde_json::{Value, json};

const PREFIX: &str = "agentbox-it-node";
const SUBNET: &str = "10.213.77.0/24";

/// The cluster of this test: built by `scripts/cluster-up.sh`, removed on drop.
struct Cluster {
    root: PathBuf,
    cache: tempfile::TempDir,
    url: String,
    admin_key: String,
    http: reqwest::Client,
}

impl Cluster {
    /// Runs `scripts/<name>` for this test's cluster and waits for it.
    // The test process is not PID 1 and reaps nothing but its own children: std waits for the
    // script itself.
    #[allow(clippy::disallowed_methods)]
    fn script(root: &Path, cache: &Path, name: &str) -> std::io::Result<std::process::Output> {
        Command::new(root.join("scripts").join(name))
            .env("AGENTBOX_CLUSTER_PREFIX", PREFIX)
            .env("AGENTBOX_CLUSTER_SUBNET", SUBNET)
            .env("AGENTBOX_CLUSTER_SKIP_BUILD", "1")
            .env("AGENTBOX_CACHE", cache)
            .env("AGENTBOX_HEARTBEAT_SECS", "2")
            .env("AGENTBOX_SWEEP_INTERVAL_SECS", "3")
            .env("AGENTBOX_SANDBOX_MEMORY_MIB", "1024")
            // Each node has two CPUs: a reservation of half of one leaves room for the pool
            // and the test's sandboxes on every node.
            .env("AGENTBOX_SANDBOX_CPUS", "0.5")
            .output()
    }

    fn up() -> anyhow::Result<Self> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("the workspace root")?
            .to_path_buf();
        for image in ["agentbox/sandbox:latest", "agentbox/orchestrator:latest"] {
            docker(&["image", "inspect", image]).with_context(|| {
                format!(
                    "{image} is missing: build it (images/build.sh, images/build-orchestrator.sh)"
                )
            })?;
        }
        let cache = tempfile::tempdir()?;
        // A cluster left by an earlier run that was killed goes first.
        let _ = Self::script(&root, cache.path(), "cluster-down.sh");
        let output = Self::script(&root, cache.path(), "cluster-up.sh")?;
        let mut cluster = Self {
            url: String::new(),
            admin_key: String::new(),
            // A connection per request: the front balances requests over both replicas.
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .pool_max_idle_per_host(0)
                .build()?,
            root,
            cache,
        };
        ensure!(
            output.status.success(),
            "cluster-up.sh failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let admin_key = std::fs::read_to_string(
            cluster
                .cache
                .path()
                .join(format!("cluster-{PREFIX}"))
                .join("admin-key"),
        )?;
        let ip = docker(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{PREFIX}-net\").IPAddress}}}}"),
            &node(1),
        ])?;
        cluster.url = format!("http://{ip}:8090");
        cluster.admin_key = admin_key.trim().to_string();
        Ok(cluster)
    }

    async fn call(
        &self,
        method: Method,
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
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    async fn create(&self, body: Value) -> anyhow::Result<(u16, Value)> {
        self.call(Method::POST, "/v1/sandboxes", Some(body)).await
    }

    async fn shell(&self, id: &str, command: &str) -> anyhow::Result<String> {
        let (status, answer) = self
            .call(
                Method::POST,
                &format!("/v1/sandboxes/{id}/api/v1/shell/exec"),
                Some(json!({ "command": command })),
            )
            .await?;
        ensure!(status == 200, "{command:?}: {status} {answer}");
        Ok(answer["data"]["output"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string())
    }

    async fn status(&self, id: &str) -> anyhow::Result<Value> {
        let (status, answer) = self
            .call(Method::GET, &format!("/v1/sandboxes/{id}"), None)
            .await?;
        ensure!(status == 200, "GET {id}: {status} {answer}");
        Ok(answer)
    }

    /// Waits (90 s at most) until sandbox `id` is `lost`; its record.
    async fn wait_lost(&self, id: &str) -> anyhow::Result<Value> {
        let started = Instant::now();
        loop {
            let record = self.status(id).await?;
            if record["status"] == "lost" {
                return Ok(record);
            }
            ensure!(
                started.elapsed() < Duration::from_secs(90),
                "sandbox {id} not lost after 90 s: {record}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Waits (120 s at most) until the manager sees node `n` ready.
    async fn wait_ready(n: usize) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            // A manager may answer with an error for a moment (seen in CI with three managers:
            // "rpc error: code = DeadlineExceeded" while Raft elected a leader): that is "not
            // ready yet", and the last answer is named if the wait runs out.
            let state = Self::on_node(1, &["node", "inspect", "-f", "{{.Status.State}}", &node(n)])
                .unwrap_or_else(|error| format!("{error:#}"));
            if state == "ready" {
                return Ok(());
            }
            ensure!(
                started.elapsed() < Duration::from_secs(120),
                "node {n} not ready again: {state}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `docker` on node `n`'s engine.
    fn on_node(n: usize, args: &[&str]) -> anyhow::Result<String> {
        let name = node(n);
        let mut full = vec!["exec", name.as_str(), "docker"];
        full.extend_from_slice(args);
        docker(&full)
    }

    /// The node whose engine runs sandbox `id`'s container.
    fn node_of(id: &str) -> anyhow::Result<usize> {
        let filter = format!("label=agentbox.sandbox_id={id}");
        for n in 1..=3 {
            if !Self::on_node(n, &["ps", "-q", "--filter", &filter])?.is_empty() {
                return Ok(n);
            }
        }
        bail!("no node runs sandbox {id}")
    }

    /// The ids of every sandbox service on the cluster, one per line.
    fn service_ids() -> anyhow::Result<String> {
        Self::on_node(
            1,
            &[
                "service",
                "ls",
                "-q",
                "--filter",
                "label=agentbox.managed=true",
            ],
        )
    }

    /// Every sandbox service on the cluster: (sandbox id, the replica that made it).
    fn services() -> anyhow::Result<Vec<(String, String)>> {
        let ids = Self::service_ids()?;
        let mut args = vec![
            "service",
            "inspect",
            "-f",
            "{{index .Spec.Labels \"agentbox.sandbox_id\"}} {{index .Spec.Labels \"agentbox.replica\"}}",
        ];
        args.extend(ids.split_whitespace());
        if args.len() == 4 {
            return Ok(Vec::new());
        }
        Ok(Self::on_node(1, &args)?
            .lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(id, replica)| (id.to_string(), replica.to_string()))
            .collect())
    }

    /// `GET /v1/cluster`'s replicas: (id, duties), by id.
    async fn replicas(&self) -> anyhow::Result<Vec<(String, Vec<String>)>> {
        let (status, view) = self.call(Method::GET, "/v1/cluster", None).await?;
        ensure!(status == 200, "GET /v1/cluster: {status} {view}");
        let replicas = view["replicas"].as_array().context("replicas")?;
        Ok(replicas
            .iter()
            .map(|r| {
                let duties = r["duties"]
                    .as_array()
                    .map(|d| {
                        d.iter()
                            .filter_map(|d| d.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                (r["id"].as_str().unwrap_or_default().to_string(), duties)
            })
            .collect())
    }

    /// What keeps the database and the cluster from agreeing, if anything: a create or delete
    /// not finished, a ready sandbox without its service, or a service that is neither a
    /// listed sandbox's nor one of the pool members `/v1/cluster` counts (a leak, or a sandbox
    /// made twice). Engine or API errors count as "not yet".
    async fn disagreement(&self) -> Option<String> {
        let check = async {
            let (status, list) = self.call(Method::GET, "/v1/sandboxes", None).await?;
            ensure!(status == 200, "GET /v1/sandboxes: {status} {list}");
            let (status, view) = self.call(Method::GET, "/v1/cluster", None).await?;
            ensure!(status == 200, "GET /v1/cluster: {status} {view}");
            let pool: u64 = view["nodes"]
                .as_array()
                .context("nodes")?
                .iter()
                .filter_map(|n| n["pool_members"].as_u64())
                .sum();
            let services = Self::services()?;
            let ids: BTreeSet<&str> = services.iter().map(|(id, _)| id.as_str()).collect();
            let mut live = BTreeSet::new();
            for sandbox in list["sandboxes"].as_array().context("sandboxes")? {
                let id = sandbox["id"].as_str().unwrap_or_default();
                match sandbox["status"].as_str().unwrap_or_default() {
                    "lost" => {}
                    "ready" | "degraded" => {
                        live.insert(id);
                    }
                    other => return Ok(Some(format!("sandbox {id} is {other}"))),
                }
            }
            let missing: Vec<_> = live.difference(&ids).collect();
            let others = ids.difference(&live).count();
            Ok(
                (!missing.is_empty() || others as u64 != pool || ids.len() != services.len()).then(
                    || {
                        format!(
                            "sandboxes without a service {missing:?}; {others} other services \
                             for {pool} pool members; services {services:?}"
                        )
                    },
                ),
            )
        };
        check
            .await
            .unwrap_or_else(|error: anyhow::Error| Some(format!("{error:#}")))
    }

    /// Waits (`secs` at most) until the database and the cluster agree.
    async fn wait_agreement(&self, secs: u64, after: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let Some(disagreement) = self.disagreement().await else {
                return Ok(());
            };
            ensure!(
                Instant::now() < deadline,
                "{after}: the database and the cluster disagree after {secs} s: {disagreement}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Kills orchestrator replica `replica`'s container (`orchestrator-<slot>`) on node 1.
    fn kill_replica(replica: &str) -> anyhow::Result<()> {
        let slot = replica
            .strip_prefix("orchestrator-")
            .with_context(|| format!("replica id {replica}"))?;
        let tasks = Self::on_node(
            1,
            &[
                "ps",
                "--filter",
                "label=com.docker.swarm.service.name=agentbox_orchestrator",
                "--format",
                "{{.ID}} {{.Label \"com.docker.swarm.task.name\"}}",
            ],
        )?;
        let prefix = format!("agentbox_orchestrator.{slot}.");
        let container = tasks
            .lines()
            .find_map(|line| {
                let (id, task) = line.split_once(' ')?;
                task.starts_with(&prefix).then_some(id)
            })
            .with_context(|| format!("no container of {replica} in {tasks:?}"))?;
        Self::on_node(1, &["kill", container])?;
        Ok(())
    }

    /// Waits (60 s at most) until both replicas have answered a request through the front,
    /// `restarted` (or both, when `None`) in a life begun after `since`.
    async fn wait_both_answer(
        &self,
        restarted: Option<&str>,
        since: Instant,
    ) -> anyhow::Result<()> {
        // In Unix ms, a second early (the clocks of the test and the nodes are the host's).
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .saturating_sub(since.elapsed())
            .as_millis() as i64
            - 1000;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut answered = BTreeSet::new();
        let mut last = String::new();
        while answered.len() < 2 {
            ensure!(
                Instant::now() < deadline,
                "not both replicas answer after 60 s: {answered:?}; last answer {last}"
            );
            match self.call(Method::GET, "/v1/cluster", None).await {
                Ok((200, view)) => {
                    let answered_in_new_life = |r: &&Value| {
                        let new_life = r["started_at"]
                            .as_str()
                            .and_then(agentbox_http::timestamp::unix_ms_from_rfc3339)
                            .is_some_and(|at| at >= since);
                        r["answering"] == true
                            && (new_life || restarted.is_some_and(|id| r["id"] != id))
                    };
                    let replicas = view["replicas"].as_array().context("replicas")?;
                    if let Some(replica) = replicas.iter().find(answered_in_new_life) {
                        answered.insert(replica["id"].as_str().unwrap_or_default().to_string());
                    }
                    last = view.to_string();
                }
                other => last = format!("{other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Self::script(&self.root, self.cache.path(), "cluster-down.sh");
    }
}

fn node(n: usize) -> String {
    format!("{PREFIX}{n}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_spread_over_a_three_node_swarm_and_a_lost_node_is_reported() -> anyhow::Result<()>
{
    let cluster = Cluster::up()?;

    // One sandbox pinned to each zone label, one placed by the scheduler: each runs where it
    // was placed, and each answers through the one orchestrator, across nodes.
    let mut pinned = Vec::new();
    for zone in 1..=3 {
        let (status, sandbox) = cluster
            .create(json!({
                "placement": { "constraints": [format!("node.labels.agentbox.zone=={zone}")] },
                "metadata": { "zone": zone.to_string() },
            }))
            .await?;
        ensure!(status == 201, "create in zone {zone}: {status} {sandbox}");
        let id = sandbox["id"].as_str().context("id")?.to_string();
        assert_eq!(
            Cluster::node_of(&id)?,
            zone,
            "sandbox {id} placed in zone {zone}"
        );
        pinned.push(id);
    }
    let (status, free) = cluster
        .create(json!({ "placement": { "preferences": ["node.labels.agentbox.zone"] } }))
        .await?;
    ensure!(status == 201, "create with a preference: {status} {free}");
    let free = free["id"].as_str().context("id")?.to_string();
    for id in pinned.iter().chain([&free]) {
        let who = cluster
            .shell(id, "id -u; echo $HOME; touch ~/written && echo ok")
            .await?;
        assert_eq!(who, "1000\n/home/agent\nok", "sandbox {id}");
    }

    // The cluster's view: three ready nodes, each with its pinned sandbox and its reservation.
    let (status, view) = cluster.call(Method::GET, "/v1/cluster", None).await?;
    ensure!(status == 200, "GET /v1/cluster: {status} {view}");
    assert_eq!(view["backend"], "swarm", "{view}");
    let nodes = view["nodes"].as_array().context("nodes")?;
    assert_eq!(nodes.len(), 3, "{view}");
    for (zone, id) in pinned.iter().enumerate() {
        let name = node(zone + 1);
        let entry = nodes
            .iter()
            .find(|n| n["name"] == name.as_str())
            .with_context(|| format!("{name} in {view}"))?;
        assert_eq!(entry["state"], "ready", "{entry}");
        assert_eq!(
            entry["labels"]["agentbox.zone"],
            (zone + 1).to_string(),
            "{entry}"
        );
        assert!(
            entry["sandboxes"]
                .as_array()
                .context("sandboxes")?
                .iter()
                .any(|s| s == id.as_str()),
            "{id} on {name}: {entry}"
        );
        assert!(
            entry["reserved_memory_mib"].as_i64().unwrap_or(0) >= 1024,
            "{entry}"
        );
        assert!(entry["free_memory_mib"].as_i64().is_some(), "{entry}");
    }

    // The key's secret file is there and unreadable to the agent; the agent cannot regain root.
    let attempt = cluster
        .shell(
            &pinned[0],
            "ls -ln /run/secrets/sandbox-key | cut -d' ' -f1,3; cat /run/secrets/sandbox-key \
             2>&1 | head -c 80; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status | tr -s '\\t ' ' '",
        )
        .await?;
    assert!(attempt.starts_with("-r-------- 0\n"), "{attempt}");
    assert!(attempt.contains("Permission denied"), "{attempt}");
    assert!(attempt.contains("NoNewPrivs: 1"), "{attempt}");
    assert!(attempt.contains("CapEff: 0000000000000000"), "{attempt}");
    // No way out of the overlay: not to a node, not to the orchestrator's host network.
    let node_ip = docker(&[
        "inspect",
        "-f",
        &format!("{{{{(index .NetworkSettings.Networks \"{PREFIX}-net\").IPAddress}}}}"),
        &node(1),
    ])?;
    let reach = cluster
        .shell(
            &pinned[1],
            &format!(
                "timeout 5 bash -c 'exec 3<>/dev/tcp/{node_ip}/2377' 2>&1; echo \"exit $?\"; \
                 ip route | grep -c default"
            ),
        )
        .await?;
    assert!(
        !reach.contains("exit 0"),
        "a sandbox reached a node: {reach}"
    );
    assert!(
        reach.ends_with("\n0"),
        "a sandbox has a default route: {reach}"
    );

    // What Swarm cannot do is refused by name, before anything is made.
    let services_before = Cluster::service_ids()?;
    for (body, field) in [
        (json!({ "idle_pause_secs": 60 }), "idle_pause_secs"),
        (json!({ "auto_resume": true }), "auto_resume"),
        (json!({ "snapshot": "snp-x" }), "snapshot"),
        (
            json!({ "placement": { "constraints": ["node.hostname==x"] } }),
            "placement.constraints.0",
        ),
    ] {
        let (status, answer) = cluster.create(body.clone()).await?;
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(answer.to_string().contains(field), "{body}: {answer}");
    }
    let (status, answer) = cluster
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{}/pause", pinned[0]),
            None,
        )
        .await?;
    assert_eq!(status, 501, "pause: {answer}");
    let (status, answer) = cluster
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{}/hibernate", pinned[0]),
            None,
        )
        .await?;
    assert_eq!(status, 501, "hibernate: {answer}");
    // No node matches: a clear 503 with Retry-After, and nothing left behind.
    let response = cluster
        .http
        .post(format!("{}/v1/sandboxes", cluster.url))
        .bearer_auth(&cluster.admin_key)
        .json(&json!({ "placement": { "constraints": ["node.labels.agentbox.zone==9"] } }))
        .send()
        .await?;
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let answer: Value = response.json().await?;
    assert_eq!(answer["error"]["code"], "no_capacity", "{answer}");
    let services_after = Cluster::service_ids()?;
    assert_eq!(
        services_after, services_before,
        "a refused create left a service"
    );

    // Node 3 is lost: its sandbox becomes `lost`, naming the node, within a bounded time; the
    // others keep working; its API calls get a clear error.
    let lost = pinned[2].clone();
    let stopped = Instant::now();
    docker(&["stop", "-t", "1", &node(3)])?;
    let record = cluster.wait_lost(&lost).await?;
    let took = stopped.elapsed();
    eprintln!("node 3 stopped -> its sandbox lost in {took:?}");
    assert!(
        record["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&node(3)),
        "the reason names the node: {record}"
    );
    for id in &pinned[..2] {
        assert_eq!(cluster.shell(id, "echo alive").await?, "alive");
    }
    let (_, view) = cluster.call(Method::GET, "/v1/cluster", None).await?;
    let down = view["nodes"]
        .as_array()
        .context("nodes")?
        .iter()
        .find(|n| n["name"] == node(3).as_str())
        .context("node 3")?
        .clone();
    assert_eq!(down["state"], "down", "{down}");
    let (status, answer) = cluster
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{lost}/api/v1/shell/exec"),
            Some(json!({ "command": "true" })),
        )
        .await?;
    assert!(
        (400..500).contains(&status),
        "a call to a lost sandbox: {status} {answer}"
    );

    // The node comes back: a sandbox can be placed on it again.
    docker(&["start", &node(3)])?;
    Cluster::wait_ready(3).await?;
    let (status, again) = cluster
        .create(json!({ "placement": { "constraints": ["node.labels.agentbox.zone==3"] } }))
        .await?;
    ensure!(
        status == 201,
        "create on the returned node: {status} {again}"
    );
    let again = again["id"].as_str().context("id")?.to_string();
    assert_eq!(cluster.shell(&again, "echo back").await?, "back");

    // Node 2 is cut off from the others and comes back: its sandbox is lost, and once the node
    // is back nothing of it is left running there (its service was removed meanwhile).
    let cut = pinned[1].clone();
    let network = format!("{PREFIX}-net");
    let ip = docker(&[
        "inspect",
        "-f",
        &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
        &node(2),
    ])?;
    docker(&["network", "disconnect", &network, &node(2)])?;
    let cut_at = Instant::now();
    let record = cluster.wait_lost(&cut).await?;
    eprintln!(
        "node 2 cut off -> its sandbox lost in {:?}",
        cut_at.elapsed()
    );
    assert!(
        record["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&node(2)),
        "{record}"
    );
    assert_eq!(cluster.shell(&pinned[0], "echo alive").await?, "alive");
    assert_eq!(cluster.shell(&again, "echo alive").await?, "alive");
    docker(&["network", "connect", "--ip", &ip, &network, &node(2)])?;
    Cluster::wait_ready(2).await?;
    let filter = format!("label=agentbox.sandbox_id={cut}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !Cluster::on_node(2, &["ps", "-q", "--filter", &filter])?.is_empty() {
        ensure!(
            Instant::now() < deadline,
            "the lost sandbox {cut} still runs on node 2 after it came back"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Deleting removes each service and its key's secret.
    for id in [&pinned[0], &free, &again] {
        let (status, answer) = cluster
            .call(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
            .await?;
        assert_eq!(status, 204, "delete {id}: {answer}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let managed = "label=agentbox.managed=true";
        // An engine that fails to answer counts as "not clean yet"; its error is named if the
        // wait runs out.
        let list = |n: usize, what: &str| {
            Cluster::on_node(n, &[what, "ls", "-q", "--filter", managed])
                .unwrap_or_else(|error| format!("({error:#})"))
        };
        let services = list(1, "service");
        let secrets = list(1, "secret");
        // The sweeper on each node removes what Swarm leaves of a finished task (its volumes).
        let mut volumes = String::new();
        for n in 1..=3 {
            volumes += &list(n, "volume");
        }
        if services.is_empty() && secrets.is_empty() && volumes.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "left after the deletes: services {services:?}, secrets {secrets:?}, volumes \
             {volumes:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    replicas_share_the_work_and_a_killed_one_leaves_nothing_behind(&cluster).await
}

/// Two orchestrator replicas behind the front: both answer at the one address, the warm pool
/// is made by the one replica holding its duty, and a replica killed in the middle of creates,
/// then another in the middle of deletes, leaves the database and the cluster in agreement
/// (nothing leaked, nothing made or removed twice) once Swarm has restarted it.
async fn replicas_share_the_work_and_a_killed_one_leaves_nothing_behind(
    cluster: &Cluster,
) -> anyhow::Result<()> {
    // Both replicas answer behind the one address.
    let mut answering = BTreeSet::new();
    for _ in 0..20 {
        let (status, view) = cluster.call(Method::GET, "/v1/cluster", None).await?;
        ensure!(status == 200, "GET /v1/cluster: {status} {view}");
        for replica in view["replicas"].as_array().context("replicas")? {
            if replica["answering"] == true {
                answering.insert(replica["id"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    assert_eq!(
        answering,
        BTreeSet::from(["orchestrator-1".to_string(), "orchestrator-2".to_string()]),
        "both replicas answer behind the front"
    );

    // The warm pool, turned on by a restart of both replicas: made by one of them.
    let restarted = Instant::now();
    Cluster::on_node(
        1,
        &[
            "service",
            "update",
            "--quiet",
            "--detach=false",
            "--update-parallelism",
            "0",
            "--update-monitor",
            "1s",
            "--env-add",
            "AGENTBOX_POOL_SIZE=2",
            "agentbox_orchestrator",
        ],
    )?;
    cluster.wait_both_answer(None, restarted).await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    let (refiller, services) = loop {
        let replicas = cluster.replicas().await?;
        let refiller = replicas
            .iter()
            .find(|(_, duties)| duties.iter().any(|d| d == "pool_refill"))
            .map(|(id, _)| id.clone());
        let services = Cluster::services().unwrap_or_default();
        if let Some(refiller) = refiller
            && services.len() == 2
            && cluster.disagreement().await.is_none()
        {
            break (refiller, services);
        }
        ensure!(
            Instant::now() < deadline,
            "the pool of 2 not made after 90 s: {replicas:?} {services:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for (id, made_by) in &services {
        assert_eq!(
            made_by, &refiller,
            "pool member {id} made by the replica holding the pool's duty"
        );
    }

    // The pool's replica is killed with six creates in flight (placed: made cold, not
    // claimed), about half of them its own; Swarm restarts it as itself. A create answered 201
    // has its sandbox, one whose answer was lost leaves nothing, and the database and the
    // cluster agree.
    let creates = futures_util::future::join_all((1..=6).map(|i| {
        cluster.create(json!({
            "placement": { "constraints": [format!("node.labels.agentbox.zone=={}", i % 3 + 1)] },
        }))
    }));
    // Killed once a service it made for one of these creates exists: its create is then in
    // flight (a create answers once the sandbox is ready, seconds after its service appears).
    let pool: BTreeSet<String> = services.iter().map(|(id, _)| id.clone()).collect();
    let kill = async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let making = Cluster::services()
                .unwrap_or_default()
                .into_iter()
                .any(|(id, made_by)| made_by == refiller && !pool.contains(&id));
            if making {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "{refiller} made no service for the creates in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Cluster::kill_replica(&refiller).map(|()| Instant::now())
    };
    let (answers, killed) = tokio::join!(creates, kill);
    let killed_at = killed?;
    let mut created = Vec::new();
    for answer in answers {
        match answer {
            Ok((201, sandbox)) => created.push(sandbox["id"].as_str().context("id")?.to_string()),
            other => eprintln!("a create during the kill: {other:?}"),
        }
    }
    eprintln!(
        "{} of 6 creates answered 201 with {refiller} killed",
        created.len()
    );
    ensure!(
        !created.is_empty(),
        "no create reached the replica that was not killed"
    );
    assert!(
        created.len() < 6,
        "the killed replica's create in flight was answered 201"
    );
    cluster.wait_both_answer(Some(&refiller), killed_at).await?;
    cluster
        .wait_agreement(90, "a replica killed mid-create")
        .await?;
    for id in &created {
        assert_eq!(cluster.shell(id, "echo ok").await?, "ok", "sandbox {id}");
    }

    // The attack: an agent in a sandbox goes for the database every replica trusts, by name
    // and at its task's address on the stack's network. Neither answers: sandboxes join only
    // their own network.
    let postgres = Cluster::on_node(
        1,
        &[
            "ps",
            "-q",
            "--filter",
            "label=com.docker.swarm.service.name=agentbox_postgres",
        ],
    )?;
    let postgres_ip = Cluster::on_node(
        1,
        &[
            "inspect",
            "-f",
            "{{(index .NetworkSettings.Networks \"agentbox_default\").IPAddress}}",
            postgres.lines().next().context("the postgres container")?,
        ],
    )?;
    ensure!(!postgres_ip.is_empty(), "postgres has no address");
    for target in ["postgres", "tasks.postgres", postgres_ip.as_str()] {
        let reach = cluster
            .shell(
                &created[0],
                &format!(
                    "timeout 5 bash -c 'exec 3<>/dev/tcp/{target}/5432' 2>&1; echo \"exit $?\""
                ),
            )
            .await?;
        assert!(
            !reach.ends_with("exit 0"),
            "a sandbox reached Postgres at {target}: {reach}"
        );
    }

    // The other replica is killed with the deletes in flight; the client retries what failed.
    let other = if refiller == "orchestrator-1" {
        "orchestrator-2"
    } else {
        "orchestrator-1"
    };
    let paths: Vec<String> = created
        .iter()
        .map(|id| format!("/v1/sandboxes/{id}"))
        .collect();
    let deletes = futures_util::future::join_all(
        paths
            .iter()
            .map(|path| cluster.call(Method::DELETE, path, None)),
    );
    // Killed once one of the sandboxes reads `deleting` (the deletes are spread over both
    // replicas by the front, so each is then removing its share).
    let kill = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        'deleting: while Instant::now() < deadline {
            for id in &created {
                if let Ok((200, record)) = cluster
                    .call(Method::GET, &format!("/v1/sandboxes/{id}"), None)
                    .await
                    && record["status"] == "deleting"
                {
                    break 'deleting;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Cluster::kill_replica(other).map(|()| Instant::now())
    };
    let (answers, killed) = tokio::join!(deletes, kill);
    let killed_at = killed?;
    eprintln!(
        "{} of {} deletes answered 204 with {other} killed",
        answers.iter().filter(|a| matches!(a, Ok((204, _)))).count(),
        answers.len()
    );
    for (id, answer) in created.iter().zip(answers) {
        if !matches!(answer, Ok((204, _))) {
            eprintln!("a delete during the kill: {answer:?}; retried");
            let (status, body) = cluster
                .call(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
                .await?;
            assert!(
                status == 204 || status == 404,
                "delete {id} again: {status} {body}"
            );
        }
    }
    cluster.wait_both_answer(Some(other), killed_at).await?;
    cluster
        .wait_agreement(90, "a replica killed mid-delete")
        .await?;
    let left: Vec<_> = Cluster::services()?
        .into_iter()
        .filter(|(id, _)| created.contains(id))
        .collect();
    assert!(
        left.is_empty(),
        "deleted sandboxes' services left: {left:?}"
    );
    Ok(())
}
