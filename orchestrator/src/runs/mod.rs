//! Runs: a task in words, carried out in one sandbox by the `agent` crate's loop (or handed to
//! a remote A2A agent: [`remote`]), with its events stored and served, a person able to take
//! over and hand back (or answer), and the files it produced kept.
//!
//! - [`Runs`] is the service the API calls: create (idempotent), list, get, cancel, takeover,
//!   hand-back, answer, events, artifacts. It knows nothing of HTTP.
//! - [`driver`] drives one run: takes a sandbox (warm pool first), builds the model and the
//!   computer, runs or resumes the loop, holds the run's lease in the database; a run of the
//!   [`conformance`] executor or of a [`remote`] A2A agent takes no sandbox;
//!   [`credentials`] keeps the bearer tokens for remote agents, sealed.
//! - [`sink`] is the loop's [`agent::EventSink`]: each event is appended to the log (seq
//!   without gaps, status moved in the same transaction) and then published to subscribers;
//!   screenshots and `~/outputs` files go to the artifact store.
//! - [`artifacts`]: the artifact store (a folder under the data directory).
//! - [`connect`]: the seam to the sandbox: the computer the loop drives and the files the sink
//!   copies, for a ready sandbox. With the [`Clock`] the runs read the time from, it is one of
//!   the [`RunSeams`] the service is built over ([`RunSeams::real`] in the server).
//!
//! **Invariants:** only the lease holder writes a run's events, and never after its terminal
//! status; a run's status only changes through an event; the sandbox's control viewers get
//! input only while a person holds control (or no run drives it).

pub mod artifacts;
pub mod backend;
pub mod conformance;
pub mod connect;
pub mod credentials;
pub mod driver;
pub mod paused;
pub mod relay;
pub mod remote;
pub mod sink;

#[cfg(test)]
mod run_tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::{Control, ControlError, ModelOptions, Phase, SetupError};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, broadcast, mpsc, watch};

use crate::clock::{Clock, SystemClock};
use crate::db::Store;
use crate::db::{
    ArtifactRecord, EventRecord, RunFilter, RunInsert, RunRecord, RunStatus, StoreError,
};
use crate::sandboxes::{SandboxError, Sandboxes};
use crate::secret::new_id;
use crate::validate::{self, Invalid, RUN_METADATA, invalid};
use artifacts::{ArtifactError, ArtifactStore};
pub use backend::RunBackend;
use connect::{SandboxConnector, SandboxdConnector};

/// Events buffered per live run for subscribers that fall behind (they re-read the log).
const LIVE_BUFFER: usize = 1024;
/// Events read from the log at a time when following.
const FOLLOW_PAGE: i64 = 500;
/// How often a follower polls the log of a run driven by another process.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// Why a run request cannot be honoured. Each names the field or the state.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no run {0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error("the run did not answer in time: {0}")]
    Timeout(String),
    /// The replica driving the run failed to carry out a command passed to it.
    #[error("the replica driving the run failed: {0}")]
    Relayed(String),
}

/// What a caller asks for.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub task: String,
    pub model: String,
    pub sandbox_id: Option<String>,
    pub max_steps: Option<u32>,
    pub max_seconds: Option<u64>,
    pub max_images: Option<usize>,
    pub metadata: BTreeMap<String, String>,
    pub idempotency_key: Option<String>,
    /// The A2A context it belongs to (`None`: its own).
    pub context_id: Option<String>,
    /// The A2A message that asks for it.
    pub message_id: Option<String>,
    /// Files the run starts with, in the sandbox's `~/inputs`.
    pub inputs: Vec<InputFile>,
}

/// A file a run is given: put in `~/inputs/<name>` before the agent starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    pub name: String,
    pub bytes: bytes::Bytes,
}

impl RunRequest {
    /// A stable hash of everything but the idempotency key.
    fn hash(&self) -> String {
        let mut canonical = serde_json::json!({
            "task": self.task,
            "model": self.model,
            "sandbox_id": self.sandbox_id,
            "max_steps": self.max_steps,
            "max_seconds": self.max_seconds,
            "max_images": self.max_images,
            "metadata": self.metadata,
        });
        // Only when set, so that the hashes of requests made before A2A stay the same.
        for (name, value) in [
            ("context_id", &self.context_id),
            ("message_id", &self.message_id),
        ] {
            if let (Some(value), Some(map)) = (value, canonical.as_object_mut()) {
                map.insert(name.to_string(), value.clone().into());
            }
        }
        hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
    }
}

