//! Screen recording: the X desktop as an MP4 video, made by ffmpeg's `x11grab`.
//!
//! One recording at a time. [`Recorder::start`] starts ffmpeg as an [`FfmpegJob`] (through the
//! reaper, in a process group of its own), writing H.264 in fragmented MP4 to its standard
//! output, which is the file the caller opened (the API opens it through the file confinement,
//! so ffmpeg never opens a caller's path itself). Fragmented MP4 needs no seek back to the start,
//! and a recording cut short (ffmpeg killed) still plays up to its last fragment (one every two
//! seconds).
//!
//! Every recording is bounded: ffmpeg stops by itself after `max_duration` (`-t`) or once the
//! file reaches the size limit (`-fs`); a watchdog stops it if it outlives the duration by
//! [`WATCHDOG_GRACE`]. [`Recorder::stop`] stops the job (SIGINT: ffmpeg finishes the file; its
//! group killed if it has not exited within [`STOP_WAIT`]); [`Recorder::shutdown`] does the same
//! when sandboxd exits.
//!
//! ffmpeg reports its progress (`-progress pipe:2`) on standard error, read by a thread that
//! keeps the encoded duration and the last error lines; a start waits for the first progress
//! report (or ffmpeg's exit) so that a recording that cannot start fails the call.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use supervisor::reaper::ExitStatus;
use tokio::sync::watch;

pub use crate::ffmpeg::STOP_WAIT;
use crate::ffmpeg::{FfmpegJob, Spawned};

/// How long a start waits for ffmpeg's first progress report before answering anyway.
pub const START_WAIT: Duration = Duration::from_secs(5);
/// How long ffmpeg may run past its `max_duration` before the watchdog stops it.
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(15);
/// Error lines of ffmpeg's kept for messages (the last ones).
const ERROR_LINES: usize = 8;
/// Longest error line kept, in bytes.
const ERROR_LINE_BYTES: usize = 300;

/// What a recording may be asked for, and what it gets when it does not say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// `max_duration` when the request gives none.
    pub default_duration: Duration,
    /// The longest recording.
    pub max_duration: Duration,
    /// The largest file; ffmpeg stops writing at this size.
    pub max_file_bytes: u64,
    /// Frames per second when the request gives none, and the most it may ask.
    pub default_fps: u32,
    pub max_fps: u32,
    /// H.264 CRF when the request gives none (0 lossless, 51 worst).
    pub default_crf: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_duration: Duration::from_secs(600),
            max_duration: Duration::from_secs(3600),
            max_file_bytes: 1 << 30,
            default_fps: 15,
            max_fps: 60,
            default_crf: 28,
        }
    }
}

/// A recording's settings, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    pub fps: u32,
    pub crf: u32,
    pub max_duration: Duration,
    /// The captured area, from the screen's top-left corner; even sides (H.264 with 4:2:0
    /// chroma needs them).
    pub width: u32,
    pub height: u32,
    pub max_file_bytes: u64,
}

/// Why a recording call failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("a recording is already in progress (to {path}, for {elapsed:.1} s); stop it first")]
    AlreadyRecording { path: PathBuf, elapsed: f64 },
    #[error("no recording is in progress")]
    NotRecording,
    /// A request field has a value that cannot be used; `field` is its name.
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("cannot start ffmpeg ({program}): {source}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// ffmpeg exited before recording anything.
    #[error("ffmpeg could not record the display {display}: {message}")]
    Failed { display: String, message: String },
}

/// Where a recording is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing recorded since sandboxd started.
    Idle,
    Recording,
    Stopped,
}

/// Why a recording ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// A stop asked for it and ffmpeg finished the file.
    Stopped,
    /// ffmpeg stopped by itself at `max_duration` or at the size limit.
    LimitReached,
    /// ffmpeg did not finish the file in time and its group was killed; the file holds every
    /// fragment written until then.
    Killed,
    /// ffmpeg failed; the message is its last error lines.
    Failed(String),
}

/// What a recording call reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub status: Status,
    pub path: Option<PathBuf>,
    /// Seconds of video encoded (ffmpeg's own count).
    pub duration: Option<f64>,
    pub file_size_bytes: Option<u64>,
    pub options: Option<Options>,
    /// Set once the recording ended.
    pub ending: Option<Ending>,
}

