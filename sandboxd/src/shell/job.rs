//! One command of a shell session, from spawn to exit.
//!
//! The command runs as `bash -c <wrapper> bash COMMAND STATE_DIR START_DIR MODE MARKER` (see
//! `wrapper.bash`): the command is an argument, never part of a script string. Usually the bash
//! is a [`Prewarmed`] one, started before the request with `--wait-for-command` and handed the
//! same five values on its fd 3 as five ANSI-C quoted words that the wrapper reads in one call and
//! gives to `set --` (the command still only ever reaches `eval` as data). bash leads a new
//! session and process group and is a child subreaper, so that orphans of what it starts stay
//! below it while it runs (see [`procs`]); stdout and stderr share one pipe, so their lines stay
//! in order (the bash pipe API asks for two, and per-command variables as `NAME=VALUE` arguments
//! after MARKER: such a command starts a bash of its own, as a waiting one has one pipe and
//! takes five values); stdin is a pipe kept open for [`Job::write_input`]. One task per job reads the output into a
//! bounded [`OutputBuffer`], enforces the hard timeout and publishes the [`Outcome`] once bash
//! has been reaped. Background processes the command leaves behind keep running, like in any
//! shell; their later output is still read (and bounded) until they close the pipe.
//!
//! The answer does not wait for the session's state to be saved: the wrapper's exit trap first
//! reports the command's exit status and working directory on the session's `done` FIFO (with
//! symlinks resolved, the directory is read from `/proc` instead: what `pwd -P` would print,
//! without a lookup per component), and the [`Outcome`] is published from that; bash then saves the environment and exits, and the
//! job is *settled* ([`Job::settled`]) once sandboxd has taken that state. The next command of
//! the session waits for it. A command that never reaches the trap (killed, `exec`) is finished
//! when bash is reaped, as before.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::sys::stat::SFlag;
use supervisor::ExitStatus;
use supervisor::process::Identity;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tokio::time::Instant;

use super::output::{Chunk, OutputBuffer, RenderedOutput};
use super::procs;
use super::state::SessionDir;
use crate::activity::ActivityGuard;

/// The fixed script every command runs inside.
pub(super) const WRAPPER: &str = include_str!("wrapper.bash");
/// The shell.
pub const BASH: &str = "/bin/bash";
/// How long a write to a command's stdin may block before the command counts as not reading.
const INPUT_WRITE_LIMIT: Duration = Duration::from_secs(5);
/// How long after an interrupt [`Job::interrupt`] looks for programs bash forked after taking
/// the signal, and how often.
const INTERRUPT_RACE_WINDOW: Duration = Duration::from_millis(300);
const INTERRUPT_RACE_POLL: Duration = Duration::from_millis(20);
/// Environment variables no command may inherit from sandboxd.
const WITHHELD_VARS: &[&str] = &["SANDBOX_API_KEY", "SANDBOX_API_KEY_FILE"];
/// Set for a session's first command (later ones inherit the session's saved environment):
/// output goes to a pipe, so no colours, no pagers waiting for a key, no buffered Python.
const FIRST_COMMAND_ENV: &[(&str, &str)] = &[
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("PYTHONUNBUFFERED", "1"),
    ("DEBIAN_FRONTEND", "noninteractive"),
];

/// Where a command is: running, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandStatus {
    Running,
    /// It exited by itself (with any exit code).
    Completed,
    /// Still running, but its output did not change for the no-change timeout.
    NoChangeTimeout,
    /// Its hard timeout ended it.
    HardTimeout,
    /// It was killed on request (or because sandboxd is stopping).
    Terminated,
}

/// Why sandboxd ended a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    HardTimeout,
    Killed,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: CommandStatus,
    /// The exit code, or 128 + the signal that ended it.
    pub exit_code: i32,
    /// The working directory it left behind (None when it did not get to save it).
    pub cwd_after: Option<PathBuf>,
}

/// How [`Job::wait`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitEnd {
    Finished(Outcome),
    /// The time limit passed; the command still runs.
    TimedOut,
    /// No new output for the no-change timeout; the command still runs.
    NoChange,
}

/// What to run and how.
#[derive(Debug)]
pub struct JobSpec {
    pub command: String,
    /// The session's state directory (saved environment and working directory).
    pub state: SessionDir,
    pub start_dir: PathBuf,
    /// Resolve symlinks in the working directory (`pwd -P`) rather than keep them.
    pub physical: bool,
    /// Drop to this user (set only when sandboxd runs as root).
    pub identity: Option<Identity>,
    pub hard_timeout: Option<Duration>,
    pub output_limit: usize,
    /// Grace between SIGTERM and SIGKILL when stopping.
    pub stop_grace: Duration,
    /// The prompt shown in front of the command in console records.
    pub ps1: String,
    /// Unique to this command: exported as [`procs::MARKER_VAR`] to everything it starts.
    pub marker: String,
    /// Capture stderr apart from stdout (the bash pipe API); otherwise they share one pipe.
    pub separate_stderr: bool,
    /// The waiting bash given to [`Job::spawn`] works in `start_dir` already (checked by its
    /// directory's inode): the wrapper is told so, and skips its `cd`.
    pub warm_in_start_dir: bool,
    /// Variables set (`Some`) or unset (`None`) for this command only; the session's saved
    /// environment is as if they had not been touched. Names are valid shell identifiers.
    pub env: Vec<(String, Option<String>)>,
}

/// A running or finished command.
#[derive(Debug)]
pub struct Job {
    command: String,
    ps1: String,
    /// bash's pid: also the id of the process group and session the command runs in.
    pid: i32,
    /// bash's start time (see [`procs::JobMark::start_time`]); None if it could not be read.
    start_time: Option<u64>,
    /// The value of [`procs::MARKER_VAR`] its programs inherit.
    marker: String,
    stop_grace: Duration,
    output: Mutex<OutputBuffer>,
    /// stderr, when it is captured apart from stdout (then `output` is stdout alone).
    errors: Option<Mutex<OutputBuffer>>,
    /// Bytes of output received so far; waiters watch it for the no-change timeout.
    output_seen: watch::Sender<u64>,
    outcome: watch::Sender<Option<Outcome>>,
    /// True once bash has been reaped and the session state it saved has been taken.
    settled: watch::Sender<bool>,
    stop_reason: Mutex<Option<StopReason>>,
    stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
}

