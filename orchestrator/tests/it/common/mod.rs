//! Harness for the orchestrator's end-to-end tests: runs the real binary against the real
//! Docker Engine with a unique instance label, network and data directory, and removes every
//! container and network it made when dropped, even when a test fails.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentbox_tests::{docker, rand_u64, sandbox_image};
use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

pub const ADMIN_KEY: &str = "test-admin-key-0123456789abcdefghij";

/// How the server is started.
#[derive(Clone)]
pub struct Options {
    pub pool_size: usize,
    pub heartbeat_secs: u64,
    pub ready_timeout_secs: u64,
    pub extra_args: Vec<String>,
    pub database_url: Option<String>,
    /// Use this data directory (another orchestrator's) instead of a fresh one.
    pub shared_data_dir: Option<PathBuf>,
    /// Extra environment for the process.
    pub env: Vec<(String, String)>,
    /// `--replica`.
    pub replica: Option<String>,
    /// Serve another orchestrator's installation (its instance, network and data directory:
    /// another replica beside it; give both a `database_url` and a `replica`).
    pub replica_of: Option<Peer>,
}

/// What a second replica shares with a running orchestrator.
#[derive(Clone)]
pub struct Peer {
    pub instance: String,
    pub network: String,
    pub data_dir: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            pool_size: 0,
            heartbeat_secs: 2,
            ready_timeout_secs: 180,
            extra_args: Vec::new(),
            database_url: None,
            shared_data_dir: None,
            env: Vec::new(),
            replica: None,
            replica_of: None,
        }
    }
}

/// A running orchestrator.
pub struct Orchestrator {
    child: Option<Child>,
    pub url: String,
    pub instance: String,
    pub network: String,
    pub data_dir: PathBuf,
    _data: tempfile::TempDir,
    options: Options,
    pub logs: Arc<Mutex<Vec<String>>>,
    pub http: reqwest::Client,
}

impl Options {
    /// The defaults, with sandbox networks cut from `range` (`--sandbox-subnets`): a test that
    /// needs a freed subnet to be the next one taken keeps other tests' networks out of it.
    pub fn with_subnets(range: &str) -> Self {
        Self {
            extra_args: vec!["--sandbox-subnets".into(), range.into()],
            ..Self::default()
        }
    }
}

