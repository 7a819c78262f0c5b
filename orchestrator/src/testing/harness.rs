//! The real lifecycle service over the fakes and a real SQLite database in a temporary
//! directory, with the checks tests share.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use super::{FakePlatform, ManualClock};
use crate::clock::Clock;
use crate::config::ServeArgs;
use crate::db::{SandboxFilter, SandboxRecord, SandboxStatus, Store, sqlite_url};
use crate::keyring::Keyring;
use crate::metrics::{Metrics, ReasonLabels};
use crate::sandboxes::{CreateSpec, EndReason, Sandboxes, Seams, Source};

/// The instance label of the service under test.
pub(crate) const INSTANCE: &str = "test-instance";
/// The API key id sandboxes are created for.
pub(crate) const OWNER: &str = "key-owner";

#[derive(Parser)]
// A test's own flags come after the defaults and win.
#[command(args_override_self = true)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// One lifecycle service under test.
pub(crate) struct Harness {
    pub(crate) sandboxes: Arc<Sandboxes>,
    pub(crate) platform: Arc<FakePlatform>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    args: Vec<String>,
    pub(crate) dir: tempfile::TempDir,
}

impl Harness {
    /// The service with the default settings.
    pub(crate) async fn new() -> Self {
        Self::with_flags(&[]).await
    }

    /// The service with these `serve` flags on top of the test defaults (no warm pool, four
    /// starts at once, a 30 s ready timeout).
    pub(crate) async fn with_flags(flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::connect(&sqlite_url(dir.path()))
            .await
            .expect("a SQLite store");
        let platform = Arc::new(FakePlatform::new(INSTANCE));
        let clock = ManualClock::new();
        let metrics = Arc::new(Metrics::new());
        let args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let sandboxes = service(&dir, &args, &store, &platform, &clock, &metrics);
        Self {
            sandboxes,
            platform,
            clock,
            store,
            metrics,
            args,
            dir,
        }
    }

    /// Replaces the service with a new one over the same database, platform and clock, with
    /// nothing in memory: the orchestrator after a restart (call `reconcile`, as `serve` does).
    pub(crate) fn restart(&mut self) {
        self.sandboxes = service(
            &self.dir,
            &self.args,
            &self.store,
            &self.platform,
            &self.clock,
            &self.metrics,
        );
    }

    /// [`restart`](Self::restart) with other `serve` flags.
    pub(crate) fn restart_with_flags(&mut self, flags: &[&str]) {
        self.args = flags.iter().map(|f| f.to_string()).collect();
        self.restart();
    }

    /// The database's URL (for a test that reaches into SQLite itself).
    pub(crate) fn database_url(&self) -> String {
        sqlite_url(self.dir.path())
    }

    /// A row of this instance, ready, with the lifecycle's defaults, to insert by hand.
    pub(crate) fn record(&self, id: &str, container_id: Option<&str>) -> SandboxRecord {
        let now = self.clock.now_ms();
        SandboxRecord {
            id: id.to_string(),
            owner_key_id: Some(OWNER.into()),
            image: "agentbox/sandbox:latest".into(),
            status: SandboxStatus::Ready,
            pooled: false,
            container_id: container_id.map(str::to_owned),
            address: None,
            instance: Some(INSTANCE.into()),
            legacy_key: None,
            resolution: None,
            env: Default::default(),
            metadata: Default::default(),
            idle_timeout_secs: 600,
            max_lifetime_secs: 3600,
            created_at: now,
            ready_at: Some(now),
            expires_at: now + 3600 * 1000,
            last_active_at: now,
            ended_at: None,
            error: None,
            paused_at: None,
            auto_resume: false,
            idle_pause_secs: None,
            hibernated_at: None,
            idle_hibernate_secs: None,
            replica: None,
            control_open: true,
            control_seq: 0,
        }
    }

    /// Creates a sandbox for [`OWNER`] with the default spec.
    pub(crate) async fn create(&self) -> SandboxRecord {
        let (record, _) = self
            .sandboxes
            .create(OWNER, CreateSpec::default())
            .await
            .expect("creating a sandbox");
        record
    }