/// How a create ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    New,
    /// The same idempotency key and body: the run made the first time.
    Replayed,
}

/// Settings of the runs service.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// How long a lease lasts without renewal.
    pub lease_ttl: Duration,
    /// Where `script:` files must be (`None`: anywhere the orchestrator can read).
    pub script_root: Option<std::path::PathBuf>,
    /// Bytes of artifacts one run may keep.
    pub run_artifact_bytes: u64,
    /// Bytes of artifacts all the runs of one key may keep together.
    pub key_artifact_bytes: u64,
    /// How long ended runs are kept (`None`: until deleted).
    pub retention: Option<Duration>,
    /// Whether runs may use the A2A conformance executor (model `conformance`): a testing
    /// aid, off by default.
    pub conformance: bool,
    /// What `a2a:` runs may connect to: public addresses, and these ranges.
    pub a2a_reach: crate::a2a::reach::Reach,
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            script_root: None,
            run_artifact_bytes: 1024 * 1024 * 1024,
            key_artifact_bytes: 10 * 1024 * 1024 * 1024,
            retention: Some(Duration::from_secs(30 * 86_400)),
            conformance: false,
            a2a_reach: crate::a2a::reach::Reach::default(),
        }
    }
}

/// A run this process drives.
pub(crate) struct ActiveRun {
    pub(crate) control: Control,
    /// Appended events, for live subscribers.
    pub(crate) events: broadcast::Sender<EventRecord>,
    /// Set before the loop starts (it then answers cancel itself).
    pub(crate) start: Mutex<StartGate>,
    pub(crate) cancel_requested: Notify,
    /// Wakes the copier of `~/outputs` (after each action).
    pub(crate) copy_outputs: Notify,
    /// True once the driver is done with the run.
    pub(crate) finished: watch::Sender<bool>,
}

#[derive(Debug, Default)]
pub(crate) struct StartGate {
    pub(crate) started: bool,
    pub(crate) canceled: bool,
}

/// What the runs reach outside the database and the lifecycle, and the clock they read: the
/// seams tests put fakes behind (`crate::testing`).
pub struct RunSeams {
    /// The computer and the files of a ready sandbox.
    pub connector: Arc<dyn SandboxConnector>,
    /// Lease times and the timestamps of records, events and artifacts.
    pub clock: Arc<dyn Clock>,
}

impl RunSeams {
    /// sandboxd's REST API and the system clock.
    pub fn real() -> Self {
        Self {
            connector: Arc::new(SandboxdConnector),
            clock: Arc::new(SystemClock),
        }
    }
}

/// The runs service. Cheap to share (`Arc`).
pub struct Runs {
    pub(crate) store: Store,
    pub(crate) sandboxes: Arc<Sandboxes>,
    pub(crate) artifacts: Arc<dyn ArtifactStore>,
    /// The sandbox side of a run ([`SandboxdConnector`] in the server).
    pub(crate) connector: Arc<dyn SandboxConnector>,
    /// The time lease and record times are read from ([`SystemClock`] in the server).
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) models: ModelOptions,
    pub(crate) settings: RunSettings,
    /// `<replica>/<boot id>`: this process, as a lease holder.
    pub(crate) lease_owner: String,
    /// `<replica>/`: every life of this replica (an earlier one's leases are taken at once).
    pub(crate) replica_prefix: String,
    pub(crate) active: Mutex<HashMap<String, Arc<ActiveRun>>>,
    /// Calls remote A2A agents (`a2a:` runs): only what `reach` permits (or why it could not
    /// start).
    pub(crate) http: Result<reqwest::Client, String>,
    pub(crate) reach: Arc<crate::a2a::reach::Reach>,
}

impl Runs {
    /// The service with sandboxd's REST API and the system clock.
    pub fn new(
        store: Store,
        sandboxes: Arc<Sandboxes>,
        artifacts: Arc<dyn ArtifactStore>,
        models: ModelOptions,
        settings: RunSettings,
    ) -> Arc<Self> {
        Self::with_seams(
            store,
            sandboxes,
            artifacts,
            RunSeams::real(),
            models,
            settings,
        )
    }

