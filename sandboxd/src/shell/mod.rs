//! Shell sessions and terminals for agents, with no HTTP in them.
//!
//! - A [`Shell`] holds a bounded set of [`Session`]s. A session runs one command at a time
//!   (a second one while the first runs is [`ShellError::Busy`], never queued); its working
//!   directory, exported environment, variables and functions carry over between commands, as at
//!   a prompt. Idle sessions expire; when the set is full the least recently used idle session
//!   makes room (its background processes keep running).
//! - Each command is a [`Job`]: bash leading its own session and process group, output merged
//!   (or, for the bash pipe API, stdout and stderr apart, read by byte offsets) and bounded, a hard timeout that ends every process the command started (even those that
//!   left its session: see [`procs`]), and an activity guard held while it runs so the idle
//!   dead-man switch waits for it.
//! - A [`Terminal`] is an interactive `bash -l` on a pseudo-terminal.
//! - Everything runs as the unprivileged user: sandboxd normally runs as `agent` and commands
//!   inherit that; if sandboxd runs as root, commands drop to [`ShellConfig::run_as`].
//!
//! # Layout
//! - [`session`]: one session's state.
//! - [`job`]: one command, from spawn to exit (and `wrapper.bash`, the script around it).
//! - [`output`]: the bounded output buffer and its rendering as plain text.
//! - [`terminal`]: the pseudo-terminal.
//! - [`procs`]: finding and ending every process a command or terminal started.
//! - [`state`]: the private directory of session state, reached through a descriptor.
//! - [`workspace`]: the workspace directory, looked up in its parent held open.
//! - [`zygote`]: long-lived bashes that fork the ready ones commands run in.

pub mod job;
pub mod output;
pub mod procs;
pub mod session;
pub mod state;
pub mod terminal;
pub mod workspace;
pub mod zygote;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid};
use supervisor::process::Identity;

use crate::activity::Activity;
use crate::config::Settings;
pub use job::{CommandStatus, InputError, Job, Outcome, StopReason, Stream, WaitEnd};
use job::{EnvKind, Prewarmed};
pub use output::{Chunk, RenderedOutput, TRUNCATE_CHARS};
pub use session::{Session, SessionInfo};
pub use terminal::{Terminal, TerminalSize};

/// The user commands run as when sandboxd itself runs as root.
pub const UNPRIVILEGED_USER: &str = "agent";

/// Limits and defaults of the shell.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// Where new sessions and terminals start (the home directory if it does not exist).
    pub workspace: PathBuf,
    /// Who commands run as if sandboxd runs as root; None keeps sandboxd's own user.
    pub run_as: Option<String>,
    pub max_sessions: usize,
    /// Sessions unused (and running nothing) for this long are removed.
    pub idle_expiry: Duration,
    /// A command whose output does not change for this long makes `exec` return
    /// `no_change_timeout` (it keeps running). Per session; AIO's default is 120 s.
    pub default_no_change_timeout: Duration,
    /// Output kept per command (the most recent bytes).
    pub output_limit: usize,
    /// Between SIGTERM and SIGKILL when a command is stopped.
    pub stop_grace: Duration,
    /// Where the per-session state directories are created.
    pub state_parent: PathBuf,
    /// Fork ready shells from a zygote when the builtin is found (see [`zygote`]).
    pub zygote: bool,
}

impl ShellConfig {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            workspace: settings.workspace.clone(),
            run_as: Uid::effective()
                .is_root()
                .then(|| UNPRIVILEGED_USER.to_string()),
            max_sessions: 64,
            idle_expiry: Duration::from_secs(3600),
            default_no_change_timeout: Duration::from_secs(120),
            output_limit: 1024 * 1024,
            stop_grace: Duration::from_secs(2),
            state_parent: state_parent(),
            zygote: settings.shell_zygote,
        }
    }
}

