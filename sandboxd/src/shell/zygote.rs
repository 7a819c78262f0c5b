//! Zygotes: long-lived bashes that fork the ready bashes commands run in.
//!
//! Starting bash costs milliseconds of loader, library and locale work (5-15 ms where the image
//! sits on fuse-overlayfs), and a command that arrives right after another waits for the next
//! [`Prewarmed`] bash to get through it. A zygote pays that once: one bash per [`EnvKind`],
//! started like a command's bash and stopped just before it would wait for a command (see
//! `wrapper.bash`, `--zygote`). Asked for a ready bash, it runs the `agentbox_fork` builtin (the
//! `bash-fork` crate): a double fork whose grandchild leads its own session, is a child
//! subreaper, has its own `$$`, `$PPID`, `$RANDOM` and `$SECONDS`, and is re-parented to
//! sandboxd, which adopts it ([`supervisor::reaper::Reaper::adopt`]) and so reaps it and reads
//! its exit status like any child it spawned. A fork costs about half a millisecond.
//!
//! The new bash gets its pipes through three FIFOs in a fresh directory of the shell's private
//! state root: `args` (its fd 3), `in` (stdin) and `out` (stdout and stderr). The zygote runs in
//! the state root and is sent the directory's name, so the new bash opens them by relative
//! paths, as sandboxd makes and opens them through its descriptor of the root (see `state`: no
//! lookup from `/`, which costs a FUSE round trip on fuse-overlayfs). sandboxd opens its
//! ends first (read-write for `args` and `in`, so the child's opens never block; read-only,
//! non-blocking for `out`), sends the directory's path, and once the child has reported its pid
//! on the zygote's stdout reopens `args` and `in` write-only and drops the read-write handles,
//! so the child sees end-of-file when sandboxd closes them, exactly as with a spawned bash's
//! pipes. The FIFOs are unlinked once open.
//!
//! The zygote runs as the commands' user, so a command can reach it (and its report pipe)
//! through `/proc`. Nothing it can report gains it anything: a reported pid is adopted only if
//! it is a child of sandboxd leading its own session and not already waited for (a supervised
//! program's pid is refused), and is then treated as the command's bash, which the command's
//! user could signal anyway. Without the builtin (or when sandboxd does not reap orphans) every
//! ready bash is started from scratch, as before.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use supervisor::process::Identity;
use supervisor::reaper::{ReapScope, reaper};
use tokio::net::unix::pipe;

use super::job::{BASH, EnvKind, Prewarmed, WRAPPER, apply_environment};
use super::state::StateRoot;

/// The builtin's file name (what `cargo build -p bash-fork` produces).
const BUILTIN_FILE: &str = "libbash_fork.so";
/// Where the image installs it; a development build finds it next to sandboxd instead.
const INSTALLED_BUILTIN: &str = "/usr/local/lib/agentbox/libbash_fork.so";
/// How long a zygote may take to report a forked bash before it counts as broken.
const REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest report accepted (a directory path and a pid).
const MAX_REPORT: usize = 8 * 1024;

/// The zygotes of one shell, started on first use.
#[derive(Debug)]
pub struct Zygotes {
    /// The builtin, or None when ready bashes are started from scratch.
    builtin: Option<PathBuf>,
    /// One per [`EnvKind`]: [`EnvKind::Fresh`] first.
    slots: [Mutex<Option<Zygote>>; 2],
    next_dir: AtomicU64,
    /// Zygote starts in a row that did not fork; at [`MAX_START_FAILURES`] zygotes are given up.
    start_failures: AtomicU32,
}

/// Failed zygote starts in a row after which ready bashes are started from scratch for good.
const MAX_START_FAILURES: u32 = 3;

/// A running zygote: its stdin takes requests, its stdout carries reports.
#[derive(Debug)]
struct Zygote {
    pid: i32,
    requests: File,
    reports: File,
    /// Report bytes read but not yet used.
    pending: Vec<u8>,
    exit: tokio::sync::oneshot::Receiver<supervisor::ExitStatus>,
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // Closing its stdin (dropping `requests`) ends a healthy zygote; a stuck one is killed,
        // unless it has been reaped already (its pid may be another process's by now).
        if matches!(
            self.exit.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        ) {
            supervisor::process::ProcessGroup::new(self.pid).kill();
        }
    }
}

impl Zygotes {
    /// Zygotes when the builtin is found and this process reaps orphans, else none.
    pub fn find() -> Zygotes {
        let builtin = (reaper().scope() == ReapScope::AllChildren)
            .then(find_builtin)
            .flatten();
        match &builtin {
            Some(path) => tracing::debug!(builtin = %path.display(), "shell zygotes enabled"),
            None => tracing::debug!("shell zygotes unavailable; ready shells start from scratch"),
        }
        Zygotes {
            builtin,
            ..Zygotes::none()
        }
    }

