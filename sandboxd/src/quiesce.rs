//! Holding the sandbox still while its home is archived (`home_archive`), so that an archive is
//! never a half-written state: Chromium is closed through CDP (`Browser.close`, its orderly
//! shutdown: it writes its session, its tabs and its cookie store; SIGTERM would end it at once,
//! recent cookies unwritten), the supervisor told to expect the exit and to keep it stopped;
//! and every other process of the
//! agent (shell commands, terminals, code sessions, programs they started) is stopped with
//! SIGSTOP. The desktop's own programs (Xvfb, the window manager, the VNC server, the CDP
//! relay) keep running: they write nothing in the home. [`Hold::release`] sends SIGCONT and
//! starts Chromium again, which then restores the session it saved.
//!
//! One hold at a time. A hold that is kept after its archive (hibernation: the orchestrator
//! removes the container next) is released by itself after [`HOLD_LIMIT`] if nobody removed
//! the sandbox or released it, so a lost orchestrator cannot leave a sandbox frozen.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getsid};
use supervisor::{ProgramState, Supervisor};

/// The supervised program that is stopped (not frozen) during a hold.
pub const BROWSER: &str = "chromium";
/// How long Chromium gets to save its session and exit.
const BROWSER_STOP_WAIT: Duration = Duration::from_secs(15);
/// A hold kept after its archive ends by itself after this long.
pub const HOLD_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum QuiesceError {
    #[error("the home is being archived already")]
    Busy,
    #[error("the browser did not stop within {} s", BROWSER_STOP_WAIT.as_secs())]
    BrowserDidNotStop,
    #[error("stopping the browser: {0}")]
    Supervisor(#[from] supervisor::SupervisorError),
}

/// The one hold of this sandbox.
pub struct Quiescer {
    supervisor: Arc<Supervisor>,
    browser: Arc<crate::browser::BrowserService>,
    /// The agent's home (the browser's profile in it).
    home: std::path::PathBuf,
    /// The current hold's generation (`None`: none), so that a late timer does not release a
    /// newer hold.
    current: Mutex<Option<u64>>,
    next: std::sync::atomic::AtomicU64,
    /// The hold kept after its archive, if any.
    kept: Mutex<Option<Hold>>,
}

/// A sandbox held still. Dropping it without [`release`](Self::release) leaves it held until
/// [`Quiescer::release_current`] or the hold limit.
pub struct Hold {
    quiescer: Arc<Quiescer>,
    generation: u64,
    frozen: Vec<Pid>,
    browser_was_running: bool,
}

impl Quiescer {
    pub fn new(
        supervisor: Arc<Supervisor>,
        browser: Arc<crate::browser::BrowserService>,
        home: std::path::PathBuf,
    ) -> Arc<Self> {
        Arc::new(Self {
            supervisor,
            browser,
            home,
            current: Mutex::new(None),
            next: std::sync::atomic::AtomicU64::new(1),
            kept: Mutex::new(None),
        })
    }

    /// Stops the browser and freezes the agent's processes.
    pub async fn hold(self: &Arc<Self>) -> Result<Hold, QuiesceError> {
        let generation = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut current = self.current.lock().map_err(|_| QuiesceError::Busy)?;
            if current.is_some() {
                return Err(QuiesceError::Busy);
            }
            *current = Some(generation);
        }
        let mut hold = Hold {
            quiescer: self.clone(),
            generation,
            frozen: Vec::new(),
            browser_was_running: false,
        };
        let browser_pid = self.supervisor.status().iter().find_map(|p| {
            (p.name == BROWSER && matches!(p.state, ProgramState::Starting | ProgramState::Ready))
                .then_some(p.pid)
                .flatten()
        });
        if let Some(pid) = browser_pid {
            hold.browser_was_running = true;
            if let Err(error) = self.supervisor.stop_program_by_caller(BROWSER).await {
                hold.release().await;
                return Err(error.into());
            }
            if let Err(error) = self.browser.close_browser().await {
                // The orderly close could not be asked for: the stop signal then (its session
                // is saved; cookies set in the last 30 s may not be).
                tracing::warn!(%error, "closing the browser through CDP failed; signalling it");
                supervisor::process::ProcessGroup::new(pid).signal(Signal::SIGTERM);
            }
            let stopped = self
                .supervisor
                .wait_for(BROWSER_STOP_WAIT, |programs| {
                    programs
                        .iter()
                        .any(|p| p.name == BROWSER && p.pid.is_none())
                })
                .await;
            if stopped.is_none() {
                hold.release().await;
                return Err(QuiesceError::BrowserDidNotStop);
            }
        }
        hold.frozen = self.freeze_agent_processes();
        tracing::info!(
            frozen = hold.frozen.len(),
            browser_stopped = hold.browser_was_running,
            "sandbox held still for an archive"
        );
        Ok(hold)
    }

    /// Stops (SIGSTOP) every process but sandboxd and the supervised programs' sessions. Two
    /// passes: a process forked while the first ran is caught by the second.
    fn freeze_agent_processes(&self) -> Vec<Pid> {
        let spared: HashSet<Pid> = self
            .supervisor
            .status()
            .iter()
            .filter_map(|p| p.pid.map(Pid::from_raw))
            .collect();
        let me = Pid::this();
        let mut frozen = Vec::new();
        for _ in 0..2 {
            for pid in all_processes() {
                if pid == me || pid.as_raw() == 1 || frozen.contains(&pid) {
                    continue;
                }
                // The supervised programs lead sessions of their own.
                match getsid(Some(pid)) {
                    Ok(session) if spared.contains(&session) => continue,
                    Ok(_) => {}
                    Err(_) => continue, // gone
                }
                if kill(pid, Signal::SIGSTOP).is_ok() {
                    frozen.push(pid);
                }
            }
        }
        frozen
    }

    /// Releases the hold that was kept after its archive (hibernation that did not happen).
    /// `false` when there is none.
    pub async fn release_current(self: &Arc<Self>) -> bool {
        let kept = self.kept.lock().ok().and_then(|mut kept| kept.take());
        match kept {
            Some(hold) => {
                hold.release().await;
                true
            }
            None => false,
        }
    }
}