/// ffmpeg's progress, as its reader thread last saw it.
#[derive(Debug, Default)]
struct Progress {
    /// `out_time_us` of the last report.
    out_time_us: Option<u64>,
    /// Lines that were not progress reports (ffmpeg's errors), the last [`ERROR_LINES`].
    errors: Vec<String>,
}

impl Progress {
    /// Takes one line of ffmpeg's standard error; true if it ended a progress report.
    fn take_line(&mut self, line: &str) -> bool {
        let line = line.trim_end();
        if let Some((key, value)) = line.split_once('=')
            && !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            if key == "out_time_us"
                && let Ok(us) = value.trim().parse::<u64>()
            {
                self.out_time_us = Some(us);
            }
            return key == "progress";
        }
        if !line.trim().is_empty() {
            if self.errors.len() == ERROR_LINES {
                self.errors.remove(0);
            }
            let mut end = line.len().min(ERROR_LINE_BYTES);
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            self.errors.push(line[..end].to_string());
        }
        false
    }

    fn duration(&self) -> Option<f64> {
        self.out_time_us.map(|us| us as f64 / 1e6)
    }

    fn error_text(&self) -> String {
        if self.errors.is_empty() {
            "no error message".into()
        } else {
            self.errors.join("; ")
        }
    }
}

/// The recording in progress.
struct Active {
    job: FfmpegJob,
    path: PathBuf,
    started: Instant,
    options: Options,
    /// The output file, for its size.
    file: std::fs::File,
    progress: Arc<Mutex<Progress>>,
}

impl Active {
    fn exited(&self) -> Option<ExitStatus> {
        self.job.exited()
    }

    fn report(&self, status: Status, ending: Option<Ending>) -> Report {
        let progress = lock(&self.progress);
        Report {
            status,
            path: Some(self.path.clone()),
            duration: progress
                .duration()
                .or_else(|| Some(self.started.elapsed().as_secs_f64())),
            file_size_bytes: self.file.metadata().ok().map(|m| m.len()),
            options: Some(self.options),
            ending,
        }
    }

    /// How it ended, once ffmpeg has exited with `status`.
    fn ending(&self, status: ExitStatus) -> Ending {
        if self.job.killed() {
            return Ending::Killed;
        }
        let progress = lock(&self.progress);
        let stopped = self.job.stop_requested();
        match status {
            ExitStatus::Code(0) if stopped => Ending::Stopped,
            ExitStatus::Code(0) => Ending::LimitReached,
            // ffmpeg exits 255 after a SIGINT it handled by finishing the file.
            ExitStatus::Code(255) if stopped => Ending::Stopped,
            _ => Ending::Failed(format!(
                "ffmpeg ended with {status}: {}",
                progress.error_text()
            )),
        }
    }
}

enum Slot {
    Idle,
    Active(Active),
    /// The last recording, ended.
    Ended(Report),
}

/// The display's recorder.
pub struct Recorder {
    program: PathBuf,
    display: String,
    screen: (u32, u32),
    limits: Limits,
    slot: tokio::sync::Mutex<Slot>,
}

/// What a start asks for; absent fields take the defaults.
#[derive(Debug, Default, Clone, Copy)]
pub struct Request {
    pub fps: Option<u32>,
    pub crf: Option<u32>,
    pub max_duration: Option<Duration>,
    pub width: Option<u32>,
    pub height: Option<u32>,
}

