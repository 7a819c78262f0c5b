//! An interactive terminal: `bash -l` on a pseudo-terminal, in the workspace, as the
//! unprivileged user.
//!
//! bash leads a new session with the terminal's slave side as its controlling terminal (setsid +
//! TIOCSCTTY), so job control, `stty` and full-screen programs work and window-size changes
//! reach the foreground job as SIGWINCH. Dropping the [`Terminal`] ends every process of that
//! session (SIGHUP, then SIGKILL after the grace period) and closes the master side.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::libc;
use nix::sys::signal::Signal;
use supervisor::ExitStatus;
use supervisor::process::Identity;
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use super::job::BASH;
use super::procs;
use crate::activity::ActivityGuard;

/// Columns and rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    pub cols: u16,
    pub rows: u16,
}

impl Default for TerminalSize {
    fn default() -> Self {
        Self { cols: 80, rows: 24 }
    }
}

pub(super) struct TerminalSpec {
    pub id: String,
    pub working_dir: PathBuf,
    pub identity: Option<Identity>,
    pub size: TerminalSize,
    pub stop_grace: Duration,
    /// The shell's table of open terminals, which this one leaves when dropped.
    pub registry: Arc<Mutex<HashMap<String, i32>>>,
}

/// An open terminal. Reading and writing may happen from different tasks at once.
pub struct Terminal {
    id: String,
    /// bash's pid: also the terminal's session and process group id.
    pid: i32,
    master: AsyncFd<OwnedFd>,
    exit: Mutex<Option<oneshot::Receiver<ExitStatus>>>,
    stop_grace: Duration,
    registry: Arc<Mutex<HashMap<String, i32>>>,
    _activity: ActivityGuard,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("id", &self.id)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl Terminal {
    /// Opens a pseudo-terminal and starts `bash -l` on it. Must be called within the runtime.
    pub(super) fn spawn(spec: TerminalSpec, activity: ActivityGuard) -> io::Result<Terminal> {
        // Close-on-exec from the start, so no other child spawned meanwhile inherits either side.
        let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
        nix::pty::grantpt(&master)?;
        nix::pty::unlockpt(&master)?;
        let slave_path = nix::pty::ptsname_r(&master)?;
        // SAFETY: `into_raw_fd` hands over sole ownership of the open descriptor.
        #[allow(unsafe_code)]
        let master = unsafe { OwnedFd::from_raw_fd(master.into_raw_fd()) };
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&slave_path)?;
        if let Some(identity) = &spec.identity {
            // The user owns its terminal, as after a login.
            std::os::unix::fs::fchown(&slave, Some(identity.uid), Some(identity.gid))?;
        }
        set_window_size(&master, spec.size)?;

        let mut command = Command::new(BASH);
        command
            .arg("-l")
            .current_dir(&spec.working_dir)
            .stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave))
            .env_remove("SANDBOX_API_KEY")
            .env_remove("SANDBOX_API_KEY_FILE")
            .env("TERM", "xterm-256color")
            .env("COLORTERM", "truecolor");
        if let Some(identity) = &spec.identity {
            command
                .env("HOME", &identity.home)
                .env("USER", &identity.user)
                .env("LOGNAME", &identity.user)
                .env("SHELL", BASH)
                .uid(identity.uid)
                .gid(identity.gid);
        }
        // SAFETY: runs in the forked child before exec and only makes async-signal-safe system
        // calls (setsid, ioctl) on its own descriptors; it touches no memory shared with the
        // parent.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid().map_err(io::Error::from)?;
                // Standard input is the slave: make it the controlling terminal.
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawned = supervisor::reaper().spawn(&mut command)?;
        // Close our copies of the slave side: once bash and its children have closed theirs,
        // reading the master reports the end.
        drop(command);
        let flags = fcntl(&master, FcntlArg::F_GETFL)?;
        fcntl(
            &master,
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
        )?;
        // SAFETY: `master` is an open descriptor that the AsyncFd owns from here on; OwnedFd's
        // `as_raw_fd` always returns that same descriptor and nothing else closes it.
        #[allow(unsafe_code)]
        let master = unsafe { AsyncFd::register(master) }.map_err(io::Error::from)?;
        let terminal = Terminal {
            id: spec.id,
            pid: spawned.pid,
            master,
            exit: Mutex::new(Some(spawned.exit)),
            stop_grace: spec.stop_grace,
            registry: spec.registry,
            _activity: activity,
        };
        tracing::info!(terminal = %terminal.id, pid = terminal.pid, "terminal opened");
        Ok(terminal)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// bash's pid, also the terminal's session id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Reads what the terminal printed. 0 means it is closed (every process let go of it).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.master.readable().await?;
            match ready.try_io(|fd| nix::unistd::read(fd, buf).map_err(io::Error::from)) {
                Ok(Ok(n)) => return Ok(n),
                // Linux reports a closed slave side as EIO.
                Ok(Err(error)) if error.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(error)) => return Err(error),
                Err(_would_block) => continue,
            }
        }
    }

    /// Types `data` into the terminal.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut ready = self.master.writable().await?;
            match ready.try_io(|fd| nix::unistd::write(fd, data).map_err(io::Error::from)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(error)) if error.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(error)) => return Err(error),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Changes the window size; the foreground job gets SIGWINCH.
    pub fn resize(&self, size: TerminalSize) -> io::Result<()> {
        set_window_size(self.master.get_ref(), size)
    }

    /// bash's exit status, once (None if already taken).
    pub fn take_exit(&self) -> Option<oneshot::Receiver<ExitStatus>> {
        self.exit.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        let (pid, grace, id) = (self.pid, self.stop_grace, self.id.clone());
        let end = move || {
            procs::terminate_session(pid, Signal::SIGHUP, grace);
            tracing::info!(terminal = %id, pid, "terminal closed");
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(end);
            }
            Err(_) => {
                procs::signal_session(pid, Signal::SIGKILL);
            }
        }
    }
}

fn set_window_size(master: &OwnedFd, size: TerminalSize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, which is valid for the call.
    #[allow(unsafe_code)]
    let result = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &winsize) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