impl Orchestrator {
    pub fn start(options: Options) -> anyhow::Result<Self> {
        let image = sandbox_image();
        if docker(&["image", "inspect", &image]).is_err() {
            bail!("image {image} is missing: build it with images/build.sh");
        }
        let data = tempfile::tempdir()?;
        let (instance, network, data_dir) = match &options.replica_of {
            Some(peer) => (
                peer.instance.clone(),
                peer.network.clone(),
                peer.data_dir.clone(),
            ),
            None => {
                let instance = format!("test-{:x}", rand_u64());
                let data_dir = options
                    .shared_data_dir
                    .clone()
                    .unwrap_or_else(|| data.path().join("data"));
                (instance.clone(), format!("agentbox-{instance}"), data_dir)
            }
        };
        let mut orchestrator = Self {
            child: None,
            url: String::new(),
            network,
            instance,
            data_dir,
            _data: data,
            options,
            logs: Arc::new(Mutex::new(Vec::new())),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(300))
                .build()?,
        };
        orchestrator.spawn()?;
        Ok(orchestrator)
    }

    // The orchestrator under test is the test's own child, killed and waited for on drop.
    #[allow(clippy::disallowed_methods)]
    fn spawn(&mut self) -> anyhow::Result<()> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--instance", &self.instance, "--network", &self.network])
            .args(["--image", &sandbox_image()])
            .args(["--pool-size", &self.options.pool_size.to_string()])
            .args(["--heartbeat-secs", &self.options.heartbeat_secs.to_string()])
            .args([
                "--ready-timeout-secs",
                &self.options.ready_timeout_secs.to_string(),
            ])
            .args(["--reaper-interval-ms", "200"])
            .args(&self.options.extra_args)
            .env("AGENTBOX_ADMIN_KEY", ADMIN_KEY)
            .env_remove("DATABASE_URL")
            .env_remove("AGENTBOX_PUBLIC_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(url) = &self.options.database_url {
            command.env("DATABASE_URL", url);
        }
        if let Some(replica) = &self.options.replica {
            command.args(["--replica", replica]);
        }
        for (name, value) in &self.options.env {
            command.env(name, value);
        }
        let mut child = command
            .spawn()
            .context("starting the orchestrator binary")?;
        let stderr = child.stderr.take().context("stderr")?;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let logs = self.logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("\"listening\"") {
                    let _ = tx.send(line.clone());
                }
                if std::env::var_os("ORCHESTRATOR_TEST_LOGS").is_some() {
                    eprintln!("[orchestrator] {line}");
                }
                if let Ok(mut logs) = logs.lock() {
                    logs.push(line);
                }
            }
        });
        self.child = Some(child);
        let line = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => line,
            Err(_) => bail!("the orchestrator did not start; log:\n{}", self.log_text()),
        };
        let value: Value = serde_json::from_str(&line)?;
        let addr = value["addr"]
            .as_str()
            .context("addr in the listening line")?;
        self.url = format!("http://{addr}");
        Ok(())
    }

    /// The process's resident memory, MiB (`VmRSS`).
    pub fn rss_mib(&self) -> anyhow::Result<f64> {
        let pid = self.child.as_ref().context("not running")?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib: f64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next())
            .context("no VmRSS")?
            .parse()?;
        Ok(kib / 1024.0)
    }

    pub fn log_text(&self) -> String {
        self.logs.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// What another replica beside this one shares with it.
    pub fn peer(&self) -> Peer {
        Peer {
            instance: self.instance.clone(),
            network: self.network.clone(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// SIGKILL, no cleanup.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again with the same data, instance and network.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        self.spawn()
    }

    pub fn u(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// A request with a key; returns (status, JSON or Null).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self.http.request(method, self.u(path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        self.call(reqwest::Method::GET, path, Some(ADMIN_KEY), None)
            .await
    }

    /// Creates a sandbox (admin key) and checks the answer.
    pub async fn create(&self, body: Value) -> anyhow::Result<Value> {
        let (status, value) = self
            .call(
                reqwest::Method::POST,
                "/v1/sandboxes",
                Some(ADMIN_KEY),
                Some(body),
            )
            .await?;
        if status != 201 {
            bail!(
                "create answered {status}: {value}\nlog tail:\n{}",
                self.log_tail(30)
            );
        }
        Ok(value)
    }

    pub async fn delete(&self, id: &str) -> anyhow::Result<u16> {
        Ok(self
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/sandboxes/{id}"),
                Some(ADMIN_KEY),
                None,
            )
            .await?
            .0)
    }

    pub async fn token(&self, id: &str, scope: &str) -> anyhow::Result<Value> {
        let (status, value) = self
            .call(
                reqwest::Method::POST,
                &format!("/v1/sandboxes/{id}/tokens"),
                Some(ADMIN_KEY),
                Some(json!({"scope": scope, "ttl_secs": 600})),
            )
            .await?;
        if status != 201 {
            bail!("token answered {status}: {value}");
        }
        Ok(value)
    }

    pub fn log_tail(&self, n: usize) -> String {
        let logs = self.logs.lock().map(|l| l.clone()).unwrap_or_default();
        logs[logs.len().saturating_sub(n)..].join("\n")
    }

    /// This instance's containers (all states).
    pub fn containers(&self) -> Vec<String> {
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=agentbox.instance={}", self.instance),
        ])
        .map(|out| {
            out.lines()
                .map(str::to_owned)
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
    }

    /// Waits until `predicate` holds, polling.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut predicate: impl AsyncFnMut() -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if predicate().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!(
            "timed out waiting for {what}; log tail:\n{}",
            self.log_tail(40)
        )
    }
}

impl Drop for Orchestrator {
    fn drop(&mut self) {
        self.kill9();
        for id in self.containers() {
            let _ = docker(&["rm", "-f", "-v", &id]);
        }
        remove_networks(&self.instance);
        remove_egress_rules(&self.network);
    }
}

/// Removes every sandbox network of an orchestrator instance (each sandbox has its own).
pub fn remove_networks(instance: &str) {
    if let Ok(names) = docker(&[
        "network",
        "ls",
        "-q",
        "--filter",
        &format!("label=agentbox.instance={instance}"),
    ]) {
        for name in names.split_whitespace() {
            let _ = docker(&["network", "rm", name]);
        }
    }
}

