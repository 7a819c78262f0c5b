//! Page screencasts: one tab's rendering as an MP4 video, from CDP's `Page.startScreencast`
//! frames (JPEG) piped to ffmpeg. The desktop recorder ([`crate::recording`]) records the whole
//! screen; this one records the page alone, at its own size, whatever covers it.
//!
//! One recording at a time, on the tab active when it starts. Chromium sends a frame only when
//! the page repaints, so a ticker feeds ffmpeg the latest frame at the recording's rate (a still
//! page still makes a video of the right length); paused, nothing is fed. ffmpeg (an
//! [`FfmpegJob`]: through the reaper, in its own process group) writes H.264 in fragmented MP4
//! to its standard output, which is the file the caller opened through the file confinement.
//!
//! Every recording is bounded: it stops by itself after `max_duration`, ffmpeg stops at the
//! file size limit (`-fs`). A stop ends ffmpeg's input (its stdin closed once the queued frames
//! are written) and lets ffmpeg finish the file by itself; one that has not within
//! [`STOP_WAIT`] is stopped as the display recorder's is (SIGINT, then its group killed).
//! [`PageRecorder::shutdown`] stops a recording when sandboxd exits.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{
    EventScreencastFrame, ScreencastFrameAckParams, StartScreencastFormat, StartScreencastParams,
    StopScreencastParams,
};
use futures::StreamExt;
use supervisor::reaper::ExitStatus;
use tokio::sync::{Mutex, oneshot};
use tokio::time::Instant;

pub use crate::ffmpeg::STOP_WAIT;
use crate::ffmpeg::{FfmpegJob, Spawned};
/// Frames queued for ffmpeg at most; a frame that finds the queue full is dropped.
const QUEUE: usize = 8;

/// What a recording may ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub default_fps: u32,
    pub max_fps: u32,
    /// JPEG quality of the frames (1 to 100).
    pub default_quality: u32,
    /// How long a started recording runs at most when the request says nothing.
    pub default_duration: Duration,
    pub max_duration: Duration,
    /// The largest file; ffmpeg stops writing at this size.
    pub max_file_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_fps: 10,
            max_fps: 30,
            default_quality: 80,
            default_duration: Duration::from_secs(300),
            max_duration: Duration::from_secs(1800),
            max_file_bytes: 512 << 20,
        }
    }
}

/// What one recording runs with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    pub fps: u32,
    pub quality: u32,
    pub max_duration: Duration,
}

/// Why a recording call failed.
#[derive(Debug, thiserror::Error)]
pub enum PageRecordError {
    #[error("a page recording is running already (into {path}); stop it first")]
    AlreadyRecording { path: PathBuf },
    #[error("no page recording is running")]
    NotRecording,
    #[error("cannot start ffmpeg ({program}): {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the browser: {0}")]
    Browser(#[from] crate::browser::BrowserError),
}

/// Where the recorder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Idle,
    Recording,
    Paused,
    Stopped,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Idle => "idle",
            Status::Recording => "recording",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        }
    }
}

/// A recording's state, for answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub status: Status,
    pub path: Option<PathBuf>,
    pub options: Option<Options>,
    /// Seconds of video (frames fed / fps).
    pub duration: Option<f64>,
    pub frames: u64,
    pub file_size_bytes: Option<u64>,
    /// How it ended, once it has: `stopped`, `limit_reached` or `failed: <why>`.
    pub ended: Option<String>,
}

impl Report {
    fn idle() -> Self {
        Self {
            status: Status::Idle,
            path: None,
            options: None,
            duration: None,
            frames: 0,
            file_size_bytes: None,
            ended: None,
        }
    }
}

struct Active {
    path: PathBuf,
    options: Options,
    paused: Arc<AtomicBool>,
    frames: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    done: oneshot::Receiver<String>,
}

enum Slot {
    Idle,
    Active(Active),
    Done(Report),
}

/// The page recorder (one recording at a time).
pub struct PageRecorder {
    program: String,
    limits: Limits,
    slot: Mutex<Slot>,
}