impl Hold {
    /// Thaws the frozen processes and starts the browser again (it restores its session).
    pub async fn release(self) {
        for pid in &self.frozen {
            let _ = kill(*pid, Signal::SIGCONT);
        }
        if self.browser_was_running {
            // It comes back with the tabs it had.
            if let Err(error) = crate::home::ask_browser_to_restore(&self.quiescer.home) {
                tracing::warn!(%error, "cannot ask the browser to restore its session");
            }
            if let Err(error) = self.quiescer.supervisor.start_program(BROWSER).await {
                tracing::warn!(%error, "starting the browser again after an archive failed");
            }
        }
        if let Ok(mut current) = self.quiescer.current.lock()
            && *current == Some(self.generation)
        {
            *current = None;
        }
        tracing::info!(
            thawed = self.frozen.len(),
            "sandbox released after an archive"
        );
    }

    /// Keeps the sandbox held after its archive (the orchestrator is about to remove it): it is
    /// released by [`Quiescer::release_current`], or by itself after [`HOLD_LIMIT`].
    pub fn keep(self) {
        let quiescer = self.quiescer.clone();
        let generation = self.generation;
        if let Ok(mut kept) = quiescer.kept.lock() {
            *kept = Some(self);
        }
        tokio::spawn(async move {
            tokio::time::sleep(HOLD_LIMIT).await;
            let still = quiescer
                .kept
                .lock()
                .ok()
                .is_some_and(|kept| kept.as_ref().is_some_and(|h| h.generation == generation));
            if still {
                tracing::warn!(
                    limit_secs = HOLD_LIMIT.as_secs(),
                    "a held sandbox was neither removed nor released; releasing it"
                );
                quiescer.release_current().await;
            }
        });
    }
}

/// The pids in this PID namespace.
fn all_processes() -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .map(Pid::from_raw)
        .collect()
}