    /// The service over the given connector and clock.
    pub fn with_seams(
        store: Store,
        sandboxes: Arc<Sandboxes>,
        artifacts: Arc<dyn ArtifactStore>,
        seams: RunSeams,
        mut models: ModelOptions,
        settings: RunSettings,
    ) -> Arc<Self> {
        models.script_root = settings.script_root.clone();
        let replica = sandboxes.replica.clone();
        let http = settings.a2a_reach.client();
        let reach = Arc::new(settings.a2a_reach.clone());
        Arc::new(Self {
            store,
            sandboxes,
            artifacts,
            connector: seams.connector,
            clock: seams.clock,
            models,
            settings,
            lease_owner: format!("{replica}/{}", new_id("boot")),
            replica_prefix: format!("{replica}/"),
            active: Mutex::new(HashMap::new()),
            http,
            reach,
        })
    }

    /// The service as the server's settings describe it: artifacts under
    /// `<data dir>/artifacts`, scripts confined to `--scripts-dir`, keys from the environment.
    pub fn from_settings(sandboxes: &Arc<Sandboxes>) -> Arc<Self> {
        let settings = sandboxes.settings();
        Self::new(
            sandboxes.store().clone(),
            sandboxes.clone(),
            Arc::new(artifacts::FsArtifacts::new(
                settings.data_dir.join("artifacts"),
            )),
            ModelOptions::from_env(),
            RunSettings {
                lease_ttl: settings.run_lease,
                script_root: Some(settings.scripts_dir.clone()),
                run_artifact_bytes: settings.run_artifact_bytes,
                key_artifact_bytes: settings.key_artifact_bytes,
                retention: settings.run_retention,
                conformance: settings.a2a_conformance,
                a2a_reach: crate::a2a::reach::Reach::new(settings.a2a_remote_networks.clone()),
            },
        )
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether runs may use the conformance executor.
    pub fn conformance_offered(&self) -> bool {
        self.settings.conformance
    }

    fn active(&self, id: &str) -> Option<Arc<ActiveRun>> {
        self.active.lock().ok()?.get(id).cloned()
    }

    /// Subscribes to the live events of a run this process drives (`None` otherwise).
    pub fn subscribe(&self, id: &str) -> Option<broadcast::Receiver<EventRecord>> {
        self.active(id).map(|run| run.events.subscribe())
    }

    /// Checks a request and creates the run (or finds the one its idempotency key made), then
    /// starts driving it.
    pub async fn create(
        self: &Arc<Self>,
        owner_key_id: &str,
        request: RunRequest,
    ) -> Result<(RunRecord, Created), RunError> {
        validate::run_text("task", &request.task)?;
        let backend = RunBackend::parse(&request.model, &self.settings)?;
        if let RunBackend::Computer(spec) = &backend {
            // Everything checkable before the run: key present, base URL, script file and steps.
            agent::build_model(spec, &self.models).map_err(|e| setup_error(&e))?;
        }
        let limits =
            validate::run_limits(request.max_steps, request.max_seconds, request.max_images)?;
        validate::metadata(&request.metadata, RUN_METADATA)?;
        validate::run_inputs(
            request
                .inputs
                .iter()
                .map(|f| (f.name.as_str(), f.bytes.len())),
        )?;
        if let Some(key) = &request.idempotency_key {
            validate::idempotency_key(key)?;
        }
        if let Some(sandbox_id) = &request.sandbox_id {
            // Visible to the caller and running, or paused (the driver resumes it).
            let sandbox = self.sandboxes.get(sandbox_id, Some(owner_key_id)).await?;
            if sandbox.status != crate::db::SandboxStatus::Paused {
                self.sandboxes
                    .get_ready(sandbox_id, Some(owner_key_id))
                    .await?;
            }
        }
        let now = self.clock.now_ms();
        let hash = request.hash();
        let record = RunRecord {
            id: new_id("run"),
            owner_key_id: owner_key_id.to_string(),
            task: request.task.clone(),
            model: backend.to_string(),
            sandbox_id: request.sandbox_id.clone(),
            sandbox_taken: false,
            status: RunStatus::Queued,
            limits,
            metadata: request.metadata.clone(),
            idempotency_key: request.idempotency_key.clone(),
            request_hash: Some(hash.clone()),
            answer: None,
            reason: None,
            lease_owner: Some(self.lease_owner.clone()),
            lease_expires_at: Some(now + self.lease_ms()),
            last_seq: 0,
            created_at: now,
            updated_at: now,
            ended_at: None,
            context_id: request.context_id.clone(),
            message_id: request.message_id.clone(),
        };
        match self.store.insert_run(&record).await? {
            RunInsert::Created => {}
            RunInsert::SameKey(existing) => {
                return if existing.request_hash.as_deref() == Some(hash.as_str()) {
                    Ok((*existing, Created::Replayed))
                } else {
                    Err(RunError::Conflict(
                        "this Idempotency-Key was used with a different request".into(),
                    ))
                };
            }
            RunInsert::SandboxBusy => {
                return Err(RunError::Conflict(format!(
                    "sandbox {} already has an active run",
                    request.sandbox_id.as_deref().unwrap_or_default()
                )));
            }
        }
        if let Err(error) = self.keep_inputs(&record, &request.inputs).await {
            // Nothing will drive it: it ends here, and says why.
            let reason = format!("its input files could not be kept: {error}");
            let failed = agent::RunEvent::RunStatus {
                status: RunStatus::Failed,
                reason: Some(reason.clone()),
                answer: None,
            };
            let data = serde_json::to_string(&failed).unwrap_or_default();
            let change = crate::db::StatusChange {
                status: RunStatus::Failed,
                answer: None,
                reason: Some(reason),
            };
            let _ = self
                .store
                .append_event(
                    &record.id,
                    &self.lease_owner,
                    failed.kind(),
                    &data,
                    now,
                    Some(&change),
                )
                .await;
            return Err(error);
        }
        let active = self.register(&record.id);
        driver::spawn(self.clone(), record.clone(), active, None);
        Ok((record, Created::New))
    }

    /// Keeps a new run's input files as its `input` artifacts (`inputs/<name>`), which the
    /// driver puts in the sandbox.
    async fn keep_inputs(&self, run: &RunRecord, inputs: &[InputFile]) -> Result<(), RunError> {
        for input in inputs {
            let name = format!("inputs/{}", input.name);
            self.artifacts
                .put(&run.id, &name, input.bytes.clone())
                .await?;
            let content_type = artifacts::sniff_content_type(&input.bytes);
            let record = artifacts::describe(
                &run.id,
                &name,
                "input",
                content_type,
                &input.bytes,
                run.created_at,
            );
            if !self.store.keep_artifact(&record, &self.lease_owner).await? {
                return Err(RunError::Conflict(format!(
                    "run {} ended before its inputs were kept",
                    run.id
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn lease_ms(&self) -> i64 {
        i64::try_from(self.settings.lease_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    pub(crate) fn register(&self, id: &str) -> Arc<ActiveRun> {
        let run = Arc::new(ActiveRun {
            control: Control::new(),
            events: broadcast::channel(LIVE_BUFFER).0,
            start: Mutex::new(StartGate::default()),
            cancel_requested: Notify::new(),
            copy_outputs: Notify::new(),
            finished: watch::channel(false).0,
        });
        if let Ok(mut active) = self.active.lock() {
            active.insert(id.to_string(), run.clone());
        }
        run
    }

    pub(crate) fn unregister(&self, id: &str) {
        if let Ok(mut active) = self.active.lock() {
            active.remove(id);
        }
    }

    /// One run the caller may see (`owner` `None`: any).
    pub async fn get(&self, id: &str, owner: Option<&str>) -> Result<RunRecord, RunError> {
        match self.store.run(id).await? {
            Some(run) if owner.is_none_or(|o| run.owner_key_id == o) => Ok(run),
            _ => Err(RunError::NotFound(id.to_string())),
        }
    }

    /// Runs matching the status and every metadata pair, newest first.
    pub async fn list(
        &self,
        owner: Option<&str>,
        status: Option<RunStatus>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<RunRecord>, RunError> {
        let runs = self
            .store
            .list_runs(&RunFilter {
                owner_key_id: owner.map(str::to_string),
                status,
                ..RunFilter::default()
            })
            .await?;
        Ok(runs
            .into_iter()
            .filter(|run| metadata.iter().all(|(k, v)| run.metadata.get(k) == Some(v)))
            .collect())
    }

    /// The run, checked, and its driver in this process.
    async fn driven(&self, id: &str, owner: Option<&str>) -> Result<Arc<ActiveRun>, RunError> {
        let run = self.get(id, owner).await?;
        if run.status.is_terminal() {
            return Err(RunError::Conflict(format!(
                "run {id} is {}",
                run.status.as_str()
            )));
        }
        self.active(id).ok_or_else(|| {
            RunError::Conflict(format!(
                "run {id} is driven by another orchestrator process; ask that one"
            ))
        })
    }

    /// Deletes an ended run: its record, its events and its artifacts (their disk space comes
    /// back). A run that has not ended is a conflict: cancel it first.
    pub async fn delete(&self, id: &str, owner: Option<&str>) -> Result<(), RunError> {
        let run = self.get(id, owner).await?;
        if !run.status.is_terminal() {
            return Err(RunError::Conflict(format!(
                "run {id} is {}: cancel it first",
                run.status.as_str()
            )));
        }
        if !self.store.delete_ended_run(id).await? {
            // Deleted meanwhile by another call.
            return Err(RunError::NotFound(id.to_string()));
        }
        self.artifacts.remove_run(id).await?;
        tracing::info!(run_id = %id, "run deleted");
        Ok(())
    }

    /// Deletes the ended runs that ended more than the retention period before `now` (ms since
    /// the epoch), with their events and artifacts; returns how many. Nothing when runs are
    /// kept for good.
    pub async fn purge_expired(&self, now: i64) -> Result<usize, RunError> {
        let Some(retention) = self.settings.retention else {
            return Ok(0);
        };
        let cutoff = now.saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let mut deleted = 0;
        loop {
            let batch = self.store.runs_ended_before(cutoff, 100).await?;
            if batch.is_empty() {
                return Ok(deleted);
            }
            for id in batch {
                match self.delete(&id, None).await {
                    Ok(()) => deleted += 1,
                    // Another process deleted it meanwhile.
                    Err(RunError::NotFound(_)) => {}
                    Err(error) => return Err(error),
                }
            }
        }
    }

    /// Deletes ended runs past their retention once an hour, from start-up on.
    pub async fn retain_forever(self: Arc<Self>) {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match self.purge_expired(self.clock.now_ms()).await {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(deleted, "ended runs past their retention deleted"),
                Err(error) => tracing::warn!(%error, "deleting runs past their retention failed"),
            }
        }
    }

    /// Cancels a run; answers once its final `canceled` status is written.
    pub async fn cancel(&self, id: &str, owner: Option<&str>) -> Result<RunRecord, RunError> {
        if let Some(done) = self
            .relay_if_elsewhere(id, owner, relay::RunCommand::Cancel)
            .await?
        {
            return Ok(done);
        }
        let active = self.driven(id, owner).await?;
        // A paused sandbox is resumed first: the run's last copy of `~/outputs` reads it. (Its
        // turn is not held: the run's end may remove a sandbox it took.)
        if let Err(error) = self.wake(&self.get(id, owner).await?).await {
            tracing::warn!(run_id = %id, %error, "the canceled run's paused sandbox was not resumed");
        }
        let started = {
            let mut gate = active.start.lock().map_err(|_| poisoned())?;
            if !gate.started {
                gate.canceled = true;
            }
            gate.started
        };
        if started {
            control_result(id, active.control.cancel().await)?;
            if !matches!(active.control.phase(), Phase::Finished(_)) {
                // Passed on to a remote agent that has not confirmed it: `canceling`.
                return self.get(id, owner).await;
            }
        } else {
            active.cancel_requested.notify_one();
        }
        let mut finished = active.finished.subscribe();
        tokio::time::timeout(Duration::from_secs(60), finished.wait_for(|done| *done))
            .await
            .map_err(|_| RunError::Timeout(format!("run {id} did not stop within 60 s")))?
            .map_err(|_| poisoned())?;
        self.get(id, owner).await
    }

    /// Takes control from the agent: answers once the in-flight action finished and the run is
    /// paused (control viewers' input is live from then on).
    pub async fn take_over(&self, id: &str, owner: Option<&str>) -> Result<RunRecord, RunError> {
        let model = self.get(id, owner).await?.model;
        if model == backend::CONFORMANCE || model.starts_with(remote::PREFIX) {
            return Err(RunError::Conflict(format!(
                "run {id} has no desktop to take over ({model} drives it)"
            )));
        }
        if let Some(done) = self
            .relay_if_elsewhere(id, owner, relay::RunCommand::TakeOver)
            .await?
        {
            return Ok(done);
        }
        let active = self.started(id, owner).await?;
        let _turn = self.wake(&self.get(id, owner).await?).await?;
        control_result(id, active.control.take_over().await)?;
        self.get(id, owner).await
    }

    /// Gives control back; the agent starts again from a fresh screenshot.
    pub async fn hand_back(
        &self,
        id: &str,
        owner: Option<&str>,
        note: Option<String>,
    ) -> Result<RunRecord, RunError> {
        let command = relay::RunCommand::HandBack { note: note.clone() };
        if let Some(done) = self.relay_if_elsewhere(id, owner, command).await? {
            return Ok(done);
        }
        let active = self.started(id, owner).await?;
        let _turn = self.wake(&self.get(id, owner).await?).await?;
        control_result(id, active.control.hand_back(note).await)?;
        self.get(id, owner).await
    }

    /// Answers the agent's question (or a provider's safety check).
    pub async fn answer(
        &self,
        id: &str,
        owner: Option<&str>,
        text: String,
    ) -> Result<RunRecord, RunError> {
        self.answer_message(id, owner, text, None).await
    }

    /// [`answer`](Self::answer), carried by a message with this id (an A2A client's): the
    /// run's `input.received` event keeps it.
    pub async fn answer_message(
        &self,
        id: &str,
        owner: Option<&str>,
        text: String,
        message_id: Option<String>,
    ) -> Result<RunRecord, RunError> {
        validate::run_text("text", &text)?;
        let command = relay::RunCommand::Answer {
            text: text.clone(),
            message_id: message_id.clone(),
        };
        if let Some(done) = self.relay_if_elsewhere(id, owner, command).await? {
            return Ok(done);
        }
        let active = self.started(id, owner).await?;
        let _turn = self.wake(&self.get(id, owner).await?).await?;
        control_result(id, active.control.answer_with_id(text, message_id).await)?;
        self.get(id, owner).await
    }

    async fn started(&self, id: &str, owner: Option<&str>) -> Result<Arc<ActiveRun>, RunError> {
        let active = self.driven(id, owner).await?;
        // Wait briefly for a queued run's loop to start (it is taking its sandbox).
        let mut phase = active.control.subscribe();
        let ready = tokio::time::timeout(
            Duration::from_secs(30),
            phase.wait_for(|p| !matches!(p, Phase::Starting)),
        )
        .await;
        if ready.is_err() {
            return Err(RunError::Conflict(format!(
                "run {id} is still queued (waiting for its sandbox)"
            )));
        }
        Ok(active)
    }

    /// Follows a run's log from `after`: the stored events, then the live ones, each exactly
    /// once and in order, until the terminal status (then the channel closes). A subscriber
    /// that falls behind, or a run driven by another process, is served from the log.
    pub fn follow(self: &Arc<Self>, id: &str, after: i64) -> mpsc::Receiver<EventRecord> {
        let (tx, rx) = mpsc::channel(256);
        let runs = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            // Subscribed before reading the log: whatever is appended meanwhile is either read
            // or received (and deduplicated by seq).
            let mut live = runs.subscribe(&id);
            // Appends by another replica (Postgres), for a run driven elsewhere.
            let mut appended = runs.store.run_appends();
            let mut last = after;
            loop {
                // The log, page by page.
                loop {
                    let page = match runs.store.events_after(&id, last, FOLLOW_PAGE).await {
                        Ok(page) => page,
                        Err(error) => {
                            tracing::warn!(run_id = %id, %error, "reading the event log failed");
                            return;
                        }
                    };
                    let full = page.len() as i64 == FOLLOW_PAGE;
                    for event in page {
                        last = event.seq;
                        let terminal = ends_run(&event);
                        if tx.send(event).await.is_err() || terminal {
                            return;
                        }
                    }
                    if !full {
                        break;
                    }
                }
                match runs.store.run(&id).await {
                    Ok(Some(run)) if run.status.is_terminal() && last >= run.last_seq => return,
                    Ok(Some(_)) => {}
                    _ => return,
                }
                // Live, until a gap, a lag or the end of this process's driving.
                match live.as_mut() {
                    Some(subscription) => loop {
                        let received = tokio::select! {
                            received = subscription.recv() => received,
                            () = tx.closed() => return,
                        };
                        match received {
                            Ok(event) if event.seq <= last => {}
                            Ok(event) if event.seq == last + 1 => {
                                last = event.seq;
                                let terminal = ends_run(&event);
                                if tx.send(event).await.is_err() || terminal {
                                    return;
                                }
                            }
                            // A gap: read the log.
                            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                            Err(broadcast::error::RecvError::Closed) => {
                                live = None;
                                break;
                            }
                        }
                    },
                    None => {
                        // Driven elsewhere (or between drivers): read the log when the driver
                        // announces an event, or now and then.
                        tokio::select! {
                            () = tokio::time::sleep(FOLLOW_POLL) => {}
                            () = announced(&mut appended, &id) => {}
                            () = tx.closed() => return,
                        }
                        live = runs.subscribe(&id);
                    }
                }
            }
        });
        rx
    }

    /// Events after `after`, at most `limit`, from the log.
    pub async fn events(
        &self,
        id: &str,
        owner: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<(RunRecord, Vec<EventRecord>), RunError> {
        let run = self.get(id, owner).await?;
        let events = self.store.events_after(id, after, limit).await?;
        Ok((run, events))
    }

    pub async fn artifacts(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<Vec<ArtifactRecord>, RunError> {
        self.get(id, owner).await?;
        Ok(self.store.artifacts(id).await?)
    }

    /// One artifact's record and bytes.
    pub async fn artifact(
        &self,
        id: &str,
        owner: Option<&str>,
        name: &str,
    ) -> Result<(ArtifactRecord, bytes::Bytes), RunError> {
        self.get(id, owner).await?;
        let missing = || RunError::NotFound(format!("{id}/artifacts/{name}"));
        let record = self.store.artifact(id, name).await?.ok_or_else(missing)?;
        let bytes = self.artifacts.get(id, name).await?.ok_or_else(missing)?;
        Ok((record, bytes))
    }

    /// Picks up runs nobody drives (after a restart, or another process's expired lease) and
    /// drives them from their last checkpoint.
    pub async fn resume_orphans(self: &Arc<Self>) -> Result<usize, RunError> {
        let now = self.clock.now_ms();
        let orphans = self
            .store
            .orphaned_runs(&self.lease_owner, &self.replica_prefix, now)
            .await?;
        let mut resumed = 0;
        for run in orphans {
            if self.active(&run.id).is_some() {
                continue;
            }
            if !self
                .store
                .acquire_run_lease(
                    &run.id,
                    &self.lease_owner,
                    &self.replica_prefix,
                    now,
                    now + self.lease_ms(),
                )
                .await?
            {
                continue;
            }
            let checkpoint = self.store.checkpoint(&run.id).await?;
            tracing::info!(run_id = %run.id, status = run.status.as_str(), "resuming run");
            let active = self.register(&run.id);
            driver::spawn(self.clone(), run, active, Some(checkpoint));
            resumed += 1;
        }
        Ok(resumed)
    }

    /// Resumes orphans now and then, until the process ends.
    pub async fn resume_forever(self: Arc<Self>) {
        let every = (self.settings.lease_ttl / 2).max(Duration::from_secs(1));
        loop {
            if let Err(error) = self.resume_orphans().await {
                tracing::warn!(%error, "resuming orphaned runs failed");
            }
            tokio::time::sleep(every).await;
        }
    }
}

/// Completes when `appended` announces run `id` (or missed announcements: read the log).
async fn announced(appended: &mut broadcast::Receiver<String>, id: &str) {
    loop {
        match appended.recv().await {
            Ok(run) if run == id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            // Never closed while the store lives; wait for the poll instead.
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// Whether a stored event is a run's terminal status.
pub fn ends_run(event: &EventRecord) -> bool {
    event.kind == "run.status"
        && serde_json::from_str::<serde_json::Value>(&event.data)
            .ok()
            .and_then(|v| v.get("status")?.as_str()?.parse::<RunStatus>().ok())
            .is_some_and(RunStatus::is_terminal)
}

fn poisoned() -> RunError {
    RunError::Conflict("the run's state is unavailable (an internal lock was poisoned)".into())
}

fn control_result(id: &str, result: Result<(), ControlError>) -> Result<(), RunError> {
    result.map_err(|error| RunError::Conflict(format!("run {id}: {error}")))
}

fn setup_error(error: &SetupError) -> Invalid {
    invalid("model", error.to_string())
}
