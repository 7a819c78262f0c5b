//! One ffmpeg child, as both recorders run it: the display recorder ([`crate::recording`],
//! `x11grab`) and the page recorder ([`crate::page_recording`], JPEG frames on its stdin).
//!
//! [`FfmpegJob::spawn`] starts ffmpeg through the reaper in a process group of its own, its
//! standard output the file the caller opened (fragmented MP4 needs no seek back, so a file cut
//! short still plays up to its last fragment). The job publishes ffmpeg's exit status once it
//! is reaped, and there is one way to stop it, [`FfmpegJob::stop`]: SIGINT to its group, which
//! ffmpeg takes as the end of its input whatever the input is (a capture device has no end of
//! its own): it stops reading, encodes what it has read, writes the last fragment and exits
//! (with 255); if it has not exited within [`STOP_WAIT`] the group is killed. A job dropped
//! while ffmpeg runs kills its group.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{ChildStderr, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::Signal;
use supervisor::process::ProcessGroup;
use supervisor::reaper::ExitStatus;
use tokio::sync::watch;

/// How long a stop waits for ffmpeg to finish the file after SIGINT before killing its group.
pub const STOP_WAIT: Duration = Duration::from_secs(10);

/// A running (or ended) ffmpeg.
pub struct FfmpegJob {
    inner: Arc<Inner>,
}

/// What the job's stops and its watchdog share.
struct Inner {
    group: ProcessGroup,
    /// ffmpeg's exit status once reaped.
    exit: watch::Receiver<Option<ExitStatus>>,
    /// Set by a stop before it signals ffmpeg.
    stop_requested: AtomicBool,
    /// Set when ffmpeg did not finish in time and its group was killed.
    killed: AtomicBool,
}

/// A started job and the pipes its command asked for.
pub struct Spawned {
    pub job: FfmpegJob,
    pub stdin: Option<ChildStdin>,
    pub stderr: Option<ChildStderr>,
}

impl FfmpegJob {
    /// Starts `command` (ffmpeg, its arguments, its stdin and stderr) through the reaper in a
    /// process group of its own, writing to `output`.
    pub fn spawn(command: &mut Command, output: &std::fs::File) -> std::io::Result<Spawned> {
        let stdout = output.as_fd().try_clone_to_owned()?;
        command.stdout(Stdio::from(stdout)).process_group(0);
        let spawned = supervisor::reaper().spawn(command)?;
        let mut child = spawned.child;
        let (exit_tx, exit) = watch::channel(None);
        let waiter = spawned.exit;
        tokio::spawn(async move {
            let status = waiter.await.ok();
            let _ = exit_tx.send(status.or(Some(ExitStatus::Code(-1))));
        });
        Ok(Spawned {
            job: FfmpegJob {
                inner: Arc::new(Inner {
                    group: ProcessGroup::new(spawned.pid),
                    exit,
                    stop_requested: AtomicBool::new(false),
                    killed: AtomicBool::new(false),
                }),
            },
            stdin: child.stdin.take(),
            stderr: child.stderr.take(),
        })
    }

    /// ffmpeg's pid, which is its process group's id.
    pub fn pid(&self) -> i32 {
        self.inner.group.id()
    }

