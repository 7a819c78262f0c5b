//! A throwaway Postgres cluster for tests and benchmarks: Debian's `postgresql` package
//! (`scripts/test.sh` installs it), a data directory in a temporary folder, a loopback port,
//! trust authentication; stopped and deleted on drop. Needs root (it runs the server as the
//! `postgres` user).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

/// A throwaway Postgres cluster, stopped and deleted on drop.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// The server's options (port, socket directory, loopback only).
    options: String,
}

impl Postgres {
    pub fn start() -> anyhow::Result<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .context(
                "Postgres is not installed: apt-get install postgresql (scripts/test.sh does)",
            )?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("initdb").exists())
            .context("no initdb under /usr/lib/postgresql/*/bin")?;
        let dir = tempfile::Builder::new().prefix("agentbox-pg-").tempdir()?;
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            listener.local_addr()?.port()
        };
        let data = dir.path().join("data");
        let path = dir.path().display().to_string();
        run(Command::new("chown").args(["postgres:postgres", &path]))?;
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data))?;
        let options = format!("-p {port} -k {path} -c listen_addresses=127.0.0.1 -c fsync=off");
        let postgres = Self {
            dir,
            bin,
            port,
            options,
        };
        postgres.start_server()?;
        Ok(postgres)
    }

    /// Starts the server (again) and waits until it accepts connections.
    pub fn start_server(&self) -> anyhow::Result<()> {
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D"])
            .arg(self.dir.path().join("data"))
            .args(["-o", &self.options, "-l"])
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "60", "start"]))
    }

    /// Stops the server at once, as a crash would (connections cut, no checkpoint).
    pub fn stop_server(&self) -> anyhow::Result<()> {
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"]))
    }

    /// Waits until the server accepts connections (`pg_ctl -w` has waited already; a
    /// moment more is allowed).
    pub async fn wait_accepting(&self) -> anyhow::Result<()> {
        let address = format!("127.0.0.1:{}", self.port);
        for _ in 0..40 {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        bail!("Postgres does not accept connections on {address}")
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.stop_server();
    }
}

/// Runs a host program (initdb, pg_ctl...) and waits for it.
// The test process reaps nothing but its own children: std waits for them.
#[allow(clippy::disallowed_methods)]
fn run(command: &mut Command) -> anyhow::Result<()> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