/// Errors of writing to a command's input.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("the command has finished; its input is closed")]
    Closed,
    #[error("the command is not reading its input (nothing was accepted for {0:?})")]
    Blocked(Duration),
    #[error("writing to the command's input: {0}")]
    Io(#[from] io::Error),
}

/// A bash already started and waiting, inside the wrapper, for its command on fd 3: the cost of
/// starting bash (the loader, its libraries, the locale, the user lookup: a few milliseconds, more
/// where the image sits on fuse-overlayfs) is paid before the request arrives. It is spawned
/// exactly as a command's bash would be (same user, own session, same environment for its
/// [`EnvKind`]); dropping it closes fd 3 and the waiting bash exits.
#[derive(Debug)]
pub struct Prewarmed {
    kind: EnvKind,
    pid: i32,
    /// Where it waits (see `wrapper.bash`, READY_DIR).
    ready_dir: PathBuf,
    /// The write end of the child's fd 3.
    args: std::fs::File,
    stdin: Option<pipe::Sender>,
    output: pipe::Receiver,
    exit: tokio::sync::oneshot::Receiver<ExitStatus>,
}

/// Which environment a command's bash starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvKind {
    /// A session's first command: sandboxd's environment (minus secrets) plus
    /// [`FIRST_COMMAND_ENV`].
    Fresh,
    /// Later commands: an empty environment; the wrapper sources the one the session saved.
    Saved,
}

impl EnvKind {
    pub fn of_session(state: &SessionDir) -> EnvKind {
        if state
            .root
            .file_len(&state.file(SAVED_ENV))
            .is_some_and(|len| len > 0)
        {
            EnvKind::Saved
        } else {
            EnvKind::Fresh
        }
    }
}

/// Longest hand-over text (the six values, quoted) given to a waiting bash: well within a pipe's
/// capacity (64 KiB), so that writing it never blocks. A command whose text would be longer
/// starts a bash of its own with the command as an argument.
pub const MAX_HAND_OVER: usize = 48 * 1024;

impl Prewarmed {
    /// Starts a bash that waits for its command in `ready_dir` (where the next command most
    /// likely starts; see `wrapper.bash`). Must be called within the Tokio runtime.
    pub fn spawn(
        kind: EnvKind,
        identity: Option<&Identity>,
        ready_dir: &Path,
    ) -> io::Result<Prewarmed> {
        let (args_reader, args) = io::pipe()?;
        let mut command = Command::new(BASH);
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("bash")
            .arg(WAIT_FOR_COMMAND)
            .arg(ready_dir);
        let args_fd = args_reader.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and only calls dup2(2) and
        // fcntl(2), which are async-signal-safe; `args_fd` stays open in the parent until the
        // spawn has returned.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                if args_fd == 3 {
                    let flags = nix::libc::fcntl(3, nix::libc::F_GETFD);
                    if flags < 0
                        || nix::libc::fcntl(3, nix::libc::F_SETFD, flags & !nix::libc::FD_CLOEXEC)
                            < 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                } else if nix::libc::dup2(args_fd, 3) < 0 {
                    // dup2 leaves the new descriptor without FD_CLOEXEC.
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawned = spawn_bash(command, kind, identity, false)?;
        drop(args_reader);
        Ok(Prewarmed {
            kind,
            pid: spawned.pid,
            ready_dir: ready_dir.to_path_buf(),
            args: std::fs::File::from(OwnedFd::from(args)),
            stdin: spawned.stdin,
            output: spawned.output,
            exit: spawned.exit,
        })
    }

    /// A bash forked by a zygote (see `zygote.rs`), with its ends of the FIFOs it opened.
    pub(super) fn from_parts(
        kind: EnvKind,
        pid: i32,
        ready_dir: PathBuf,
        args: std::fs::File,
        stdin: Option<pipe::Sender>,
        output: pipe::Receiver,
        exit: tokio::sync::oneshot::Receiver<ExitStatus>,
    ) -> Prewarmed {
        Prewarmed {
            kind,
            pid,
            ready_dir,
            args,
            stdin,
            output,
            exit,
        }
    }

    pub fn kind(&self) -> EnvKind {
        self.kind
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The directory it was sent to wait in (it may not have got there, or not yet).
    pub fn ready_dir(&self) -> &Path {
        &self.ready_dir
    }

    /// Hands the command over as `text` (see [`hand_over_text`]) and closes the pipe, which
    /// ends the text for the waiting bash. Fails if the bash is gone (killed meanwhile), so the
    /// caller can start a cold one.
    fn hand_over(self, text: &str) -> io::Result<SpawnedBash> {
        use std::io::Write;
        let mut args = self.args;
        // At most MAX_HAND_OVER bytes, within the pipe's capacity: this never blocks. A dead
        // reader gives EPIPE (SIGPIPE is ignored by Rust programs).
        args.write_all(text.as_bytes())?;
        drop(args);
        Ok(SpawnedBash {
            pid: self.pid,
            stdin: self.stdin,
            output: self.output,
            errors: None,
            exit: self.exit,
        })
    }
}

/// The argument that makes the wrapper wait for its command on fd 3.
const WAIT_FOR_COMMAND: &str = "--wait-for-command";

fn mode(physical: bool) -> &'static str {
    if physical { "physical" } else { "logical" }
}

/// Whether a command can run in a [`Prewarmed`] bash, which has one output pipe and takes
/// exactly six values (none of them variables of the command's own).
pub(super) fn fits_a_waiting_bash(separate_stderr: bool, env: &[(String, Option<String>)]) -> bool {
    !separate_stderr && env.is_empty()
}