    /// ffmpeg's exit status, once it has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        *self.inner.exit.borrow()
    }

    /// Waits until ffmpeg has exited (`Code(-1)` if its status was lost).
    pub async fn wait(&self) -> ExitStatus {
        self.inner.wait().await
    }

    /// Whether a stop asked ffmpeg to finish.
    pub fn stop_requested(&self) -> bool {
        self.inner.stop_requested.load(Ordering::SeqCst)
    }

    /// Whether ffmpeg did not finish in time and its group was killed.
    pub fn killed(&self) -> bool {
        self.inner.killed.load(Ordering::SeqCst)
    }

    /// Asks ffmpeg to finish the file (SIGINT to its group) and waits for it to exit, killing
    /// the group if it has not within [`STOP_WAIT`]. Returns how it exited.
    pub async fn stop(&self) -> ExitStatus {
        self.inner.stop().await
    }

    /// For a job fed on its stdin, once that input has been closed: lets ffmpeg write what it
    /// still holds and finish the file by itself (every frame sent is in it), and only if it
    /// has not within [`STOP_WAIT`], stops it as [`FfmpegJob::stop`] does.
    pub async fn stop_after_input(&self) -> ExitStatus {
        self.inner.stop_requested.store(true, Ordering::SeqCst);
        match tokio::time::timeout(STOP_WAIT, self.inner.wait()).await {
            Ok(status) => status,
            Err(_) => self.inner.stop().await,
        }
    }

    /// Stops ffmpeg if it still runs `limit` from now.
    pub fn watchdog(&self, limit: Duration) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut exit = inner.exit.clone();
            if tokio::time::timeout(limit, exit.wait_for(Option::is_some))
                .await
                .is_ok()
            {
                return;
            }
            tracing::warn!(
                pgid = inner.group.id(),
                limit_secs = limit.as_secs_f64(),
                "ffmpeg outlived its max_duration; stopping it"
            );
            inner.stop().await;
        });
    }
}

impl Inner {
    async fn wait(&self) -> ExitStatus {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(status) => status.unwrap_or(ExitStatus::Code(-1)),
            // The sender only goes once it has sent the status: kept in the channel.
            Err(_) => self.exit.borrow().unwrap_or(ExitStatus::Code(-1)),
        }
    }

    async fn stop(&self) -> ExitStatus {
        self.stop_requested.store(true, Ordering::SeqCst);
        self.group.signal(Signal::SIGINT);
        if let Ok(status) = tokio::time::timeout(STOP_WAIT, self.wait()).await {
            return status;
        }
        tracing::warn!(
            pgid = self.group.id(),
            "ffmpeg did not finish the recording in time; killing its group"
        );
        // Set before the kill, so that whoever sees the exit also sees why.
        self.killed.store(true, Ordering::SeqCst);
        self.group.kill();
        self.wait().await
    }
}

impl Drop for FfmpegJob {
    fn drop(&mut self) {
        // Unless it has been reaped already (its pid may be another process's by now).
        if self.exited().is_none() {
            self.inner.group.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for ffmpeg that finishes its output and exits 255 on SIGINT, as ffmpeg does.
    #[tokio::test]
    async fn a_stop_interrupts_the_job_which_finishes_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let file = std::fs::File::create(&path).unwrap();
        let mut command = Command::new("sh");
        command
            .args([
                "-c",
                "trap 'echo finished; exit 255' INT; echo started; while :; do sleep 0.05; done",
            ])
            .stdin(Stdio::null());
        let Spawned { job, stdin, stderr } = FfmpegJob::spawn(&mut command, &file).unwrap();
        assert!(stdin.is_none() && stderr.is_none());
        while std::fs::metadata(&path).unwrap().len() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(job.exited(), None);
        assert!(!job.stop_requested());
        assert_eq!(job.stop().await, ExitStatus::Code(255));
        assert!(job.stop_requested() && !job.killed());
        assert_eq!(job.exited(), Some(ExitStatus::Code(255)));
        assert_eq!(job.wait().await, ExitStatus::Code(255));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "started\nfinished\n"
        );
    }

    #[tokio::test]
    async fn a_dropped_job_kills_its_group() {
        let file = tempfile::tempfile().unwrap();
        let mut command = Command::new("sleep");
        command.arg("30").stdin(Stdio::null());
        let Spawned { job, .. } = FfmpegJob::spawn(&mut command, &file).unwrap();
        let group = ProcessGroup::new(job.pid());
        assert_eq!(group.send(Signal::SIGCONT), Ok(true));
        let exit = job.inner.clone();
        drop(job);
        let status = tokio::time::timeout(Duration::from_secs(5), exit.wait())
            .await
            .unwrap();
        assert_eq!(status.as_shell_code(), 137);
    }
}
