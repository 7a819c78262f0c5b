//! Test harness: a real sandboxd router (`sandboxd::api::router`) served on a loopback port with
//! `axum::serve`, a real shell (bash, as `nobody` when the tests run as root), a temporary
//! workspace as the only file root, and an API key; and a real Xvfb for desktop tests.

#![allow(dead_code)] // Each test binary uses a different part of the harness.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Once};
use std::time::Duration;

use anyhow::{Context, Result};
use sandbox_client::SandboxClient;
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use sandboxd::shell::{Shell, ShellConfig};
use supervisor::{Supervisor, SupervisorConfig};

pub const KEY: &str = "client-test-key-0123";

/// One sandboxd, served until the test ends.
pub struct Sandboxd {
    pub base: String,
    /// The workspace, also the only file root.
    pub workspace: PathBuf,
    pub supervisor: Arc<Supervisor>,
    _root: tempfile::TempDir,
    _state: tempfile::TempDir,
}

impl Sandboxd {
    /// A client with the right key.
    pub fn client(&self) -> SandboxClient {
        SandboxClient::new(&self.base, Some(KEY)).expect("the base URL is valid")
    }
}

/// What to start sandboxd with.
#[derive(Default)]
pub struct Options {
    /// The programs its supervisor runs (none by default: `/readyz` is ready).
    pub programs: SupervisorConfig,
    /// The X display (`:N`) for the desktop routes.
    pub display: Option<String>,
}

fn init_reaping() {
    static ONCE: Once = Once::new();
    ONCE.call_once(sandboxd::pid1::init_reaping);
}

/// Starts sandboxd's router on `127.0.0.1:0`.
pub async fn start(options: Options) -> Result<Sandboxd> {
    init_reaping();
    let root = tempfile::tempdir()?;
    let workspace = root.path().canonicalize()?.join("workspace");
    std::fs::create_dir(&workspace)?;
    let state = tempfile::tempdir()?;
    // Like /tmp: the unprivileged user must reach its state directory inside.
    std::fs::set_permissions(
        state.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )?;
    let run_as = nix::unistd::Uid::effective()
        .is_root()
        .then(|| "nobody".to_string());
    if run_as.is_some() {
        std::os::unix::fs::chown(&workspace, Some(65534), Some(65534))?;
    }
    let mut settings =
        Settings::from_lookup(|name| (name == "SANDBOX_API_KEY").then(|| KEY.to_string()))?;
    settings.workspace = workspace.clone();
    settings.file_roots = vec![workspace.clone()];
    if let Some(display) = options.display {
        settings.display = display;
    }
    let activity = Activity::new();
    let shell = Arc::new(Shell::new(
        ShellConfig {
            workspace: workspace.clone(),
            run_as,
            max_sessions: 16,
            idle_expiry: Duration::from_secs(3600),
            default_no_change_timeout: Duration::from_secs(120),
            output_limit: 1024 * 1024,
            stop_grace: Duration::from_secs(1),
            state_parent: state.path().to_path_buf(),
            zygote: true,
        },
        activity.clone(),
    ));
    let supervisor = Arc::new(Supervisor::start(options.programs)?);
    let app_state =
        AppState::new(supervisor.clone(), Arc::new(settings), activity).with_shell(shell);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router(app_state)).await });
    Ok(Sandboxd {
        base: format!("http://{address}"),
        workspace,
        supervisor,
        _root: root,
        _state: state,
    })
}

/// A running Xvfb, killed on drop.
pub struct Xvfb {
    child: Child,
    pub display: String,
}

pub const SCREEN: (u32, u32) = (1280, 800);

impl Xvfb {
    /// Starts `Xvfb` on a free display (it reports the one it picked once it accepts
    /// connections). Fails, never skips, when Xvfb is missing.
    // The test's own X server: killed and waited for on drop.
    #[allow(clippy::disallowed_methods)]
    pub fn start() -> Result<Xvfb> {
        let screen = format!("{}x{}x24", SCREEN.0, SCREEN.1);
        let mut child = Command::new("Xvfb")
            .args(["-displayfd", "1", "-screen", "0", &screen, "-noreset"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run Xvfb; install it with `apt-get install -y xvfb`")?;
        let stdout = child.stdout.take().context("Xvfb stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut xvfb = Xvfb {
            child,
            display: String::new(),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .context("Xvfb did not report its display within 20 s")?;
        let number: u32 = line
            .trim()
            .parse()
            .with_context(|| format!("Xvfb reported {line:?} instead of a display number"))?;
        xvfb.display = format!(":{number}");
        Ok(xvfb)
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