impl Recorder {
    /// Records `display` (`:1`) whose screen is `screen` pixels, with `program` (ffmpeg).
    pub fn new(
        program: impl Into<PathBuf>,
        display: impl Into<String>,
        screen: (u32, u32),
        limits: Limits,
    ) -> Self {
        Self {
            program: program.into(),
            display: display.into(),
            screen,
            limits,
            slot: tokio::sync::Mutex::new(Slot::Idle),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Checks a start's request against the limits and the screen, filling in the defaults.
    pub fn options(&self, request: &Request) -> Result<Options, RecordError> {
        let limits = &self.limits;
        let fps = request.fps.unwrap_or(limits.default_fps);
        if !(1..=limits.max_fps).contains(&fps) {
            return Err(invalid(
                "fps",
                format!("`fps` must be from 1 to {}, got {fps}", limits.max_fps),
            ));
        }
        let crf = request.crf.unwrap_or(limits.default_crf);
        if crf > 51 {
            return Err(invalid(
                "crf",
                format!("`crf` must be from 0 (lossless) to 51, got {crf}"),
            ));
        }
        let max_duration = request.max_duration.unwrap_or(limits.default_duration);
        if max_duration.is_zero() || max_duration > limits.max_duration {
            return Err(invalid(
                "max_duration",
                format!(
                    "`max_duration` is in seconds and must be above 0 and at most {}, got {}",
                    limits.max_duration.as_secs_f64(),
                    max_duration.as_secs_f64()
                ),
            ));
        }
        let (screen_width, screen_height) = self.screen;
        let side = |field: &'static str, value: Option<u32>, screen: u32| {
            let Some(value) = value else {
                // The whole screen, less a pixel if its side is odd.
                return Ok(screen & !1);
            };
            if value < 2 || value > screen || value % 2 != 0 {
                return Err(invalid(
                    field,
                    format!(
                        "`{field}` is the captured area's side in pixels from the screen's \
                         top-left corner: an even number from 2 to the screen's {screen}, got {value}"
                    ),
                ));
            }
            Ok(value)
        };
        Ok(Options {
            fps,
            crf,
            max_duration,
            width: side("width", request.width, screen_width)?,
            height: side("height", request.height, screen_height)?,
            max_file_bytes: limits.max_file_bytes,
        })
    }

    /// ffmpeg's arguments for `options`.
    fn args(&self, options: &Options) -> Vec<String> {
        let fps = options.fps.to_string();
        let mut args: Vec<String> = [
            "-hide_banner",
            "-nostdin",
            "-loglevel",
            "error",
            "-nostats",
            "-progress",
            "pipe:2",
            "-f",
            "x11grab",
            "-draw_mouse",
            "1",
            "-framerate",
        ]
        .map(String::from)
        .into();
        args.extend([
            fps.clone(),
            "-video_size".into(),
            format!("{}x{}", options.width, options.height),
            "-i".into(),
            format!("{}+0,0", self.display),
            "-t".into(),
            format!("{:.3}", options.max_duration.as_secs_f64()),
            "-fs".into(),
            options.max_file_bytes.to_string(),
            "-c:v".into(),
            "libx264".into(),
            "-preset".into(),
            "ultrafast".into(),
            "-crf".into(),
            options.crf.to_string(),
            "-pix_fmt".into(),
            "yuv420p".into(),
            // A keyframe, hence a fragment, every two seconds.
            "-g".into(),
            (options.fps * 2).to_string(),
            "-movflags".into(),
            "+frag_keyframe+empty_moov+default_base_moof".into(),
            "-f".into(),
            "mp4".into(),
            "pipe:1".into(),
        ]);
        args
    }

    /// Starts recording into `file` (opened for writing, empty), reported as `path`.
    pub async fn start(
        &self,
        options: Options,
        file: std::fs::File,
        path: PathBuf,
    ) -> Result<Report, RecordError> {
        let mut slot = self.slot.lock().await;
        if let Slot::Active(active) = &*slot
            && active.exited().is_none()
        {
            return Err(RecordError::AlreadyRecording {
                path: active.path.clone(),
                elapsed: active.started.elapsed().as_secs_f64(),
            });
        }
        self.settle(&mut slot);
        let mut command = Command::new(&self.program);
        command
            .args(self.args(&options))
            .env("DISPLAY", &self.display)
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        let Spawned { job, stderr, .. } =
            FfmpegJob::spawn(&mut command, &file).map_err(|source| RecordError::Spawn {
                program: self.program.clone(),
                source,
            })?;
        let progress = Arc::new(Mutex::new(Progress::default()));
        let (reports_tx, mut reports) = watch::channel(0u64);
        if let Some(stderr) = stderr {
            let progress = progress.clone();
            let spawned = std::thread::Builder::new()
                .name("ffmpeg-progress".into())
                .stack_size(64 * 1024)
                .spawn(move || read_progress(stderr, &progress, &reports_tx));
            if let Err(error) = spawned {
                tracing::warn!(%error, "cannot read ffmpeg's progress");
            }
        }
        let active = Active {
            job,
            path,
            started: Instant::now(),
            options,
            file,
            progress,
        };
        // The first progress report means ffmpeg has the display and encodes; an early exit
        // means it could not.
        let _ = tokio::time::timeout(START_WAIT, async {
            tokio::select! {
                _ = reports.changed() => {}
                _ = active.job.wait() => {}
            }
        })
        .await;
        if let Some(status) = active.exited() {
            let message = format!(
                "ffmpeg ended with {status}: {}",
                lock(&active.progress).error_text()
            );
            tracing::warn!(display = %self.display, %message, "recording failed to start");
            return Err(RecordError::Failed {
                display: self.display.clone(),
                message,
            });
        }
        active.job.watchdog(options.max_duration + WATCHDOG_GRACE);
        tracing::info!(
            path = %active.path.display(),
            pid = active.job.pid(),
            fps = options.fps,
            width = options.width,
            height = options.height,
            max_duration_secs = options.max_duration.as_secs_f64(),
            "recording started"
        );
        let report = active.report(Status::Recording, None);
        *slot = Slot::Active(active);
        Ok(report)
    }

    /// Stops the recording and reports the finished file; if it had ended already (a limit, or
    /// an earlier stop), reports how it ended.
    pub async fn stop(&self) -> Result<Report, RecordError> {
        let mut slot = self.slot.lock().await;
        if let Slot::Active(active) = &*slot
            && active.exited().is_none()
        {
            active.job.stop().await;
        }
        self.settle(&mut slot);
        match &*slot {
            Slot::Ended(report) => Ok(report.clone()),
            Slot::Idle | Slot::Active(_) => Err(RecordError::NotRecording),
        }
    }

    /// Where the recorder is: recording, or the last recording's end, or idle.
    pub async fn status(&self) -> Report {
        let mut slot = self.slot.lock().await;
        self.settle(&mut slot);
        match &*slot {
            Slot::Idle => Report {
                status: Status::Idle,
                path: None,
                duration: None,
                file_size_bytes: None,
                options: None,
                ending: None,
            },
            Slot::Active(active) => active.report(Status::Recording, None),
            Slot::Ended(report) => report.clone(),
        }
    }

    /// Stops a recording in progress (sandboxd is exiting).
    pub async fn shutdown(&self) {
        let slot = self.slot.lock().await;
        if let Slot::Active(active) = &*slot
            && active.exited().is_none()
        {
            tracing::info!(path = %active.path.display(), "stopping the recording: sandboxd is exiting");
            active.job.stop().await;
        }
    }

    /// Turns an exited recording into its report.
    fn settle(&self, slot: &mut Slot) {
        let Slot::Active(active) = slot else {
            return;
        };
        let Some(status) = active.exited() else {
            return;
        };
        let ending = active.ending(status);
        let report = active.report(Status::Stopped, Some(ending.clone()));
        tracing::info!(
            path = %active.path.display(),
            %status,
            ending = ?ending,
            duration_secs = report.duration,
            bytes = report.file_size_bytes,
            "recording ended"
        );
        *slot = Slot::Ended(report);
    }
}

fn read_progress(
    stderr: std::process::ChildStderr,
    progress: &Mutex<Progress>,
    reports: &watch::Sender<u64>,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        // ffmpeg's lines are short; a runaway line is cut, the rest of it read as more lines.
        match (&mut reader).take(4096).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                if lock(progress).take_line(&text) {
                    reports.send_modify(|n| *n += 1);
                }
            }
        }
    }
}

