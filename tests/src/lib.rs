//! Shared harness for end-to-end tests: real containers from the real image, driven through the
//! `docker` CLI, removed by a `Drop` guard even when a test fails.
//!
//! Tests need the image (`images/build.sh`); they fail with that hint when it is missing rather
//! than pass without testing anything.
//!
//! [`router`] is the other shared fixture: calls through a server's `Router` without a socket,
//! for sandboxd's and the orchestrator's router tests.

pub mod openapi_lint;
pub mod postgres;
pub mod router;
pub mod snapshot;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// The sandbox image under test (`AGENTBOX_SANDBOX_IMAGE`, default `agentbox/sandbox:latest`).
pub fn sandbox_image() -> String {
    std::env::var("AGENTBOX_SANDBOX_IMAGE").unwrap_or_else(|_| "agentbox/sandbox:latest".into())
}

/// Runs the host's `docker` CLI with `args` and waits for it.
// The test process is not PID 1 and reaps nothing but its own children: std waits for the
// docker CLI itself. This is the harness's one direct spawn.
#[allow(clippy::disallowed_methods)]
pub fn docker_output(args: &[&str]) -> std::io::Result<Output> {
    Command::new("docker").args(args).output()
}

/// Runs `docker` with `args`, returning stdout; fails with stderr on a non-zero exit.
pub fn docker(args: &[&str]) -> anyhow::Result<String> {
    let output = docker_output(args).with_context(|| format!("running docker {args:?}"))?;
    if !output.status.success() {
        bail!(
            "docker {:?} failed ({}): {}",
            args,
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The container the orchestrator made for sandbox `sandbox_id` (found by its
/// `agentbox.sandbox_id` label: sandbox containers have no names), running or not.
pub fn sandbox_container(sandbox_id: &str) -> Option<String> {
    let filter = format!("label=agentbox.sandbox_id={sandbox_id}");
    docker(&["ps", "-aq", "--no-trunc", "--filter", &filter])
        .ok()?
        .lines()
        .next()
        .map(str::to_string)
}

/// A running sandbox container, removed on drop.
pub struct Sandbox {
    pub id: String,
    pub ip: String,
    pub api_key: String,
    pub client: reqwest::Client,
}

/// Options for [`Sandbox::start`].
#[derive(Default)]
pub struct SandboxOptions<'a> {
    pub env: Vec<(&'a str, String)>,
    /// (host file, file name in /etc/sandboxd/programs.d)
    pub drop_ins: Vec<(&'a Path, &'a str)>,
    pub extra_args: Vec<&'a str>,
}

impl Sandbox {
    /// Starts a sandbox with a fresh random API key and waits until it answers `/healthz`.
    pub fn start(options: SandboxOptions<'_>) -> anyhow::Result<Self> {
        let image = sandbox_image();
        if docker(&["image", "inspect", &image]).is_err() {
            bail!("image {image} is missing: build it with images/build.sh");
        }
        let api_key = format!("test-key-{:016x}", rand_u64());
        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--label".into(),
            "agentbox.test=1".into(),
            "-e".into(),
            format!("SANDBOX_API_KEY={api_key}"),
        ];
        for (name, value) in &options.env {
            args.push("-e".into());
            args.push(format!("{name}={value}"));
        }
        for (host, name) in &options.drop_ins {
            args.push("-v".into());
            args.push(format!(
                "{}:/etc/sandboxd/programs.d/{name}:ro",
                host.display()
            ));
        }
        args.extend(options.extra_args.iter().map(|s| s.to_string()));
        args.push(image);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let id = docker(&refs)?;
        let mut sandbox = Self {
            id,
            ip: String::new(),
            api_key,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
        };
        sandbox.ip = docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &sandbox.id,
        ])?;
        Ok(sandbox)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}:8080{path}", self.ip)
    }

    /// GET with the API key; returns (status, JSON body or Null).
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        let response = self
            .client
            .get(self.url(path))
            .bearer_auth(&self.api_key)
            .send()
            .await?;
        let status = response.status().as_u16();
        let body = response.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// POST (empty body) with the API key.
    pub async fn post(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        let response = self
            .client
            .post(self.url(path))
            .bearer_auth(&self.api_key)
            .send()
            .await?;
        let status = response.status().as_u16();
        let body = response.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// Polls `/readyz` until 200.
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.get("/readyz").await {
                Ok((200, _)) => return Ok(()),
                Ok((status, body)) => last = format!("{status} {body}"),
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "sandbox not ready after {timeout:?}; last answer: {last}\nlogs:\n{}",
            self.logs_tail(40)
        )
    }

    /// The program table from `/v1/processes`.
    pub async fn programs(&self) -> anyhow::Result<Vec<Value>> {
        let (status, body) = self.get("/v1/processes").await?;
        if status != 200 {
            bail!("/v1/processes answered {status}: {body}");
        }
        Ok(body["data"]["programs"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// One program's row.
    pub async fn program(&self, name: &str) -> anyhow::Result<Value> {
        self.programs()
            .await?
            .into_iter()
            .find(|p| p["name"] == name)
            .with_context(|| format!("no program {name}"))
    }

    /// Polls the program table until `predicate` holds.
    pub async fn wait_programs(
        &self,
        what: &str,
        timeout: Duration,
        mut predicate: impl FnMut(&[Value]) -> bool,
    ) -> anyhow::Result<Vec<Value>> {
        let deadline = Instant::now() + timeout;
        loop {
            // Until sandboxd listens, connections are refused: keep polling.
            let programs = self.programs().await.unwrap_or_default();
            if !programs.is_empty() && predicate(&programs) {
                return Ok(programs);
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {what}; programs: {programs:#?}");
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }

    /// Runs a command in the container (as its default user), returning stdout.
    pub fn exec(&self, command: &[&str]) -> anyhow::Result<String> {
        let mut args = vec!["exec", self.id.as_str()];
        args.extend_from_slice(command);
        docker(&args)
    }

    pub fn logs_tail(&self, lines: usize) -> String {
        let n = lines.to_string();
        docker_output(&["logs", "--tail", &n, &self.id])
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_default()
    }
}

impl Sandbox {
    /// Follows the container's log as it is written (`docker logs -f`, both streams), for a
    /// test that acts at the moment a line appears.
    // The docker CLI is the test's own child, read by two threads and killed on drop.
    #[allow(clippy::disallowed_methods)]
    pub fn follow_logs(&self) -> anyhow::Result<LogFollower> {
        let mut child = Command::new("docker")
            .args(["logs", "-f", &self.id])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running docker logs -f")?;
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().context("docker logs stdout")?;
        let stderr = child.stderr.take().context("docker logs stderr")?;
        for stream in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stream)
                    .lines()
                    .map_while(Result::ok)
                {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(LogFollower {
            child,
            lines,
            seen: Vec::new(),
        })
    }
}

/// A container's log, line by line as it is written (see [`Sandbox::follow_logs`]).
pub struct LogFollower {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl LogFollower {
    /// Waits for a line containing `needle` (lines before it are kept in `seen`).
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).map_err(|_| {
                anyhow::anyhow!(
                    "no log line with `{needle}` within {timeout:?}; log:\n{}",
                    self.seen.join("\n")
                )
            })?;
            self.seen.push(line.clone());
            if line.contains(needle) {
                return Ok(line);
            }
        }
    }

    /// Every line written so far, including those nobody waited for.
    pub fn drain(&mut self) -> &[String] {
        self.seen.extend(self.lines.try_iter());
        &self.seen
    }
}

impl Drop for LogFollower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = docker_output(&["rm", "-f", "-v", &self.id]);
    }
}

/// A program row's field as a number.
pub fn num(program: &Value, field: &str) -> i64 {
    program[field].as_i64().unwrap_or(-1)
}

/// Finds a row by name in a program table.
pub fn row<'a>(programs: &'a [Value], name: &str) -> &'a Value {
    programs
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or(&Value::Null)
}

/// A random number for keys and names (test instances, container tags), which must differ
/// between runs: from the kernel, or, should `/dev/urandom` be unreadable, from
/// [`fallback_u64`].
pub fn rand_u64() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    match read {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => fallback_u64(),
    }
}

/// A number that differs between calls and runs without the kernel's randomness: std's
/// randomly keyed hasher over the wall clock and the process id. (`Instant::now().elapsed()`,
/// mixed in here before, is always about zero.)
fn fallback_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::hash::RandomState::new().build_hasher();
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(since_epoch.as_nanos());
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Writes `content` to a world-readable file in `dir` (the container user must read it).
pub fn readable_file(dir: &Path, name: &str, content: &str) -> anyhow::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let path = dir.join(name);
    std::fs::write(&path, content)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sources give numbers spread over all 64 bits, never the same twice in a row.
    #[test]
    fn random_numbers_differ_and_fill_their_bits() {
        for source in [rand_u64 as fn() -> u64, fallback_u64] {
            let values: std::collections::HashSet<u64> = (0..64).map(|_| source()).collect();
            assert_eq!(values.len(), 64);
            assert!(
                values.iter().filter(|v| **v >> 40 != 0).count() > 48,
                "{values:x?}"
            );
        }
    }
}
