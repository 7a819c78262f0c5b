//! Turning a [`ProgramSpec`] into a running process: identity, environment, session, pipes, and
//! signalling a whole process group.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Gid, Group, Pid, Uid, User};

use crate::spec::ProgramSpec;

/// The user a program runs as, resolved from the password database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: PathBuf,
}

/// Errors resolving who a program runs as.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    #[error("unknown group {0:?}")]
    UnknownGroup(String),
    #[error("cannot run as {user:?}: the supervisor runs as uid {current} and is not root")]
    NotPermitted { user: String, current: u32 },
    #[error("looking up {what}: {source}")]
    Lookup {
        what: String,
        #[source]
        source: nix::Error,
    },
}

impl Identity {
    /// Resolves `user` (name or uid) and optional `group` (name or gid).
    pub fn resolve(user: &str, group: Option<&str>) -> Result<Self, IdentityError> {
        let lookup = |source| IdentityError::Lookup {
            what: format!("user {user:?}"),
            source,
        };
        let entry = match user.parse::<u32>() {
            Ok(uid) => User::from_uid(Uid::from_raw(uid)).map_err(lookup)?,
            Err(_) => User::from_name(user).map_err(lookup)?,
        }
        .ok_or_else(|| IdentityError::UnknownUser(user.to_string()))?;
        let gid = match group {
            None => entry.gid.as_raw(),
            Some(group) => match group.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => Group::from_name(group)
                    .map_err(|source| IdentityError::Lookup {
                        what: format!("group {group:?}"),
                        source,
                    })?
                    .ok_or_else(|| IdentityError::UnknownGroup(group.to_string()))?
                    .gid
                    .as_raw(),
            },
        };
        let current = Uid::effective().as_raw();
        if current != 0 && current != entry.uid.as_raw() {
            return Err(IdentityError::NotPermitted {
                user: user.to_string(),
                current,
            });
        }
        Ok(Self {
            user: entry.name,
            uid: entry.uid.as_raw(),
            gid,
            home: entry.dir,
            shell: entry.shell,
        })
    }

    /// True when switching to this identity needs no `setuid`/`setgid`.
    fn is_current(&self) -> bool {
        Uid::effective().as_raw() == self.uid && Gid::effective().as_raw() == self.gid
    }
}

/// Builds the command for one start of `spec`: a new session (so the program leads its own
/// process group), stdin from `/dev/null`, stdout and stderr piped to the supervisor, and the
/// identity's `HOME`/`USER`/`LOGNAME`/`SHELL` when it runs as another user.
pub fn build_command(spec: &ProgramSpec, identity: Option<&Identity>) -> Command {
    let mut command = Command::new(&spec.command);
    command
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(identity) = identity {
        command
            .env("HOME", &identity.home)
            .env("USER", &identity.user)
            .env("LOGNAME", &identity.user)
            .env("SHELL", &identity.shell);
        if !identity.is_current() {
            command.uid(identity.uid).gid(identity.gid);
        }
    }
    command.envs(&spec.env);
    if let Some(dir) = &spec.working_dir {
        command.current_dir(dir);
    }
    new_session(&mut command);
    command
}

/// Makes the child a session and process-group leader, so that the whole tree it starts can be
/// signalled at once and it has no controlling terminal.
pub fn new_session(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls setsid(2), which is
    // async-signal-safe; it touches no memory shared with the parent.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

/// A process group, named by its id (the pid of the process that leads it): the one way the
/// workspace signals and kills a group of processes. A group that no longer exists
/// is never an error, and ids 0 and 1 (the caller's own group, init's) are never signalled.
///
/// Made with [`ProcessGroup::new`] it only names the group; made with
/// [`ProcessGroup::kill_on_drop`] it owns it: dropping it kills the group (SIGKILL), unless
/// [`ProcessGroup::release`] let go of it first.
#[derive(Debug)]
pub struct ProcessGroup {
    pgid: i32,
    kill_on_drop: bool,
}

impl ProcessGroup {
    /// The group `pgid`, left as it is when this value is dropped.
    pub fn new(pgid: i32) -> Self {
        Self {
            pgid,
            kill_on_drop: false,
        }
    }

    /// The group `pgid`, killed when this value is dropped (unless released).
    pub fn kill_on_drop(pgid: i32) -> Self {
        Self {
            pgid,
            kill_on_drop: true,
        }
    }

    /// The group's id.
    pub fn id(&self) -> i32 {
        self.pgid
    }

    /// Lets go of the group without killing it; returns its id.
    pub fn release(mut self) -> i32 {
        self.kill_on_drop = false;
        self.pgid
    }

    /// Sends `signal` to every process of the group: `Ok(true)` when it was sent, `Ok(false)`
    /// when there is no such group (gone already), an error otherwise (`EPERM`).
    pub fn send(&self, signal: Signal) -> nix::Result<bool> {
        if self.pgid <= 1 {
            return Ok(false); // never signal "every process", our own group or init's by accident
        }
        match killpg(Pid::from_raw(self.pgid), signal) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::ESRCH) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Sends `signal` to the group; a group that no longer exists is not an error, and any
    /// other failure is logged.
    pub fn signal(&self, signal: Signal) {
        if let Err(error) = self.send(signal) {
            tracing::warn!(pgid = self.pgid, %signal, %error, "cannot signal process group");
        }
    }

    /// Kills the group (SIGKILL).
    pub fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.kill_on_drop {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn root_resolves_and_unknown_users_are_named() {
        let root = Identity::resolve("0", None);
        if Uid::effective().is_root() {
            let root = root.unwrap();
            assert_eq!((root.uid, root.gid), (0, 0));
            assert_eq!(root.user, "root");
        }
        let err = Identity::resolve("no-such-user-xyz", None).unwrap_err();
        assert!(err.to_string().contains("no-such-user-xyz"));
    }

    /// A process in a group of its own that ignores SIGTERM.
    fn stubborn_group() -> crate::reaper::SpawnedChild {
        let mut command = Command::new("sh");
        command
            .args(["-c", "trap '' TERM; exec sleep 30"])
            .process_group(0);
        crate::reaper().spawn(&mut command).unwrap()
    }

    #[tokio::test]
    async fn a_group_that_ignores_a_signal_is_killed_and_then_gone() {
        let child = stubborn_group();
        // Time for the shell to ignore SIGTERM before it is sent.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let group = ProcessGroup::new(child.pid);
        group.signal(Signal::SIGTERM);
        let mut exit = child.exit;
        let still_there = tokio::time::timeout(Duration::from_millis(200), &mut exit).await;
        assert!(still_there.is_err());
        group.kill();
        let status = tokio::time::timeout(Duration::from_secs(5), exit)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.as_shell_code(), 137);
        // Its only member reaped, the group is gone: not an error.
        assert_eq!(group.send(Signal::SIGTERM), Ok(false));
        group.signal(Signal::SIGTERM);
    }

    #[tokio::test]
    async fn an_owned_group_is_killed_when_dropped_unless_released() {
        let child = stubborn_group();
        let released = ProcessGroup::kill_on_drop(child.pid).release();
        assert_eq!(released, child.pid);
        assert_eq!(ProcessGroup::new(child.pid).send(Signal::SIGCONT), Ok(true));
        drop(ProcessGroup::kill_on_drop(child.pid));
        let status = tokio::time::timeout(Duration::from_secs(5), child.exit)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.as_shell_code(), 137);
        // Never init's group nor our own.
        assert_eq!(ProcessGroup::new(0).send(Signal::SIGCONT), Ok(false));
        assert_eq!(ProcessGroup::new(1).send(Signal::SIGCONT), Ok(false));
    }
}
