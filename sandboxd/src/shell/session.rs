//! A shell session: a working directory and an environment that carry over from one command to
//! the next, the latest command, and what finds the processes of earlier commands (whose
//! background processes may still run).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::job::{CommandStatus, Job};
use super::procs::JobMark;

/// How many earlier commands are remembered for clean-up.
const MAX_REMEMBERED_JOBS: usize = 256;

#[derive(Debug)]
pub struct Session {
    pub id: String,
    pub created_at: SystemTime,
    /// Where the wrapper saves the environment and working directory between commands.
    pub(super) state_dir: String,
    state: Mutex<SessionState>,
}

#[derive(Debug)]
pub(super) struct SessionState {
    /// The working directory as of the last finished command.
    pub cwd: PathBuf,
    pub preserve_symlinks: bool,
    pub no_change_timeout: Duration,
    pub last_used_at: SystemTime,
    pub last_used: Instant,
    /// The latest command, running or finished.
    pub current: Option<Arc<Job>>,
    /// This session's commands, for ending leftovers.
    pub jobs: Vec<JobMark>,
    /// Removed from the shell: starts no more commands.
    pub closed: bool,
    /// Commands started in this session.
    pub commands: u64,
}

/// A description of a session at one moment.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: String,
    pub working_dir: PathBuf,
    pub created_at: SystemTime,
    pub last_used_at: SystemTime,
    pub age: Duration,
    pub running: bool,
    /// The latest command (running or not).
    pub current_command: Option<String>,
    pub no_change_timeout: Duration,
    /// Commands started in this session.
    pub command_count: u64,
}

impl SessionState {
    /// The working directory the next command starts in: where the latest command left off.
    pub fn effective_cwd(&self) -> PathBuf {
        self.current
            .as_ref()
            .and_then(|job| job.outcome())
            .and_then(|outcome| outcome.cwd_after)
            .unwrap_or_else(|| self.cwd.clone())
    }

    pub fn is_running(&self) -> bool {
        self.current.as_ref().is_some_and(|job| job.is_running())
    }

    pub fn touch(&mut self) {
        self.last_used_at = SystemTime::now();
        self.last_used = Instant::now();
    }

    pub fn remember(&mut self, job: JobMark) {
        if self.jobs.len() >= MAX_REMEMBERED_JOBS {
            self.jobs.remove(0);
        }
        self.jobs.push(job);
    }
}

impl Session {
    pub(super) fn new(
        id: String,
        state_dir: String,
        cwd: PathBuf,
        preserve_symlinks: bool,
        no_change_timeout: Duration,
    ) -> Self {
        let now = SystemTime::now();
        Self {
            id,
            created_at: now,
            state_dir,
            state: Mutex::new(SessionState {
                cwd,
                preserve_symlinks,
                no_change_timeout,
                last_used_at: now,
                last_used: Instant::now(),
                current: None,
                jobs: Vec::new(),
                closed: false,
                commands: 0,
            }),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SessionState> {
        // Every update is a plain field assignment, so a poisoned lock still guards consistent
        // state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The latest command, running or finished, marking the session used.
    pub fn current_job(&self) -> Option<Arc<Job>> {
        let mut state = self.lock();
        state.touch();
        state.current.clone()
    }

    pub fn working_dir(&self) -> PathBuf {
        self.lock().effective_cwd()
    }

    pub fn no_change_timeout(&self) -> Duration {
        self.lock().no_change_timeout
    }

    pub fn set_no_change_timeout(&self, timeout: Duration) {
        let mut state = self.lock();
        state.no_change_timeout = timeout;
        state.touch();
    }

    pub fn is_running(&self) -> bool {
        self.lock().is_running()
    }

    pub fn info(&self) -> SessionInfo {
        let state = self.lock();
        SessionInfo {
            id: self.id.clone(),
            working_dir: state.effective_cwd(),
            created_at: self.created_at,
            last_used_at: state.last_used_at,
            age: self.created_at.elapsed().unwrap_or_default(),
            running: state.is_running(),
            current_command: state.current.as_ref().map(|job| job.command().to_string()),
            no_change_timeout: state.no_change_timeout,
            command_count: state.commands,
        }
    }

    /// The latest command's status, or None before the first command.
    pub fn status(&self) -> Option<CommandStatus> {
        self.lock().current.as_ref().map(|job| job.status())
    }
}
