//! The sandbox lifecycle: create (cold or from the warm pool), wait until ready, list, change
//! timeouts, [`pause`] and resume, delete; viewer tokens; and the background work that keeps state and containers in
//! step: [`reconcile`] at start, [`reaper`] (idle and lifetime limits, heartbeats) while
//! running, [`pool`] (ready containers waiting to be claimed).
//!
//! **Invariant:** this module knows the database, the backend and sandboxd's own routes, but
//! nothing of the orchestrator's HTTP API; errors are [`SandboxError`] values that the API maps
//! to status codes.
//!
//! **Invariant:** nothing is leaked. A sandbox that fails to become ready is removed (container
//! and row) before the error is returned; deletions that fail are retried by the reaper; the
//! reconciler removes containers without a record and records without a container. Lifecycle
//! work (creating, deleting) runs in its own task, so a client that goes away mid-call cannot
//! leave it half done.
//!
//! **Invariant:** an instance only ever reconciles, reaps, heartbeats or removes the sandboxes
//! whose row names it (`instance`); another instance's sandbox is marked for deletion and left
//! to its owner.
//!
//! **Invariant:** no sandbox key is stored; each is derived from the master key
//! ([`crate::keyring`]) when needed. Long-lived sessions end when their key, token or sandbox
//! does ([`crate::sessions`]).

pub mod activity;
pub mod cluster;
pub mod control_gate;
pub mod hibernate;
pub mod pause;
pub mod pool;
pub mod profiles;
pub mod reaper;
pub mod reconcile;
pub mod sandboxd;
pub mod snapshots;
pub mod tokens;

#[cfg(test)]
mod hibernate_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod pause_tests;
#[cfg(test)]
mod profiles_tests;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backend::{Backend, BackendError, ContainerSpec, Placement};
use crate::clock::{Clock, SystemClock};
use crate::config::Settings;
use crate::db::{SandboxFilter, SandboxRecord, SandboxStatus, Store, StoreError};
use crate::keyring::Keyring;
use crate::metrics::Metrics;
use crate::secret::new_id;
use crate::sessions::Sessions;
use crate::tokens::{TokenError, TokenSigner};
use crate::validate::{self, SANDBOX_METADATA, invalid};
use activity::ActivityTracker;
use pause::idle_pause;
pub use pause::{LifecycleChange, Why};
use pool::Pool;
use sandboxd::{SandboxProbe, SandboxdClient};

pub use crate::metrics::EndReason;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Invalid(#[from] validate::Invalid),
    /// No such sandbox, or not one the caller may see.
    #[error("no sandbox {0}")]
    NotFound(String),
    /// The sandbox exists, but no live token of it has this id.
    #[error("no token {token_id} of sandbox {sandbox_id}")]
    TokenNotFound {
        sandbox_id: String,
        token_id: String,
    },
    /// No such snapshot, or not one the caller may see.
    #[error("no snapshot {0}")]
    SnapshotNotFound(String),
    /// No such browser profile, or not one the caller may see.
    #[error("no profile {0}")]
    ProfileNotFound(String),
    /// The run exists, but no live share link of it has this id.
    #[error("no share link {share_id} of run {run_id}")]
    ShareLinkNotFound { run_id: String, share_id: String },
    #[error("{0}")]
    Conflict(String),
    #[error("the sandbox did not become ready: {reason}")]
    NotReady { reason: String, logs: String },
    /// Resumed, but its sandboxd does not answer (it stays, as it is).
    #[error("{0}")]
    Unresponsive(String),
    #[error(
        "this API key already has {live} sandboxes running (the limit is {limit}): delete one first"
    )]
    Quota { live: i64, limit: usize },
    #[error("the lifecycle task failed: {0}")]
    Task(String),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a client asks for.
#[derive(Debug, Clone, Default)]
pub struct CreateSpec {
    pub image: Option<String>,
    pub resolution: Option<String>,
    pub idle_timeout_secs: Option<i64>,
    pub max_lifetime_secs: Option<i64>,
    pub env: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    /// A call through the proxies resumes the sandbox when it is paused.
    pub auto_resume: bool,
    /// Idle this long, the reaper pauses it (`None`: the server's default; 0: never).
    pub idle_pause_secs: Option<i64>,
    /// Idle this long, the reaper hibernates it (`None`: the server's default; 0: never).
    pub idle_hibernate_secs: Option<i64>,
    /// Start from this snapshot's home (one of the caller's).
    pub snapshot: Option<String>,
    /// Use this browser profile (one of the caller's, by id or name) and save it at the end.
    pub profile: Option<String>,
    /// Where it may run (backends with nodes to choose from).
    pub placement: Placement,
}

