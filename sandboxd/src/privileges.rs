//! Becoming the agent's user when started as root (`SANDBOXD_RUN_AS`).
//!
//! The Docker backend starts sandboxd as `agent` with no capabilities and hands it its key on
//! standard input. A Docker Swarm service has no standard input to write to: its key arrives as
//! a Swarm secret, a file on a read-only mount that cannot be deleted after reading. So the
//! Swarm backend mounts that file owned by root and readable by root alone, starts sandboxd as
//! root with no capability but `SETUID` and `SETGID`, and sets `SANDBOXD_RUN_AS=agent`:
//! sandboxd reads the key (`config`), then, before any thread or program exists, becomes
//! `agent` for good here. Switching every user id away from 0 clears the capabilities it had,
//! and `no_new_privs` is set for sandboxd and everything it starts, so nothing in the sandbox
//! can regain root, and nothing left running can read the key file any more.

use nix::unistd::{Gid, Uid, User};

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("SANDBOXD_RUN_AS: no user {0:?} in the image")]
    NoSuchUser(String),
    #[error("SANDBOXD_RUN_AS: looking up user {user:?}: {source}")]
    Lookup { user: String, source: nix::Error },
    #[error("SANDBOXD_RUN_AS: {step}: {source}")]
    Switch {
        step: &'static str,
        source: nix::Error,
    },
    #[error("SANDBOXD_RUN_AS: still user {uid} after switching to {user:?}")]
    StillPrivileged { user: String, uid: u32 },
}

/// Becomes `user` (its user and group ids, its group alone as supplementary group) when running
/// as root; as anyone else, checks that it already is that user. Sets `no_new_privs` either way.
/// Call it before any other thread exists: the ids are changed for the calling thread first.
pub fn become_user(user: &str) -> Result<(), PrivilegeError> {
    let entry = User::from_name(user)
        .map_err(|source| PrivilegeError::Lookup {
            user: user.to_string(),
            source,
        })?
        .ok_or_else(|| PrivilegeError::NoSuchUser(user.to_string()))?;
    if Uid::effective().is_root() {
        let switch = |step| move |source| PrivilegeError::Switch { step, source };
        nix::unistd::setgroups(&[entry.gid]).map_err(switch("setting the groups"))?;
        nix::unistd::setresgid(entry.gid, entry.gid, entry.gid)
            .map_err(switch("setting the group id"))?;
        nix::unistd::setresuid(entry.uid, entry.uid, entry.uid)
            .map_err(switch("setting the user id"))?;
    }
    let (uid, euid) = (Uid::current(), Uid::effective());
    if uid != entry.uid || euid != entry.uid || Gid::effective() != entry.gid {
        return Err(PrivilegeError::StillPrivileged {
            user: user.to_string(),
            uid: euid.as_raw(),
        });
    }
    nix::sys::prctl::set_no_new_privs().map_err(|source| PrivilegeError::Switch {
        step: "setting no_new_privs",
        source,
    })
}

/// Whether a key file that cannot be deleted may stay: it can when sandboxd is about to give up
/// root (`run_as`) and the file is root's, readable by root alone, so no process left in the
/// sandbox can read it.
pub fn key_file_may_stay(path: &std::path::Path, run_as: Option<&str>) -> bool {
    use std::os::unix::fs::MetadataExt;
    if run_as.is_none() || !Uid::effective().is_root() {
        return false;
    }
    match std::fs::metadata(path) {
        Ok(meta) => meta.uid() == 0 && meta.mode() & 0o077 == 0,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_user_is_refused_by_name() {
        let error = become_user("no-such-user-here").unwrap_err();
        assert!(error.to_string().contains("no-such-user-here"), "{error}");
    }

    #[test]
    fn a_key_file_stays_only_when_root_gives_up_root_and_the_file_is_roots_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "k\n").unwrap();
        // Without SANDBOXD_RUN_AS a key file must always be deleted.
        assert!(!key_file_may_stay(&path, None));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Readable by others: never.
        assert!(!key_file_may_stay(&path, Some("agent")));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(
            key_file_may_stay(&path, Some("agent")),
            Uid::effective().is_root(),
            "a root-only file may stay exactly when sandboxd runs as root"
        );
    }
}
