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

/// Sends `signal` to the process group `pgid`. A group that no longer exists is not an error.
pub fn signal_group(pgid: i32, signal: Signal) {
    if pgid <= 1 {
        return; // never signal "every process" or init's group by accident
    }
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(error) => tracing::warn!(pgid, %signal, %error, "cannot signal process group"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