    /// Creates one with a spec the warm pool cannot serve (so it is always cold).
    pub(crate) async fn create_cold(&self) -> SandboxRecord {
        let (record, source) = self
            .sandboxes
            .create(OWNER, cold_spec())
            .await
            .expect("creating a sandbox");
        assert_eq!(source, Source::Cold);
        record
    }

    /// Adds `n` ready warm-pool members.
    pub(crate) async fn fill_pool(&self, n: usize) -> Vec<SandboxRecord> {
        let mut members = Vec::new();
        for _ in 0..n {
            let member = self
                .sandboxes
                .create_pool_member()
                .await
                .expect("creating a pool member");
            self.sandboxes.pool.push(member.clone());
            members.push(member);
        }
        members
    }

    /// The row of a sandbox.
    pub(crate) async fn row(&self, id: &str) -> Option<SandboxRecord> {
        self.store.sandbox(id).await.expect("reading a sandbox row")
    }

    /// Every row of this instance, pool members included.
    pub(crate) async fn rows(&self) -> Vec<SandboxRecord> {
        self.store
            .list_sandboxes(&SandboxFilter {
                include_pooled: true,
                instance: Some(INSTANCE.into()),
                ..Default::default()
            })
            .await
            .expect("listing sandbox rows")
    }

    /// How many sandboxes ended for `reason` (the `sandboxes_ended` metric).
    pub(crate) fn ended(&self, reason: EndReason) -> u64 {
        self.metrics
            .ended
            .get_or_create(&ReasonLabels {
                reason: reason.as_str().into(),
            })
            .get()
    }

    /// Fails the test when anything leaked (see [`leaks`](Self::leaks)).
    pub(crate) async fn assert_nothing_leaks(&self) {
        let leaks = self.leaks().await;
        assert!(leaks.is_empty(), "leaks: {leaks:#?}");
    }