fn invalid(field: &'static str, message: String) -> RecordError {
    RecordError::Invalid { field, message }
}

fn lock(progress: &Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    // The reader thread only assigns fields; a panic there cannot leave them inconsistent.
    progress.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> Recorder {
        Recorder::new("ffmpeg", ":1", (1280, 801), Limits::default())
    }

    #[test]
    fn defaults_fill_the_screen_with_even_sides() {
        let options = recorder().options(&Request::default()).unwrap();
        assert_eq!((options.width, options.height), (1280, 800));
        assert_eq!(options.fps, 15);
        assert_eq!(options.max_duration, Duration::from_secs(600));
    }

    #[test]
    fn bad_fields_are_named() {
        let r = recorder();
        let field = |request: Request| match r.options(&request) {
            Err(RecordError::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(
            field(Request {
                fps: Some(0),
                ..Request::default()
            }),
            "fps"
        );
        assert_eq!(
            field(Request {
                crf: Some(52),
                ..Request::default()
            }),
            "crf"
        );
        assert_eq!(
            field(Request {
                max_duration: Some(Duration::from_secs(3601)),
                ..Request::default()
            }),
            "max_duration"
        );
        assert_eq!(
            field(Request {
                width: Some(1281),
                ..Request::default()
            }),
            "width"
        );
        assert_eq!(
            field(Request {
                height: Some(101),
                ..Request::default()
            }),
            "height"
        );
    }

    #[test]
    fn arguments_bound_the_recording_and_write_to_standard_output() {
        let r = recorder();
        let options = r
            .options(&Request {
                fps: Some(10),
                width: Some(640),
                height: Some(480),
                max_duration: Some(Duration::from_millis(2500)),
                ..Request::default()
            })
            .unwrap();
        let args = r.args(&options).join(" ");
        assert!(args.contains("-f x11grab"), "{args}");
        assert!(
            args.contains("-framerate 10 -video_size 640x480 -i :1+0,0"),
            "{args}"
        );
        assert!(args.contains("-t 2.500"), "{args}");
        assert!(args.contains(&format!("-fs {}", 1u64 << 30)), "{args}");
        assert!(args.ends_with("-f mp4 pipe:1"), "{args}");
    }

    #[test]
    fn progress_lines_give_the_duration_and_other_lines_the_errors() {
        let mut progress = Progress::default();
        assert!(!progress.take_line("frame=10\n"));
        assert!(!progress.take_line("out_time_us=N/A\n"));
        assert_eq!(progress.duration(), None);
        assert!(!progress.take_line("out_time_us=1500000\n"));
        assert!(progress.take_line("progress=continue\n"));
        assert_eq!(progress.duration(), Some(1.5));
        progress.take_line("[x11grab @ 0x1] Cannot open display :9, error 1.\n");
        for i in 0..20 {
            progress.take_line(&format!("error line {i}"));
        }
        assert_eq!(progress.errors.len(), ERROR_LINES);
        assert!(progress.error_text().ends_with("error line 19"));
        let long = "é".repeat(400);
        progress.take_line(&long);
        assert!(progress.errors.last().unwrap().len() <= ERROR_LINE_BYTES);
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error_and_leaves_the_recorder_idle() {
        let r = Recorder::new("/nonexistent/ffmpeg", ":1", (640, 480), Limits::default());
        let options = r.options(&Request::default()).unwrap();
        let file = tempfile::tempfile().unwrap();
        let error = r
            .start(options, file, PathBuf::from("/tmp/x.mp4"))
            .await
            .unwrap_err();
        assert!(matches!(error, RecordError::Spawn { .. }), "{error}");
        assert_eq!(r.status().await.status, Status::Idle);
        assert!(matches!(r.stop().await, Err(RecordError::NotRecording)));
    }

    /// A stand-in for ffmpeg that reports progress and exits on SIGINT, to check the state
    /// machine without a display.
    #[tokio::test]
    async fn one_recording_at_a_time_and_stop_interrupts_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("ffmpeg");
        std::fs::write(
            &fake,
            "#!/bin/sh\ntrap 'echo done >&1; exit 255' INT\n\
             echo out_time_us=2000000 >&2\necho progress=continue >&2\n\
             while :; do sleep 0.05; done\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let r = Recorder::new(&fake, ":1", (640, 480), Limits::default());
        let options = r.options(&Request::default()).unwrap();
        let path = dir.path().join("out.mp4");
        let file = std::fs::File::create(&path).unwrap();
        let started = r.start(options, file, path.clone()).await.unwrap();
        assert_eq!(started.status, Status::Recording);
        let second = std::fs::File::create(dir.path().join("b.mp4")).unwrap();
        let again = r
            .start(options, second, dir.path().join("b.mp4"))
            .await
            .unwrap_err();
        assert!(
            matches!(again, RecordError::AlreadyRecording { .. }),
            "{again}"
        );
        assert_eq!(r.status().await.status, Status::Recording);
        let stopped = r.stop().await.unwrap();
        assert_eq!(stopped.status, Status::Stopped);
        assert_eq!(stopped.ending, Some(Ending::Stopped));
        assert_eq!(stopped.duration, Some(2.0));
        assert_eq!(stopped.file_size_bytes, Some(5));
        assert_eq!(r.status().await.status, Status::Stopped);
    }
}
