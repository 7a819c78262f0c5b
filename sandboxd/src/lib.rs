//! sandboxd: PID 1 of an Agentbox sandbox container.
//!
//! It supervises the desktop stack (Xvfb, a window manager, Chromium with CDP, socat, x11vnc,
//! websockify/noVNC) through the [`supervisor`] crate, reaps every zombie in the container, turns
//! SIGTERM/SIGINT into an ordered shutdown, and serves the sandbox HTTP API.
//!
//! # Layout
//! - [`config`]: settings from the environment.
//! - [`pid1`]: reaping scope and the process's own memory protection (termination signals are
//!   `agentbox_http::signals`, installed by `main` before anything else).
//! - [`activity`]: API activity and the idle dead-man switch.
//! - [`services`]: the composition root: every capability built once from the settings, and
//!   the ordered shutdown.
//! - [`api`]: the HTTP routes (the only module that knows HTTP).
//! - [`shell`]: shell sessions, their commands, and interactive terminals.
//! - [`desktop_session`]: the X display (opened lazily), screenshots and their transforms, and
//!   desktop actions checked and performed.
//! - [`files`]: the file operations behind `/v1/file/*`, confined to the allowed roots.
//! - [`browser`]: the browser capability (Chromium over CDP) behind `/v1/browser/...`.
//! - [`jupyter`]: Python code on IPython kernels, in sessions.
//! - [`nodejs`]: JavaScript on Node, stateless runs and sessions.
//! - [`code_sessions`]: the session table `jupyter` and `nodejs` share (limit, idle expiry).
//! - [`system_info`]: facts about the sandbox for `GET /v1/sandbox`.
//! - [`vnc`]: the VNC server's passwords and the RFB handshakes behind `/vnc/websockify`.
//! - [`tickets`]: single-use tickets and viewer sessions for browsers.
//! - [`skills`]: the agent's skills directory (`SKILL.md` directories) behind `/v1/skills`.
//! - [`hooks`]: shell commands run at shutdown, before the programs stop.
//! - [`page_recording`]: one tab's screencast (CDP frames) to MP4 through ffmpeg.
//! - [`ffmpeg`]: the ffmpeg child both recorders run, and the one way it is stopped.

/// The stack of each async runtime worker (and blocking thread). Small, for memory: anything
/// that recurses deeply runs on a thread of its own (see `api::openapi_json`).
pub const WORKER_STACK_BYTES: usize = 512 * 1024;

pub mod activity;
pub mod api;
pub mod browser;
pub mod code_sessions;
pub mod config;
pub mod desktop_session;
pub mod ffmpeg;
pub mod files;
pub mod home;
pub mod home_archive;
pub mod hooks;
pub mod jupyter;
pub mod markdown;
pub mod nodejs;
pub mod packages;
pub mod page_recording;
pub mod pid1;
pub mod privileges;
pub mod quiesce;
pub mod recording;
pub mod services;
pub mod shell;
pub mod skills;
pub mod system_info;
pub mod tickets;
pub mod vnc;

use std::sync::Arc;
use std::time::Duration;

use agentbox_http::signals::TerminationSignals;
use anyhow::Context;
use supervisor::{Supervisor, SupervisorConfig};

use crate::activity::Activity;
use crate::config::Settings;

/// How long in-flight HTTP requests get to finish once programs have stopped.
const HTTP_DRAIN: Duration = Duration::from_secs(2);

/// How long the idle dead-man switch waits for the sandbox to get ready before its clock starts
/// anyway (the orchestrator's ready timeout is 120 s by default).
const IDLE_CLOCK_READY_WAIT: Duration = Duration::from_secs(180);

/// Loads the program configuration named by `settings`, applying environment overrides.
pub fn load_programs(settings: &Settings) -> anyhow::Result<SupervisorConfig> {
    let mut config = SupervisorConfig::load(&settings.programs_file, Some(&settings.programs_dir))
        .context("loading the programs configuration")?;
    if let Some(dir) = &settings.log_dir {
        config.supervisor.log_dir = Some(dir.clone());
    }
    if let Some(bytes) = settings.log_max_bytes {
        config.supervisor.log_max_bytes = bytes;
    }
    if let Some(backups) = settings.log_backups {
        config.supervisor.log_backups = backups;
    }
    config
        .expand(|name| std::env::var(name).ok())
        .context("expanding variables in the programs configuration")?;
    Ok(config)
}