    /// The "nothing leaks" invariant, checked when no lifecycle work is in flight: every
    /// container of this instance belongs to a live or paused row that names it (paused exactly
    /// when the row is), and every live or paused row has its container; no row is left creating or deleting; a lost row has no container; the
    /// warm pool's queue holds exactly the live pool members; nothing in memory (activity
    /// clocks, deletions in progress) outlives its row. Returns what is wrong.
    pub(crate) async fn leaks(&self) -> Vec<String> {
        let mut leaks = Vec::new();
        let rows = self.rows().await;
        let containers: Vec<_> = self
            .platform
            .containers()
            .into_iter()
            .filter(|c| c.instance == INSTANCE)
            .collect();
        for container in &containers {
            match rows
                .iter()
                .find(|r| r.container_id.as_deref() == Some(&container.container_id))
            {
                None => leaks.push(format!(
                    "container {} (sandbox {:?}) has no row",
                    container.container_id, container.sandbox_id
                )),
                Some(row) if !row.status.is_live() && row.status != SandboxStatus::Paused => leaks
                    .push(format!(
                        "container {} belongs to sandbox {}, which is {}",
                        container.container_id,
                        row.id,
                        row.status.as_str()
                    )),
                Some(row) if row.status == SandboxStatus::Paused && !container.paused => {
                    leaks.push(format!(
                        "sandbox {} is paused but its container {} is not",
                        row.id, container.container_id
                    ));
                }
                Some(row) if row.status != SandboxStatus::Paused && container.paused => {
                    leaks.push(format!(
                        "container {} is paused but its sandbox {} is {}",
                        container.container_id,
                        row.id,
                        row.status.as_str()
                    ));
                }
                Some(_) => {}
            }
        }
        for row in &rows {
            let container = row
                .container_id
                .as_ref()
                .and_then(|id| containers.iter().find(|c| &c.container_id == id));
            match row.status {
                SandboxStatus::Creating
                | SandboxStatus::Deleting
                | SandboxStatus::Hibernating
                | SandboxStatus::Waking => {
                    leaks.push(format!(
                        "sandbox {} is left {}",
                        row.id,
                        row.status.as_str()
                    ));
                }
                SandboxStatus::Ready | SandboxStatus::Degraded | SandboxStatus::Paused
                    if container.is_none() =>
                {
                    leaks.push(format!(
                        "sandbox {} is {} without a container",
                        row.id,
                        row.status.as_str()
                    ));
                }
                SandboxStatus::Lost if container.is_some() => {
                    leaks.push(format!("sandbox {} is lost but has a container", row.id));
                }
                SandboxStatus::Hibernated if row.container_id.is_some() => {
                    leaks.push(format!("sandbox {} is hibernated with a container", row.id));
                }
                SandboxStatus::Hibernated
                    if !self
                        .sandboxes
                        .homes
                        .path(crate::homes::Kind::Hibernated, &row.id)
                        .is_ok_and(|p| p.exists()) =>
                {
                    leaks.push(format!("sandbox {} is hibernated without its home", row.id));
                }
                _ => {}
            }
        }
        let queued: BTreeSet<String> = self.sandboxes.pool.ready_ids().into_iter().collect();
        let members: BTreeSet<String> = rows
            .iter()
            .filter(|r| r.pooled && r.status.is_live())
            .map(|r| r.id.clone())
            .collect();
        if queued != members {
            leaks.push(format!(
                "the pool's queue {queued:?} is not its live members {members:?}"
            ));
        }
        for id in self.sandboxes.homes.ids(crate::homes::Kind::Hibernated) {
            if !rows
                .iter()
                .any(|r| r.id == id && r.status == SandboxStatus::Hibernated)
            {
                leaks.push(format!("a kept home outlives sandbox {id}'s hibernation"));
            }
        }
        let profiles = self
            .sandboxes
            .store
            .profiles(None)
            .await
            .unwrap_or_default();
        for id in self.sandboxes.homes.ids(crate::homes::Kind::Profile) {
            if !profiles.iter().any(|p| p.id == id) {
                leaks.push(format!("a profile's archive outlives profile {id}"));
            }
        }
        let live: BTreeSet<&str> = rows
            .iter()
            .filter(|r| {
                r.status.is_live()
                    || matches!(r.status, SandboxStatus::Paused | SandboxStatus::Hibernated)
            })
            .map(|r| r.id.as_str())
            .collect();
        for id in self.sandboxes.activity.tracked() {
            if !live.contains(id.as_str()) {
                leaks.push(format!("an activity clock outlives sandbox {id}"));
            }
        }
        let deleting = self.sandboxes.deleting_now();
        if !deleting.is_empty() {
            leaks.push(format!("deletions still marked in progress: {deleting:?}"));
        }
        leaks
    }
}

fn service(
    dir: &tempfile::TempDir,
    flags: &[String],
    store: &Store,
    platform: &Arc<FakePlatform>,
    clock: &Arc<ManualClock>,
    metrics: &Arc<Metrics>,
) -> Arc<Sandboxes> {
    let data_dir = dir.path().display().to_string();
    let mut args: Vec<&str> = vec![
        "orchestrator",
        "--data-dir",
        &data_dir,
        "--pool-size",
        "0",
        "--max-concurrent-starts",
        "4",
        "--ready-timeout-secs",
        "30",
    ];
    args.extend(flags.iter().map(String::as_str));
    let settings = Cli::try_parse_from(args)
        .expect("valid serve flags")
        .serve
        .settings()
        .expect("valid settings");
    Sandboxes::with_seams(
        store.clone(),
        Seams {
            backend: platform.clone(),
            probe: platform.clone(),
            clock: clock.clone(),
        },
        Arc::new(settings),
        metrics.clone(),
        Keyring::from_bytes([7; 32]),
        INSTANCE.into(),
    )
}

/// A spec the warm pool cannot serve.
pub(crate) fn cold_spec() -> CreateSpec {
    CreateSpec {
        resolution: Some("1280x800".into()),
        ..CreateSpec::default()
    }
}

/// Waits (in real time, up to 10 s) until `check` holds: for work a test set off in a task it
/// no longer awaits.
pub(crate) async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
