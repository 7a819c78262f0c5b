//! [`RecordingComputer`]: a test double at the sandbox boundary. It keeps a "screen" (a version
//! number that actions bump unless the screen is inert), gives every screenshot an id like
//! sandboxd does, maps action coordinates through the named screenshot's scale the way
//! sandboxd does, and records every call. An action can be held at a gate so tests can act
//! while it is in flight.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use agent::observation::fit_within;
use agent::{
    ActionReport, Computer, ComputerError, DesktopAction, EditCommand, EditOutcome, Observation,
    ObservationMeta, ObserveRequest, SettleReport, ShellOutcome,
};
use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::oneshot;

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Observe {
        id: String,
        bounds: (Option<u32>, Option<u32>),
    },
    Act {
        action: DesktopAction,
        observation: Option<String>,
        /// The action's points mapped to the screen.
        screen_points: Vec<(i32, i32)>,
    },
    Settle,
    Zoom {
        region: [f64; 4],
    },
    Shell {
        command: String,
        restart: bool,
    },
    ReadFile {
        path: String,
    },
    WriteFile {
        path: String,
        content: Vec<u8>,
    },
    Edit(EditCommand),
}

struct Gate {
    started: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

struct Inner {
    next_id: u64,
    version: u64,
    inert: bool,
    calls: Vec<Call>,
    shots: HashMap<String, ObservationMeta>,
    gate: Option<Gate>,
    pointer: (i32, i32),
}

/// The recording computer.
pub struct RecordingComputer {
    screen: (u32, u32),
    inner: Mutex<Inner>,
}

impl RecordingComputer {
    pub fn new(screen: (u32, u32)) -> Self {
        Self {
            screen,
            inner: Mutex::new(Inner {
                next_id: 1,
                version: 0,
                inert: false,
                calls: Vec::new(),
                shots: HashMap::new(),
                gate: None,
                pointer: (0, 0),
            }),
        }
    }

    /// A screen that never changes, whatever is done to it.
    pub fn inert(screen: (u32, u32)) -> Self {
        let computer = Self::new(screen);
        computer.lock().inert = true;
        computer
    }