/// The wrapper's sixth value: whether the session has a saved environment to restore (`saved`
/// or `fresh`), and `,here` when the bash already works in START_DIR.
fn flags(kind: EnvKind, here: bool) -> &'static str {
    match (kind, here) {
        (EnvKind::Fresh, false) => "fresh",
        (EnvKind::Fresh, true) => "fresh,here",
        (EnvKind::Saved, false) => "saved",
        (EnvKind::Saved, true) => "saved,here",
    }
}

/// What a waiting bash is handed: COMMAND STATE_DIR START_DIR MODE MARKER FLAGS as six words of
/// bash's ANSI-C quoting, which the wrapper reads in one `read -N` and gives to `set --` through
/// `eval` (the text holds quoted words only, so that only ever sets the six values). None when
/// it would be longer than [`MAX_HAND_OVER`] or a value holds a NUL byte (which no bash
/// argument can).
fn hand_over_text(spec: &JobSpec, kind: EnvKind) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let state_path = spec.state.path();
    let values = [
        spec.command.as_bytes(),
        state_path.as_os_str().as_bytes(),
        spec.start_dir.as_os_str().as_bytes(),
        mode(spec.physical).as_bytes(),
        spec.marker.as_bytes(),
        flags(kind, spec.warm_in_start_dir).as_bytes(),
    ];
    let mut text = String::with_capacity(values.iter().map(|v| v.len() + 4).sum());
    for value in values {
        if value.contains(&0) {
            return None;
        }
        if !text.is_empty() {
            text.push(' ');
        }
        ansi_c_quote(value, &mut text);
        if text.len() > MAX_HAND_OVER {
            return None;
        }
    }
    Some(text)
}

/// Appends `value` as one bash word in ANSI-C quoting (`$'...'`) made of printable ASCII only:
/// `'` and `\` are escaped, every other byte outside space..`~` is `\xHH` (bash reads at most
/// two hex digits there), so the word means exactly these bytes in every locale. `value` holds
/// no NUL (bash would end the word there).
fn ansi_c_quote(value: &[u8], out: &mut String) {
    use std::fmt::Write;
    out.push_str("$'");
    for &byte in value {
        match byte {
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            b' '..=b'~' => out.push(char::from(byte)),
            _ => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
    out.push('\'');
}

/// A spawned bash with its pipes.
struct SpawnedBash {
    pid: i32,
    stdin: Option<pipe::Sender>,
    output: pipe::Receiver,
    /// stderr's own pipe, when it is separate.
    errors: Option<pipe::Receiver>,
    exit: tokio::sync::oneshot::Receiver<ExitStatus>,
}

/// Spawns `command` (a bash running the wrapper) in a new session as `identity`, with the
/// environment of `kind`, stdin a pipe, stdout and stderr one shared pipe (or two with
/// `separate_stderr`).
fn spawn_bash(
    mut command: Command,
    kind: EnvKind,
    identity: Option<&Identity>,
    separate_stderr: bool,
) -> io::Result<SpawnedBash> {
    let (reader, writer) = io::pipe()?;
    let (errors, error_writer) = if separate_stderr {
        let (reader, writer) = io::pipe()?;
        (Some(reader), writer)
    } else {
        (None, writer.try_clone()?)
    };
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(error_writer))
        // bash changes to START_DIR itself; "/" always exists and is always searchable.
        .current_dir("/");
    apply_environment(&mut command, kind, identity);
    if let Some(identity) = identity {
        command.uid(identity.uid).gid(identity.gid);
    }
    supervisor::process::new_session(&mut command);
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which
    // is async-signal-safe. The attribute survives exec and is not inherited by bash's
    // children: orphans of the command's double forks are re-parented to bash, not to PID 1,
    // so its process tree still holds them (see `procs`).
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from));
    }
    let spawned = supervisor::reaper().spawn(&mut command)?;
    // Close our copies of the pipe's write end, so the reader sees EOF once the command's
    // processes have all closed theirs.
    drop(command);
    let mut child = spawned.child;
    let stdin = match child.stdin.take() {
        Some(stdin) => Some(pipe::Sender::from_owned_fd(OwnedFd::from(stdin))?),
        None => None,
    };
    let errors = match errors {
        Some(errors) => Some(pipe::Receiver::from_owned_fd(OwnedFd::from(errors))?),
        None => None,
    };
    Ok(SpawnedBash {
        pid: spawned.pid,
        stdin,
        output: pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?,
        errors,
        exit: spawned.exit,
    })
}

