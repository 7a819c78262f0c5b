//! The one place in the process that waits for children.
//!
//! Every child the process starts must be spawned through [`Reaper::spawn`], which registers its
//! pid and hands back a future of its exit status. A background thread wakes on `SIGCHLD` and
//! reaps. In [`ReapScope::AllChildren`] (PID 1, or a child subreaper) it reaps *every* child,
//! including orphans re-parented to us, with a `waitpid(-1, WNOHANG)` loop, because `SIGCHLD`
//! signals coalesce. In [`ReapScope::OwnChildren`] (the default, e.g. in tests) it only waits for
//! pids it registered, so it never steals another library's children.
//!
//! The registry lock is held across `fork`/`exec` and across each reaping pass, so a child that
//! exits before its pid is recorded is still matched to its waiter.

use std::collections::HashMap;
use std::fmt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::sync::oneshot;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// It called `exit` with this code.
    Code(i32),
    /// A signal ended it.
    Signal { signal: i32, core_dumped: bool },
}

impl ExitStatus {
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }

    /// The shell convention: the exit code, or 128 + the signal number.
    pub fn as_shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal { signal, .. } => 128 + signal,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(code) => write!(f, "exit code {code}"),
            ExitStatus::Signal {
                signal,
                core_dumped,
            } => {
                let name = nix::sys::signal::Signal::try_from(*signal)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {signal}"));
                write!(f, "killed by {name}")?;
                if *core_dumped {
                    write!(f, " (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

/// Which children the reaper waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReapScope {
    /// Only the children spawned through the reaper.
    OwnChildren,
    /// Every child of the process, including re-parented orphans (PID 1 or subreaper).
    AllChildren,
}

/// A child started through the reaper. Dropping it neither kills nor waits for the process.
pub struct SpawnedChild {
    pub pid: i32,
    /// The `std` handle, for its stdin/stdout/stderr pipes. Never call `wait` on it: the reaper
    /// owns waiting.
    pub child: Child,
    /// Resolves with the exit status once the process has been reaped.
    pub exit: oneshot::Receiver<ExitStatus>,
}

/// The process-wide reaper. Get it with [`reaper`].
pub struct Reaper {
    registry: Mutex<HashMap<i32, oneshot::Sender<ExitStatus>>>,
    scope: ReapScope,
    orphans_reaped: AtomicU64,
}

static REAPER: OnceLock<Reaper> = OnceLock::new();
static SCOPE: OnceLock<ReapScope> = OnceLock::new();

/// Chooses the reaping scope. Call once, before the first [`reaper`] call; PID 1 and subreapers
/// pass [`ReapScope::AllChildren`]. Returns false if the reaper was already running.
pub fn set_scope(scope: ReapScope) -> bool {
    SCOPE.set(scope).is_ok() && REAPER.get().is_none()
}

/// The process-wide reaper, started on first use.
pub fn reaper() -> &'static Reaper {
    REAPER.get_or_init(|| {
        let scope = *SCOPE.get_or_init(|| ReapScope::OwnChildren);
        // Register for SIGCHLD before any child can exist, so no exit goes unnoticed.
        let signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGCHLD]);
        match signals {
            Ok(mut signals) => {
                let spawned = std::thread::Builder::new()
                    .name("reaper".into())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        loop {
                            // Blocks until at least one SIGCHLD arrived; they coalesce.
                            for _ in signals.wait() {}
                            if let Some(reaper) = REAPER.get() {
                                reaper.reap_pass();
                            }
                        }
                    });
                if let Err(error) = spawned {
                    tracing::error!(%error, "cannot start the reaper thread; children will not be reaped");
                }
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGCHLD; children will not be reaped");
            }
        }
        Reaper {
            registry: Mutex::new(HashMap::new()),
            scope,
            orphans_reaped: AtomicU64::new(0),
        }
    })
}

impl Reaper {
    pub fn scope(&self) -> ReapScope {
        self.scope
    }

    /// Children reaped that were not spawned through the reaper (re-parented orphans).
    pub fn orphans_reaped(&self) -> u64 {
        self.orphans_reaped.load(Ordering::Relaxed)
    }

    /// Spawns `command` and registers the child for reaping.
    pub fn spawn(&self, command: &mut Command) -> std::io::Result<SpawnedChild> {
        let mut registry = self.lock();
        // The one direct spawn of the process: every other child comes through here.
        #[allow(clippy::disallowed_methods)]
        let child = command.spawn()?;
        let pid = child.id() as i32;
        let (tx, rx) = oneshot::channel();
        registry.insert(pid, tx);
        // If the child already exited, its SIGCHLD is pending and the reaper thread's next pass,
        // which needs this lock, will find the pid registered.
        drop(registry);
        Ok(SpawnedChild {
            pid,
            child,
            exit: rx,
        })
    }

