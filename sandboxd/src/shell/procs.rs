//! Finding and ending every process a shell command or terminal started.
//!
//! Each shell command and each terminal is started as the leader of a new session (and process
//! group), so its session id is its pid. A command's processes are found four ways, because
//! cgroups are not writable inside the container and any one way can be escaped:
//! - its **process group** (signalled atomically, so a loop that keeps forking cannot slip
//!   through) and its **Unix session** (children that moved to their own process group, such as
//!   those of `timeout` or an interactive shell's jobs);
//! - its **marker**: [`MARKER_VAR`] in the environment, set to a value unique to the command, is
//!   inherited by every program it starts and survives `setsid`, double forks and `nohup`
//!   (read from `/proc/<pid>/environ`, the environment a program was started with);
//! - the **parent-pid tree** below every process found: children that cleared their
//!   environment. The command's bash is a child subreaper while it runs, so orphans of a double
//!   fork stay in its tree instead of moving to PID 1;
//! - every process found once stays found (by pid and start time) until it is gone, so a
//!   process whose parent died during the kill is not lost.
//!
//! Scans repeat until nothing is left, so processes forked while a kill is in progress are
//! caught too. A process that both cleared its environment and was orphaned after the
//! command's bash had exited is out of reach, as is a same-user process that made itself
//! non-dumpable (its environment cannot be read).
//!
//! Processes in sandboxd's own session, sandboxd itself and PID 1 are never signalled.
//!
//! The functions here block (they read `/proc` and sleep); async callers use `spawn_blocking`.
//! Files under `/proc` are opened relative to one descriptor of `/proc` ([`read_proc`]): a path
//! from `/` is looked up through the image's root, and where that is fuse-overlayfs every
//! lookup of `/` is a round trip to the FUSE daemon.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use supervisor::process::ProcessGroup;

/// The environment variable that marks every program a shell command started.
pub const MARKER_VAR: &str = "AGENTBOX_SHELL_JOB";

/// How often membership is checked while waiting for processes to go.
const POLL: Duration = Duration::from_millis(20);
/// How long to keep sending SIGKILL before giving up on a process (one stuck in the kernel).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// What identifies the processes of one shell command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMark {
    /// bash's pid: the Unix session and process group the command started in.
    pub sid: i32,
    /// bash's start time (clock ticks after boot). While a process with pid `sid` that
    /// started then exists, alive or a zombie not yet reaped, the pid is still bash's and the
    /// session still the command's.
    pub start_time: Option<u64>,
    /// The value of [`MARKER_VAR`] the command's programs inherit (unique per command).
    pub marker: String,
}

/// One live process, as far as stopping commands is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessEntry {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// Start time after boot, in clock ticks: tells a process from a later one with its pid.
    pub start_time: u64,
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
        entry_of(pid)
    })
    .collect()
}

/// `/proc`, opened once; None if it cannot be opened (then paths from `/` are used).
fn proc_dir() -> Option<&'static OwnedFd> {
    static PROC: OnceLock<Option<OwnedFd>> = OnceLock::new();
    PROC.get_or_init(|| {
        nix::fcntl::open(
            "/proc",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()
    })
    .as_ref()
}