/// Runs sandboxd until a termination signal or the idle dead-man switch, then stops every program
/// in reverse dependency order and returns.
///
/// `signals` were installed before anything else (see `main`): a signal that came during
/// start-up ends it before the programs start if it came that early, or goes straight to the
/// same shutdown as later on, stopping the programs already started.
pub async fn run(settings: Settings, mut signals: TerminationSignals) -> anyhow::Result<()> {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        sandbox_id = settings.sandbox_id.as_deref(),
        listen = %settings.listen,
        auth = settings.api_key.is_some(),
        idle_exit_secs = settings.idle_exit.map(|d| d.as_secs()),
        "sandboxd starting"
    );
    if settings.api_key.is_none() {
        tracing::warn!(
            "SANDBOX_AUTH=none: the API, the browser (CDP) and the desktop (VNC) answer anyone \
             who can reach port {} without a credential",
            settings.listen.port()
        );
    }
    // The port is ours before any program runs, so nothing started in the sandbox can take it.
    let listener = match signals
        .unless_stopped(tokio::net::TcpListener::bind(settings.listen))
        .await
    {
        Ok(bound) => bound.with_context(|| format!("binding the API to {}", settings.listen))?,
        Err(stopped) => return stopped_before_programs(stopped),
    };
    // A hibernated sandbox's home (or a snapshot's, or a browser profile) comes back first.
    match home::restore_saved(&settings.home_archive, &settings.home_dir) {
        Ok(None) => {}
        Ok(Some(restored)) => {
            tracing::info!(
                entries = restored.entries,
                bytes = restored.bytes,
                "home restored from its archive"
            );
            // Chromium reopens the saved session's tabs when it starts.
            if let Err(error) = home::ask_browser_to_restore(&settings.home_dir) {
                tracing::warn!(%error, "cannot ask the browser to restore its session");
            }
        }
        Err(error) => {
            tracing::error!(archive = %settings.home_archive.display(), %error, "cannot restore the home from its archive");
        }
    }
    // Then a named browser profile, in place of the profile the home had.
    match home::restore_profile(&settings.profile_archive, &settings.home_dir) {
        Ok(None) => {}
        Ok(Some(restored)) => {
            tracing::info!(
                entries = restored.entries,
                bytes = restored.bytes,
                "browser profile restored from its archive"
            );
        }
        Err(error) => {
            tracing::error!(archive = %settings.profile_archive.display(), %error, "cannot restore the browser profile; the browser starts with an empty one");
        }
    }
    // The home may be an empty tmpfs: its dotfiles and the workspace go back before anything
    // runs there.
    if let Err(error) = home::prepare(&settings.home_dir, &settings.workspace) {
        tracing::warn!(home = %settings.home_dir.display(), %error, "cannot prepare the home directory");
    }
    // The VNC server reads its passwords when it starts: write them before any program starts.
    let vnc_passwords = vnc::VncPasswords::generate();
    if let Err(error) = vnc_passwords.write(&settings.vnc.password_file) {
        tracing::warn!(path = %settings.vnc.password_file.display(), %error, "cannot write the VNC passwords; the remote desktop will not start");
    }
    let programs = load_programs(&settings)?;
    if let Err(stopped) = signals.unless_stopped(std::future::ready(())).await {
        return stopped_before_programs(stopped);
    }
    let supervisor = Arc::new(Supervisor::start(programs).context("starting the supervisor")?);

    tracing::info!("building the API");
    let activity = Activity::new();
    let settings = Arc::new(settings);
    // Building the routes generates every route's OpenAPI description: CPU work that took 11 s
    // on a loaded machine (a CI run). It runs on a blocking thread, so a stop meanwhile is acted
    // on at once: the programs already started are stopped in order and sandboxd exits (main
    // does not wait long for the abandoned build).
    let build = {
        let supervisor = supervisor.clone();
        let settings = settings.clone();
        let activity = activity.clone();
        tokio::task::spawn_blocking(move || {
            let services = Arc::new(
                services::Services::new(supervisor, settings, activity)
                    .with_vnc_passwords(vnc_passwords),
            );
            services.start_background_tasks();
            let app = api::router(api::AppState::from_services(services.clone()));
            // Building the router generated the OpenAPI descriptions of every route, then
            // dropped them; hand the freed heap back to the kernel so an idle sandboxd stays
            // small.
            // SAFETY: malloc_trim only walks glibc's own heap, under its own locks.
            #[allow(unsafe_code)]
            unsafe {
                nix::libc::malloc_trim(0);
            }
            (services, app)
        })
    };
    let (services, app) = match signals.unless_stopped(build).await {
        Ok(built) => built.context("building the API")?,
        Err(stopped) => {
            tracing::info!(
                signal = stopped.signal,
                "termination requested while the API was being built; stopping programs"
            );
            supervisor.shutdown().await;
            tracing::info!("all programs stopped; exiting");
            return Ok(());
        }
    };

    tracing::info!("serving the API");
    let (stop_http_tx, stop_http_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        api::serve(listener, app, async {
            let _ = stop_http_rx.await;
        })
        .await
    });

    let idle = async {
        match settings.idle_exit {
            Some(limit) => {
                // The idle clock starts once the sandbox is ready: until then its orchestrator
                // polls `/readyz` (which is not activity) and sends no heartbeat, and a start
                // slowed by a loaded machine must not end by itself (a 3 s switch fired during
                // a 10 s start in a CI run). A start that never gets ready counts from the end
                // of the wait.
                let supervisor = services.supervisor.clone();
                supervisor
                    .wait_for(IDLE_CLOCK_READY_WAIT, |programs| {
                        programs
                            .iter()
                            .all(|p| !p.required || p.state == supervisor::ProgramState::Ready)
                    })
                    .await;
                activity.touch();
                activity.clone().idle_watchdog(limit).await;
                limit
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        signal = signals.recv() => {
            tracing::info!(signal, "termination requested; stopping programs");
        }
        limit = idle => {
            tracing::warn!(idle_secs = limit.as_secs(), "no API request within the idle limit; shutting the sandbox down");
        }
        result = &mut server => {
            result.context("API server task")?.context("API server")?;
            anyhow::bail!("the API server stopped unexpectedly");
        }
    }

    services.shutdown().await;
    let _ = stop_http_tx.send(());
    if tokio::time::timeout(HTTP_DRAIN, server).await.is_err() {
        tracing::warn!("in-flight API requests did not finish in time; exiting anyway");
    }
    tracing::info!("all programs stopped; exiting");
    Ok(())
}

/// A stop before any program started: nothing to stop, an orderly exit.
fn stopped_before_programs(stopped: agentbox_http::signals::Stopped) -> anyhow::Result<()> {
    tracing::info!(
        signal = stopped.signal,
        "termination requested before any program started; exiting"
    );
    Ok(())
}