impl PageRecorder {
    pub fn new(program: impl Into<String>, limits: Limits) -> Self {
        Self {
            program: program.into(),
            limits,
            slot: Mutex::new(Slot::Idle),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Starts recording `page` into `file` (opened for writing, empty), reported as `path`.
    pub async fn start(
        &self,
        page: Page,
        options: Options,
        file: std::fs::File,
        path: PathBuf,
    ) -> Result<Report, PageRecordError> {
        let mut slot = self.slot.lock().await;
        settle(&mut slot);
        if let Slot::Active(active) = &*slot {
            return Err(PageRecordError::AlreadyRecording {
                path: active.path.clone(),
            });
        }
        let spawn_error = |source| PageRecordError::Spawn {
            program: self.program.clone(),
            source,
        };
        let mut command = Command::new(&self.program);
        command
            .args(ffmpeg_args(options, self.limits.max_file_bytes))
            .stdin(Stdio::piped())
            .stderr(Stdio::null());
        // Until the recording's task has it, a return drops the job, which kills ffmpeg.
        let Spawned { job, stdin, .. } =
            FfmpegJob::spawn(&mut command, &file).map_err(spawn_error)?;
        let Some(stdin) = stdin else {
            return Err(spawn_error(std::io::Error::other("no stdin pipe")));
        };
        // The frames' writer: a thread, as the pipe is a blocking std handle.
        let (frames_tx, frames_rx) = std::sync::mpsc::sync_channel::<Arc<Vec<u8>>>(QUEUE);
        let writer = std::thread::Builder::new()
            .name("page-record-writer".into())
            .spawn(move || {
                let mut stdin = stdin;
                while let Ok(frame) = frames_rx.recv() {
                    if stdin.write_all(&frame).is_err() {
                        break;
                    }
                }
            });
        if let Err(error) = writer {
            return Err(spawn_error(error));
        }
        let frames_listener = match page.event_listener::<EventScreencastFrame>().await {
            Ok(listener) => listener,
            Err(error) => return Err(crate::browser::BrowserError::from(error).into()),
        };
        let params = StartScreencastParams::builder()
            .format(StartScreencastFormat::Jpeg)
            .quality(i64::from(options.quality))
            .build();
        if let Err(error) = page.execute(params).await {
            return Err(crate::browser::BrowserError::from(error).into());
        }
        let paused = Arc::new(AtomicBool::new(false));
        let frames = Arc::new(AtomicU64::new(0));
        let (stop_tx, stop_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let run = Run {
            page,
            options,
            paused: paused.clone(),
            frames: frames.clone(),
            frames_tx,
            job,
        };
        tokio::spawn(async move {
            let ending = run.feed(frames_listener, stop_rx).await;
            let _ = done_tx.send(ending);
        });
        tracing::info!(path = %path.display(), fps = options.fps, "page recording started");
        let active = Active {
            path,
            options,
            paused,
            frames,
            stop: Some(stop_tx),
            done: done_rx,
        };
        let report = active.report(Status::Recording, None);
        *slot = Slot::Active(active);
        Ok(report)
    }

    /// Pauses (`true`) or resumes the running recording.
    pub async fn pause(&self, pause: bool) -> Result<Report, PageRecordError> {
        let mut slot = self.slot.lock().await;
        settle(&mut slot);
        let Slot::Active(active) = &*slot else {
            return Err(PageRecordError::NotRecording);
        };
        active.paused.store(pause, Ordering::SeqCst);
        Ok(active.report(active.status(), None))
    }

    /// Stops the recording and finishes its file.
    pub async fn stop(&self) -> Result<Report, PageRecordError> {
        let mut slot = self.slot.lock().await;
        settle(&mut slot);
        let active = match std::mem::replace(&mut *slot, Slot::Idle) {
            Slot::Active(active) => active,
            other => {
                *slot = other;
                return Err(PageRecordError::NotRecording);
            }
        };
        let report = finish(active).await;
        *slot = Slot::Done(report.clone());
        Ok(report)
    }

    /// Where the recorder is.
    pub async fn status(&self) -> Report {
        let mut slot = self.slot.lock().await;
        settle(&mut slot);
        match &*slot {
            Slot::Idle => Report::idle(),
            Slot::Active(active) => active.report(active.status(), None),
            Slot::Done(report) => report.clone(),
        }
    }

    /// Stops a running recording (sandboxd is exiting).
    pub async fn shutdown(&self) {
        let mut slot = self.slot.lock().await;
        if let Slot::Active(active) = std::mem::replace(&mut *slot, Slot::Idle) {
            tracing::info!(path = %active.path.display(), "stopping the page recording: sandboxd is exiting");
            finish(active).await;
        }
    }
}

impl Active {
    fn status(&self) -> Status {
        if self.paused.load(Ordering::SeqCst) {
            Status::Paused
        } else {
            Status::Recording
        }
    }

    fn report(&self, status: Status, ended: Option<String>) -> Report {
        let frames = self.frames.load(Ordering::SeqCst);
        Report {
            status,
            path: Some(self.path.clone()),
            options: Some(self.options),
            duration: Some(frames as f64 / f64::from(self.options.fps)),
            frames,
            file_size_bytes: std::fs::metadata(&self.path).ok().map(|m| m.len()),
            ended,
        }
    }
}

/// Turns a recording that ended by itself into its report.
fn settle(slot: &mut Slot) {
    let Slot::Active(active) = slot else {
        return;
    };
    let ending = match active.done.try_recv() {
        Ok(ending) => ending,
        Err(oneshot::error::TryRecvError::Empty) => return,
        Err(oneshot::error::TryRecvError::Closed) => "failed: the recording task ended".into(),
    };
    let report = active.report(Status::Stopped, Some(ending));
    *slot = Slot::Done(report);
}

/// Stops a recording and waits for its file.
async fn finish(mut active: Active) -> Report {
    if let Some(stop) = active.stop.take() {
        let _ = stop.send(());
    }
    let ending =
        match tokio::time::timeout(STOP_WAIT + Duration::from_secs(2), &mut active.done).await {
            Ok(Ok(ending)) => ending,
            _ => "failed: the recording did not finish".into(),
        };
    let report = active.report(Status::Stopped, Some(ending));
    tracing::info!(path = ?report.path, frames = report.frames, ended = ?report.ended, "page recording stopped");
    report
}

/// The running recording's task: feeds frames until stopped, then finishes ffmpeg.
struct Run {
    page: Page,
    options: Options,
    paused: Arc<AtomicBool>,
    frames: Arc<AtomicU64>,
    frames_tx: std::sync::mpsc::SyncSender<Arc<Vec<u8>>>,
    job: FfmpegJob,
}

impl Run {
    async fn feed(
        self,
        mut listener: chromiumoxide::listeners::EventStream<EventScreencastFrame>,
        mut stop: oneshot::Receiver<()>,
    ) -> String {
        let Run {
            page,
            options,
            paused,
            frames,
            frames_tx,
            job,
        } = self;
        let deadline = Instant::now() + options.max_duration;
        let mut ticker =
            tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(options.fps)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut latest: Option<Arc<Vec<u8>>> = None;
        let mut ending = "stopped".to_string();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep_until(deadline) => {
                    ending = "limit_reached".into();
                    break;
                }
                status = job.wait() => {
                    // ffmpeg exits by itself at the size limit.
                    ending = if status.success() {
                        "limit_reached".into()
                    } else {
                        format!("failed: ffmpeg exited with {status}")
                    };
                    let _ = page.execute(StopScreencastParams::default()).await;
                    return ending;
                }
                frame = listener.next() => {
                    let Some(frame) = frame else {
                        ending = "failed: the tab went away".into();
                        break;
                    };
                    let _ = page.execute(ScreencastFrameAckParams::new(frame.session_id)).await;
                    let data: &str = frame.data.as_ref();
                    if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) {
                        latest = Some(Arc::new(bytes));
                    }
                }
                _ = ticker.tick() => {
                    if paused.load(Ordering::SeqCst) {
                        continue;
                    }
                    if let Some(frame) = &latest
                        && frames_tx.try_send(frame.clone()).is_ok()
                    {
                        frames.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
        let _ = page.execute(StopScreencastParams::default()).await;
        // The writer writes the frames still queued, then closes ffmpeg's input: ffmpeg encodes
        // every frame sent and ends by itself.
        drop(frames_tx);
        let status = job.stop_after_input().await;
        match status {
            _ if job.killed() => "failed: ffmpeg did not finish in time and was killed".into(),
            // 255: ffmpeg's exit after the SIGINT of a stop, the file finished.
            ExitStatus::Code(0 | 255) => ending,
            _ => format!("failed: ffmpeg exited with {status}"),
        }
    }
}

/// ffmpeg's arguments: JPEG frames on stdin at `fps`, H.264 in fragmented MP4 on stdout.
fn ffmpeg_args(options: Options, max_file_bytes: u64) -> Vec<String> {
    [
        "-hide_banner",
        "-loglevel",
        "error",
        "-f",
        "image2pipe",
        "-c:v",
        "mjpeg",
        "-framerate",
        &options.fps.to_string(),
        "-i",
        "pipe:0",
        "-vf",
        "scale=trunc(iw/2)*2:trunc(ih/2)*2,setsar=1",
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-pix_fmt",
        "yuv420p",
        "-fs",
        &max_file_bytes.to_string(),
        "-movflags",
        "+frag_keyframe+empty_moov+default_base_moof",
        "-f",
        "mp4",
        "pipe:1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ffmpeg_reads_jpeg_frames_at_the_rate_and_writes_fragmented_mp4() {
        let args = ffmpeg_args(
            Options {
                fps: 12,
                quality: 80,
                max_duration: Duration::from_secs(5),
            },
            1000,
        );
        let joined = args.join(" ");
        assert!(
            joined.contains("-f image2pipe -c:v mjpeg -framerate 12 -i pipe:0"),
            "{joined}"
        );
        assert!(joined.contains("-fs 1000"), "{joined}");
        assert!(joined.ends_with("-f mp4 pipe:1"), "{joined}");
    }
}
