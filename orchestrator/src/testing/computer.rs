//! A sandbox's desktop and files, in memory, behind the runs' seam
//! ([`SandboxConnector`](crate::runs::connect::SandboxConnector)).
//!
//! [`FakeSandbox`] is both the [`Computer`] the loop drives and the
//! [`SandboxFiles`](crate::runs::connect::SandboxFiles) the sink copies `~/outputs` through:
//! a file the agent writes is one the sink can list and download. Every screenshot gets a new
//! id (as sandboxd's do) and every action changes the screen, so the loop never sees an action
//! repeated without effect. Every call is recorded; a test can hold the next action until it
//! lets it go (to act while it is in flight).
//!
//! [`FakeConnector`] hands out one [`FakeSandbox`] per sandbox id (the same one to every
//! `Runs` built over it, as a sandbox outlives the process that drives it), counts connections
//! and can hold the next one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use agent::observation::fit_within;
use agent::{
    ActionReport, Computer, ComputerError, DesktopAction, EditCommand, EditOutcome, Observation,
    ObservationMeta, ObserveRequest, SettleReport, ShellOutcome,
};
use async_trait::async_trait;
use bytes::Bytes;
use sandbox_client::types::FileInfo;
use tokio::sync::oneshot;

use crate::db::SandboxRecord;
use crate::runs::connect::{ConnectError, Connection, FilesError, SandboxConnector, SandboxFiles};

/// The agent's home directory in a fake sandbox.
pub(crate) const HOME: &str = "/home/agent";
const SCREEN: (u32, u32) = (1280, 800);

/// One call the loop made.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    Observe { id: String },
    Act { action: DesktopAction },
    Settle,
    Zoom,
    Shell { command: String },
    ReadFile { path: String },
    WriteFile { path: String },
    Edit,
}

/// A point a test stops a call at: `reached` fires when the call arrives, and the call goes on
/// when the [`Hold`] is released or dropped.
struct Gate {
    reached: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// A call stopped by a test.
pub(crate) struct Hold {
    reached: Option<oneshot::Receiver<()>>,
    release: Option<oneshot::Sender<()>>,
}

impl Hold {
    fn new() -> (Self, Gate) {
        let (reached_tx, reached_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        (
            Self {
                reached: Some(reached_rx),
                release: Some(release_tx),
            },
            Gate {
                reached: reached_tx,
                release: release_rx,
            },
        )
    }

    /// Waits (in real time, up to 10 s) until the held call arrives.
    pub(crate) async fn reached(&mut self) {
        if let Some(reached) = self.reached.take() {
            tokio::time::timeout(Duration::from_secs(10), reached)
                .await
                .expect("the held call did not arrive within 10 s")
                .expect("the fake dropped a hold point without reaching it");
        }
    }

    /// Lets the call go on.
    pub(crate) fn release(mut self) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
    }
}

impl Gate {
    async fn pass(self) {
        let _ = self.reached.send(());
        let _ = self.release.await;
    }
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// Bumped by every action: the screen's content.
    version: u64,
    calls: Vec<Call>,
    /// Path -> content.
    files: BTreeMap<String, Vec<u8>>,
    /// Actions that reached the sandbox (held ones included).
    actions_started: usize,
    /// Action number (from 1) -> where it stops.
    holds: BTreeMap<usize, Gate>,
}

/// One fake sandbox (see the module documentation).
#[derive(Default)]
pub(crate) struct FakeSandbox {
    inner: Mutex<Inner>,
}

impl FakeSandbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A test that panicked while holding the lock has failed already.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every call so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The desktop actions performed so far, in order.
    pub(crate) fn actions(&self) -> Vec<DesktopAction> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Act { action } => Some(action),
                _ => None,
            })
            .collect()
    }

    /// Holds the next action before it reaches the screen.
    pub(crate) fn hold_next_action(&self) -> Hold {
        let next = self.lock().actions_started + 1;
        self.hold_action(next)
    }

    /// Holds the `nth` action (counted from 1 over the sandbox's life) before it reaches the
    /// screen.
    pub(crate) fn hold_action(&self, nth: usize) -> Hold {
        let (hold, gate) = Hold::new();
        self.lock().holds.insert(nth, gate);
        hold
    }

    /// Writes a file, as a program in the sandbox would.
    pub(crate) fn put_file(&self, path: &str, content: &[u8]) {
        self.lock().files.insert(path.to_string(), content.to_vec());
    }
}

#[async_trait]
impl Computer for FakeSandbox {
    async fn observe(&self, request: &ObserveRequest) -> Result<Observation, ComputerError> {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id.to_string();
        let (width, height) = fit_within(
            SCREEN,
            (
                request.max_width.unwrap_or(u32::MAX),
                request.max_height.unwrap_or(u32::MAX),
            ),
        );
        inner.calls.push(Call::Observe { id: id.clone() });
        Ok(Observation {
            id,
            image: Bytes::from(format!("fake screen v{}", inner.version)),
            mime: "image/png".into(),
            image_width: width,
            image_height: height,
            screen_width: SCREEN.0,
            screen_height: SCREEN.1,
            taken_at: SystemTime::now(),
        })
    }

