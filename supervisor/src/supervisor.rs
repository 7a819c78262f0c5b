//! The supervisor itself: one task that owns every program's state and reacts to events.
//!
//! Everything that happens (a child exits, a probe succeeds, a timer fires, a caller asks for a
//! restart) arrives as an [`Event`] on one channel; the task applies it, then runs
//! [`Engine::reconcile`], which starts what may start (dependencies ready), stops what lost a
//! dependency, and during shutdown stops programs in reverse dependency order. Each start gets a
//! new generation number, and events from an older generation are ignored, so a late probe or
//! timer can never act on a newer process.
//!
//! Callers read state from a `watch` channel of [`ProgramStatus`] snapshots and never wait on the
//! task except for control calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;

use crate::logs::{RotatingLog, Stream, pump_lines};
use crate::probe::probe_once;
use crate::process::{Identity, IdentityError, ProcessGroup, build_command};
use crate::reaper::{ExitStatus, reaper};
use crate::spec::{ConfigError, ProgramSpec, RestartPolicy, SupervisorConfig};

/// Where a program is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgramState {
    /// Not running, and not about to be (or waiting for its dependencies: see `waiting_for`).
    Stopped,
    /// Running; its readiness probe has not yet passed.
    Starting,
    /// Running and its readiness probe passed.
    Ready,
    /// Sent its stop signal; waiting for it to exit (then SIGKILL to its group).
    Stopping,
    /// Failed; waiting out the back-off delay before the next start.
    Backoff,
    /// Exited and its restart policy says not to start it again.
    Exited,
    /// Failed to start more times in a row than `start_retries` allows; left alone.
    Fatal,
}

impl ProgramState {
    pub fn as_str(self) -> &'static str {
        match self {
            ProgramState::Stopped => "stopped",
            ProgramState::Starting => "starting",
            ProgramState::Ready => "ready",
            ProgramState::Stopping => "stopping",
            ProgramState::Backoff => "backoff",
            ProgramState::Exited => "exited",
            ProgramState::Fatal => "fatal",
        }
    }
}

/// A snapshot of one program, as published to readers.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramStatus {
    pub name: String,
    pub state: ProgramState,
    pub pid: Option<i32>,
    /// How many times it was started after its first start.
    pub restarts: u32,
    /// Consecutive failures since it last ran stably.
    pub failures: u32,
    /// When the current process was started.
    pub started_at: Option<SystemTime>,
    /// When the current process became ready.
    pub ready_at: Option<SystemTime>,
    pub last_exit: Option<ExitStatus>,
    pub last_error: Option<String>,
    /// Dependencies that are not ready while this program waits to start.
    pub waiting_for: Vec<String>,
    pub depends_on: Vec<String>,
    /// Whether it counts toward overall readiness.
    pub required: bool,
}

impl ProgramStatus {
    /// How long the current process has been running.
    pub fn uptime(&self) -> Option<Duration> {
        self.started_at
            .and_then(|t| SystemTime::now().duration_since(t).ok())
    }
}

/// Errors from [`Supervisor`] calls.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("program {program:?}: {source}")]
    Identity {
        program: String,
        #[source]
        source: IdentityError,
    },
    #[error("program {program:?}: cannot open log {path}: {source}")]
    Log {
        program: String,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no program named {0:?}")]
    UnknownProgram(String),
    #[error("the supervisor is shutting down")]
    ShuttingDown,
}

/// A handle to a running supervisor. Cheap to share behind an `Arc`.
pub struct Supervisor {
    events: mpsc::UnboundedSender<Event>,
    status: watch::Receiver<Arc<[ProgramStatus]>>,
}

#[derive(Debug, Clone, Copy)]
enum Control {
    Start,
    Stop,
    /// Stop, without the stop signal: the caller makes the program exit.
    StopByCaller,
    Restart,
}