/// Removes the egress chains the orchestrator made for `network` (they outlive it by design).
// Runs the host's iptables and waits for it (the test process reaps only its own children).
#[allow(clippy::disallowed_methods)]
pub fn remove_egress_rules(network: &str) {
    let rules = orchestrator::backend::egress::EgressRules::for_network(
        network,
        orchestrator::backend::egress::EgressPolicy::Public,
        Vec::new(),
    );
    for args in rules.teardown_commands() {
        let _ = Command::new("iptables")
            .arg("-w")
            .args(&args)
            .stderr(Stdio::null())
            .status();
    }
}

/// The container of a sandbox, found by its label (sandbox containers have no names, so that
/// Docker's resolver has no record of them): its id, or a name no container has when there is
/// none, so that a docker command on it fails saying so.
pub fn container_name(id: &str) -> String {
    agentbox_tests::sandbox_container(id).unwrap_or_else(|| format!("no-container-for-{id}"))
}

/// Whether a sandbox's container exists.
pub fn container_exists(id: &str) -> bool {
    docker(&["inspect", &container_name(id)]).is_ok()
}

/// A WebSocket client stream.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub async fn ws_connect(
    url: &str,
    bearer: Option<&str>,
    protocol: Option<&str>,
) -> anyhow::Result<Ws> {
    let mut request = url.into_client_request()?;
    if let Some(key) = bearer {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {key}").parse()?);
    }
    if let Some(protocol) = protocol {
        request
            .headers_mut()
            .insert("sec-websocket-protocol", protocol.parse()?);
    }
    let (socket, _) = tokio_tungstenite::connect_async(request).await?;
    Ok(socket)
}

pub fn ws_url(http: &str) -> String {
    http.replacen("http://", "ws://", 1)
}

/// Reads exactly `n` bytes of an RFB stream carried in binary WebSocket messages.
pub async fn read_rfb(socket: &mut Ws, pending: &mut Vec<u8>, n: usize) -> anyhow::Result<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while pending.len() < n {
        let message = tokio::time::timeout_at(deadline.into(), socket.next())
            .await
            .context("timed out reading RFB")?
            .context("socket closed")??;
        match message {
            Message::Binary(bytes) => pending.extend_from_slice(&bytes),
            Message::Close(frame) => bail!("closed: {frame:?}"),
            _ => {}
        }
    }
    Ok(pending.drain(..n).collect())
}

/// Completes the RFB 3.8 handshake (security None); returns the framebuffer size.
pub async fn rfb_handshake(socket: &mut Ws, pending: &mut Vec<u8>) -> anyhow::Result<(u16, u16)> {
    let version = read_rfb(socket, pending, 12).await?;
    assert_eq!(&version, b"RFB 003.008\n");
    socket
        .send(Message::Binary(b"RFB 003.008\n".to_vec().into()))
        .await?;
    let count = read_rfb(socket, pending, 1).await?[0] as usize;
    let types = read_rfb(socket, pending, count).await?;
    assert!(types.contains(&1), "security None offered: {types:?}");
    socket.send(Message::Binary(vec![1u8].into())).await?;
    let result = read_rfb(socket, pending, 4).await?;
    assert_eq!(result, [0, 0, 0, 0], "security result OK");
    socket.send(Message::Binary(vec![1u8].into())).await?; // ClientInit, shared
    let init = read_rfb(socket, pending, 24).await?;
    let width = u16::from_be_bytes([init[0], init[1]]);
    let height = u16::from_be_bytes([init[2], init[3]]);
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
    read_rfb(socket, pending, name_len).await?;
    Ok((width, height))
}

pub fn pointer_event(x: u16, y: u16) -> Message {
    let mut m = vec![5u8, 0];
    m.extend(x.to_be_bytes());
    m.extend(y.to_be_bytes());
    Message::Binary(m.into())
}

pub fn mouse_location(id: &str) -> anyhow::Result<(i64, i64)> {
    let out = docker(&["exec", &container_name(id), "xdotool", "getmouselocation"])?;
    let field = |name: &str| -> anyhow::Result<i64> {
        out.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .context("mouse location field")?
            .parse()
            .context("number")
    };
    Ok((field("x:")?, field("y:")?))
}