    /// No zygotes: every ready bash starts from scratch.
    pub fn none() -> Zygotes {
        Zygotes {
            builtin: None,
            slots: [Mutex::new(None), Mutex::new(None)],
            next_dir: AtomicU64::new(1),
            start_failures: AtomicU32::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        self.builtin.is_some() && self.start_failures.load(Ordering::Relaxed) < MAX_START_FAILURES
    }

    /// A ready bash of `kind` forked by its zygote (started first if needed, in `state_root`),
    /// its FIFOs in a new directory there, waiting in `ready_dir` (see `wrapper.bash`). Must be
    /// called within the Tokio runtime, off its worker threads (it blocks for up to
    /// [`REPORT_TIMEOUT`]).
    pub fn ready_bash(
        &self,
        kind: EnvKind,
        identity: Option<&Identity>,
        state_root: &StateRoot,
        ready_dir: &Path,
    ) -> io::Result<Prewarmed> {
        let builtin = self
            .builtin
            .as_deref()
            .filter(|_| self.enabled())
            .ok_or_else(|| io::Error::other("shell zygotes unavailable"))?;
        let dir = format!("fork-{}", self.next_dir.fetch_add(1, Ordering::Relaxed));
        let fifos = Fifos::create(state_root, &dir, identity)?;
        let forked = self.fork_in(kind, identity, builtin, state_root, fifos, ready_dir);
        let _ = state_root.remove_tree(&dir);
        forked
    }

    /// Ends every zygote (their forked bashes live on).
    pub fn clear(&self) {
        for slot in &self.slots {
            lock(slot).take();
        }
    }

    fn fork_in(
        &self,
        kind: EnvKind,
        identity: Option<&Identity>,
        builtin: &Path,
        state_root: &StateRoot,
        fifos: Fifos<'_>,
        ready_dir: &Path,
    ) -> io::Result<Prewarmed> {
        let dir = fifos.dir.as_str();
        let mut slot = lock(&self.slots[slot_of(kind)]);
        let pid = match slot.as_mut() {
            Some(zygote) => zygote.request(dir, ready_dir),
            None => Err(io::Error::other("not started")),
        };
        let pid = match pid {
            Ok(pid) => pid,
            Err(error) => {
                // Dead, stuck or not started yet: (re)start it once and ask again.
                if slot.is_some() {
                    tracing::info!(%error, "restarting a shell zygote");
                }
                *slot = None;
                let zygote = slot.insert(Zygote::spawn(kind, identity, builtin, state_root)?);
                match zygote.request(dir, ready_dir) {
                    Ok(pid) => {
                        self.start_failures.store(0, Ordering::Relaxed);
                        pid
                    }
                    Err(error) => {
                        *slot = None;
                        let failures = self.start_failures.fetch_add(1, Ordering::Relaxed) + 1;
                        if failures == MAX_START_FAILURES {
                            tracing::warn!(%error, "shell zygotes do not work here; ready shells start from scratch");
                        }
                        return Err(error);
                    }
                }
            }
        };
        drop(slot);
        // A bash forked by the builtin leads its own session; anything else reported (see the
        // module doc) is refused, and so is a pid another waiter owns (by `adopt`).
        if super::procs::entry(pid).map(|p| p.session) != Some(pid) {
            return Err(io::Error::other(format!(
                "reported shell {pid} does not lead its own session"
            )));
        }
        let exit = reaper()
            .adopt(pid)
            .map_err(|error| io::Error::other(format!("forked shell {pid}: {error}")))?;
        fifos.into_prewarmed(kind, pid, ready_dir.to_path_buf(), exit)
    }
}

impl Zygote {
    fn spawn(
        kind: EnvKind,
        identity: Option<&Identity>,
        builtin: &Path,
        state_root: &StateRoot,
    ) -> io::Result<Zygote> {
        let mut command = Command::new(BASH);
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("bash")
            .arg("--zygote")
            .arg(builtin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Requests name directories here (see the module doc).
            .current_dir(state_root.path());
        apply_environment(&mut command, kind, identity);
        if let Some(identity) = identity {
            command.uid(identity.uid).gid(identity.gid);
        }
        // Its own session: signals meant for sandboxd's group (a Ctrl-C where it runs in a
        // terminal) do not reach it. Its forks call setsid() themselves.
        supervisor::process::new_session(&mut command);
        let mut spawned = reaper().spawn(&mut command)?;
        let (Some(stdin), Some(stdout)) = (spawned.child.stdin.take(), spawned.child.stdout.take())
        else {
            return Err(io::Error::other("zygote pipes missing"));
        };
        Ok(Zygote {
            pid: spawned.pid,
            requests: File::from(std::os::fd::OwnedFd::from(stdin)),
            reports: File::from(std::os::fd::OwnedFd::from(stdout)),
            pending: Vec::new(),
            exit: spawned.exit,
        })
    }

    /// Asks for a bash whose FIFOs are in `dir` (a name in the zygote's working directory),
    /// to wait in `ready_dir`; returns its pid once it has reported.
    fn request(&mut self, dir: &str, ready_dir: &Path) -> io::Result<i32> {
        use std::os::unix::ffi::OsStrExt;
        let name = dir.as_bytes();
        let ready_dir = ready_dir.as_os_str().as_bytes();
        if ready_dir.contains(&0) {
            return Err(io::Error::other("a directory name with a NUL byte"));
        }
        let mut request = Vec::with_capacity(name.len() + ready_dir.len() + 2);
        request.extend_from_slice(name);
        request.push(0);
        request.extend_from_slice(ready_dir);
        request.push(0);
        self.requests.write_all(&request)?;
        let deadline = Instant::now() + REPORT_TIMEOUT;
        loop {
            // Reports are DIR\0PID\0; one of an earlier, abandoned request is skipped.
            if let Some(report) = take_report(&mut self.pending) {
                if report.0 != name {
                    continue;
                }
                return match std::str::from_utf8(&report.1)
                    .ok()
                    .and_then(|p| p.parse().ok())
                {
                    Some(pid) if pid > 1 => Ok(pid),
                    _ => Err(io::Error::other("the zygote could not fork")),
                };
            }
            if self.pending.len() > MAX_REPORT {
                return Err(io::Error::other("oversized zygote report"));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no zygote report"));
            }
            let mut fds = [nix::poll::PollFd::new(
                self.reports.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let timeout = nix::poll::PollTimeout::try_from(left.as_millis().max(1) as u64)
                .unwrap_or(nix::poll::PollTimeout::MAX);
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
            let mut buf = [0u8; 512];
            match self.reports.read(&mut buf) {
                Ok(0) => return Err(io::Error::other("the zygote exited")),
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
}

/// Takes the first complete `DIR\0PID\0` report off `pending`.
fn take_report(pending: &mut Vec<u8>) -> Option<(Vec<u8>, Vec<u8>)> {
    let first = pending.iter().position(|&b| b == 0)?;
    let second = first + 1 + pending[first + 1..].iter().position(|&b| b == 0)?;
    let report = (
        pending[..first].to_vec(),
        pending[first + 1..second].to_vec(),
    );
    pending.drain(..=second);
    Some(report)
}

/// sandboxd's ends of a forked bash's three FIFOs.
struct Fifos<'a> {
    root: &'a StateRoot,
    /// Their directory's name in the state root.
    dir: String,
    /// Read-write until the child has opened its end.
    args: OwnedFd,
    stdin: OwnedFd,
    output: OwnedFd,
}

impl<'a> Fifos<'a> {
    fn create(
        root: &'a StateRoot,
        dir: &str,
        identity: Option<&Identity>,
    ) -> io::Result<Fifos<'a>> {
        root.make_private_dir(dir, identity)?;
        for name in ["args", "in", "out"] {
            root.make_fifo(&format!("{dir}/{name}"), identity)?;
        }
        Ok(Fifos {
            root,
            dir: dir.to_string(),
            args: root.open(&format!("{dir}/args"), OFlag::O_RDWR)?,
            stdin: root.open(&format!("{dir}/in"), OFlag::O_RDWR)?,
            output: root.open(&format!("{dir}/out"), OFlag::O_RDONLY | OFlag::O_NONBLOCK)?,
        })
    }

    /// Once the child holds its ends: sandboxd's become write-only (so that closing them is
    /// end-of-file for the child) and the bash is ready.
    fn into_prewarmed(
        self,
        kind: EnvKind,
        pid: i32,
        ready_dir: PathBuf,
        exit: tokio::sync::oneshot::Receiver<supervisor::ExitStatus>,
    ) -> io::Result<Prewarmed> {
        // The child has the read ends open, so these opens do not block.
        let args = self
            .root
            .open(&format!("{}/args", self.dir), OFlag::O_WRONLY)?;
        let stdin = self.root.open(
            &format!("{}/in", self.dir),
            OFlag::O_WRONLY | OFlag::O_NONBLOCK,
        )?;
        drop(self.args);
        drop(self.stdin);
        Ok(Prewarmed::from_parts(
            kind,
            pid,
            ready_dir,
            File::from(args),
            Some(pipe::Sender::from_owned_fd(stdin)?),
            pipe::Receiver::from_owned_fd(self.output)?,
            exit,
        ))
    }
}

/// The builtin next to sandboxd's executable or one directory up (a development build: `cargo
/// build -p bash-fork` puts it in `target/PROFILE`, a test build in `target/PROFILE/deps`, where
/// test binaries are), else the installed one.
fn find_builtin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent().map(|dir| dir.join(BUILTIN_FILE));
    let above = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(BUILTIN_FILE));
    [beside, above, Some(PathBuf::from(INSTALLED_BUILTIN))]
        .into_iter()
        .flatten()
        .find(|path| path.is_file())
}

fn slot_of(kind: EnvKind) -> usize {
    match kind {
        EnvKind::Fresh => 0,
        EnvKind::Saved => 1,
    }
}

fn lock(slot: &Mutex<Option<Zygote>>) -> MutexGuard<'_, Option<Zygote>> {
    // Replaced or taken whole: a poisoned slot is still consistent.
    slot.lock().unwrap_or_else(|e| e.into_inner())
}