/// The whole of `/proc/<relative>`.
pub fn read_proc(relative: &str) -> io::Result<Vec<u8>> {
    let Some(proc) = proc_dir() else {
        return std::fs::read(format!("/proc/{relative}"));
    };
    let fd = nix::fcntl::openat(
        proc,
        relative,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The working directory of `pid` as the kernel knows it (symlinks resolved, as `pwd -P`
/// prints it), or None when it has been removed. Fails when `pid` is gone or cannot be read.
pub fn current_dir(pid: i32) -> io::Result<Option<PathBuf>> {
    let relative = format!("{pid}/cwd");
    let link = match proc_dir() {
        Some(proc) => nix::fcntl::readlinkat(proc, relative.as_str())?,
        None => std::fs::read_link(format!("/proc/{relative}"))?.into_os_string(),
    };
    let path = PathBuf::from(link);
    // The kernel marks a removed directory so; a live one can carry that name too.
    let removed = path.as_os_str().as_bytes().ends_with(b" (deleted)") && !path.is_dir();
    Ok((!removed && path.is_absolute()).then_some(path))
}

/// The device and inode of `pid`'s working directory (through `/proc`, without a lookup of
/// its path); None when `pid` is gone or cannot be read.
pub fn cwd_identity(pid: i32) -> Option<(u64, u64)> {
    let relative = format!("{pid}/cwd");
    let stat = match proc_dir() {
        Some(proc) => {
            nix::sys::stat::fstatat(proc, relative.as_str(), nix::fcntl::AtFlags::empty())
        }
        None => nix::sys::stat::stat(format!("/proc/{relative}").as_str()),
    }
    .ok()?;
    Some((stat.st_dev, stat.st_ino))
}

/// The process `pid`, zombies included; None once it is gone.
pub fn entry(pid: i32) -> Option<ProcessEntry> {
    entry_of(pid)
}

fn entry_of(pid: i32) -> Option<ProcessEntry> {
    let stat = read_proc(&format!("{pid}/stat")).ok()?;
    // A program may name itself with any bytes: the fields that matter follow the last `)`.
    parse_stat(pid, &String::from_utf8_lossy(&stat))
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid pgrp session ...`; `comm` may hold spaces
/// and parentheses, so fields are counted from the last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcessEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid: i32 = fields.next()?.parse().ok()?;
    let pgrp: i32 = fields.next()?.parse().ok()?;
    let session: i32 = fields.next()?.parse().ok()?;
    // Fields 7 to 21 of stat(5), then starttime (22); `state` was field 3.
    let start_time: u64 = fields.nth(15)?.parse().ok()?;
    Some(ProcessEntry {
        pid,
        ppid,
        pgrp,
        session,
        start_time,
        zombie: matches!(state, "Z" | "X"),
    })
}

/// The value of [`MARKER_VAR`] in the environment `pid` was started with; None when it has none
/// or the environment cannot be read (gone, another user's, non-dumpable).
fn marker_of(pid: i32) -> Option<String> {
    let environ = read_proc(&format!("{pid}/environ")).ok()?;
    let prefix = format!("{MARKER_VAR}=");
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|value| String::from_utf8_lossy(value).into_owned())
}

/// Live (non-zombie) processes of session `sid`.
pub fn members(sid: i32) -> Vec<i32> {
    scan()
        .into_iter()
        .filter(|p| p.session == sid && !p.zombie)
        .map(|p| p.pid)
        .collect()
}

/// The live children of `leader` that are in its process group, by pid and start time (what
/// a `killpg` of that group reaches among them).
pub fn group_children(leader: i32) -> HashSet<(i32, u64)> {
    scan()
        .into_iter()
        .filter(|p| p.ppid == leader && p.pgrp == leader && !p.zombie)
        .map(|p| (p.pid, p.start_time))
        .collect()
}

/// Sends `signal` to `pid` if it is still the process that started at `start_time`.
pub fn signal_if_same(pid: i32, start_time: u64, signal: Signal) {
    if entry(pid).is_some_and(|p| p.start_time == start_time && !p.zombie) {
        signal_each(&[pid], signal);
    }
}

/// Sandboxd's own session id, or 0 if it cannot be read.
fn own_session() -> i32 {
    nix::unistd::getsid(None).map(Pid::as_raw).unwrap_or(0)
}

/// True when `sid` may be signalled: never init's, never our own session.
fn signallable(sid: i32) -> bool {
    sid > 1 && sid != own_session()
}

/// Sends `signal` to the process group `sid` and to every live member of session `sid`.
/// Returns how many members were found.
pub fn signal_session(sid: i32, signal: Signal) -> usize {
    if !signallable(sid) {
        return 0;
    }
    ProcessGroup::new(sid).signal(signal);
    let pids = members(sid);
    signal_each(&pids, signal);
    pids.len()
}

fn signal_each(pids: &[i32], signal: Signal) {
    for &pid in pids {
        match kill(Pid::from_raw(pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => tracing::warn!(pid, %signal, %error, "cannot signal process"),
        }
    }
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

/// The processes of some shell commands, found again on every [`Tracker::scan`].
#[derive(Debug)]
struct Tracker {
    /// Unix sessions (and process groups) whose every member belongs to the commands.
    sessions: HashSet<i32>,
    markers: HashSet<String>,
    /// Processes found before, by pid, with their start times.
    known: HashMap<i32, u64>,
    own_pid: i32,
    own_session: i32,
}

impl Tracker {
    /// Tracks `jobs`. With `sessions_trusted` false, a session id counts while no process has
    /// that pid, or while the one that has it is the command's bash itself (same start time,
    /// alive or a zombie): a pid is never reused while processes still carry it as their
    /// session or group id, so a different process with that pid means the old session is
    /// empty and the number now belongs to someone else. (The bash case matters: a child it
    /// forked may not have exec'd yet, and so not carry the marker, when the kill comes.)
    fn new(jobs: &[JobMark], processes: &[ProcessEntry], sessions_trusted: bool) -> Self {
        let own_session = own_session();
        let still_the_commands = |job: &JobMark| {
            sessions_trusted
                || processes
                    .iter()
                    .find(|p| p.pid == job.sid)
                    .is_none_or(|p| job.start_time == Some(p.start_time))
        };
        let sessions = jobs
            .iter()
            .filter(|job| job.sid > 1 && job.sid != own_session)
            .filter(|job| still_the_commands(job))
            .map(|job| job.sid)
            .collect();
        Self {
            sessions,
            markers: jobs.iter().map(|job| job.marker.clone()).collect(),
            known: HashMap::new(),
            own_pid: std::process::id() as i32,
            own_session,
        }
    }

    /// The live processes of the commands now: members of their sessions or groups, holders of
    /// their markers, processes found before, and every descendant of those.
    fn scan(&mut self, processes: &[ProcessEntry]) -> Vec<i32> {
        let eligible =
            |p: &ProcessEntry| p.pid > 1 && p.pid != self.own_pid && p.session != self.own_session;
        let mut found: HashSet<i32> = HashSet::new();
        for p in processes.iter().filter(|p| eligible(p)) {
            let member = self.sessions.contains(&p.session)
                || self.sessions.contains(&p.pgrp)
                || self.known.get(&p.pid) == Some(&p.start_time)
                || (!p.zombie && marker_of(p.pid).is_some_and(|m| self.markers.contains(&m)));
            if member {
                found.insert(p.pid);
            }
        }
        // Descendants, through the parent-pid links.
        let mut children: HashMap<i32, Vec<&ProcessEntry>> = HashMap::new();
        for p in processes.iter().filter(|p| eligible(p)) {
            children.entry(p.ppid).or_default().push(p);
        }
        let mut queue: Vec<i32> = found.iter().copied().collect();
        while let Some(parent) = queue.pop() {
            for child in children.get(&parent).into_iter().flatten() {
                if found.insert(child.pid) {
                    queue.push(child.pid);
                }
            }
        }
        let live: Vec<&ProcessEntry> = processes
            .iter()
            .filter(|p| found.contains(&p.pid) && !p.zombie)
            .collect();
        self.known = live.iter().map(|p| (p.pid, p.start_time)).collect();
        live.iter().map(|p| p.pid).collect()
    }

    /// Finds the processes, then signals the sessions' groups and every process found.
    /// Scanning first matters: once a parent dies, its children move to a subreaper further up
    /// and the tree no longer shows where they came from. Returns how many were found.
    fn signal(&mut self, signal: Signal) -> usize {
        let pids = self.scan(&scan());
        for &sid in &self.sessions {
            ProcessGroup::new(sid).signal(signal);
        }
        signal_each(&pids, signal);
        pids.len()
    }
}

/// Ends every process of `jobs` (see the module documentation for how they are found):
/// `first` to each, up to `grace` for them to exit, then SIGKILL until none is left. With
/// `sessions_trusted`, the jobs' session ids are taken as theirs even if a process with that
/// pid lives (true for a command whose bash has not been reaped yet). Returns true when nothing
/// is left at the end.
pub fn terminate_jobs(
    jobs: &[JobMark],
    sessions_trusted: bool,
    first: Signal,
    grace: Duration,
) -> bool {
    if jobs.is_empty() {
        return true;
    }
    let mut tracker = Tracker::new(jobs, &scan(), sessions_trusted);
    // One empty look is no proof that nothing is left: a process in the middle of an `execve`
    // has no readable environment (so no marker) for an instant, and one that has just left the
    // command's session by `setsid` is then found by nothing else. (A CI run caught a `setsid
    // sleep &` surviving a kill that way.) Nothing is taken as gone until a second look, a poll
    // later, agrees.
    if tracker.signal(first) == 0 {
        std::thread::sleep(POLL);
        if tracker.signal(first) == 0 {
            return true;
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(POLL);
        if tracker.scan(&scan()).is_empty() {
            std::thread::sleep(POLL);
            if tracker.signal(first) == 0 {
                return true;
            }
        }
    }
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        if tracker.signal(Signal::SIGKILL) == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            tracing::warn!(jobs = jobs.len(), "processes survived SIGKILL");
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Ends what is left of commands whose bash has already been reaped (background processes of
/// finished commands), as [`terminate_jobs`] without trusting reused session ids.
pub fn terminate_leftovers(jobs: &[JobMark], grace: Duration) {
    terminate_jobs(jobs, false, Signal::SIGTERM, grace);
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "42 (a (weird) name) S 7 42 40 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10 18446744073709551615";

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let entry = parse_stat(42, STAT).unwrap();
        assert_eq!(
            entry,
            ProcessEntry {
                pid: 42,
                ppid: 7,
                pgrp: 42,
                session: 40,
                start_time: 12345,
                zombie: false
            }
        );
        let zombie = STAT.replace(") S ", ") Z ");
        assert!(parse_stat(42, &zombie).unwrap().zombie);
        assert_eq!(parse_stat(7, "garbage"), None);
        assert_eq!(parse_stat(7, "7 (x) Z 1 7 9 0"), None, "too short");
    }

    #[test]
    // A plain child the test kills and waits for itself.
    #[allow(clippy::disallowed_methods)]
    fn a_process_named_with_invalid_utf8_is_still_found() {
        // A command could otherwise hide from every scan (and so from being ended) by naming
        // itself with bytes that are not UTF-8.
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import ctypes, sys, time\n\
                 ctypes.CDLL(None).prctl(15, b'\\xff\\xfe(x) Z', 0, 0, 0)\n\
                 print(flush=True)\n\
                 time.sleep(30)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut ready = [0u8; 1];
        child.stdout.take().unwrap().read_exact(&mut ready).unwrap();
        let pid = child.id() as i32;
        let stat = read_proc(&format!("{pid}/stat")).unwrap();
        assert!(std::str::from_utf8(&stat).is_err(), "the name is not UTF-8");
        let found = entry(pid);
        let scanned = scan().iter().any(|entry| entry.pid == pid);
        let _ = child.kill();
        let _ = child.wait();
        let found = found.expect("found despite its name");
        assert_eq!((found.pid, found.zombie), (pid, false));
        assert!(scanned, "and listed by a scan");
    }

    #[test]
    fn our_own_session_is_never_signalled() {
        let own = nix::unistd::getsid(None).unwrap().as_raw();
        assert_eq!(signal_session(own, Signal::SIGTERM), 0);
        assert_eq!(signal_session(1, Signal::SIGTERM), 0);
        let me = std::process::id() as i32;
        let processes = scan();
        assert!(processes.iter().any(|p| p.pid == me));
        // Even a job claiming our session, our pid as a descendant root, or a marker we carry
        // finds nothing of ours.
        let job = JobMark {
            sid: own,
            start_time: None,
            marker: "x".into(),
        };
        let mut tracker = Tracker::new(&[job], &processes, true);
        assert!(tracker.sessions.is_empty());
        tracker.known.insert(me, 0);
        assert!(!tracker.scan(&processes).contains(&me));
    }

    #[test]
    fn a_session_counts_while_its_pid_is_the_commands_bash_or_nobodys() {
        let process = |pid, start_time, zombie| ProcessEntry {
            pid,
            ppid: 1,
            pgrp: pid,
            session: pid,
            start_time,
            zombie,
        };
        let job = |sid, start_time| JobMark {
            sid,
            start_time,
            marker: "m".into(),
        };
        let sessions = |job: JobMark, processes: &[ProcessEntry]| {
            Tracker::new(&[job], processes, false).sessions
        };
        // bash itself, alive or not yet reaped: its session is the command's (a child it forked
        // that has not exec'd yet carries no marker, and only the session finds it).
        assert_eq!(
            sessions(job(4242, Some(7)), &[process(4242, 7, false)]),
            [4242].into()
        );
        assert_eq!(
            sessions(job(4242, Some(7)), &[process(4242, 7, true)]),
            [4242].into()
        );
        // bash gone and its pid free: still the command's (no one can have taken the pid).
        assert_eq!(sessions(job(4242, Some(7)), &[]), [4242].into());
        // Another process now has the pid: the number is someone else's.
        assert!(sessions(job(4242, Some(7)), &[process(4242, 9, false)]).is_empty());
        assert!(sessions(job(4242, None), &[process(4242, 7, false)]).is_empty());
    }

    #[test]
    // A plain child whose environment is read; the test kills and waits for it itself.
    #[allow(clippy::disallowed_methods)]
    fn markers_are_read_from_the_environment() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("BEFORE", "1")
            .env(MARKER_VAR, "test-marker.1")
            .env("AFTER", "2")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // `spawn` returns once the child is inside execve, which can be just before the kernel
        // has laid out the new environment (`/proc/PID/environ` then reads empty): wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut marker = marker_of(pid);
        while marker.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            marker = marker_of(pid);
        }
        assert_eq!(marker.as_deref(), Some("test-marker.1"));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