enum Event {
    Exited {
        index: usize,
        generation: u64,
        status: ExitStatus,
    },
    Probe {
        index: usize,
        generation: u64,
        result: Result<(), String>,
    },
    Stable {
        index: usize,
        generation: u64,
    },
    BackoffDone {
        index: usize,
        generation: u64,
    },
    StopTimeout {
        index: usize,
        generation: u64,
    },
    Control {
        name: String,
        control: Control,
        reply: oneshot::Sender<Result<(), SupervisorError>>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

impl Supervisor {
    /// Validates `config`, resolves users, opens log files and starts supervising on the current
    /// Tokio runtime. Programs with `autostart` start at once, in dependency order.
    pub fn start(mut config: SupervisorConfig) -> Result<Self, SupervisorError> {
        let order = config.validate()?;
        let by_name: HashMap<String, usize> = config
            .programs
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
        let order: Vec<usize> = order.iter().map(|n| by_name[n]).collect();
        let settings = config.supervisor.clone();
        let mut programs = Vec::with_capacity(config.programs.len());
        for spec in config.programs.drain(..) {
            let identity = spec
                .user
                .as_deref()
                .map(|user| Identity::resolve(user, spec.group.as_deref()))
                .transpose()
                .map_err(|source| SupervisorError::Identity {
                    program: spec.name.clone(),
                    source,
                })?;
            let log = match &settings.log_dir {
                None => None,
                Some(dir) => {
                    let path = dir.join(format!("{}.log", spec.name));
                    let log = RotatingLog::open(
                        path.clone(),
                        settings.log_max_bytes,
                        settings.log_backups,
                    )
                    .map_err(|source| SupervisorError::Log {
                        program: spec.name.clone(),
                        path,
                        source,
                    })?;
                    Some(Arc::new(Mutex::new(log)))
                }
            };
            let deps = spec.depends_on.iter().map(|d| by_name[d]).collect();
            programs.push(Program::new(spec, identity, log, deps));
        }
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (status_tx, status_rx) = watch::channel(Arc::from(Vec::new()));
        let mut engine = Engine {
            programs,
            order,
            by_name,
            events: events_tx.clone(),
            status: status_tx,
            shutdown_waiters: Vec::new(),
            shutting_down: false,
        };
        engine.reconcile();
        engine.publish();
        tokio::spawn(engine.run(events_rx));
        Ok(Self {
            events: events_tx,
            status: status_rx,
        })
    }

    /// The current state of every program, in configuration order.
    pub fn status(&self) -> Arc<[ProgramStatus]> {
        self.status.borrow().clone()
    }

    /// A receiver that sees every new snapshot.
    pub fn watch(&self) -> watch::Receiver<Arc<[ProgramStatus]>> {
        self.status.clone()
    }

    /// Names of required programs that are not ready (empty when all are).
    pub fn required_not_ready(&self) -> Vec<String> {
        self.status
            .borrow()
            .iter()
            .filter(|p| p.required && p.state != ProgramState::Ready)
            .map(|p| p.name.clone())
            .collect()
    }

    /// Waits until `predicate` holds for the latest snapshot, or `timeout` passes. Returns the
    /// snapshot that satisfied it.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut predicate: impl FnMut(&[ProgramStatus]) -> bool,
    ) -> Option<Arc<[ProgramStatus]>> {
        let mut rx = self.status.clone();
        let wait = async {
            loop {
                {
                    let snapshot = rx.borrow_and_update().clone();
                    if predicate(&snapshot) {
                        return Some(snapshot);
                    }
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }

    /// Starts a stopped, exited or fatal program (clearing its failure count).
    pub async fn start_program(&self, name: &str) -> Result<(), SupervisorError> {
        self.control(name, Control::Start).await
    }

    /// Stops a program and keeps it stopped.
    pub async fn stop_program(&self, name: &str) -> Result<(), SupervisorError> {
        self.control(name, Control::Stop).await
    }

    /// Marks a program as stopping without sending it its stop signal: the caller makes it
    /// exit (a browser closed through its own protocol saves what a signal would not). Past its
    /// stop wait its process group is killed, as for any stop; it stays stopped.
    pub async fn stop_program_by_caller(&self, name: &str) -> Result<(), SupervisorError> {
        self.control(name, Control::StopByCaller).await
    }

    /// Stops a program if it runs, then starts it again. Programs that depend on it are restarted
    /// once it is ready again.
    pub async fn restart_program(&self, name: &str) -> Result<(), SupervisorError> {
        self.control(name, Control::Restart).await
    }

    async fn control(&self, name: &str, control: Control) -> Result<(), SupervisorError> {
        let (reply, rx) = oneshot::channel();
        self.events
            .send(Event::Control {
                name: name.to_string(),
                control,
                reply,
            })
            .map_err(|_| SupervisorError::ShuttingDown)?;
        rx.await.map_err(|_| SupervisorError::ShuttingDown)?
    }

    /// Stops every program, dependents before their dependencies, each within its stop-wait
    /// (then SIGKILL to its process group), and returns when all have exited.
    pub async fn shutdown(&self) {
        let (reply, rx) = oneshot::channel();
        if self.events.send(Event::Shutdown { reply }).is_ok() {
            let _ = rx.await;
        }
    }
}

/// Why a running program is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// A caller asked (stop or restart).
    Requested,
    /// A dependency stopped being ready.
    Dependency,
    /// It did not become ready in time: counts as a failed start.
    NotReady,
    /// The supervisor is shutting down.
    Shutdown,
}

struct Program {
    spec: ProgramSpec,
    name: Arc<str>,
    identity: Option<Identity>,
    log: Option<Arc<Mutex<RotatingLog>>>,
    /// Indices of the programs this one depends on.
    deps: Vec<usize>,
    state: ProgramState,
    /// Whether the program should be running (false after an explicit stop, or in shutdown).
    wanted: bool,
    generation: u64,
    pid: Option<i32>,
    started_at: Option<SystemTime>,
    ready_at: Option<SystemTime>,
    ever_started: bool,
    restarts: u32,
    failures: u32,
    last_exit: Option<ExitStatus>,
    last_error: Option<String>,
    stop_reason: Option<StopReason>,
    /// Probe and timer tasks of the current generation, aborted when it ends.
    tasks: Vec<AbortHandle>,
}

impl Program {
    fn new(
        spec: ProgramSpec,
        identity: Option<Identity>,
        log: Option<Arc<Mutex<RotatingLog>>>,
        deps: Vec<usize>,
    ) -> Self {
        Self {
            name: Arc::from(spec.name.as_str()),
            wanted: spec.autostart,
            spec,
            identity,
            log,
            deps,
            state: ProgramState::Stopped,
            generation: 0,
            pid: None,
            started_at: None,
            ready_at: None,
            ever_started: false,
            restarts: 0,
            failures: 0,
            last_exit: None,
            last_error: None,
            stop_reason: None,
            tasks: Vec::new(),
        }
    }

    fn is_running(&self) -> bool {
        matches!(
            self.state,
            ProgramState::Starting | ProgramState::Ready | ProgramState::Stopping
        )
    }

    fn cancel_tasks(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

struct Engine {
    programs: Vec<Program>,
    /// Program indices with every program after its dependencies.
    order: Vec<usize>,
    by_name: HashMap<String, usize>,
    events: mpsc::UnboundedSender<Event>,
    status: watch::Sender<Arc<[ProgramStatus]>>,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    shutting_down: bool,
}

impl Engine {
    async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>) {
        while let Some(event) = events.recv().await {
            self.apply(event);
            self.reconcile();
            self.publish();
            if self.shutting_down && self.programs.iter().all(|p| p.pid.is_none()) {
                for waiter in self.shutdown_waiters.drain(..) {
                    let _ = waiter.send(());
                }
                // Keep answering: late control calls get ShuttingDown, late waiters return.
            }
        }
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Exited {
                index,
                generation,
                status,
            } => {
                if self.programs[index].generation == generation {
                    self.on_exit(index, status);
                }
            }
            Event::Probe {
                index,
                generation,
                result,
            } => {
                let program = &mut self.programs[index];
                if program.generation != generation || program.state != ProgramState::Starting {
                    return;
                }
                match result {
                    Ok(()) => self.on_ready(index),
                    Err(error) => {
                        program.last_error = Some(format!(
                            "not ready after {:.1} s: {error}",
                            program.spec.ready_timeout_secs
                        ));
                        tracing::warn!(program = %program.name, error = program.last_error.as_deref(), "readiness probe gave up");
                        self.stop(index, StopReason::NotReady);
                    }
                }
            }
            Event::Stable { index, generation } => {
                let program = &mut self.programs[index];
                if program.generation != generation {
                    return;
                }
                match program.state {
                    // No probe: having run this long is what "ready" means.
                    ProgramState::Starting if program.spec.ready.is_none() => {
                        self.on_ready(index);
                        self.programs[index].failures = 0;
                    }
                    ProgramState::Ready => program.failures = 0,
                    _ => {}
                }
            }
            Event::BackoffDone { index, generation } => {
                let program = &mut self.programs[index];
                if program.generation == generation && program.state == ProgramState::Backoff {
                    program.state = ProgramState::Stopped;
                }
            }
            Event::StopTimeout { index, generation } => {
                let program = &self.programs[index];
                if program.generation == generation
                    && program.state == ProgramState::Stopping
                    && let Some(pid) = program.pid
                {
                    tracing::warn!(program = %program.name, pid, "did not stop within stop_wait; killing its process group");
                    ProcessGroup::new(pid).kill();
                }
            }
            Event::Control {
                name,
                control,
                reply,
            } => {
                let result = self.on_control(&name, control);
                let _ = reply.send(result);
            }
            Event::Shutdown { reply } => {
                if !self.shutting_down {
                    tracing::info!("stopping all programs");
                }
                self.shutting_down = true;
                self.shutdown_waiters.push(reply);
                for program in &mut self.programs {
                    program.wanted = false;
                    if program.state == ProgramState::Backoff {
                        program.cancel_tasks();
                        program.state = ProgramState::Stopped;
                    }
                }
            }
        }
    }

    fn on_control(&mut self, name: &str, control: Control) -> Result<(), SupervisorError> {
        if self.shutting_down {
            return Err(SupervisorError::ShuttingDown);
        }
        let index = *self
            .by_name
            .get(name)
            .ok_or_else(|| SupervisorError::UnknownProgram(name.to_string()))?;
        let program = &mut self.programs[index];
        tracing::info!(program = %program.name, ?control, "control request");
        match control {
            Control::Stop | Control::StopByCaller => {
                program.wanted = false;
                if program.is_running() {
                    if program.state != ProgramState::Stopping {
                        let signal = !matches!(control, Control::StopByCaller);
                        self.stop_with(index, StopReason::Requested, signal);
                    }
                } else {
                    program.cancel_tasks();
                    program.state = ProgramState::Stopped;
                }
            }
            Control::Start | Control::Restart => {
                program.wanted = true;
                program.failures = 0;
                if program.is_running() {
                    if matches!(control, Control::Restart)
                        && program.state != ProgramState::Stopping
                    {
                        self.stop(index, StopReason::Requested);
                    }
                } else {
                    program.cancel_tasks();
                    program.state = ProgramState::Stopped;
                }
            }
        }
        Ok(())
    }

    fn on_ready(&mut self, index: usize) {
        let program = &mut self.programs[index];
        program.state = ProgramState::Ready;
        program.ready_at = Some(SystemTime::now());
        program.last_error = None;
        tracing::info!(program = %program.name, pid = program.pid, "ready");
        if program.spec.ready.is_some() {
            let generation = program.generation;
            let delay = program.spec.start_secs();
            self.after(index, delay, Event::Stable { index, generation });
        }
    }

    fn on_exit(&mut self, index: usize, status: ExitStatus) {
        let program = &mut self.programs[index];
        let previous = program.state;
        let stop_reason = program.stop_reason.take();
        if let Some(pid) = program.pid.take() {
            // Leave nothing of its tree behind: helpers it started share its process group.
            ProcessGroup::new(pid).kill();
        }
        program.cancel_tasks();
        program.last_exit = Some(status);
        program.started_at = None;
        program.ready_at = None;
        let expected =
            previous == ProgramState::Stopping && stop_reason != Some(StopReason::NotReady);
        if expected {
            tracing::info!(program = %program.name, %status, reason = ?stop_reason.unwrap_or(StopReason::Requested), "stopped");
            program.state = ProgramState::Stopped;
            return;
        }
        let was_ready = previous == ProgramState::Ready;
        if stop_reason != Some(StopReason::NotReady) {
            program.last_error = Some(if was_ready {
                format!("exited while ready: {status}")
            } else {
                format!("exited before becoming ready: {status}")
            });
        }
        tracing::warn!(program = %program.name, %status, was_ready, "exited unexpectedly");
        let restart = match program.spec.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => !status.success(),
            RestartPolicy::Never => false,
        };
        if !restart {
            program.state = ProgramState::Exited;
            return;
        }
        program.failures += 1;
        if program.failures > program.spec.start_retries {
            program.state = ProgramState::Fatal;
            tracing::error!(program = %program.name, failures = program.failures, "giving up: too many failed starts");
            return;
        }
        // The first failure after running stably restarts at once; later ones back off.
        let delay = if was_ready && program.failures == 1 {
            Duration::ZERO
        } else {
            program.spec.backoff_delay(program.failures)
        };
        program.state = ProgramState::Backoff;
        tracing::info!(
            program = %program.name,
            failures = program.failures,
            delay_ms = delay.as_millis() as u64,
            "backing off before the next start"
        );
        let generation = program.generation;
        self.after(index, delay, Event::BackoffDone { index, generation });
    }

    /// Sends the stop signal to a running program's group and arms the kill timer.
    fn stop(&mut self, index: usize, reason: StopReason) {
        self.stop_with(index, reason, true);
    }

    /// [`stop`](Self::stop), sending the stop signal or (`signal == false`) leaving the exit
    /// to the caller; the stop wait's kill applies either way.
    fn stop_with(&mut self, index: usize, reason: StopReason, signal: bool) {
        let program = &mut self.programs[index];
        let Some(pid) = program.pid else {
            program.state = ProgramState::Stopped;
            return;
        };
        program.cancel_tasks();
        program.state = ProgramState::Stopping;
        program.stop_reason = Some(reason);
        if signal {
            // Validation proved the signal parses; fall back to SIGTERM rather than panic.
            let signal = program.spec.stop_signal().unwrap_or(Signal::SIGTERM);
            tracing::info!(program = %program.name, pid, %signal, ?reason, "stopping");
            ProcessGroup::new(pid).signal(signal);
        } else {
            tracing::info!(program = %program.name, pid, ?reason, "stopping (by the caller)");
        }
        let generation = program.generation;
        let wait = program.spec.stop_wait();
        self.after(index, wait, Event::StopTimeout { index, generation });
    }

    /// Starts one process of `index`'s program.
    fn spawn(&mut self, index: usize) {
        let events = self.events.clone();
        let program = &mut self.programs[index];
        program.generation += 1;
        let generation = program.generation;
        let mut command = build_command(&program.spec, program.identity.as_ref());
        let mut child = match reaper().spawn(&mut command) {
            Ok(child) => child,
            Err(error) => {
                let message = format!("cannot start {}: {error}", program.spec.command);
                tracing::error!(program = %program.name, %error, "spawn failed");
                // Treat like a process that exited at once, so retries and back-off apply.
                program.state = ProgramState::Starting;
                self.on_exit(index, ExitStatus::Code(127));
                self.programs[index].last_error = Some(message);
                return;
            }
        };
        if program.ever_started {
            program.restarts += 1;
        }
        program.ever_started = true;
        program.pid = Some(child.pid);
        program.state = ProgramState::Starting;
        program.started_at = Some(SystemTime::now());
        tracing::info!(program = %program.name, pid = child.pid, generation, "started");

        for (stream, fd) in [
            (
                Stream::Stdout,
                child.child.stdout.take().map(std::os::fd::OwnedFd::from),
            ),
            (
                Stream::Stderr,
                child.child.stderr.take().map(std::os::fd::OwnedFd::from),
            ),
        ] {
            let Some(fd) = fd else { continue };
            match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
                Ok(reader) => {
                    tokio::spawn(pump_lines(
                        program.name.clone(),
                        stream,
                        reader,
                        program.log.clone(),
                    ));
                }
                Err(error) => {
                    tracing::warn!(program = %program.name, %error, "cannot read program output")
                }
            }
        }
        let exit = child.exit;
        tokio::spawn(async move {
            // The reaper only drops the sender if its thread died; report a lost child then.
            let status = exit.await.unwrap_or(ExitStatus::Code(-1));
            let _ = events.send(Event::Exited {
                index,
                generation,
                status,
            });
        });

        match program.spec.ready.clone() {
            Some(probe) => {
                let events = self.events.clone();
                let interval = program.spec.probe_interval();
                let deadline = Instant::now() + program.spec.ready_timeout();
                let task = tokio::spawn(async move {
                    let result = loop {
                        let left = deadline.saturating_duration_since(Instant::now());
                        let attempt = probe_once(&probe, left.min(Duration::from_secs(5))).await;
                        match attempt {
                            Ok(()) => break Ok(()),
                            Err(error) if Instant::now() >= deadline => break Err(error),
                            Err(_) => tokio::time::sleep(interval).await,
                        }
                    };
                    let _ = events.send(Event::Probe {
                        index,
                        generation,
                        result,
                    });
                });
                program.tasks.push(task.abort_handle());
            }
            None => {
                let delay = program.spec.start_secs();
                self.after(index, delay, Event::Stable { index, generation });
            }
        }
    }

    /// Delivers `event` after `delay`, unless the program's tasks are cancelled first.
    fn after(&mut self, index: usize, delay: Duration, event: Event) {
        let events = self.events.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = events.send(event);
        });
        self.programs[index].tasks.push(task.abort_handle());
    }

    /// Brings running programs in line with what is wanted and what is ready.
    fn reconcile(&mut self) {
        if self.shutting_down {
            // Stop a program once nothing that depends on it is still running.
            for index in 0..self.programs.len() {
                let program = &self.programs[index];
                if !matches!(program.state, ProgramState::Starting | ProgramState::Ready) {
                    continue;
                }
                let dependents_alive = self
                    .programs
                    .iter()
                    .any(|p| p.deps.contains(&index) && p.pid.is_some());
                if !dependents_alive {
                    self.stop(index, StopReason::Shutdown);
                }
            }
            return;
        }
        for position in 0..self.order.len() {
            let index = self.order[position];
            let deps_ready = self.programs[index]
                .deps
                .iter()
                .all(|&d| self.programs[d].state == ProgramState::Ready);
            let program = &self.programs[index];
            match program.state {
                ProgramState::Stopped if program.wanted && deps_ready => self.spawn(index),
                ProgramState::Starting | ProgramState::Ready if !deps_ready => {
                    let program = &mut self.programs[index];
                    program.last_error = Some("a dependency stopped being ready".into());
                    self.stop(index, StopReason::Dependency);
                }
                _ => {}
            }
        }
    }

    fn publish(&self) {
        let snapshot: Vec<ProgramStatus> = self
            .programs
            .iter()
            .map(|p| {
                let waiting_for = if p.state == ProgramState::Stopped && p.wanted {
                    p.deps
                        .iter()
                        .filter(|&&d| self.programs[d].state != ProgramState::Ready)
                        .map(|&d| self.programs[d].spec.name.clone())
                        .collect()
                } else {
                    Vec::new()
                };
                ProgramStatus {
                    name: p.spec.name.clone(),
                    state: p.state,
                    pid: p.pid,
                    restarts: p.restarts,
                    failures: p.failures,
                    started_at: p.started_at,
                    ready_at: p.ready_at,
                    last_exit: p.last_exit,
                    last_error: p.last_error.clone(),
                    waiting_for,
                    depends_on: p.spec.depends_on.clone(),
                    required: p.spec.required,
                }
            })
            .collect();
        self.status.send_replace(Arc::from(snapshot));
    }
}