/// What a new container starts with besides its record: the archives of its home and of a
/// browser profile, and where it may be placed.
#[derive(Debug, Clone, Default)]
pub(crate) struct StartWith {
    pub home: Option<std::path::PathBuf>,
    pub profile: Option<std::path::PathBuf>,
    pub placement: Placement,
}

/// A create request's values with the server's defaults filled in.
struct Defaults {
    image: String,
    idle: i64,
    lifetime: i64,
    idle_pause: Option<i64>,
    idle_hibernate: Option<i64>,
}

/// What `POST /v1/sandboxes/{id}/timeout` changes (`None`: unchanged).
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeoutChange {
    pub idle_timeout_secs: Option<i64>,
    pub max_lifetime_secs: Option<i64>,
    /// 0: never pause it when idle.
    pub idle_pause_secs: Option<i64>,
    /// 0: never hibernate it when idle.
    pub idle_hibernate_secs: Option<i64>,
}

/// How a sandbox was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Cold,
    Pool,
}

/// Why a token does not open a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    #[error("{0}")]
    Invalid(#[from] TokenError),
    #[error("token revoked")]
    Revoked,
    #[error("the API key that issued the token was revoked")]
    IssuerRevoked,
    #[error("the token's scope does not match its record")]
    ScopeMismatch,
    #[error("token is for another sandbox")]
    OtherSandbox,
    #[error("token does not grant control")]
    NeedsControl,
    #[error("the token opens Chromium's DevTools only, not a viewer")]
    CdpOnly,
    /// A share link presented to a sandbox route.
    #[error("a share link opens its run's share page only")]
    ShareOnly,
    /// A sandbox token (view, control, cdp) presented as a share link.
    #[error("a viewer token is not a share link: make one from the run")]
    NotAShareLink,
    #[error("the share link is for another run")]
    OtherRun,
}

/// The lifecycle service. Cheap to share (`Arc`).
pub struct Sandboxes {
    pub(crate) store: Store,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) activity: Arc<ActivityTracker>,
    /// sandboxd's readiness and heartbeat routes ([`SandboxdClient`] in the server).
    pub(crate) sandboxd: Arc<dyn SandboxProbe>,
    /// The time every lifecycle decision reads ([`SystemClock`] in the server).
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) signer: TokenSigner,
    pub(crate) keyring: Keyring,
    pub(crate) pool: Pool,
    /// This orchestrator's instance label: the sandboxes it runs.
    pub(crate) instance: String,
    /// This process's replica among those sharing the database ([`crate::replicas`]).
    pub(crate) replica: String,
    /// This process (a new id at every start of the replica).
    pub(crate) boot: String,
    /// The duties this replica takes turns at with its peers.
    pub(crate) duties: crate::replicas::Duties,
    /// Live proxied sessions and their authority.
    pub(crate) sessions: Arc<Sessions>,
    /// Sandboxes being deleted right now (so the API and the reaper do not race).
    deleting: Mutex<HashSet<String>>,
    /// Admission control for starts (`--max-concurrent-starts`), first come first served.
    starts: tokio::sync::Semaphore,
    /// Per sandbox: whether control viewers' input reaches the desktop (a run closes it while
    /// its agent drives and opens it when a person takes over).
    pub(crate) control_gates: Arc<control_gate::ControlGates>,
    /// Held from counting a key's sandboxes to recording the new one, so two creates cannot
    /// both pass the quota with one place left.
    quota: tokio::sync::Mutex<()>,
    /// Per sandbox: the lock its pauses and resumes take turns on.
    transitions: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Pauses and resumes, for the runs' event logs.
    lifecycle: tokio::sync::broadcast::Sender<LifecycleChange>,
    /// Kept homes: hibernated sandboxes' and snapshots' archives.
    pub(crate) homes: crate::homes::HomeStore,
}

/// Removes a sandbox id from the `deleting` set when dropped, however the removal ended.
struct DeletingGuard<'a> {
    set: &'a Mutex<HashSet<String>>,
    id: String,
}

impl Drop for DeletingGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut set) = self.set.lock() {
            set.remove(&self.id);
        }
    }
}