    /// Continues screenshot ids after `last` (a restarted sandboxd keeps counting; ids in a
    /// checkpoint must not be reused).
    pub fn starting_after(self, last: u64) -> Self {
        self.lock().next_id = last + 1;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    pub fn actions(&self) -> Vec<DesktopAction> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Act { action, .. } => Some(action),
                _ => None,
            })
            .collect()
    }

    pub fn observation_ids(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Observe { id, .. } => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Holds the next action: `started` fires when it arrives, and it completes when
    /// `release` is sent (or dropped).
    pub fn hold_next_action(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (started_tx, started_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        self.lock().gate = Some(Gate {
            started: started_tx,
            release: release_rx,
        });
        (started_rx, release_tx)
    }

    fn image(version: u64, size: (u32, u32)) -> Bytes {
        Bytes::from(format!("screen v{version} {}x{}", size.0, size.1))
    }
}

#[async_trait]
impl Computer for RecordingComputer {
    async fn observe(&self, request: &ObserveRequest) -> Result<Observation, ComputerError> {
        let mut inner = self.lock();
        let bounds = (
            request.max_width.unwrap_or(u32::MAX),
            request.max_height.unwrap_or(u32::MAX),
        );
        let (w, h) = fit_within(self.screen, bounds);
        let id = inner.next_id.to_string();
        inner.next_id += 1;
        let observation = Observation {
            id: id.clone(),
            image: Self::image(inner.version, (w, h)),
            mime: "image/png".into(),
            image_width: w,
            image_height: h,
            screen_width: self.screen.0,
            screen_height: self.screen.1,
            taken_at: SystemTime::now(),
        };
        inner.shots.insert(id.clone(), observation.meta());
        inner.calls.push(Call::Observe {
            id,
            bounds: (request.max_width, request.max_height),
        });
        Ok(observation)
    }

    async fn act(
        &self,
        action: &DesktopAction,
        observation_id: Option<&str>,
    ) -> Result<ActionReport, ComputerError> {
        let gate = self.lock().gate.take();
        if let Some(gate) = gate {
            let _ = gate.started.send(());
            let _ = gate.release.await;
        }
        let mut inner = self.lock();
        let meta = match observation_id {
            Some(id) => {
                Some(
                    inner
                        .shots
                        .get(id)
                        .cloned()
                        .ok_or_else(|| ComputerError::Refused {
                            field: Some("screenshot_id".into()),
                            message: format!("screenshot_id {id} is unknown or too old"),
                        })?,
                )
            }
            None => None,
        };
        let screen_points: Vec<(i32, i32)> = action
            .points()
            .into_iter()
            .map(|(x, y)| match &meta {
                Some(meta) => meta.to_screen(x, y),
                None => (x as i32, y as i32),
            })
            .collect();
        if let Some(last) = screen_points.last() {
            inner.pointer = *last;
        }
        if action.changes_screen() && !inner.inert {
            inner.version += 1;
        }
        inner.calls.push(Call::Act {
            action: action.clone(),
            observation: observation_id.map(str::to_string),
            screen_points,
        });
        Ok(ActionReport {
            cursor: Some(inner.pointer),
            settle: None,
        })
    }

    async fn wait_settled(
        &self,
        _quiet: Duration,
        _timeout: Duration,
    ) -> Result<SettleReport, ComputerError> {
        self.lock().calls.push(Call::Settle);
        Ok(SettleReport {
            settled: true,
            waited_ms: 0,
            frames: 1,
            last_change_ms: None,
            quiet_ms: 0,
        })
    }

    async fn zoom(
        &self,
        observation: &ObservationMeta,
        region: [f64; 4],
        bounds: (u32, u32),
    ) -> Result<Observation, ComputerError> {
        let mut inner = self.lock();
        inner.calls.push(Call::Zoom { region });
        let id = format!("{}-zoom", inner.next_id);
        inner.next_id += 1;
        let (w, h) = fit_within(
            (
                (region[2] - region[0]) as u32 * observation.screen_width / observation.image_width,
                (region[3] - region[1]) as u32 * observation.screen_height
                    / observation.image_height,
            ),
            bounds,
        );
        Ok(Observation {
            id,
            image: Self::image(inner.version, (w, h)),
            mime: "image/png".into(),
            image_width: w,
            image_height: h,
            screen_width: w,
            screen_height: h,
            taken_at: SystemTime::now(),
        })
    }

    async fn run_shell(
        &self,
        command: &str,
        _timeout: Duration,
        restart: bool,
    ) -> Result<ShellOutcome, ComputerError> {
        let mut inner = self.lock();
        inner.calls.push(Call::Shell {
            command: command.to_string(),
            restart,
        });
        inner.version += 1;
        Ok(ShellOutcome {
            exit_code: Some(if command.contains("exit 3") { 3 } else { 0 }),
            output: format!("ran: {command}"),
            still_running: false,
            truncated: false,
        })
    }

    async fn read_file(&self, path: &str) -> Result<String, ComputerError> {
        self.lock().calls.push(Call::ReadFile {
            path: path.to_string(),
        });
        Ok(String::new())
    }

    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ComputerError> {
        self.lock().calls.push(Call::WriteFile {
            path: path.to_string(),
            content: content.to_vec(),
        });
        Ok(())
    }

    async fn edit(&self, command: &EditCommand) -> Result<EditOutcome, ComputerError> {
        self.lock().calls.push(Call::Edit(command.clone()));
        if command.path().contains("missing") {
            return Err(ComputerError::Refused {
                field: Some("path".into()),
                message: format!("{} does not exist", command.path()),
            });
        }
        Ok(EditOutcome {
            output: "edited".into(),
        })
    }
}
