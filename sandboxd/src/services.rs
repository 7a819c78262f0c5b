//! sandboxd's composition root: every capability built once from the [`Settings`], started and
//! shut down in one place.
//!
//! [`Services`] is what the HTTP layer ([`crate::api::AppState`]) wraps and what
//! [`crate::run`] stops at shutdown. A new capability goes here: its settings in
//! [`crate::config`] (read from the environment once), its type in a module of its own that
//! knows nothing of HTTP, and one field here built from those settings; the routes in
//! `api/` then reach it through the state.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use supervisor::Supervisor;

use crate::activity::Activity;
use crate::browser::BrowserService;
use crate::config::Settings;
use crate::desktop_session::DesktopSession;
use crate::files::watch::{WatchLimits, Watches};
use crate::files::{Confinement, Files, Limits as FileLimits};
use crate::hooks::Hooks;
use crate::jupyter::{Jupyter, JupyterConfig};
use crate::nodejs::{NodeConfig, NodeSessions};
use crate::page_recording::PageRecorder;
use crate::recording::Recorder;
use crate::shell::{Shell, ShellConfig};
use crate::skills::Skills;
use crate::tickets::Tickets;
use crate::vnc::{VncGateway, VncPasswords};

/// How long sandboxd waits for a loopback service (Chromium's DevTools endpoint) to answer.
const LOOPBACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Every capability of the sandbox, each built once.
#[derive(Clone)]
pub struct Services {
    pub supervisor: Arc<Supervisor>,
    pub settings: Arc<Settings>,
    pub activity: Arc<Activity>,
    pub shell: Arc<Shell>,
    pub desktop: Arc<DesktopSession>,
    /// The file service behind `/v1/file/*` (roots and limits from the settings).
    pub files: Arc<Files>,
    /// The file watches behind `/v1/file/watch*` (same roots).
    pub watches: Arc<Watches>,
    /// The browser API's connection to Chromium (made on first use).
    pub browser: Arc<BrowserService>,
    /// Authenticated connections to the VNC server for viewers.
    pub vnc: Arc<VncGateway>,
    /// Tickets and viewer sessions for browsers.
    pub tickets: Arc<Tickets>,
    /// The display's recorder (`/v1/display/record`).
    pub recorder: Arc<Recorder>,
    /// The page screencast recorder (`/v1/browser/page/record`).
    pub page_recorder: Arc<PageRecorder>,
    /// HTTP client for loopback services (Chromium's DevTools endpoint).
    pub http: reqwest::Client,
    /// Jupyter sessions behind `/v1/jupyter/*` (kernels start on first use).
    pub jupyter: Arc<Jupyter>,
    /// Node sessions and runs behind `/v1/nodejs/*`.
    pub node: Arc<NodeSessions>,
    /// The skills directory behind `/v1/skills/*`.
    pub skills: Arc<Skills>,
    /// The shutdown hooks behind `/v1/sandbox/hooks` (run by [`Services::shutdown`]).
    pub hooks: Arc<Hooks>,
    /// Holds the sandbox still while its home is archived (`/v1/sandbox/home/archive`).
    pub quiescer: Arc<crate::quiesce::Quiescer>,
}

impl Services {
    /// Builds every capability from `settings`. Nothing starts running: programs are the
    /// supervisor's, sessions start on first use, background reapers with
    /// [`Services::start_background_tasks`].
    pub fn new(
        supervisor: Arc<Supervisor>,
        settings: Arc<Settings>,
        activity: Arc<Activity>,
    ) -> Self {
        let run_as = code_user();
        let http = reqwest::Client::builder()
            .timeout(LOOPBACK_TIMEOUT)
            .no_proxy()
            .build()
            // A client without TLS or proxies only fails to build on a broken resolver setup;
            // the default client has the same needs.
            .unwrap_or_default();
        let confinement = || Confinement::new(&settings.file_roots, &settings.workspace);
        let browser = Arc::new(BrowserService::new(&settings.browser));
        Self {
            shell: Arc::new(Shell::new(
                ShellConfig::from_settings(&settings),
                activity.clone(),
            )),
            desktop: Arc::new(DesktopSession::new(settings.display.clone())),
            files: Arc::new(Files::new(
                confinement(),
                FileLimits {
                    max_read_bytes: settings.max_read_bytes,
                    max_write_bytes: settings.max_write_bytes,
                    max_upload_bytes: settings.max_upload_bytes,
                },
            )),
            watches: Arc::new(Watches::new(confinement(), WatchLimits::default())),
            browser: browser.clone(),
            vnc: Arc::new(VncGateway::new(
                settings.vnc.clone(),
                VncPasswords::generate(),
                supervisor.clone(),
            )),
            tickets: Arc::new(Tickets::new()),
            recorder: Arc::new(Recorder::new(
                settings.ffmpeg.clone(),
                settings.display.clone(),
                (settings.screen.width, settings.screen.height),
                crate::recording::Limits::default(),
            )),
            page_recorder: Arc::new(PageRecorder::new(
                settings.ffmpeg.to_string_lossy(),
                crate::page_recording::Limits::default(),
            )),
            http,
            jupyter: Arc::new(Jupyter::new(jupyter_config(&settings, run_as))),
            node: Arc::new(NodeSessions::new(node_config(&settings, run_as))),
            skills: Arc::new(Skills::new(
                settings.home_dir.join("skills"),
                crate::skills::Limits::default(),
            )),
            hooks: Arc::new(Hooks::new(
                shutdown_hooks(&settings),
                run_as,
                settings.workspace.clone(),
            )),
            quiescer: crate::quiesce::Quiescer::new(
                supervisor.clone(),
                browser.clone(),
                settings.home_dir.clone(),
            ),
            supervisor,
            settings,
            activity,
        }
    }