/// What the lifecycle talks to outside the process, and the clock it reads: the seams tests
/// put fakes behind (`crate::testing`).
pub struct Seams {
    /// The container platform.
    pub backend: Arc<dyn Backend>,
    /// sandboxd's readiness and heartbeat routes.
    pub probe: Arc<dyn SandboxProbe>,
    pub clock: Arc<dyn Clock>,
}

impl Seams {
    /// The real probe and clock in front of `backend`.
    pub fn real(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            probe: Arc::new(SandboxdClient::new()),
            clock: Arc::new(SystemClock),
        }
    }
}

impl Sandboxes {
    /// The service with the real sandboxd client and the system clock.
    pub fn new(
        store: Store,
        backend: Arc<dyn Backend>,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        keyring: Keyring,
        instance: String,
    ) -> Arc<Self> {
        Self::with_seams(
            store,
            Seams::real(backend),
            settings,
            metrics,
            keyring,
            instance,
        )
    }

    /// The service over the given platform, probe and clock.
    pub fn with_seams(
        store: Store,
        seams: Seams,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        keyring: Keyring,
        instance: String,
    ) -> Arc<Self> {
        let pool = Pool::new(settings.image.clone(), settings.pool_size);
        let starts = tokio::sync::Semaphore::new(settings.max_concurrent_starts.max(1));
        let homes = crate::homes::HomeStore::new(&settings.data_dir);
        let replica = settings.replica.clone().unwrap_or_else(|| instance.clone());
        let duties = crate::replicas::Duties::new(
            store.clone(),
            replica.clone(),
            seams.clock.clone(),
            crate::replicas::Duties::ttl_for(settings.heartbeat),
        );
        Arc::new(Self {
            store,
            backend: seams.backend,
            settings,
            activity: ActivityTracker::new(seams.clock.clone()),
            sandboxd: seams.probe,
            clock: seams.clock,
            metrics,
            signer: TokenSigner::new(&keyring.token_signing_key()),
            keyring,
            pool,
            instance,
            replica,
            boot: crate::secret::new_id("boot"),
            duties,
            sessions: Sessions::new(),
            deleting: Mutex::new(HashSet::new()),
            starts,
            control_gates: control_gate::ControlGates::new(),
            quota: tokio::sync::Mutex::new(()),
            transitions: Mutex::new(std::collections::HashMap::new()),
            lifecycle: tokio::sync::broadcast::Sender::new(64),
            homes,
        })
    }

    /// The gate control viewers' input passes through (open unless a run closed it), for a
    /// sandbox whose row was just read.
    pub fn control_gate(&self, record: &SandboxRecord) -> tokio::sync::watch::Receiver<bool> {
        self.control_gates
            .subscribe(&record.id, record.control_open, record.control_seq)
    }

    /// Opens or closes the control gate of a sandbox; open sessions follow at once, those
    /// through other replicas within a second.
    pub fn set_control_input(&self, sandbox_id: &str, open: bool, driver: Option<&str>) {
        self.control_gates
            .set(&self.store, sandbox_id, open, driver);
    }