impl Job {
    /// Starts `spec`'s command, in `warm` when given and still alive, else in a bash of its
    /// own. `activity` is held until bash exits. Must be called within the Tokio runtime.
    pub fn spawn(
        spec: JobSpec,
        warm: Option<Prewarmed>,
        activity: ActivityGuard,
    ) -> io::Result<Arc<Job>> {
        let kind = EnvKind::of_session(&spec.state);
        // Opened before bash can write to it; without it, the outcome waits for bash's exit.
        let done = open_done_fifo(&spec.state, spec.identity.as_ref())
            .inspect_err(|error| tracing::warn!(%error, "shell command reports unavailable"))
            .ok();
        let warm = warm
            .filter(|w| w.kind == kind && fits_a_waiting_bash(spec.separate_stderr, &spec.env))
            .and_then(|w| Some((w, hand_over_text(&spec, kind)?)));
        let bash = match warm.map(|(w, text)| w.hand_over(&text)) {
            Some(Ok(bash)) => bash,
            failed => {
                if let Some(Err(error)) = failed {
                    tracing::debug!(%error, "prewarmed shell unusable; starting one");
                }
                let mut command = Command::new(BASH);
                command
                    .arg("-c")
                    .arg(WRAPPER)
                    .arg("bash")
                    .arg(&spec.command)
                    .arg(spec.state.path())
                    .arg(&spec.start_dir)
                    .arg(mode(spec.physical))
                    .arg(&spec.marker)
                    .arg(flags(kind, false));
                // The per-command variables follow, as data: NAME=VALUE sets, NAME unsets.
                for (name, value) in &spec.env {
                    match value {
                        Some(value) => command.arg(format!("{name}={value}")),
                        None => command.arg(name),
                    };
                }
                spawn_bash(command, kind, spec.identity.as_ref(), spec.separate_stderr)?
            }
        };
        let job = Arc::new(Job {
            command: spec.command,
            ps1: spec.ps1,
            pid: bash.pid,
            // bash is alive here (waiting for this command, or just started): not reaped, so
            // the pid is still its own.
            start_time: procs::entry(bash.pid).map(|entry| entry.start_time),
            marker: spec.marker,
            stop_grace: spec.stop_grace,
            output: Mutex::new(OutputBuffer::new(spec.output_limit)),
            errors: spec
                .separate_stderr
                .then(|| Mutex::new(OutputBuffer::new(spec.output_limit))),
            output_seen: watch::Sender::new(0),
            outcome: watch::Sender::new(None),
            settled: watch::Sender::new(false),
            stop_reason: Mutex::new(None),
            stdin: tokio::sync::Mutex::new(bash.stdin),
        });
        tracing::debug!(pid = job.pid, "shell command started");
        tokio::spawn(supervise(
            job.clone(),
            Pipes {
                output: bash.output,
                errors: bash.errors,
                exit: bash.exit,
                done,
            },
            spec.hard_timeout,
            spec.state,
            activity,
        ));
        Ok(job)
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    /// The command's id on the wire: unique for as long as sandboxd runs (its marker, which the
    /// command's own programs see anyway).
    pub fn id(&self) -> &str {
        &self.marker
    }

    /// Whether stderr is captured apart from stdout.
    pub fn separate_stderr(&self) -> bool {
        self.errors.is_some()
    }

    /// Bytes `stream` has received so far (stderr merged into stdout reads as empty).
    pub fn stream_len(&self, stream: Stream) -> u64 {
        match (stream, &self.errors) {
            (Stream::Stdout, _) => self.lock_output().total_bytes(),
            (Stream::Stderr, Some(errors)) => lock_buffer(errors).total_bytes(),
            (Stream::Stderr, None) => 0,
        }
    }

    /// `stream` from byte `offset` on, raw (no terminal cleaning: offsets count bytes as the
    /// command wrote them); None when `offset` is past the end.
    pub fn read_stream(&self, stream: Stream, offset: u64) -> Option<Chunk> {
        match (stream, &self.errors) {
            (Stream::Stdout, _) => self.lock_output().read_from(offset),
            (Stream::Stderr, Some(errors)) => lock_buffer(errors).read_from(offset),
            (Stream::Stderr, None) => (offset == 0).then(|| Chunk {
                text: String::new(),
                skipped: 0,
                next_offset: 0,
            }),
        }
    }

    /// Waits until stdout has more than `stdout_from` bytes or stderr more than
    /// `stderr_from`, the command ends, or `limit` passes. True when there is new output or the
    /// command has ended.
    pub async fn wait_for_output(
        &self,
        stdout_from: u64,
        stderr_from: u64,
        limit: Duration,
    ) -> bool {
        let mut seen = self.output_seen.subscribe();
        let mut outcome = self.outcome.subscribe();
        let deadline = Instant::now() + limit;
        loop {
            seen.borrow_and_update();
            if outcome.borrow_and_update().is_some()
                || self.stream_len(Stream::Stdout) > stdout_from
                || self.stream_len(Stream::Stderr) > stderr_from
            {
                return true;
            }
            tokio::select! {
                changed = seen.changed() => if changed.is_err() { return false },
                changed = outcome.changed() => if changed.is_err() { return false },
                () = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }

    /// Sends `signal` to the command's process group (bash and its foreground programs), as a
    /// terminal's Ctrl-C would. False when the command has already ended.
    pub fn signal(&self, signal: Signal) -> io::Result<bool> {
        if !self.is_running() {
            return Ok(false);
        }
        supervisor::process::ProcessGroup::new(self.pid)
            .send(signal)
            .map_err(io::Error::from)
    }

    /// Interrupts the command as Ctrl-C at a prompt does: SIGINT to its process group, then
    /// waits up to `limit` for it to end.
    ///
    /// bash runs its SIGINT trap (which ends the command with 130) only once its foreground
    /// program has ended. When the signal reaches bash in the moment before it forks that
    /// program, the program never sees the signal and bash waits for it with the trap pending:
    /// the command would hang where a person would press Ctrl-C again. So for a short while
    /// after the signal, if bash's only programs are ones it forked after the signal, they get
    /// SIGINT too (each once). A program that was there when the signal was sent never gets a
    /// second one.
    pub async fn interrupt(&self, limit: Duration) -> io::Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        let leader = self.pid;
        let deadline = Instant::now() + limit;
        let before = tokio::task::spawn_blocking(move || procs::group_children(leader))
            .await
            .unwrap_or_default();
        if !self.signal(Signal::SIGINT)? {
            return Ok(());
        }
        let race_until = Instant::now() + INTERRUPT_RACE_WINDOW.min(limit);
        let mut signalled_again = std::collections::HashSet::new();
        while Instant::now() < race_until {
            let poll_end = (Instant::now() + INTERRUPT_RACE_POLL).min(race_until);
            if let WaitEnd::Finished(_) = self.wait(Some(poll_end - Instant::now()), None).await {
                return Ok(());
            }
            let now = tokio::task::spawn_blocking(move || procs::group_children(leader))
                .await
                .unwrap_or_default();
            if now.is_empty() || !now.is_disjoint(&before) {
                continue;
            }
            for &(pid, start_time) in now.difference(&signalled_again) {
                tracing::debug!(
                    pid,
                    "interrupting a program bash forked after the interrupt"
                );
                procs::signal_if_same(pid, start_time, Signal::SIGINT);
            }
            signalled_again.extend(now);
        }
        self.wait(
            Some(deadline.saturating_duration_since(Instant::now())),
            None,
        )
        .await;
        Ok(())
    }

    pub fn ps1(&self) -> &str {
        &self.ps1
    }

    /// bash's pid, which is also the command's process group and session id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// What finds the command's processes (see [`procs`]).
    pub fn mark(&self) -> procs::JobMark {
        procs::JobMark {
            sid: self.pid,
            start_time: self.start_time,
            marker: self.marker.clone(),
        }
    }

    /// How it ended, or None while it runs.
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome.borrow().clone()
    }

    pub fn is_running(&self) -> bool {
        self.outcome.borrow().is_none()
    }

    /// Waits, at most `limit`, until bash has exited and the session state it saved has been
    /// taken (the next command of the session starts from it). True when settled.
    pub async fn settled(&self, limit: Duration) -> bool {
        let mut settled = self.settled.subscribe();
        tokio::time::timeout(limit, settled.wait_for(|done| *done))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    pub fn status(&self) -> CommandStatus {
        self.outcome()
            .map(|o| o.status)
            .unwrap_or(CommandStatus::Running)
    }

    /// The output so far, as text.
    pub fn output(&self, max_chars: Option<usize>) -> RenderedOutput {
        self.lock_output().render(max_chars)
    }

    /// Waits until the command finishes, `limit` passes, or its output stays unchanged for
    /// `no_change`.
    pub async fn wait(&self, limit: Option<Duration>, no_change: Option<Duration>) -> WaitEnd {
        let mut outcome = self.outcome.subscribe();
        let mut seen = self.output_seen.subscribe();
        let deadline = limit.map(|d| Instant::now() + d);
        let mut quiet_until = no_change.map(|d| Instant::now() + d);
        loop {
            if let Some(done) = outcome.borrow_and_update().clone() {
                return WaitEnd::Finished(done);
            }
            tokio::select! {
                changed = outcome.changed() => {
                    if changed.is_err() {
                        // The job is dropped while we hold it: cannot happen; end the wait.
                        return WaitEnd::TimedOut;
                    }
                }
                changed = seen.changed() => {
                    if changed.is_ok() {
                        quiet_until = no_change.map(|d| Instant::now() + d);
                    }
                }
                () = sleep_until(deadline) => return WaitEnd::TimedOut,
                () = sleep_until(quiet_until) => return WaitEnd::NoChange,
            }
        }
    }

    /// Writes `input` to the command's stdin.
    pub async fn write_input(&self, input: &[u8]) -> Result<(), InputError> {
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin.as_mut().ok_or(InputError::Closed)?;
        if !self.is_running() {
            return Err(InputError::Closed);
        }
        match tokio::time::timeout(INPUT_WRITE_LIMIT, pipe.write_all(input)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) if error.kind() == io::ErrorKind::BrokenPipe => Err(InputError::Closed),
            Ok(Err(error)) => Err(error.into()),
            Err(_) => Err(InputError::Blocked(INPUT_WRITE_LIMIT)),
        }
    }

    /// Ends the command and every process it started, including those that left its session
    /// (see [`procs`]): SIGTERM, the grace period, then SIGKILL. Returns once bash has been
    /// reaped (or a bounded wait has passed).
    pub async fn stop(&self, reason: StopReason) {
        if !self.is_running() {
            return;
        }
        {
            let mut current = self.lock_reason();
            if current.is_none() {
                *current = Some(reason);
            }
        }
        let (pid, grace, mark) = (self.pid, self.stop_grace, self.mark());
        // bash is running, or reaped so recently that no process can have its pid yet: its
        // session id is its own.
        let stopped = tokio::task::spawn_blocking(move || {
            procs::terminate_jobs(&[mark], true, Signal::SIGTERM, grace)
        })
        .await;
        if let Err(error) = stopped {
            tracing::error!(%error, "stopping a shell command panicked");
        }
        let mut outcome = self.outcome.subscribe();
        let done = tokio::time::timeout(Duration::from_secs(5), async {
            while outcome.borrow_and_update().is_none() {
                if outcome.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if done.is_err() {
            tracing::warn!(pid, "stopped shell command was not reaped in time");
        }
    }

    fn append_output(&self, bytes: &[u8]) {
        self.lock_output().push(bytes);
        self.output_seen
            .send_modify(|seen| *seen += bytes.len() as u64);
    }

    /// Appends to stderr when it is separate (else to the shared output).
    fn append_errors(&self, bytes: &[u8]) {
        match &self.errors {
            Some(errors) => {
                lock_buffer(errors).push(bytes);
                self.output_seen
                    .send_modify(|seen| *seen += bytes.len() as u64);
            }
            None => self.append_output(bytes),
        }
    }

    fn append(&self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stdout => self.append_output(bytes),
            Stream::Stderr => self.append_errors(bytes),
        }
    }

    fn lock_output(&self) -> MutexGuard<'_, OutputBuffer> {
        lock_buffer(&self.output)
    }

    fn lock_reason(&self) -> MutexGuard<'_, Option<StopReason>> {
        // Plain value: consistent even if poisoned.
        self.stop_reason.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn lock_buffer(buffer: &Mutex<OutputBuffer>) -> MutexGuard<'_, OutputBuffer> {
    // Pushing and rendering cannot leave the buffer half-updated, so a poisoned lock (a panic
    // elsewhere while holding it) still guards a consistent buffer.
    buffer.lock().unwrap_or_else(|e| e.into_inner())
}

/// One of a command's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The first command of a session inherits sandboxd's environment (secrets are long gone, and
/// withheld again here); later ones start from an empty environment and source the one the
/// session saved, so that `unset` sticks too.
pub(super) fn apply_environment(command: &mut Command, kind: EnvKind, identity: Option<&Identity>) {
    if kind == EnvKind::Saved {
        command.env_clear();
        return;
    }
    for name in WITHHELD_VARS {
        command.env_remove(name);
    }
    for (name, value) in FIRST_COMMAND_ENV {
        command.env(name, value);
    }
    if let Some(identity) = identity {
        command
            .env("HOME", &identity.home)
            .env("USER", &identity.user)
            .env("LOGNAME", &identity.user)
            .env("SHELL", BASH);
    }
}

/// What [`supervise`] watches.
struct Pipes {
    output: pipe::Receiver,
    errors: Option<pipe::Receiver>,
    exit: tokio::sync::oneshot::Receiver<ExitStatus>,
    /// The session's `done` FIFO, if it could be opened.
    done: Option<pipe::Receiver>,
}

/// The name of the FIFO in the session's state directory on which the wrapper reports the end
/// of the command: MARKER, exit status and working directory, each NUL-terminated.
const DONE_FIFO: &str = "done";
/// The files of a session's state directory the wrapper writes (see `wrapper.bash`): the saved
/// environment, and the next one and the working directory as the last command left them.
const SAVED_ENV: &str = "env";
const SAVED_ENV_NEXT: &str = "env.next";
const SAVED_CWD_NEXT: &str = "cwd.next";
/// Longest report accepted (a working directory is at most PATH_MAX).
const MAX_REPORT: usize = 8 * 1024;

/// Creates the session's `done` FIFO if needed and opens it for reading. It is opened
/// read-write, so that it never reads as closed between writers; the wrapper opens it
/// read-write too, which never blocks.
fn open_done_fifo(state: &SessionDir, identity: Option<&Identity>) -> io::Result<pipe::Receiver> {
    let fifo = state.file(DONE_FIFO);
    match state.root.file_type(&fifo) {
        Some(SFlag::S_IFIFO) => {}
        Some(_) => {
            state.root.remove_file(&fifo)?;
            state.root.make_fifo(&fifo, identity)?;
        }
        None => state.root.make_fifo(&fifo, identity)?,
    }
    pipe::Receiver::from_owned_fd(state.root.open(&fifo, OFlag::O_RDWR | OFlag::O_NONBLOCK)?)
}

/// A report from the wrapper: the command's exit status and working directory.
#[derive(Debug, PartialEq, Eq)]
struct Report {
    exit_code: i32,
    cwd: ReportedCwd,
}

/// The working directory a report gives.
#[derive(Debug, PartialEq, Eq)]
enum ReportedCwd {
    /// As bash printed it (`pwd -L`).
    Path(PathBuf),
    /// Not given: it is bash's current directory, read from `/proc` (symlinks resolved).
    OfProcess,
    /// Given, but not an absolute path (bash could not tell).
    Unknown,
}

/// Parses `MARKER\0STATUS\0CWD\n\0` (or `MARKER\0STATUS\0\0`: the directory is bash's
/// current one) once all of it has arrived; None while incomplete, or when it is another
/// command's or malformed (then it is ignored).
fn parse_report(bytes: &[u8], marker: &str) -> Option<Report> {
    let mut fields = bytes.split(|&b| b == 0);
    let (who, status, cwd) = (fields.next()?, fields.next()?, fields.next()?);
    fields.next()?; // the third NUL has arrived
    if who != marker.as_bytes() {
        return None;
    }
    let exit_code: i32 = std::str::from_utf8(status).ok()?.parse().ok()?;
    let cwd = if cwd.is_empty() {
        ReportedCwd::OfProcess
    } else {
        match std::str::from_utf8(cwd.strip_suffix(b"\n").unwrap_or(cwd)) {
            Ok(path) if path.starts_with('/') => ReportedCwd::Path(PathBuf::from(path)),
            _ => ReportedCwd::Unknown,
        }
    };
    Some(Report { exit_code, cwd })
}

/// Reads what is in the pipe now without waiting. (A direct non-blocking read: Tokio's
/// readiness may be stale.) Returns true at end of file.
fn drain_now(output: &pipe::Receiver, buf: &mut [u8], job: &Job, stream: Stream) -> bool {
    loop {
        match nix::unistd::read(output.as_fd(), buf) {
            Ok(0) => return true,
            Ok(n) => job.append(stream, &buf[..n]),
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false, // EAGAIN: nothing more for now
        }
    }
}

/// The task that owns a job's output pipe, its report FIFO and its exit status.
async fn supervise(
    job: Arc<Job>,
    pipes: Pipes,
    hard_timeout: Option<Duration>,
    state: SessionDir,
    activity: ActivityGuard,
) {
    let Pipes {
        mut output,
        mut errors,
        mut exit,
        mut done,
    } = pipes;
    let mut errors_eof = errors.is_none();
    let mut errors_buf = vec![0u8; if errors.is_some() { 16 * 1024 } else { 0 }];
    let mut activity = Some(activity);
    let mut buf = vec![0u8; 16 * 1024];
    let mut report_buf = [0u8; 1024];
    let mut report = Vec::new();
    let mut eof = false;
    let hard_deadline = hard_timeout.map(|d| Instant::now() + d);
    let mut hard_fired = false;
    let status = loop {
        tokio::select! {
            read = output.read(&mut buf), if !eof => match read {
                Ok(0) => eof = true,
                Ok(n) => job.append_output(&buf[..n]),
                Err(error) => {
                    tracing::warn!(pid = job.pid, %error, "reading shell command output");
                    eof = true;
                }
            },
            read = read_some(errors.as_mut(), &mut errors_buf), if !errors_eof => match read {
                Ok(0) => errors_eof = true,
                Ok(n) => job.append_errors(&errors_buf[..n]),
                Err(error) => {
                    tracing::warn!(pid = job.pid, %error, "reading shell command stderr");
                    errors_eof = true;
                }
            },
            read = read_some(done.as_mut(), &mut report_buf), if done.is_some() && job.is_running() => {
                match read {
                    Ok(n) if n > 0 && report.len() + n <= MAX_REPORT => {
                        report.extend_from_slice(&report_buf[..n]);
                        if let Some(parsed) = parse_report(&report, &job.marker) {
                            let cwd_after = match parsed.cwd {
                                ReportedCwd::Path(path) => Some(Some(path)),
                                ReportedCwd::Unknown => Some(None),
                                // bash is in its exit trap, still in that directory. If it is
                                // gone already, the outcome waits for its exit and takes the
                                // directory it saved. (Its pid cannot be another process's
                                // yet: pids are not reused within microseconds.)
                                ReportedCwd::OfProcess => procs::current_dir(job.pid).ok(),
                            };
                            if let Some(cwd_after) = cwd_after
                                && job.lock_reason().is_none()
                            {
                                // The command's own output is all in the pipe by now.
                                eof = drain_now(&output, &mut buf, &job, Stream::Stdout);
                                if let Some(errors) = errors.as_ref().filter(|_| !errors_eof) {
                                    errors_eof =
                                        drain_now(errors, &mut buf, &job, Stream::Stderr);
                                }
                                job.outcome.send_replace(Some(Outcome {
                                    status: CommandStatus::Completed,
                                    exit_code: parsed.exit_code,
                                    cwd_after,
                                }));
                                drop(activity.take());
                            }
                            done = None;
                        }
                    }
                    _ => done = None, // a broken or oversized report: wait for the exit
                }
            },
            status = &mut exit => break status.ok(),
            () = sleep_until(hard_deadline), if !hard_fired => {
                hard_fired = true;
                tracing::info!(pid = job.pid, "shell command reached its hard timeout");
                let job = job.clone();
                tokio::spawn(async move { job.stop(StopReason::HardTimeout).await });
            }
        }
    };
    drop(done);
    // Everything bash and its foreground children wrote is in the pipe by now: take it before
    // publishing the outcome.
    if !eof {
        eof = drain_now(&output, &mut buf, &job, Stream::Stdout);
    }
    if let Some(errors) = errors.as_ref().filter(|_| !errors_eof) {
        errors_eof = drain_now(errors, &mut buf, &job, Stream::Stderr);
    }
    let exit_code = status.map(ExitStatus::as_shell_code).unwrap_or(-1);
    let reason = *job.lock_reason();
    // A command that was stopped leaves the previous state in place.
    let saved_cwd = reason.is_none().then(|| take_saved_state(&state)).flatten();
    if job.is_running() {
        let outcome = match reason {
            Some(StopReason::HardTimeout) => Outcome {
                status: CommandStatus::HardTimeout,
                exit_code,
                cwd_after: None,
            },
            Some(StopReason::Killed) => Outcome {
                status: CommandStatus::Terminated,
                exit_code,
                cwd_after: None,
            },
            None => Outcome {
                status: CommandStatus::Completed,
                exit_code,
                cwd_after: saved_cwd,
            },
        };
        job.outcome.send_replace(Some(outcome));
    }
    // No more input: close stdin (background readers see EOF).
    job.stdin.lock().await.take();
    tracing::debug!(pid = job.pid, exit_code, "shell command finished");
    job.settled.send_replace(true);
    drop(activity);
    // Background processes may still hold the pipe: keep reading (into the bounded buffer) so
    // they never block on a full pipe.
    while !eof || !errors_eof {
        tokio::select! {
            read = output.read(&mut buf), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => job.append_output(&buf[..n]),
            },
            read = read_some(errors.as_mut(), &mut errors_buf), if !errors_eof => match read {
                Ok(0) | Err(_) => errors_eof = true,
                Ok(n) => job.append_errors(&errors_buf[..n]),
            },
        }
    }
}

/// Reads from `pipe` (never None when called: the select branch is disabled then).
async fn read_some(pipe: Option<&mut pipe::Receiver>, buf: &mut [u8]) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Makes the environment the command saved the session's, and returns the working directory
/// it saved. A command killed before saving leaves the previous state in place.
fn take_saved_state(state: &SessionDir) -> Option<PathBuf> {
    let env_next = state.file(SAVED_ENV_NEXT);
    match state.root.rename(&env_next, &state.file(SAVED_ENV)) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(%error, dir = %state.path().display(), "cannot keep the shell session's environment");
        }
    }
    let cwd_next = state.file(SAVED_CWD_NEXT);
    let cwd = state.root.read(&cwd_next).ok()?;
    let _ = state.root.remove_file(&cwd_next);
    let cwd = String::from_utf8(cwd).ok()?;
    let cwd = cwd.strip_suffix('\n').unwrap_or(&cwd);
    if cwd.is_empty() || !cwd.starts_with('/') {
        return None;
    }
    // bash saves the name it knows (`$PWD`, or what `pwd` prints from it) even when the command
    // removed that directory: as with the done report's directory read from /proc, a removed
    // one does not become the session's. (Only this fallback pays the lookup: it runs when the
    // report was missed, e.g. bash exited before sandboxd read it on a loaded machine.)
    let cwd = PathBuf::from(cwd);
    match std::fs::metadata(&cwd) {
        Ok(metadata) if !metadata.is_dir() => None,
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            None
        }
        _ => Some(cwd),
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::StateRoot;
    use super::*;

    #[test]
    fn reports_parse_once_complete_and_only_for_their_command() {
        let full = b"m.1\x003\x00/tmp/a b\nc\n\x00";
        assert_eq!(
            parse_report(full, "m.1"),
            Some(Report {
                exit_code: 3,
                cwd: ReportedCwd::Path(PathBuf::from("/tmp/a b\nc"))
            })
        );
        for cut in 0..full.len() {
            assert_eq!(parse_report(&full[..cut], "m.1"), None, "cut at {cut}");
        }
        assert_eq!(parse_report(full, "m.2"), None, "another command's");
        assert_eq!(parse_report(b"m.1\x00x\x00/\n\x00", "m.1"), None);
        assert_eq!(
            parse_report(b"m.1\x000\x00relative\n\x00", "m.1"),
            Some(Report {
                exit_code: 0,
                cwd: ReportedCwd::Unknown
            })
        );
        let physical = b"m.1\x00130\x00\x00";
        assert_eq!(
            parse_report(physical, "m.1"),
            Some(Report {
                exit_code: 130,
                cwd: ReportedCwd::OfProcess
            })
        );
        for cut in 0..physical.len() {
            assert_eq!(parse_report(&physical[..cut], "m.1"), None, "cut at {cut}");
        }
    }

    /// The state bash saved is what the session keeps when the done report was missed, but a
    /// directory the command removed is not (issue 28: the test of the directory a command
    /// leaves failed under load, when bash exited before sandboxd read its report).
    #[test]
    fn a_saved_directory_that_was_removed_is_not_kept() {
        let scratch = tempfile::tempdir().unwrap();
        let root = Arc::new(StateRoot::create(scratch.path().join("state"), None).unwrap());
        root.make_private_dir("s", None).unwrap();
        let session = SessionDir {
            root: root.clone(),
            name: "s".to_string(),
        };
        let kept = scratch.path().join("a dir\nwith newline");
        std::fs::create_dir(&kept).unwrap();
        let gone = kept.join("gone");
        let file = scratch.path().join("a file");
        std::fs::write(&file, b"").unwrap();
        let save = |dir: &Path| {
            let mut text = dir.as_os_str().as_encoded_bytes().to_vec();
            text.push(b'\n');
            std::fs::write(session.path().join(SAVED_CWD_NEXT), text).unwrap();
        };
        save(&kept);
        assert_eq!(take_saved_state(&session), Some(kept.clone()));
        assert_eq!(take_saved_state(&session), None, "taken once");
        for removed in [&gone, &file, &file.join("below")] {
            save(removed);
            assert_eq!(take_saved_state(&session), None, "{}", removed.display());
        }
    }

    /// What bash makes of `words` given to `set --` through `eval`, as the wrapper does: each
    /// value printed NUL-terminated.
    // A plain child of the test, waited for by `output`: nothing for the reaper to adopt.
    #[allow(clippy::disallowed_methods)]
    fn through_bash(words: &str, locale: &str) -> Vec<Vec<u8>> {
        let output = std::process::Command::new(BASH)
            .env_clear()
            .env("LC_ALL", locale)
            .args([
                "-c",
                "builtin eval \"builtin set -- $1\" && builtin printf '%s\\0' \"$@\"",
                "bash",
                words,
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let mut values: Vec<Vec<u8>> = output
            .stdout
            .split(|&b| b == 0)
            .map(<[u8]>::to_vec)
            .collect();
        // Each value ends with a NUL: what follows the last one is empty.
        assert_eq!(values.pop(), Some(Vec::new()));
        values
    }

    #[test]
    fn quoted_words_reach_bash_byte_for_byte_in_any_locale() {
        // Every byte but NUL, alone, in runs, and next to what could end or extend an escape.
        let mut values: Vec<Vec<u8>> = (1..=255u8).map(|b| vec![b]).collect();
        values.push((1..=255u8).collect());
        values.push(b"\\x41'\\'$(touch /tmp/agentbox-quote-escaped)`id`\xff\xfeff\x7f0\n".to_vec());
        values.push("π \u{1F600} ü\t\r\n".as_bytes().to_vec());
        values.push(Vec::new());
        for locale in ["C", "C.UTF-8"] {
            let mut words = String::new();
            for value in &values {
                if !words.is_empty() {
                    words.push(' ');
                }
                ansi_c_quote(value, &mut words);
            }
            assert!(
                words.bytes().all(|b| (b' '..=b'~').contains(&b)),
                "printable ASCII only"
            );
            assert_eq!(through_bash(&words, locale), values, "in {locale}");
        }
        assert!(!std::path::Path::new("/tmp/agentbox-quote-escaped").exists());
    }

    #[test]
    fn hand_over_texts_are_bounded_and_refuse_nul() {
        let parent = tempfile::tempdir().unwrap();
        let root = super::super::state::StateRoot::create(parent.path().join("s"), None).unwrap();
        let state_path = root.path_of("1");
        let root = Arc::new(root);
        let spec = |command: &str| JobSpec {
            command: command.to_string(),
            state: SessionDir {
                root: root.clone(),
                name: "1".to_string(),
            },
            start_dir: PathBuf::from("/home/agent/work space"),
            physical: true,
            identity: None,
            hard_timeout: None,
            output_limit: 1024,
            stop_grace: Duration::from_secs(1),
            ps1: String::new(),
            marker: "m.1".to_string(),
            separate_stderr: false,
            env: Vec::new(),
            warm_in_start_dir: false,
        };
        let text = hand_over_text(&spec("echo 'hi'"), EnvKind::Saved).unwrap();
        assert_eq!(
            through_bash(&text, "C.UTF-8"),
            [
                b"echo 'hi'".to_vec(),
                state_path.as_os_str().as_encoded_bytes().to_vec(),
                b"/home/agent/work space".to_vec(),
                b"physical".to_vec(),
                b"m.1".to_vec(),
                b"saved".to_vec()
            ]
        );
        assert_eq!(hand_over_text(&spec("a\0b"), EnvKind::Fresh), None);
        assert!(hand_over_text(&spec(&"x".repeat(MAX_HAND_OVER - 100)), EnvKind::Fresh).is_some());
        assert_eq!(
            hand_over_text(&spec(&"x".repeat(MAX_HAND_OVER)), EnvKind::Fresh),
            None
        );
        // Non-ASCII takes four bytes a byte: a quarter of the limit is the most that fits.
        assert_eq!(
            hand_over_text(&spec(&"\u{e9}".repeat(MAX_HAND_OVER / 6)), EnvKind::Fresh),
            None
        );
    }
}