    async fn act(
        &self,
        action: &DesktopAction,
        _observation_id: Option<&str>,
    ) -> Result<ActionReport, ComputerError> {
        let gate = {
            let mut inner = self.lock();
            inner.actions_started += 1;
            let nth = inner.actions_started;
            inner.holds.remove(&nth)
        };
        if let Some(gate) = gate {
            gate.pass().await;
        }
        let mut inner = self.lock();
        inner.version += 1;
        inner.calls.push(Call::Act {
            action: action.clone(),
        });
        Ok(ActionReport {
            cursor: None,
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
        _region: [f64; 4],
        _bounds: (u32, u32),
    ) -> Result<Observation, ComputerError> {
        let mut inner = self.lock();
        inner.calls.push(Call::Zoom);
        inner.next_id += 1;
        Ok(Observation {
            id: format!("{}-zoom", inner.next_id),
            image: Bytes::from_static(b"fake zoom"),
            mime: observation.mime.clone(),
            image_width: observation.image_width,
            image_height: observation.image_height,
            screen_width: observation.screen_width,
            screen_height: observation.screen_height,
            taken_at: SystemTime::now(),
        })
    }

    async fn run_shell(
        &self,
        command: &str,
        _timeout: Duration,
        _restart: bool,
    ) -> Result<ShellOutcome, ComputerError> {
        let mut inner = self.lock();
        inner.version += 1;
        inner.calls.push(Call::Shell {
            command: command.to_string(),
        });
        Ok(ShellOutcome {
            exit_code: Some(0),
            output: String::new(),
            still_running: false,
            truncated: false,
        })
    }

    async fn read_file(&self, path: &str) -> Result<String, ComputerError> {
        let mut inner = self.lock();
        inner.calls.push(Call::ReadFile {
            path: path.to_string(),
        });
        match inner.files.get(path) {
            Some(content) => Ok(String::from_utf8_lossy(content).into_owned()),
            None => Err(ComputerError::Refused {
                field: Some("path".into()),
                message: format!("{path} does not exist"),
            }),
        }
    }

    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ComputerError> {
        let mut inner = self.lock();
        inner.calls.push(Call::WriteFile {
            path: path.to_string(),
        });
        inner.files.insert(path.to_string(), content.to_vec());
        Ok(())
    }

    async fn edit(&self, _command: &EditCommand) -> Result<EditOutcome, ComputerError> {
        self.lock().calls.push(Call::Edit);
        Ok(EditOutcome {
            output: "edited".into(),
        })
    }
}

#[async_trait]
impl SandboxFiles for FakeSandbox {
    async fn list(&self, root: &str) -> Result<Vec<FileInfo>, FilesError> {
        let prefix = format!("{}/", root.trim_end_matches('/'));
        let files: Vec<FileInfo> = self
            .lock()
            .files
            .iter()
            .filter(|(path, _)| path.starts_with(&prefix))
            .map(|(path, content)| FileInfo {
                name: path.rsplit('/').next().unwrap_or_default().to_string(),
                path: path.clone(),
                is_directory: false,
                is_symlink: false,
                size: Some(content.len() as u64),
                modified_time: None,
                permissions: None,
                extension: None,
            })
            .collect();
        if files.is_empty() {
            return Err(FilesError::NotFound(root.to_string()));
        }
        Ok(files)
    }

    async fn download_at_most(&self, path: &str, limit: u64) -> Result<Vec<u8>, FilesError> {
        let content = self
            .lock()
            .files
            .get(path)
            .cloned()
            .ok_or_else(|| FilesError::NotFound(path.to_string()))?;
        if content.len() as u64 > limit {
            return Err(FilesError::TooLarge(format!("{path}: over {limit} bytes")));
        }
        Ok(content)
    }

    async fn upload(&self, path: &str, bytes: Vec<u8>) -> Result<(), FilesError> {
        self.lock().files.insert(path.to_string(), bytes);
        Ok(())
    }
}

#[derive(Default)]
struct Connections {
    sandboxes: HashMap<String, Arc<FakeSandbox>>,
    count: usize,
    hold: Option<Gate>,
}

/// Hands out the fake sandboxes (see the module documentation).
#[derive(Default)]
pub(crate) struct FakeConnector {
    state: Mutex<Connections>,
}

impl FakeConnector {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Connections> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fake sandbox of a sandbox id (made on first use).
    pub(crate) fn sandbox(&self, sandbox_id: &str) -> Arc<FakeSandbox> {
        self.state()
            .sandboxes
            .entry(sandbox_id.to_string())
            .or_default()
            .clone()
    }

    /// How many connections were made.
    pub(crate) fn connections(&self) -> usize {
        self.state().count
    }

    /// Holds the next connection before it is made.
    pub(crate) fn hold_next(&self) -> Hold {
        let (hold, gate) = Hold::new();
        self.state().hold = Some(gate);
        hold
    }
}

#[async_trait]
impl SandboxConnector for FakeConnector {
    async fn connect(
        &self,
        sandbox: &SandboxRecord,
        _key: &str,
    ) -> Result<Connection, ConnectError> {
        let gate = self.state().hold.take();
        if let Some(gate) = gate {
            gate.pass().await;
        }
        if sandbox.address.is_none() {
            return Err(ConnectError::NoAddress(sandbox.id.clone()));
        }
        self.state().count += 1;
        let fake = self.sandbox(&sandbox.id);
        Ok(Connection {
            computer: fake.clone(),
            files: fake,
            home: HOME.into(),
        })
    }
}