    /// The sandboxes being removed right now.
    #[cfg(test)]
    pub(crate) fn deleting_now(&self) -> Vec<String> {
        self.deleting
            .lock()
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The sandbox's own API key (derived, or stored by an older version).
    pub fn sandbox_key(&self, record: &SandboxRecord) -> String {
        match &record.legacy_key {
            Some(key) => key.clone(),
            None => self.keyring.sandbox_key(&record.id),
        }
    }

    /// Whether this instance runs the sandbox's container.
    pub(crate) fn is_mine(&self, record: &SandboxRecord) -> bool {
        record.instance.as_deref() == Some(self.instance.as_str())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn activity(&self) -> &Arc<ActivityTracker> {
        &self.activity
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Checks a request and fills in defaults; returns (image, idle, lifetime).
    fn validate(&self, spec: &CreateSpec) -> Result<Defaults, validate::Invalid> {
        let settings = &self.settings;
        let image = validate::image(
            spec.image.as_deref(),
            &settings.image,
            &settings.allowed_images,
        )?;
        if let Some(resolution) = &spec.resolution {
            validate::resolution(resolution)?;
        }
        let cap = settings.lifetime_cap_secs;
        let idle = validate::within(
            "idle_timeout_secs",
            spec.idle_timeout_secs.unwrap_or(settings.idle_timeout_secs),
            1..=cap,
        )?;
        let lifetime = validate::within(
            "max_lifetime_secs",
            spec.max_lifetime_secs.unwrap_or(settings.max_lifetime_secs),
            1..=cap,
        )?;
        let idle_pause = idle_pause(spec.idle_pause_secs, settings.idle_pause_secs, cap)?;
        let idle_hibernate =
            hibernate::idle_hibernate(spec.idle_hibernate_secs, settings.idle_hibernate_secs, cap)?;
        validate::env(&spec.env)?;
        validate::metadata(&spec.metadata, SANDBOX_METADATA)?;
        validate::placement(&spec.placement.constraints, &spec.placement.preferences)?;
        self.backend_can(spec, idle_pause, idle_hibernate)?;
        Ok(Defaults {
            image,
            idle,
            lifetime,
            idle_pause,
            idle_hibernate,
        })
    }

    /// Refuses, naming the field, what the request asks for that this orchestrator's backend
    /// cannot do (see [`crate::backend::BackendFeatures`]).
    fn backend_can(
        &self,
        spec: &CreateSpec,
        idle_pause: Option<i64>,
        idle_hibernate: Option<i64>,
    ) -> Result<(), validate::Invalid> {
        let features = self.backend.features();
        let refuse = |field: &str, what: &str| {
            Err(invalid(
                field,
                format!("{what} is not possible with this orchestrator's backend"),
            ))
        };
        if !features.placement && !spec.placement.is_empty() {
            return refuse("placement", "placing a sandbox on chosen nodes");
        }
        if !features.pause && (spec.auto_resume || idle_pause.is_some()) {
            let field = if spec.auto_resume {
                "auto_resume"
            } else {
                "idle_pause_secs"
            };
            return refuse(field, "pausing a sandbox");
        }
        if !features.home_archives {
            for (field, given) in [
                ("idle_hibernate_secs", idle_hibernate.is_some()),
                ("snapshot", spec.snapshot.is_some()),
                ("profile", spec.profile.is_some()),
            ] {
                if given {
                    return refuse(field, "starting a sandbox from a kept home or profile");
                }
            }
        }
        Ok(())
    }

    /// Creates a sandbox for `owner` and returns it once ready. Takes a ready one from the warm
    /// pool when the request allows (default image, no env, default resolution). The work runs
    /// in its own task: if the caller goes away, the sandbox is still finished (and owned by the
    /// caller's key) or cleaned up, never left half created.
    pub async fn create(
        self: &Arc<Self>,
        owner_key_id: &str,
        spec: CreateSpec,
    ) -> Result<(SandboxRecord, Source), SandboxError> {
        let this = self.clone();
        let owner = owner_key_id.to_string();
        tokio::spawn(async move { this.create_now(&owner, spec).await })
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?
    }

    async fn create_now(
        self: &Arc<Self>,
        owner_key_id: &str,
        spec: CreateSpec,
    ) -> Result<(SandboxRecord, Source), SandboxError> {
        let Defaults {
            mut image,
            idle,
            lifetime,
            idle_pause,
            idle_hibernate,
        } = self.validate(&spec)?;
        let mut resolution = spec.resolution.clone();
        let snapshot = match &spec.snapshot {
            None => None,
            Some(snapshot_id) => {
                let snapshot = self
                    .snapshot_to_start_from(snapshot_id, owner_key_id, spec.image.as_deref())
                    .await
                    .map_err(|error| match error {
                        SandboxError::SnapshotNotFound(id) => {
                            invalid("snapshot", format!("no snapshot {id}")).into()
                        }
                        other => other,
                    })?;
                image = snapshot.image.clone();
                resolution = resolution.or_else(|| snapshot.resolution.clone());
                Some(
                    self.homes
                        .path(crate::homes::Kind::Snapshot, &snapshot.id)
                        .map_err(|e| SandboxError::Task(e.to_string()))?,
                )
            }
        };
        let profile = match &spec.profile {
            None => None,
            Some(profile) => Some(self.profile_to_mount(profile, owner_key_id).await?),
        };
        let started = Instant::now();
        let quota = self.quota.lock().await;
        let quota_wait = started.elapsed();
        let limit = self.settings.max_sandboxes_per_key;
        // The pool serves requests for what its members are: the bare image at the default
        // size, or the snapshot they started from (`--pool-snapshot`; a request names only its
        // own key's snapshots).
        if spec.env.is_empty()
            && resolution.as_deref() == self.pool.resolution()
            && spec.snapshot.as_deref() == self.pool.snapshot().map(|s| s.id.as_str())
            && profile.is_none()
            && spec.placement.is_empty()
            && image == self.pool.image()
        {
            let now = self.clock.now_ms();
            let claim = |id: String| SandboxRecord {
                id,
                owner_key_id: Some(owner_key_id.to_string()),
                image: image.clone(),
                status: SandboxStatus::Ready,
                pooled: false,
                container_id: None,
                address: None,
                instance: Some(self.instance.clone()),
                legacy_key: None,
                resolution: resolution.clone(),
                env: BTreeMap::new(),
                metadata: spec.metadata.clone(),
                idle_timeout_secs: idle,
                max_lifetime_secs: lifetime,
                created_at: now,
                ready_at: None,
                expires_at: now + lifetime * 1000,
                last_active_at: now,
                ended_at: None,
                error: None,
                paused_at: None,
                auto_resume: spec.auto_resume,
                idle_pause_secs: idle_pause,
                hibernated_at: None,
                idle_hibernate_secs: idle_hibernate,
                replica: None,
                control_open: true,
                control_seq: 0,
            };
            // The quota is counted by the claim's write itself (one round trip).
            let limit = (limit > 0).then_some(limit);
            if let Some(record) = self.pool.claim(self, limit, claim).await? {
                drop(quota);
                let total = started.elapsed();
                self.activity.touch(&record.id);
                self.metrics.observe_create("pool", "ok", total);
                // Where a claim's time goes, step by step (the claims benchmark reads these):
                // waiting for the key's quota lock, then taking a member (its row written,
                // the key's quota counted in the same statement).
                let ms = |d: Duration| d.as_secs_f64() * 1000.0;
                tracing::info!(
                    sandbox_id = %record.id,
                    source = "pool",
                    quota_wait_ms = ms(quota_wait),
                    claim_ms = ms(total.saturating_sub(quota_wait)),
                    total_ms = ms(total),
                    "sandbox claimed from the warm pool"
                );
                return Ok((record, Source::Pool));
            }
        }
        let now = self.clock.now_ms();
        let record = SandboxRecord {
            id: new_id("sbx-"),
            owner_key_id: Some(owner_key_id.to_string()),
            image,
            status: SandboxStatus::Creating,
            pooled: false,
            container_id: None,
            address: None,
            instance: Some(self.instance.clone()),
            legacy_key: None,
            resolution,
            env: spec.env,
            metadata: spec.metadata,
            idle_timeout_secs: idle,
            max_lifetime_secs: lifetime,
            created_at: now,
            ready_at: None,
            expires_at: now + lifetime * 1000,
            last_active_at: now,
            ended_at: None,
            error: None,
            paused_at: None,
            auto_resume: spec.auto_resume,
            idle_pause_secs: idle_pause,
            hibernated_at: None,
            idle_hibernate_secs: idle_hibernate,
            replica: Some(self.replica.clone()),
            control_open: true,
            control_seq: 0,
        };
        if limit > 0 {
            // Counted and written in one turn of the key's, in every replica.
            let cap = i64::try_from(limit).unwrap_or(i64::MAX);
            if let crate::db::QuotaInsert::Full { live } =
                self.store.insert_sandbox_within_quota(&record, cap).await?
            {
                return Err(SandboxError::Quota { live, limit });
            }
        } else {
            self.store.insert_sandbox(&record).await?;
        }
        drop(quota);
        let mut restore = StartWith {
            home: snapshot,
            profile: None,
            placement: spec.placement,
        };
        if let Some(profile) = &profile {
            // Held once the row exists: a profile whose holder has no row is free.
            match self.hold_profile(profile, &record.id).await {
                Ok(archive) => restore.profile = archive,
                Err(error) => {
                    let _ = self.store.delete_sandbox(&record.id).await;
                    return Err(error);
                }
            }
        }
        match self.start_inserted(record, restore).await {
            Ok(record) => {
                self.metrics.observe_create("cold", "ok", started.elapsed());
                Ok((record, Source::Cold))
            }
            Err(error) => {
                self.metrics
                    .observe_create("cold", "failed", started.elapsed());
                Err(error)
            }
        }
    }

    /// Inserts the record, starts its container and waits until sandboxd is ready. On failure
    /// the container and the row are removed and the error carries the container's last output.
    pub(crate) async fn start(
        &self,
        record: SandboxRecord,
        restore: StartWith,
    ) -> Result<SandboxRecord, SandboxError> {
        self.store.insert_sandbox(&record).await?;
        self.start_inserted(record, restore).await
    }

    /// [`start`](Self::start) for a record already inserted, its home and browser profile
    /// restored from `restore`'s archives. A start that fails frees the profile it held.
    async fn start_inserted(
        &self,
        record: SandboxRecord,
        restore: StartWith,
    ) -> Result<SandboxRecord, SandboxError> {
        let permit = self.starts.acquire().await;
        let result = self.boot(record.clone(), restore).await;
        drop(permit);
        if result.is_err() {
            let _ = self.store.delete_sandbox(&record.id).await;
            let _ = self.store.release_profile(&record.id).await;
        }
        result
    }

    /// What to start for `record`: its image, environment (screen size, the dead-man switch),
    /// its derived key, the limits, and the archives to restore, if any.
    fn container_spec(
        &self,
        record: &SandboxRecord,
        restore: StartWith,
    ) -> Result<ContainerSpec, SandboxError> {
        let mut env = record.env.clone();
        if let Some(resolution) = &record.resolution {
            let (width, height) = validate::resolution(resolution)?;
            env.insert("SCREEN_WIDTH".into(), width.to_string());
            env.insert("SCREEN_HEIGHT".into(), height.to_string());
        }
        // The dead-man switch: three missed heartbeats and the sandbox stops (and, being
        // auto-removed, disappears).
        env.insert(
            "SANDBOXD_IDLE_EXIT_SECS".into(),
            (self.settings.heartbeat.as_secs() * 3).max(3).to_string(),
        );
        Ok(ContainerSpec {
            sandbox_id: record.id.clone(),
            image: record.image.clone(),
            env,
            api_key: self.sandbox_key(record),
            limits: self.settings.limits.clone(),
            home_archive: restore.home,
            profile_archive: restore.profile,
            placement: restore.placement,
        })
    }

    /// Starts the container of an inserted record and waits until sandboxd is ready.
    async fn boot(
        &self,
        mut record: SandboxRecord,
        restore: StartWith,
    ) -> Result<SandboxRecord, SandboxError> {
        let spec = self.container_spec(&record, restore)?;
        let key = spec.api_key.clone();
        let started = match self.backend.start(&spec).await {
            Ok(started) => started,
            Err(error) => {
                let _ = self.store.delete_sandbox(&record.id).await;
                tracing::warn!(sandbox_id = %record.id, %error, "starting the container failed");
                return Err(error.into());
            }
        };
        record.container_id = Some(started.container_id.clone());
        record.address = Some(started.address.clone());
        if let Err(error) = self
            .store
            .set_container(&record.id, &started.container_id, &started.address)
            .await
        {
            let _ = self.backend.remove(&started.container_id).await;
            let _ = self.store.delete_sandbox(&record.id).await;
            return Err(error.into());
        }
        if let Err(reason) = self
            .wait_ready(&started.container_id, &started.address, &key)
            .await
        {
            let logs = self.remove_unready(&started.container_id).await;
            let _ = self.store.delete_sandbox(&record.id).await;
            self.metrics.sandbox_ended(EndReason::Failed);
            tracing::warn!(sandbox_id = %record.id, %reason, "sandbox failed to become ready; removed");
            return Err(SandboxError::NotReady { reason, logs });
        }
        let now = self.clock.now_ms();
        if let Err(error) = self.store.mark_ready(&record.id, now).await {
            // Ready, but not recorded as such: remove the container with its row, as for any
            // failed start (no heartbeat reaches a container whose row is gone).
            let _ = self.backend.remove(&started.container_id).await;
            let _ = self.store.delete_sandbox(&record.id).await;
            self.metrics.sandbox_ended(EndReason::Failed);
            tracing::warn!(sandbox_id = %record.id, %error, "recording the sandbox as ready failed; removed");
            return Err(error.into());
        }
        record.status = SandboxStatus::Ready;
        record.ready_at = Some(now);
        record.last_active_at = now;
        self.activity.seed(&record.id, now);
        tracing::info!(sandbox_id = %record.id, container_id = %started.container_id, pooled = record.pooled, "sandbox ready");
        Ok(record)
    }

    /// Removes a container that did not get ready; its last output first, for the error.
    async fn remove_unready(&self, container_id: &str) -> String {
        let logs = self
            .backend
            .logs_tail(container_id, 30)
            .await
            .unwrap_or_else(|e| format!("(logs unavailable: {e})"));
        let _ = self.backend.remove(container_id).await;
        logs
    }

    /// Polls `/readyz` until 200, the container exits, or the ready timeout passes.
    async fn wait_ready(&self, container_id: &str, address: &str, key: &str) -> Result<(), String> {
        let deadline = self.clock.now() + self.settings.ready_timeout;
        let mut last_check = self.clock.now();
        // sandboxd's /readyz is cheap (no process is probed per call), so polling often costs
        // little and saves the caller the tail of a long interval.
        let interval = Duration::from_millis(10);
        loop {
            if let Ok(true) = self.sandboxd.ready(address, key).await {
                return Ok(());
            }
            if self.clock.now().duration_since(last_check) > Duration::from_secs(1) {
                last_check = self.clock.now();
                match self.backend.inspect(container_id).await {
                    Ok(Some(info)) if info.running => {}
                    Ok(_) => return Err("the container exited before it was ready".into()),
                    Err(error) => return Err(error.to_string()),
                }
            }
            if self.clock.now() >= deadline {
                let last = self.sandboxd.readiness_message(address, key).await;
                return Err(format!(
                    "not ready after {} s (last answer: {})",
                    self.settings.ready_timeout.as_secs(),
                    last.chars().take(500).collect::<String>()
                ));
            }
            self.clock.sleep(interval).await;
        }
    }

    /// One sandbox, as seen by `owner` (`None`: any owner, for admins).
    pub async fn get(&self, id: &str, owner: Option<&str>) -> Result<SandboxRecord, SandboxError> {
        match self.store.sandbox(id).await? {
            Some(record)
                if !record.pooled
                    && owner.is_none_or(|o| record.owner_key_id.as_deref() == Some(o)) =>
            {
                Ok(record)
            }
            _ => Err(SandboxError::NotFound(id.to_string())),
        }
    }

    /// One sandbox that is ready (for the proxies): not found, or a conflict naming its state.
    /// A paused sandbox created with `auto_resume` is resumed first.
    pub async fn get_ready(
        &self,
        id: &str,
        owner: Option<&str>,
    ) -> Result<SandboxRecord, SandboxError> {
        self.ready_or_resume(id, owner, Why::AutoResume).await
    }

    /// Sandboxes matching the filter and every metadata pair.
    pub async fn list(
        &self,
        owner: Option<&str>,
        status: Option<SandboxStatus>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxRecord>, SandboxError> {
        let filter = SandboxFilter {
            owner_key_id: owner.map(str::to_owned),
            status,
            include_pooled: false,
            ..Default::default()
        };
        let mut records = self.store.list_sandboxes(&filter).await?;
        records.retain(|r| metadata.iter().all(|(k, v)| r.metadata.get(k) == Some(v)));
        Ok(records)
    }

    /// Changes the idle timeout, the idle pause and/or the lifetime (counted from creation).
    pub async fn set_timeouts(
        &self,
        id: &str,
        owner: Option<&str>,
        change: TimeoutChange,
    ) -> Result<SandboxRecord, SandboxError> {
        let TimeoutChange {
            idle_timeout_secs,
            max_lifetime_secs,
            idle_pause_secs,
            idle_hibernate_secs,
        } = change;
        let mut record = self.get(id, owner).await?;
        if !record.status.is_live()
            && !matches!(
                record.status,
                SandboxStatus::Creating | SandboxStatus::Paused | SandboxStatus::Hibernated
            )
        {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is {}",
                record.status.as_str()
            )));
        }
        let cap = self.settings.lifetime_cap_secs;
        if let Some(idle) = idle_timeout_secs {
            record.idle_timeout_secs = validate::within("idle_timeout_secs", idle, 1..=cap)?;
        }
        if let Some(lifetime) = max_lifetime_secs {
            validate::within("max_lifetime_secs", lifetime, 1..=cap)?;
            let expires_at = record.created_at + lifetime * 1000;
            if expires_at <= self.clock.now_ms() {
                return Err(invalid(
                    "max_lifetime_secs",
                    "the sandbox is already older than that; use DELETE to end it",
                )
                .into());
            }
            record.max_lifetime_secs = lifetime;
            record.expires_at = expires_at;
        }
        if idle_pause_secs.is_some() {
            record.idle_pause_secs = idle_pause(idle_pause_secs, None, cap)?;
        }
        if idle_hibernate_secs.is_some() {
            record.idle_hibernate_secs = hibernate::idle_hibernate(idle_hibernate_secs, None, cap)?;
        }
        self.store
            .set_timeouts(
                id,
                &crate::db::Timeouts {
                    idle_timeout_secs: record.idle_timeout_secs,
                    max_lifetime_secs: record.max_lifetime_secs,
                    expires_at: record.expires_at,
                    idle_pause_secs: record.idle_pause_secs,
                    idle_hibernate_secs: record.idle_hibernate_secs,
                },
            )
            .await?;
        self.activity.touch(id);
        Ok(record)
    }

    /// Deletes a sandbox for a client. The removal runs in its own task, so it completes even
    /// if the client goes away. A sandbox run by another instance is marked for deletion and
    /// removed by that instance.
    pub async fn delete(
        self: &Arc<Self>,
        id: &str,
        owner: Option<&str>,
    ) -> Result<(), SandboxError> {
        let record = self.get(id, owner).await?;
        if record.status == SandboxStatus::Creating {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} is still being created; delete it once the create call returns"
            )));
        }
        if !self.is_mine(&record) {
            // No replica of this instance deletes it: the owner instance's reaper does.
            self.store.mark_deleting(&record.id, None).await?;
            self.sessions
                .end_sandbox(&record.id, "the sandbox was deleted");
            return Ok(());
        }
        let this = self.clone();
        tokio::spawn(async move { this.remove(&record, EndReason::Deleted).await })
            .await
            .map_err(|e| SandboxError::Task(e.to_string()))?
    }

    /// Removes the container (if any) and the record. Idempotent: concurrent calls for the same
    /// sandbox do the work once, and a call with a record read before another call removed the
    /// sandbox (two reapers, a reaper and a client) does nothing. The `sandboxes_ended` metric
    /// counts the sandbox once, under the reason of the call that removed it (a lost sandbox was
    /// counted when it was marked lost).
    pub(crate) async fn remove(
        &self,
        record: &SandboxRecord,
        reason: EndReason,
    ) -> Result<(), SandboxError> {
        {
            let Ok(mut deleting) = self.deleting.lock() else {
                return Ok(());
            };
            if !deleting.insert(record.id.clone()) {
                return Ok(());
            }
        }
        let _deleting = DeletingGuard {
            set: &self.deleting,
            id: record.id.clone(),
        };
        self.sessions
            .end_sandbox(&record.id, "the sandbox is being removed");
        // The record may be stale (read by a reaper pass before another call removed the
        // sandbox): act on the row as it is now.
        let result = async {
            let Some(current) = self.store.sandbox(&record.id).await? else {
                return Ok(None);
            };
            // Another replica is deleting it now: its removal, not a second one.
            if current.status == SandboxStatus::Deleting
                && current
                    .replica
                    .as_deref()
                    .is_some_and(|r| r != self.replica)
            {
                let peers = self.duties.live_peers().await?;
                if self
                    .duties
                    .in_progress_elsewhere(current.replica.as_deref(), &peers)
                {
                    return Ok(None);
                }
            }
            if current.status != SandboxStatus::Lost {
                self.store
                    .mark_deleting(&current.id, Some(&self.replica))
                    .await?;
            }
            // Its browser profile is saved while the browser (or its kept home) is still there.
            self.save_held_profile(&current).await;
            if let Some(container_id) = &current.container_id {
                self.backend.remove(container_id).await?;
            }
            self.store.delete_sandbox(&current.id).await?;
            let _ = self.store.release_profile(&current.id).await;
            // A hibernated sandbox's kept home goes with it.
            if let Err(error) = self
                .homes
                .remove(crate::homes::Kind::Hibernated, &current.id)
                .await
            {
                tracing::warn!(sandbox_id = %current.id, %error, "removing a kept home failed");
            }
            Ok::<_, SandboxError>(Some(current.status))
        }
        .await;
        match &result {
            Ok(removed) => {
                self.activity.forget(&record.id);
                self.pool.forget(&record.id);
                self.forget_transitions(&record.id);
                self.control_gates.forget(&record.id);
                if let Some(was) = removed {
                    if *was != SandboxStatus::Lost {
                        self.metrics.sandbox_ended(reason);
                    }
                    tracing::info!(sandbox_id = %record.id, reason = reason.as_str(), "sandbox removed");
                }
            }
            Err(error) => {
                // Given up here, so the reaper (maybe another replica's) retries it.
                let _ = self.store.release_deleting(&record.id, &self.replica).await;
                tracing::warn!(sandbox_id = %record.id, %error, "removing the sandbox failed; the reaper retries");
            }
        }
        result.map(drop)
    }
}
