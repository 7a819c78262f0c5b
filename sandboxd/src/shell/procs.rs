//! Finding and ending every process of a Unix session.
//!
//! Each shell command and each terminal is started as the leader of a new session (and process
//! group), so its session id is its pid. Stopping it signals the process group (atomic, so a
//! loop that keeps forking cannot slip through) and every process whose session id matches,
//! found in `/proc` (this catches children that moved to their own process group, such as those
//! of `timeout` or an interactive shell's jobs). Processes that left the session with `setsid`
//! are out of reach, as with any shell.
//!
//! The functions here block (they read `/proc` and sleep); async callers use `spawn_blocking`.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// How often membership is checked while waiting for processes to go.
const POLL: Duration = Duration::from_millis(20);
/// How long to keep sending SIGKILL before giving up on a process (one stuck in the kernel).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// One live process, as far as stopping sessions is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessEntry {
    pub pid: i32,
    pub session: i32,
    /// Exited but not reaped yet: it holds no resources and cannot be signalled.
    pub zombie: bool,
}

/// Every process visible in `/proc`.
pub fn scan() -> Vec<ProcessEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        parse_stat(pid, &stat)
    })
    .collect()
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid pgrp session ...`; `comm` may hold spaces
/// and parentheses, so fields are counted from the last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcessEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let _ppid = fields.next()?;
    let _pgrp = fields.next()?;
    let session: i32 = fields.next()?.parse().ok()?;
    Some(ProcessEntry {
        pid,
        session,
        zombie: matches!(state, "Z" | "X"),
    })
}

/// Live (non-zombie) processes of session `sid`.
pub fn members(sid: i32) -> Vec<i32> {
    scan()
        .into_iter()
        .filter(|p| p.session == sid && !p.zombie)
        .map(|p| p.pid)
        .collect()
}

/// True when `sid` may be signalled: never init's, never our own session.
fn signallable(sid: i32) -> bool {
    if sid <= 1 {
        return false;
    }
    match nix::unistd::getsid(None) {
        Ok(own) => own.as_raw() != sid,
        Err(_) => true,
    }
}

/// Sends `signal` to the process group `sid` and to every live member of session `sid`.
/// Returns how many members were found.
pub fn signal_session(sid: i32, signal: Signal) -> usize {
    if !signallable(sid) {
        return 0;
    }
    match killpg(Pid::from_raw(sid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => tracing::warn!(sid, %signal, %error, "cannot signal process group"),
    }
    let pids = members(sid);
    for &pid in &pids {
        match kill(Pid::from_raw(pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => tracing::warn!(pid, %signal, %error, "cannot signal process"),
        }
    }
    pids.len()
}

/// Ends session `sid`: `first` (SIGTERM, or SIGHUP for a terminal) to every member, up to
/// `grace` for them to exit, then SIGKILL until none is left. Returns true when the session is
/// empty at the end.
pub fn terminate_session(sid: i32, first: Signal, grace: Duration) -> bool {
    if !signallable(sid) {
        return true;
    }
    if signal_session(sid, first) == 0 && members(sid).is_empty() {
        return true;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(POLL);
        if members(sid).is_empty() {
            return true;
        }
    }
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        if signal_session(sid, Signal::SIGKILL) == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            tracing::warn!(sid, "processes survived SIGKILL");
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Ends what is left of sessions whose leaders have already been reaped (background jobs of
/// finished commands). A session id is only trusted while its number is not in use by a live
/// process: a pid is never reused while processes still carry it as their session id, so if a
/// process with that pid exists, the old session is empty and the number now belongs to
/// someone else.
pub fn terminate_leftovers(sids: &[i32], grace: Duration) {
    let processes = scan();
    let live: Vec<i32> = sids
        .iter()
        .copied()
        .filter(|&sid| {
            !processes.iter().any(|p| p.pid == sid)
                && processes.iter().any(|p| p.session == sid && !p.zombie)
        })
        .collect();
    for &sid in &live {
        signal_session(sid, Signal::SIGTERM);
    }
    for sid in live {
        terminate_session(sid, Signal::SIGTERM, grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let entry = parse_stat(42, "42 (a (weird) name) S 1 42 42 0 -1 4194560 ...").unwrap();
        assert_eq!(
            entry,
            ProcessEntry {
                pid: 42,
                session: 42,
                zombie: false
            }
        );
        assert!(parse_stat(7, "7 (x) Z 1 7 9 0").unwrap().zombie);
        assert_eq!(parse_stat(7, "garbage"), None);
    }

    #[test]
    fn our_own_session_is_never_signalled() {
        let own = nix::unistd::getsid(None).unwrap().as_raw();
        assert_eq!(signal_session(own, Signal::SIGTERM), 0);
        assert_eq!(signal_session(1, Signal::SIGTERM), 0);
        assert!(scan().iter().any(|p| p.pid == std::process::id() as i32));
    }
}