/// Where session state goes: `/dev/shm` when it is a writable directory (a tmpfs in every
/// container: each command reads and writes its session's state, and on an overlay or
/// fuse-overlayfs root that costs milliseconds per call), else the temporary directory.
fn state_parent() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    let writable = nix::unistd::access(&shm, nix::unistd::AccessFlags::W_OK).is_ok();
    if shm.is_dir() && writable {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// What went wrong, naming the session or the step.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("no shell session {0:?}")]
    UnknownSession(String),
    #[error(
        "shell session {id:?} is still running {command:?}; wait for it, kill it, or use another session"
    )]
    Busy { id: String, command: String },
    #[error("no command is running in shell session {0:?}")]
    NotRunning(String),
    #[error("shell session {0:?} has not run any command yet")]
    NoCommand(String),
    #[error("all {0} shell sessions are running commands; kill one or wait")]
    TooManySessions(usize),
    #[error("a terminal with id {0:?} is already open")]
    TerminalInUse(String),
    #[error("the shell is shutting down")]
    ShuttingDown,
    #[error("cannot run commands as {user:?}: {message}")]
    Identity { user: String, message: String },
    #[error("preparing the session state directory {path}: {source}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting bash: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("opening a pseudo-terminal: {0}")]
    Pty(#[source] std::io::Error),
    #[error(transparent)]
    Input(#[from] InputError),
}

/// A new session's settings (all optional).
#[derive(Debug, Default, Clone)]
pub struct NewSession {
    pub id: Option<String>,
    pub working_dir: Option<PathBuf>,
    pub no_change_timeout: Option<Duration>,
    pub preserve_symlinks: Option<bool>,
}

/// One command to start in a session.
#[derive(Debug, Clone, Default)]
pub struct CommandRequest {
    pub command: String,
    /// Start here instead of the session's working directory (and stay there after).
    pub exec_dir: Option<PathBuf>,
    pub hard_timeout: Option<Duration>,
    pub preserve_symlinks: Option<bool>,
    /// Capture stderr apart from stdout (the bash pipe API).
    pub separate_stderr: bool,
    /// Variables set (`Some`) or unset (`None`) for this command only. Names must be shell
    /// identifiers (the API checks them).
    pub env: Vec<(String, Option<String>)>,
}

impl CommandRequest {
    /// Whether it can run in a bash started ahead of time (see [`job::fits_a_waiting_bash`]).
    fn fits_a_waiting_bash(&self) -> bool {
        job::fits_a_waiting_bash(self.separate_stderr, &self.env)
    }
}

/// Counts for `stats`.
#[derive(Debug, Clone, Copy)]
pub struct ShellStats {
    pub total: usize,
    pub running: usize,
    pub max: usize,
    pub idle_expiry: Duration,
}

/// The shell: sessions, their commands, and open terminals.
#[derive(Debug)]
pub struct Shell {
    config: ShellConfig,
    activity: Arc<Activity>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Open terminals: id -> the terminal's session id (its bash pid).
    terminals: Arc<Mutex<HashMap<String, i32>>>,
    /// Commands of sessions that expired or were evicted: their background processes are left
    /// running, and ended when sandboxd stops.
    detached: Mutex<Vec<procs::JobMark>>,
    identity: OnceLock<Result<Option<Identity>, String>>,
    /// Created on first use.
    state_root: Mutex<Option<Arc<state::StateRoot>>>,
    next_state_dir: AtomicU64,
    closed: AtomicBool,
    /// Random per shell: the first part of every command's marker, so that markers of another
    /// shell (an earlier sandboxd, another test) never match.
    marker_prefix: String,
    /// Numbers commands, for their markers.
    next_job: AtomicU64,
    /// Up to [`READY_PER_KIND`] bashes of each environment kind started ahead of the next
    /// commands (see [`job::Prewarmed`]), longest waiting first.
    prewarmed: Mutex<Vec<Prewarmed>>,
    /// Whether a bash of each kind ([`EnvKind::Fresh`] first) is being made for `prewarmed`.
    refilling: [AtomicBool; 2],
    /// Told when a bash joins `prewarmed` or a refill ends.
    ready_changed: tokio::sync::Notify,
    /// What forks the prewarmed bashes, when it can (else they start from scratch).
    zygotes: zygote::Zygotes,
    /// `config.workspace`, looked up without a lookup from `/`.
    workspace: workspace::Workspace,
}

/// How many detached command session ids are remembered.
const MAX_DETACHED: usize = 4096;
/// Bashes of each kind kept waiting for a command: with two, a command that arrives while the
/// one before it is still being replaced finds one ready (each costs about 0.6 MiB of PSS,
/// forked from a zygote).
const READY_PER_KIND: usize = 2;
/// How long the bash that replaces a waiting one waits for the command that took it to end.
const REFILL_AFTER_AT_MOST: Duration = Duration::from_millis(50);
/// How long a command waits for a bash being made before it starts one from scratch.
const WAIT_FOR_READY_AT_MOST: Duration = Duration::from_millis(25);
/// Longest session or terminal id.
pub const MAX_ID_LEN: usize = 128;

impl Shell {
    pub fn new(config: ShellConfig, activity: Arc<Activity>) -> Self {
        let zygotes = if config.zygote {
            zygote::Zygotes::find()
        } else {
            zygote::Zygotes::none()
        };
        Self {
            workspace: workspace::Workspace::new(config.workspace.clone()),
            config,
            activity,
            sessions: Mutex::new(HashMap::new()),
            terminals: Arc::new(Mutex::new(HashMap::new())),
            detached: Mutex::new(Vec::new()),
            identity: OnceLock::new(),
            state_root: Mutex::new(None),
            next_state_dir: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            marker_prefix: new_session_id(),
            next_job: AtomicU64::new(1),
            prewarmed: Mutex::new(Vec::new()),
            refilling: [AtomicBool::new(false), AtomicBool::new(false)],
            ready_changed: tokio::sync::Notify::new(),
            zygotes,
        }
    }

    pub fn config(&self) -> &ShellConfig {
        &self.config
    }

    /// Returns the session `request.id` if it exists (unchanged), else creates it. The bool is
    /// true when it was created.
    pub fn create_session(&self, request: NewSession) -> Result<(Arc<Session>, bool), ShellError> {
        self.check_open()?;
        let mut sessions = self.lock_sessions();
        if let Some(id) = &request.id
            && let Some(session) = sessions.get(id)
        {
            session.lock().touch();
            return Ok((session.clone(), false));
        }
        self.make_room(&mut sessions)?;
        let id = match request.id {
            Some(id) => id,
            None => loop {
                let id = new_session_id();
                if !sessions.contains_key(&id) {
                    break id;
                }
            },
        };
        let state_dir = self
            .next_state_dir
            .fetch_add(1, Ordering::Relaxed)
            .to_string();
        let session = Arc::new(Session::new(
            id.clone(),
            state_dir,
            request.working_dir.unwrap_or_else(|| self.default_dir()),
            request.preserve_symlinks.unwrap_or(false),
            request
                .no_change_timeout
                .unwrap_or(self.config.default_no_change_timeout),
        ));
        sessions.insert(id, session.clone());
        Ok((session, true))
    }

    pub fn session(&self, id: &str) -> Result<Arc<Session>, ShellError> {
        self.lock_sessions()
            .get(id)
            .cloned()
            .ok_or_else(|| ShellError::UnknownSession(id.to_string()))
    }

    /// Ends what the session's commands left running: the background processes of finished
    /// commands, however they left (see [`procs`]). The session stays.
    pub async fn end_leftovers(&self, session: &Session) {
        let jobs = session.lock().jobs.clone();
        let grace = self.config.stop_grace;
        let ended =
            tokio::task::spawn_blocking(move || procs::terminate_leftovers(&jobs, grace)).await;
        if let Err(error) = ended {
            tracing::error!(%error, "ending a shell session's leftover processes panicked");
        }
    }

    /// Starts `request` in `session`. Fails with [`ShellError::Busy`] while the session's
    /// previous command still runs.
    ///
    /// When no bash of the command's kind waits but one is being made, waits for it (up to
    /// [`WAIT_FOR_READY_AT_MOST`]): it is at most a fork away, and starting one from scratch
    /// takes several milliseconds (a lookup of every path bash opens, through the image).
    pub async fn start(
        self: &Arc<Self>,
        session: &Arc<Session>,
        request: CommandRequest,
    ) -> Result<Arc<Job>, ShellError> {
        if request.fits_a_waiting_bash()
            && let Ok(identity) = self.identity()
            && let Ok(state_root) = self.state_root(identity.as_ref())
        {
            let kind = EnvKind::of_session(&state::SessionDir {
                root: state_root,
                name: session.state_dir.clone(),
            });
            self.wait_for_ready(kind).await;
        }
        self.start_now(session, request)
    }

    /// Waits until a bash of `kind` waits or none is being made, for at most
    /// [`WAIT_FOR_READY_AT_MOST`].
    async fn wait_for_ready(&self, kind: EnvKind) {
        let deadline = tokio::time::Instant::now() + WAIT_FOR_READY_AT_MOST;
        loop {
            let changed = self.ready_changed.notified();
            tokio::pin!(changed);
            // Registered before the check: a change between the two still wakes it.
            changed.as_mut().enable();
            if self.waiting(kind) > 0 || !self.refilling_of(kind).load(Ordering::Acquire) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return;
            }
        }
    }

    fn start_now(
        self: &Arc<Self>,
        session: &Arc<Session>,
        request: CommandRequest,
    ) -> Result<Arc<Job>, ShellError> {
        self.check_open()?;
        let identity = self.identity()?;
        let state_root = self.state_root(identity.as_ref())?;
        let mut state = session.lock();
        if state.closed {
            return Err(ShellError::UnknownSession(session.id.clone()));
        }
        if let Some(job) = state.current.as_ref().filter(|job| job.is_running()) {
            return Err(ShellError::Busy {
                id: session.id.clone(),
                command: job.command().to_string(),
            });
        }
        let cwd = state.effective_cwd();
        state.cwd = cwd.clone();
        let fits_a_waiting_bash = request.fits_a_waiting_bash();
        let start_dir = request.exec_dir.unwrap_or(cwd);
        let session_dir = state::SessionDir {
            root: state_root.clone(),
            name: session.state_dir.clone(),
        };
        state_root
            .make_private_dir(&session_dir.name, identity.as_ref())
            .map_err(|source| ShellError::StateDir {
                path: session_dir.path(),
                source,
            })?;
        let physical = !request.preserve_symlinks.unwrap_or(state.preserve_symlinks);
        let ps1 = prompt(identity.as_ref(), &start_dir);
        let kind = EnvKind::of_session(&session_dir);
        let warm = fits_a_waiting_bash
            .then(|| self.take_prewarmed(kind))
            .flatten();
        // A waiting bash sits in the default directory: when the command starts there, and it
        // is still the directory of that name, it need not `cd` (see `wrapper.bash`).
        let warm_in_start_dir = warm.as_ref().is_some_and(|warm| {
            warm.ready_dir() == start_dir
                && start_dir == self.config.workspace
                && self.workspace.is_cwd_of(warm.pid())
        });
        let job = Job::spawn(
            job::JobSpec {
                command: request.command,
                state: session_dir,
                start_dir,
                physical,
                identity: identity.clone(),
                hard_timeout: request.hard_timeout,
                output_limit: self.config.output_limit,
                stop_grace: self.config.stop_grace,
                ps1,
                marker: format!(
                    "{}.{}",
                    self.marker_prefix,
                    self.next_job.fetch_add(1, Ordering::Relaxed)
                ),
                separate_stderr: request.separate_stderr,
                env: request.env,
                warm_in_start_dir,
            },
            warm,
            self.activity.hold(),
        )
        .map_err(ShellError::Spawn)?;
        // Off the request path: forking bash costs a millisecond here, and the request that
        // just took the waiting one should not pay for the next. Nor compete with it while
        // another bash waits (READY_PER_KIND): then the refill waits for this command to end,
        // or for a moment if it runs on.
        let shell = Arc::clone(self);
        let running = (self.waiting(kind) > 0).then(|| job.clone());
        tokio::spawn(async move {
            if let Some(running) = running {
                running.settled(REFILL_AFTER_AT_MOST).await;
            }
            let _ = tokio::task::spawn_blocking(move || {
                shell.refill_prewarmed(kind, identity.as_ref(), &state_root)
            })
            .await;
        });
        state.remember(job.mark());
        state.current = Some(job.clone());
        state.commands += 1;
        state.touch();
        Ok(job)
    }

    /// Ends the session's command and background processes and forgets the session.
    pub async fn remove_session(&self, id: &str) -> Result<(), ShellError> {
        let session = self
            .lock_sessions()
            .remove(id)
            .ok_or_else(|| ShellError::UnknownSession(id.to_string()))?;
        self.close_session(session).await;
        Ok(())
    }

    /// Removes every session (as [`Shell::remove_session`]); returns their ids.
    pub async fn remove_all_sessions(&self) -> Vec<String> {
        let sessions: Vec<Arc<Session>> = self.lock_sessions().drain().map(|(_, s)| s).collect();
        let ids = sessions.iter().map(|s| s.id.clone()).collect();
        let mut closing = tokio::task::JoinSet::new();
        for session in sessions {
            let grace = self.config.stop_grace;
            let root = self.lock_state_root().clone();
            closing.spawn(close_session(session, grace, root));
        }
        closing.join_all().await;
        ids
    }

    pub fn sessions(&self) -> Vec<SessionInfo> {
        let mut sessions = self.lock_sessions();
        self.expire(&mut sessions);
        let mut infos: Vec<SessionInfo> = sessions.values().map(|s| s.info()).collect();
        infos.sort_by_key(|info| info.created_at);
        infos
    }

    pub fn stats(&self) -> ShellStats {
        let mut sessions = self.lock_sessions();
        self.expire(&mut sessions);
        ShellStats {
            total: sessions.len(),
            running: sessions.values().filter(|s| s.is_running()).count(),
            max: self.config.max_sessions,
            idle_expiry: self.config.idle_expiry,
        }
    }

    /// Opens an interactive terminal. `id` names it (one open terminal per id).
    pub fn open_terminal(
        &self,
        id: Option<String>,
        size: TerminalSize,
    ) -> Result<Terminal, ShellError> {
        self.check_open()?;
        let identity = self.identity()?;
        let id = id.unwrap_or_else(new_session_id);
        if self.lock_terminals().contains_key(&id) {
            return Err(ShellError::TerminalInUse(id));
        }
        let dir = self.default_dir();
        let terminal = Terminal::spawn(
            terminal::TerminalSpec {
                id: id.clone(),
                working_dir: dir,
                identity,
                size,
                stop_grace: self.config.stop_grace,
                registry: self.terminals.clone(),
            },
            self.activity.hold(),
        )
        .map_err(ShellError::Pty)?;
        let mut terminals = self.lock_terminals();
        if terminals.contains_key(&id) {
            return Err(ShellError::TerminalInUse(id)); // dropping `terminal` ends it
        }
        terminals.insert(id, terminal.pid());
        Ok(terminal)
    }

    /// Stops everything: running commands, background processes of every session, terminals.
    /// New work is refused from now on.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Closing their fd 3 ends the waiting shells; closing the zygotes' input ends them.
        self.lock_prewarmed().clear();
        self.zygotes.clear();
        let removed = self.remove_all_sessions().await;
        let detached = std::mem::take(&mut *self.lock_detached());
        let terminals: Vec<i32> = self.lock_terminals().values().copied().collect();
        let grace = self.config.stop_grace;
        let ended = tokio::task::spawn_blocking(move || {
            procs::terminate_leftovers(&detached, grace);
            for sid in terminals {
                procs::terminate_session(sid, Signal::SIGHUP, grace);
            }
        })
        .await;
        if let Err(error) = ended {
            tracing::error!(%error, "ending shell processes panicked");
        }
        if let Some(root) = self.lock_state_root().take() {
            let _ = std::fs::remove_dir_all(root.path());
        }
        tracing::info!(sessions = removed.len(), "shell stopped");
    }

    async fn close_session(&self, session: Arc<Session>) {
        let root = self.lock_state_root().clone();
        close_session(session, self.config.stop_grace, root).await;
    }

    fn check_open(&self) -> Result<(), ShellError> {
        if self.closed.load(Ordering::SeqCst) {
            Err(ShellError::ShuttingDown)
        } else {
            Ok(())
        }
    }

    /// Removes expired sessions and, if the set is still full, the least recently used idle one.
    fn make_room(&self, sessions: &mut HashMap<String, Arc<Session>>) -> Result<(), ShellError> {
        self.expire(sessions);
        if sessions.len() < self.config.max_sessions {
            return Ok(());
        }
        let oldest = sessions
            .values()
            .filter_map(|s| {
                let state = s.lock();
                (!state.is_running()).then(|| (state.last_used, s.id.clone()))
            })
            .min();
        match oldest {
            Some((_, id)) => {
                if let Some(session) = sessions.remove(&id) {
                    // Debug: an `exec` without a session id makes a session each time, so once
                    // the set is full this happens on every such call.
                    tracing::debug!(session = %id, "evicting the least recently used shell session");
                    self.detach(&session);
                }
                Ok(())
            }
            None => Err(ShellError::TooManySessions(self.config.max_sessions)),
        }
    }

    fn expire(&self, sessions: &mut HashMap<String, Arc<Session>>) {
        let limit = self.config.idle_expiry;
        let expired: Vec<String> = sessions
            .values()
            .filter(|s| {
                let state = s.lock();
                !state.is_running() && state.last_used.elapsed() >= limit
            })
            .map(|s| s.id.clone())
            .collect();
        for id in expired {
            if let Some(session) = sessions.remove(&id) {
                tracing::info!(session = %id, "shell session expired");
                self.detach(&session);
            }
        }
    }

    /// Forgets a session without ending its background processes.
    fn detach(&self, session: &Session) {
        let jobs = {
            let mut state = session.lock();
            state.closed = true;
            std::mem::take(&mut state.jobs)
        };
        let mut detached = self.lock_detached();
        detached.extend(jobs);
        let excess = detached.len().saturating_sub(MAX_DETACHED);
        detached.drain(..excess);
        drop(detached);
        if let Some(root) = self.lock_state_root().clone() {
            // Off the request path: an `exec` without a session id evicts a session each time
            // once the set is full. (The name is never used again.)
            let name = session.state_dir.clone();
            let remove = move || {
                let _ = root.remove_tree(&name);
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(remove)),
                Err(_) => remove(),
            }
        }
    }

    /// The workspace if it exists, else the home directory, else `/`.
    fn default_dir(&self) -> PathBuf {
        if self.workspace.is_dir() {
            return self.config.workspace.clone();
        }
        let home = match self.identity() {
            Ok(Some(identity)) => identity.home,
            _ => std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default(),
        };
        if home.is_dir() {
            home
        } else {
            PathBuf::from("/")
        }
    }

    /// Who the agent's programs run as (None: as sandboxd), for other programs sandboxd runs
    /// on the agent's behalf.
    pub fn agent_identity(&self) -> Result<Option<Identity>, ShellError> {
        self.identity()
    }

    /// The identity to switch to, or None to keep sandboxd's.
    fn identity(&self) -> Result<Option<Identity>, ShellError> {
        let resolved = self.identity.get_or_init(|| {
            let Some(user) = &self.config.run_as else {
                return Ok(None);
            };
            let identity = Identity::resolve(user, None).map_err(|e| e.to_string())?;
            let current = identity.uid == Uid::effective().as_raw()
                && identity.gid == Gid::effective().as_raw();
            Ok((!current).then_some(identity))
        });
        resolved.clone().map_err(|message| ShellError::Identity {
            user: self.config.run_as.clone().unwrap_or_default(),
            message,
        })
    }

    /// The directory holding every session's state directory, created on first use.
    /// The longest-waiting bash of `kind` (it has finished getting ready), if any.
    fn take_prewarmed(&self, kind: EnvKind) -> Option<Prewarmed> {
        let mut warm = self.lock_prewarmed();
        let at = warm.iter().position(|w| w.kind() == kind)?;
        Some(warm.remove(at))
    }

    fn waiting(&self, kind: EnvKind) -> usize {
        self.lock_prewarmed()
            .iter()
            .filter(|w| w.kind() == kind)
            .count()
    }

    /// Starts bashes of `kind` ahead of time until [`READY_PER_KIND`] wait. A failure only
    /// costs the next command its head start.
    /// A zygote forks them when it can (see [`zygote`]); else they start from scratch.
    fn refill_prewarmed(
        &self,
        kind: EnvKind,
        identity: Option<&Identity>,
        state_root: &state::StateRoot,
    ) {
        // The list is not locked while a bash is made (a fork and a report, a millisecond or
        // more): a command arriving meanwhile takes another waiting one. `refilling` keeps two
        // refills of a kind from racing; a command that took a bash while this one was
        // finishing is made up for by the check after it.
        let refilling = self.refilling_of(kind);
        let full = || self.closed.load(Ordering::SeqCst) || self.waiting(kind) >= READY_PER_KIND;
        while !full() {
            if refilling.swap(true, Ordering::AcqRel) {
                return;
            }
            // Where a new session's commands start (a stat from `/`: off the request path).
            let ready_dir = self.default_dir();
            while !full() {
                let forked = if self.zygotes.enabled() {
                    self.zygotes
                        .ready_bash(kind, identity, state_root, &ready_dir)
                        .inspect_err(
                            |error| tracing::debug!(%error, "no forked shell; starting one"),
                        )
                        .ok()
                } else {
                    None
                };
                let next = match forked {
                    Some(forked) => forked,
                    None => match Prewarmed::spawn(kind, identity, &ready_dir) {
                        Ok(next) => next,
                        Err(error) => {
                            tracing::warn!(%error, "cannot start a shell ahead of time");
                            refilling.store(false, Ordering::Release);
                            self.ready_changed.notify_waiters();
                            return;
                        }
                    },
                };
                let mut warm = self.lock_prewarmed();
                // Shut down meanwhile: dropping it ends it.
                if !self.closed.load(Ordering::SeqCst) {
                    warm.push(next);
                }
                drop(warm);
                self.ready_changed.notify_waiters();
            }
            refilling.store(false, Ordering::Release);
            self.ready_changed.notify_waiters();
        }
    }

    fn refilling_of(&self, kind: EnvKind) -> &AtomicBool {
        &self.refilling[match kind {
            EnvKind::Fresh => 0,
            EnvKind::Saved => 1,
        }]
    }

    fn lock_prewarmed(&self) -> MutexGuard<'_, Vec<Prewarmed>> {
        // Pushes and removes are single calls: a poisoned list is still consistent.
        self.prewarmed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state root, created on first use, and anew (with new zygotes, whose working
    /// directory it is) if a command removed it.
    fn state_root(&self, identity: Option<&Identity>) -> Result<Arc<state::StateRoot>, ShellError> {
        let mut root = self.lock_state_root();
        if let Some(root) = root.as_ref().filter(|root| !root.is_removed()) {
            return Ok(root.clone());
        }
        if root.take().is_some() {
            tracing::warn!("the shell's state directory was removed; making a new one");
            self.zygotes.clear();
        }
        let base = format!("agentbox-shell-{}", std::process::id());
        for attempt in 0..100u32 {
            let path = self.config.state_parent.join(format!("{base}-{attempt}"));
            match state::StateRoot::create(path.clone(), identity) {
                Ok(created) => {
                    let created = Arc::new(created);
                    *root = Some(created.clone());
                    return Ok(created);
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(ShellError::StateDir { path, source }),
            }
        }
        Err(ShellError::StateDir {
            path: self.config.state_parent.join(base),
            source: std::io::Error::other("no free name"),
        })
    }

    fn lock_sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        // Inserts and removes are single calls: a poisoned map is still consistent.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_terminals(&self) -> MutexGuard<'_, HashMap<String, i32>> {
        // As above.
        self.terminals.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_detached(&self) -> MutexGuard<'_, Vec<procs::JobMark>> {
        // As above.
        self.detached.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_state_root(&self) -> MutexGuard<'_, Option<Arc<state::StateRoot>>> {
        // A plain value: consistent even if poisoned.
        self.state_root.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Ends a removed session's command and background processes and deletes its state.
async fn close_session(
    session: Arc<Session>,
    grace: Duration,
    state_root: Option<Arc<state::StateRoot>>,
) {
    let (job, jobs) = {
        let mut state = session.lock();
        state.closed = true;
        (state.current.clone(), std::mem::take(&mut state.jobs))
    };
    if let Some(job) = job {
        job.stop(StopReason::Killed).await;
    }
    let ended = tokio::task::spawn_blocking(move || procs::terminate_leftovers(&jobs, grace)).await;
    if let Err(error) = ended {
        tracing::error!(%error, "ending a shell session's processes panicked");
    }
    if let Some(root) = state_root {
        let _ = root.remove_tree(&session.state_dir);
    }
}

/// `user@host:dir$ `, with the home directory shown as `~`.
fn prompt(identity: Option<&Identity>, dir: &Path) -> String {
    static WHO: OnceLock<(String, String, PathBuf)> = OnceLock::new();
    let (user, host, home) = WHO.get_or_init(|| {
        let me = nix::unistd::User::from_uid(Uid::effective()).ok().flatten();
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "sandbox".into());
        (
            me.as_ref().map(|u| u.name.clone()).unwrap_or_default(),
            host,
            me.map(|u| u.dir).unwrap_or_default(),
        )
    });
    let (user, home) = match identity {
        Some(identity) => (identity.user.as_str(), identity.home.as_path()),
        None => (user.as_str(), home.as_path()),
    };
    let dir = match dir.strip_prefix(home) {
        Ok(rest) if !home.as_os_str().is_empty() && home != Path::new("/") => {
            if rest.as_os_str().is_empty() {
                "~".to_string()
            } else {
                format!("~/{}", rest.display())
            }
        }
        _ => dir.display().to_string(),
    };
    format!("{user}@{host}:{dir}$ ")
}

/// A fresh session id: 16 hex digits, unpredictable enough to never collide by accident.
fn new_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(since_epoch.as_nanos());
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_abbreviate_home() {
        let identity = Identity {
            user: "agent".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/agent".into(),
            shell: "/bin/bash".into(),
        };
        let p = prompt(Some(&identity), Path::new("/home/agent/workspace"));
        assert!(
            p.starts_with("agent@") && p.ends_with(":~/workspace$ "),
            "{p}"
        );
        let p = prompt(Some(&identity), Path::new("/home/agent"));
        assert!(p.ends_with(":~$ "), "{p}");
        let p = prompt(Some(&identity), Path::new("/tmp"));
        assert!(p.ends_with(":/tmp$ "), "{p}");
    }

    #[test]
    fn session_ids_differ() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
    }
}