    /// Registers `pid`, a process re-parented to this one (an orphan of a double fork), for
    /// reaping, as if it had been spawned here. Only in [`ReapScope::AllChildren`]; refused when
    /// `pid` is not a child of this process (it was already reaped, or never was ours) or is
    /// already registered (a pid another waiter owns is never taken from it).
    pub fn adopt(&self, pid: i32) -> Result<oneshot::Receiver<ExitStatus>, AdoptError> {
        if self.scope != ReapScope::AllChildren {
            return Err(AdoptError::NotReapingOrphans);
        }
        let mut registry = self.lock();
        if registry.contains_key(&pid) {
            return Err(AdoptError::AlreadyRegistered(pid));
        }
        // With the lock held no reaping pass runs, so a child seen here (alive or a zombie)
        // is reaped only after its sender is registered.
        if parent_of(pid) != Some(std::process::id() as i32) {
            return Err(AdoptError::NotAChild(pid));
        }
        let (tx, rx) = oneshot::channel();
        registry.insert(pid, tx);
        Ok(rx)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<ExitStatus>>> {
        // A panic while holding this lock cannot leave the map inconsistent (inserts and removes
        // are single calls), so a poisoned lock is still safe to use.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reap_pass(&self) {
        let mut registry = self.lock();
        match self.scope {
            ReapScope::AllChildren => loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                    Err(Errno::EINTR) => continue,
                    Err(error) => {
                        tracing::warn!(%error, "waitpid failed");
                        break;
                    }
                    Ok(status) => self.deliver(&mut registry, status),
                }
            },
            ReapScope::OwnChildren => {
                let pids: Vec<i32> = registry.keys().copied().collect();
                for pid in pids {
                    loop {
                        match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                            Err(Errno::EINTR) => continue,
                            Ok(WaitStatus::StillAlive) => {}
                            Err(Errno::ECHILD) => {
                                // Someone else reaped it; report it as lost rather than hang.
                                if let Some(tx) = registry.remove(&pid) {
                                    let _ = tx.send(ExitStatus::Code(-1));
                                }
                            }
                            Err(error) => tracing::warn!(pid, %error, "waitpid failed"),
                            Ok(status) => self.deliver(&mut registry, status),
                        }
                        break;
                    }
                }
            }
        }
    }

    fn deliver(
        &self,
        registry: &mut HashMap<i32, oneshot::Sender<ExitStatus>>,
        status: WaitStatus,
    ) {
        let (pid, exit) = match status {
            WaitStatus::Exited(pid, code) => (pid, ExitStatus::Code(code)),
            WaitStatus::Signaled(pid, signal, core_dumped) => (
                pid,
                ExitStatus::Signal {
                    signal: signal as i32,
                    core_dumped,
                },
            ),
            // Stops and continues are not requested (no WUNTRACED/WCONTINUED).
            _ => return,
        };
        match registry.remove(&pid.as_raw()) {
            Some(tx) => {
                let _ = tx.send(exit);
            }
            None => {
                self.orphans_reaped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(pid = pid.as_raw(), %exit, "reaped orphan");
            }
        }
    }
}

/// Why [`Reaper::adopt`] refused a pid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdoptError {
    #[error("this process only reaps its own children (it is neither PID 1 nor a subreaper)")]
    NotReapingOrphans,
    #[error("process {0} is not a child of this process")]
    NotAChild(i32),
    #[error("process {0} is already waited for")]
    AlreadyRegistered(i32),
}

/// The parent pid of `pid` from `/proc/PID/stat` (zombies included), None if it is gone.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so split after the
    // last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exit_codes_and_signals_are_reported() {
        let child = reaper()
            .spawn(Command::new("sh").args(["-c", "exit 7"]))
            .unwrap();
        assert_eq!(child.exit.await.unwrap(), ExitStatus::Code(7));

        let child = reaper()
            .spawn(Command::new("sh").args(["-c", "kill -KILL $$"]))
            .unwrap();
        let status = child.exit.await.unwrap();
        assert_eq!(
            status,
            ExitStatus::Signal {
                signal: 9,
                core_dumped: false
            }
        );
        assert_eq!(status.as_shell_code(), 137);
        assert_eq!(status.to_string(), "killed by SIGKILL");
    }

    #[tokio::test]
    async fn many_concurrent_children_are_all_matched() {
        let children: Vec<_> = (0..50)
            .map(|i| {
                reaper()
                    .spawn(Command::new("sh").args(["-c", &format!("exit {}", i % 5)]))
                    .unwrap()
            })
            .collect();
        for (i, child) in children.into_iter().enumerate() {
            assert_eq!(child.exit.await.unwrap(), ExitStatus::Code((i % 5) as i32));
        }
    }
}