    /// Replaces the shell (tests use their own limits and user).
    pub fn with_shell(mut self, shell: Arc<Shell>) -> Self {
        self.shell = shell;
        self
    }

    /// Uses `passwords` for the VNC server (the ones written to its password file).
    pub fn with_vnc_passwords(mut self, passwords: VncPasswords) -> Self {
        self.vnc = Arc::new(VncGateway::new(
            self.settings.vnc.clone(),
            passwords,
            self.supervisor.clone(),
        ));
        self
    }

    /// Starts the background expiry of idle code sessions.
    pub fn start_background_tasks(&self) {
        self.jupyter.spawn_reaper();
        self.node.spawn_reaper();
    }

    /// The ordered shutdown: the hooks first, while the desktop, the browser and the files are
    /// all still there; then the recordings (finished, so their files are whole), the shell's
    /// commands, and last the supervised programs in reverse dependency order.
    pub async fn shutdown(&self) {
        self.hooks.run_shutdown(crate::hooks::SHUTDOWN_BUDGET).await;
        self.recorder.shutdown().await;
        self.page_recorder.shutdown().await;
        self.shell.shutdown().await;
        self.supervisor.shutdown().await;
    }
}

/// The shutdown hooks given in the settings; a value that does not parse is reported and
/// ignored (the sandbox still starts).
fn shutdown_hooks(settings: &Settings) -> Vec<crate::hooks::Hook> {
    let Some(value) = &settings.shutdown_hooks else {
        return Vec::new();
    };
    match crate::hooks::parse_env(value) {
        Ok(hooks) => hooks,
        Err(error) => {
            tracing::error!(%error, "ignoring the shutdown hooks of the environment");
            Vec::new()
        }
    }
}

/// Who code runs as: sandboxd's own user, or the unprivileged user when sandboxd is root.
fn code_user() -> Option<(u32, u32)> {
    if !nix::unistd::Uid::effective().is_root() {
        return None;
    }
    match nix::unistd::User::from_name(crate::shell::UNPRIVILEGED_USER) {
        Ok(Some(user)) => Some((user.uid.as_raw(), user.gid.as_raw())),
        _ => None,
    }
}

/// Kernels and sockets live in a private directory of this process's own.
fn code_runtime_dir() -> PathBuf {
    std::env::temp_dir().join(format!("agentbox-code-{}", std::process::id()))
}

fn jupyter_config(settings: &Settings, run_as: Option<(u32, u32)>) -> JupyterConfig {
    let code = &settings.code;
    JupyterConfig {
        python: code.python.clone(),
        runtime_dir: code_runtime_dir().join("jupyter"),
        workspace: settings.workspace.clone(),
        run_as,
        max_sessions: code.jupyter_max_sessions,
        idle_expiry: code.idle_expiry,
        output: crate::jupyter::OutputLimits {
            max_bytes: code.jupyter_output_bytes,
        },
    }
}

fn node_config(settings: &Settings, run_as: Option<(u32, u32)>) -> NodeConfig {
    let code = &settings.code;
    NodeConfig {
        node: code.node.clone(),
        runtime_dir: code_runtime_dir().join("node"),
        workspace: settings.workspace.clone(),
        run_as,
        output_limit: code.node_output_bytes,
        max_sessions: code.node_max_sessions,
        default_idle: code.idle_expiry,
    }
}
