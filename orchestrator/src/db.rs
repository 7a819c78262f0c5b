//! The orchestrator's state in SQL: API keys, sandboxes, viewer tokens and a few settings.
//!
//! One code path for SQLite (the default, a file in the data directory) and Postgres
//! (`DATABASE_URL=postgres://...`), through sqlx's `Any` driver and one set of portable
//! migrations (`orchestrator/migrations/`). Placeholders are `$n`, which both accept; timestamps
//! are milliseconds since the epoch, flags 0/1, maps JSON text.
//!
//! Runs, their event log and artifacts are in [`runs`]; web console sign-ins in [`console`];
//! the sealed credentials for remote A2A agents in [`credentials`].
//!
//! **Invariant:** this module knows SQL and nothing of HTTP or Docker.

mod console;
mod credentials;
mod homes;
mod notifications;
mod profiles;
mod reachability;
mod replicas;
mod run_commands;
mod runs;
mod viewer_tickets;

pub use console::ConsoleSessionRecord;
pub use credentials::CredentialRecord;
pub use homes::WakeMark;
pub use homes::{SnapshotRecord, SnapshotStatus};
pub use profiles::{ProfileRecord, ProfileTake};
pub use replicas::{QuotaInsert, ReplicaRecord};
pub use run_commands::RunCommandRecord;
pub use runs::{
    ArtifactRecord, EventRecord, RunFilter, RunInsert, RunRecord, RunStatus, StatusChange,
};
pub use viewer_tickets::ViewerTicketRecord;

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::any::{AnyPoolOptions, AnyRow};
// Dynamic SQL here is built only from constants and `$n` placeholders, never from input.
use sqlx::{AnyPool, Row};

/// Errors from the store, naming the step.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("connecting to the database {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("applying migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database query ({what}): {source}")]
    Query {
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("corrupt row in {what}: {message}")]
    Corrupt { what: &'static str, message: String },
}

impl StoreError {
    /// The database is busy: another writer held its lock past the busy timeout (SQLite's
    /// `SQLITE_BUSY` and `SQLITE_LOCKED`, with their extended codes; Postgres' lock timeouts,
    /// serialization failures and deadlocks) or no pooled connection came free in time.
    /// Nothing was written, and the same call may well succeed a moment later.
    pub fn is_busy(&self) -> bool {
        let (Self::Query { source, .. } | Self::Connect { source, .. }) = self else {
            return false;
        };
        match source {
            sqlx::Error::PoolTimedOut => true,
            sqlx::Error::Database(error) => {
                if let Some(sqlite) = error.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
                    use sqlx::error::DatabaseError;
                    // Extended result codes keep the primary code in their low byte.
                    sqlite
                        .code()
                        .and_then(|code| code.parse::<i32>().ok())
                        .is_some_and(|code| matches!(code & 0xff, SQLITE_BUSY | SQLITE_LOCKED))
                } else if let Some(postgres) =
                    error.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                {
                    matches!(postgres.code(), "55P03" | "40001" | "40P01")
                } else {
                    false
                }
            }
            _ => false,
        }
    }
}

/// SQLite's primary result codes for a lock held elsewhere (sqlite3.h).
const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;

/// How long a SQLite write waits for another writer's lock before the call fails as busy
/// ([`StoreError::is_busy`]): the orchestrator's own transactions take milliseconds, so only a
/// lock held from outside (a backup, a `sqlite3` shell) lasts this long, and the API answers
/// 503 with `Retry-After` instead of holding the request.
const SQLITE_BUSY_TIMEOUT: &str = "PRAGMA busy_timeout = 2000";

/// How long a call waits for a pooled connection before it fails as busy.
const POOL_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

type Result<T> = std::result::Result<T, StoreError>;

fn query_error(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Query { what, source }
}

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxStatus {
    /// Container being created or started, not yet answering `/readyz`.
    Creating,
    /// Ready and handed out (or waiting in the warm pool when `pooled`).
    Ready,
    /// Running, but sandboxd reports a required program not ready (the heartbeat saw it;
    /// `error` says which). The proxies still reach it, so it can be inspected and repaired.
    Degraded,
    /// Being removed.
    Deleting,
    /// The record outlived its container (found missing by the reconciler or the heartbeat).
    Lost,
    /// Frozen (the cgroup freezer): no CPU, its memory and connections kept, not reachable
    /// through the proxies until it is resumed.
    Paused,
    /// Its home is being archived before its container goes (`sandboxes::hibernate`).
    Hibernating,
    /// No container: its home is kept as an archive until it is woken.
    Hibernated,
    /// A new container is being started from its kept home.
    Waking,
}

impl SandboxStatus {
    pub const ALL: [SandboxStatus; 9] = [
        Self::Creating,
        Self::Ready,
        Self::Degraded,
        Self::Deleting,
        Self::Lost,
        Self::Paused,
        Self::Hibernating,
        Self::Hibernated,
        Self::Waking,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Ready => "ready",
            Self::Degraded => "degraded",
            Self::Deleting => "deleting",
            Self::Lost => "lost",
            Self::Paused => "paused",
            Self::Hibernating => "hibernating",
            Self::Hibernated => "hibernated",
            Self::Waking => "waking",
        }
    }
}

impl SandboxStatus {
    /// Running and reachable through the proxies (ready or degraded).
    pub fn is_live(self) -> bool {
        matches!(self, Self::Ready | Self::Degraded)
    }
}

impl FromStr for SandboxStatus {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown status `{s}` (one of {})", known.join(", "))
            })
    }
}

/// One sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRecord {
    pub id: String,
    /// The API key that created (or claimed) it; `None` while in the warm pool.
    pub owner_key_id: Option<String>,
    pub image: String,
    pub status: SandboxStatus,
    /// Waiting in the warm pool, not yet claimed.
    pub pooled: bool,
    pub container_id: Option<String>,
    /// The container's address on the sandbox network.
    pub address: Option<String>,
    /// The orchestrator instance that runs its container (`--instance`); only that instance
    /// reconciles, reaps or removes it. `None` for rows written before instances were recorded.
    pub instance: Option<String>,
    /// A sandbox key stored by an older version (now keys are derived from the master key and
    /// never stored). Never leaves the orchestrator.
    pub legacy_key: Option<String>,
    /// `WIDTHxHEIGHT`, or `None` for the image's default.
    pub resolution: Option<String>,
    pub env: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub idle_timeout_secs: i64,
    pub max_lifetime_secs: i64,
    pub created_at: i64,
    pub ready_at: Option<i64>,
    /// Absolute end of life (`created_at + max_lifetime_secs`).
    pub expires_at: i64,
    pub last_active_at: i64,
    pub ended_at: Option<i64>,
    pub error: Option<String>,
    /// When it was paused (`None` unless [`SandboxStatus::Paused`]).
    pub paused_at: Option<i64>,
    /// A call through the proxies resumes it when paused (instead of a 409).
    pub auto_resume: bool,
    /// Idle this long, it is paused by the reaper (`None`: never).
    pub idle_pause_secs: Option<i64>,
    /// When it was hibernated (`None` unless [`SandboxStatus::Hibernated`]).
    pub hibernated_at: Option<i64>,
    /// Idle this long, it is hibernated by the reaper (`None`: never).
    pub idle_hibernate_secs: Option<i64>,
    /// The orchestrator replica creating it, or deleting it (`--replica`): while that replica
    /// lives, no other undoes or repeats its work. `None` in rows written before replicas.
    pub replica: Option<String>,
    /// Control viewers' input reaches the desktop (closed while a run's agent drives it).
    pub control_open: bool,
    /// When `control_open` was last written (ms; 0: never).
    pub control_seq: i64,
}

/// A sandbox's clocks, as [`Store::set_timeouts`] writes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    pub idle_timeout_secs: i64,
    pub max_lifetime_secs: i64,
    /// `created_at + max_lifetime_secs`.
    pub expires_at: i64,
    pub idle_pause_secs: Option<i64>,
    pub idle_hibernate_secs: Option<i64>,
}

/// An API key as stored: only its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRecord {
    pub id: String,
    pub name: String,
    pub key_hash: String,
    pub is_admin: bool,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// A viewer token's record (the token itself is signed; this row makes it revocable).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub id: String,
    pub sandbox_id: String,
    /// The API key that issued the token; revoking it ends the token.
    pub issuer_key_id: Option<String>,
    pub scope: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    /// The run a share link shows (scope `share`); `None` for sandbox tokens.
    pub run_id: Option<String>,
}

/// Which sandboxes to list.
#[derive(Debug, Clone, Default)]
pub struct SandboxFilter {
    /// Only those of this key (`None`: everyone's).
    pub owner_key_id: Option<String>,
    /// Only those run by this orchestrator instance.
    pub instance: Option<String>,
    pub status: Option<SandboxStatus>,
    /// Include warm-pool members.
    pub include_pooled: bool,
}

/// The database.
#[derive(Clone)]
pub struct Store {
    /// Reads. On SQLite, readers never wait for a writer (WAL).
    pool: AnyPool,
    /// Writes and transactions. On SQLite a pool of one connection: SQLite lets one writer in
    /// at a time anyway, and writers of this process that queue here wait in turn (woken the
    /// moment the writer before them is done) instead of holding a pooled connection each
    /// while SQLite's busy handler sleeps them in steps of up to 100 ms, which left readers (a
    /// claim's quota count) waiting for a free connection behind them. On Postgres the same
    /// pool as `pool`.
    writer: AnyPool,
    is_sqlite: bool,
    /// Set while the database does not answer ([`Store::watch_reachability`]).
    unreachable: Arc<AtomicBool>,
    /// A database server's URL (`None` for SQLite), for the reachability check's own
    /// connection.
    server_url: Option<Arc<str>>,
    /// Runs another replica appended events to ([`notifications`]).
    appended: tokio::sync::broadcast::Sender<String>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("is_sqlite", &self.is_sqlite)
            .finish()
    }
}

/// The SQLite URL for a data directory.
pub fn sqlite_url(data_dir: &Path) -> String {
    format!(
        "sqlite://{}?mode=rwc",
        data_dir.join("orchestrator.db").display()
    )
}

/// A database URL with any password replaced, for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{user}:***{}", &url[..scheme_end], &url[at..])
        }
        _ => url.to_string(),
    }
}

const SANDBOX_COLUMNS: &str = "id, owner_key_id, image, status, pooled, container_id, address, \
    api_key, resolution, env, metadata, idle_timeout_secs, max_lifetime_secs, created_at, \
    ready_at, expires_at, last_active_at, ended_at, error, instance, paused_at, auto_resume, \
    idle_pause_secs, hibernated_at, idle_hibernate_secs, replica, control_open, control_seq";

/// The schema's migrations, `orchestrator/migrations/NNNN_name.sql`, compiled in. Listed here
/// rather than found by sqlx's `migrate!` macro, which would compile sqlx's SQLite and Postgres
/// drivers a second time for the build host (minutes on two cores); a unit test checks that
/// the list is the directory. Versions, descriptions and checksums are those `migrate!` gives,
/// so databases it migrated keep working.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "trust boundaries",
        include_str!("../migrations/0002_trust_boundaries.sql"),
    ),
    (3, "runs", include_str!("../migrations/0003_runs.sql")),
    (
        4,
        "console sessions",
        include_str!("../migrations/0004_console_sessions.sql"),
    ),
    (
        5,
        "share links",
        include_str!("../migrations/0005_share_links.sql"),
    ),
    (6, "a2a", include_str!("../migrations/0006_a2a.sql")),
    (
        7,
        "a2a credentials",
        include_str!("../migrations/0007_a2a_credentials.sql"),
    ),
    (8, "pause", include_str!("../migrations/0008_pause.sql")),
    (
        9,
        "hibernate snapshots",
        include_str!("../migrations/0009_hibernate_snapshots.sql"),
    ),
    (
        10,
        "profiles",
        include_str!("../migrations/0010_profiles.sql"),
    ),
    (
        11,
        "fork snapshots",
        include_str!("../migrations/0011_fork_snapshots.sql"),
    ),
    (
        12,
        "replicas",
        include_str!("../migrations/0012_replicas.sql"),
    ),
];

fn migrator() -> sqlx::migrate::Migrator {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(
                    version,
                    description.into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

impl Store {
    /// Connects and applies the migrations.
    pub async fn connect(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let is_sqlite = url.starts_with("sqlite:");
        let connect = |max_connections: u32| {
            AnyPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(POOL_ACQUIRE_TIMEOUT)
                // A local file's connection does not go stale: no round trip to its worker
                // thread before every statement (each one a wait for a core under load).
                .test_before_acquire(!is_sqlite)
                .after_connect(move |connection, _| {
                    Box::pin(async move {
                        if is_sqlite {
                            use sqlx::Executor;
                            // WAL lets readers proceed during a write; the busy timeout makes
                            // a writer wait for another process's write instead of failing
                            // at once.
                            connection.execute("PRAGMA journal_mode = WAL").await?;
                            connection.execute(SQLITE_BUSY_TIMEOUT).await?;
                            connection.execute("PRAGMA synchronous = NORMAL").await?;
                        }
                        Ok(())
                    })
                })
                .connect(url)
        };
        let connect_error = |source| StoreError::Connect {
            url: redact_url(url),
            source,
        };
        let (pool, writer) = if is_sqlite {
            // The writer first: it creates the file and switches it to WAL before readers open.
            let writer = connect(1).await.map_err(connect_error)?;
            let pool = connect(8).await.map_err(connect_error)?;
            (pool, writer)
        } else {
            let pool = connect(16).await.map_err(connect_error)?;
            (pool.clone(), pool)
        };
        migrator().run(&writer).await?;
        Ok(Self {
            pool,
            writer,
            is_sqlite,
            unreachable: Arc::default(),
            server_url: (!is_sqlite).then(|| Arc::from(url)),
            appended: tokio::sync::broadcast::Sender::new(notifications::APPENDS_BUFFER),
        })
    }

    pub fn is_sqlite(&self) -> bool {
        self.is_sqlite
    }

    /// Whether the database failed its last reachability check: callers answer at once
    /// instead of each waiting for a connection that will not come.
    pub fn is_unreachable(&self) -> bool {
        self.unreachable.load(Ordering::Acquire)
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
        self.writer.close().await;
    }

    // ---- settings ----

    /// Stores `value` under `name` unless a value is there; returns the stored value.
    pub async fn setting_or_insert(&self, name: &str, value: &str) -> Result<String> {
        sqlx::query(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(value)
        .execute(&self.writer)
        .await
        .map_err(query_error("insert setting"))?;
        let row = sqlx::query("SELECT value FROM settings WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("read setting"))?;
        row.try_get::<String, _>(0)
            .map_err(query_error("read setting"))
    }

    // ---- API keys ----

    pub async fn insert_key(&self, key: &ApiKeyRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO api_keys (id, name, key_hash, is_admin, created_at, revoked_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&key.id)
        .bind(&key.name)
        .bind(&key.key_hash)
        .bind(key.is_admin as i64)
        .bind(key.created_at)
        .bind(key.revoked_at)
        .execute(&self.writer)
        .await
        .map_err(query_error("insert api key"))?;
        Ok(())
    }

    pub async fn key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>> {
        let row = sqlx::query(
            "SELECT id, name, key_hash, is_admin, created_at, revoked_at FROM api_keys \
             WHERE key_hash = $1",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("find api key"))?;
        row.map(|row| key_from_row(&row)).transpose()
    }

    pub async fn key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        let row = sqlx::query(
            "SELECT id, name, key_hash, is_admin, created_at, revoked_at FROM api_keys \
             WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("get api key"))?;
        row.map(|row| key_from_row(&row)).transpose()
    }

    /// Ids of keys revoked at or after `since` (for ending their sessions).
    pub async fn keys_revoked_since(&self, since: i64) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM api_keys WHERE revoked_at >= $1")
            .bind(since)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("list revoked keys"))?;
        rows.iter().map(|row| get(row, "id")).collect()
    }

    pub async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let rows = sqlx::query(
            "SELECT id, name, key_hash, is_admin, created_at, revoked_at FROM api_keys \
             ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("list api keys"))?;
        rows.iter().map(key_from_row).collect()
    }

    pub async fn count_keys(&self) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) FROM api_keys")
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("count api keys"))?;
        row.try_get::<i64, _>(0)
            .map_err(query_error("count api keys"))
    }

    /// Marks a key revoked; false when there is no such (unrevoked) key.
    pub async fn revoke_key(&self, id: &str, at: i64) -> Result<bool> {
        let done =
            sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(at)
                .bind(id)
                .execute(&self.writer)
                .await
                .map_err(query_error("revoke api key"))?;
        Ok(done.rows_affected() > 0)
    }

    // ---- sandboxes ----

    pub async fn insert_sandbox(&self, s: &SandboxRecord) -> Result<()> {
        insert_sandbox_in(&self.writer, s).await
    }

    pub async fn sandbox(&self, id: &str) -> Result<Option<SandboxRecord>> {
        let sql = format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("get sandbox"))?;
        row.map(|row| sandbox_from_row(&row)).transpose()
    }

    pub async fn list_sandboxes(&self, filter: &SandboxFilter) -> Result<Vec<SandboxRecord>> {
        let mut sql = format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE 1 = 1");
        let mut n = 0;
        if filter.owner_key_id.is_some() {
            n += 1;
            sql.push_str(&format!(" AND owner_key_id = ${n}"));
        }
        if filter.status.is_some() {
            n += 1;
            sql.push_str(&format!(" AND status = ${n}"));
        }
        if filter.instance.is_some() {
            n += 1;
            sql.push_str(&format!(" AND instance = ${n}"));
        }
        if !filter.include_pooled {
            sql.push_str(" AND pooled = 0");
        }
        sql.push_str(" ORDER BY created_at, id");
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(owner) = &filter.owner_key_id {
            query = query.bind(owner);
        }
        if let Some(status) = filter.status {
            query = query.bind(status.as_str());
        }
        if let Some(instance) = &filter.instance {
            query = query.bind(instance);
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("list sandboxes"))?;
        rows.iter().map(sandbox_from_row).collect()
    }

    /// Gives rows written before instances were recorded to `instance` (the only instance that
    /// could have run them, when one orchestrator used the database).
    pub async fn adopt_unassigned(&self, instance: &str) -> Result<u64> {
        let done = sqlx::query("UPDATE sandboxes SET instance = $1 WHERE instance IS NULL")
            .bind(instance)
            .execute(&self.writer)
            .await
            .map_err(query_error("adopt unassigned sandboxes"))?;
        Ok(done.rows_affected())
    }

    /// Counts a key's sandboxes that hold resources (creating, ready, degraded or paused: a
    /// paused sandbox keeps its memory; not pool members).
    pub async fn count_live_sandboxes(&self, owner_key_id: &str) -> Result<i64> {
        replicas::count_live_in(&self.pool, owner_key_id).await
    }

    /// Records the container of a sandbox being created.
    pub async fn set_container(&self, id: &str, container_id: &str, address: &str) -> Result<()> {
        sqlx::query("UPDATE sandboxes SET container_id = $1, address = $2 WHERE id = $3")
            .bind(container_id)
            .bind(address)
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(query_error("set container"))?;
        Ok(())
    }

    /// Marks a sandbox ready.
    pub async fn mark_ready(&self, id: &str, at: i64) -> Result<()> {
        sqlx::query(
            "UPDATE sandboxes SET status = 'ready', ready_at = $1, last_active_at = $1 \
             WHERE id = $2",
        )
        .bind(at)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark ready"))?;
        Ok(())
    }

    /// Sets the status (and the error and end time, for terminal states).
    pub async fn set_status(
        &self,
        id: &str,
        status: SandboxStatus,
        error: Option<&str>,
        ended_at: Option<i64>,
    ) -> Result<()> {
        sqlx::query("UPDATE sandboxes SET status = $1, error = $2, ended_at = $3 WHERE id = $4")
            .bind(status.as_str())
            .bind(error)
            .bind(ended_at)
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(query_error("set status"))?;
        Ok(())
    }

    /// Moves a live sandbox between ready and degraded (with the reason), only if it is still
    /// live; returns whether it changed.
    pub async fn set_health(&self, id: &str, healthy: bool, reason: Option<&str>) -> Result<bool> {
        let (to, from) = if healthy {
            ("ready", "degraded")
        } else {
            ("degraded", "ready")
        };
        let done = sqlx::query(
            "UPDATE sandboxes SET status = $1, error = $2 WHERE id = $3 AND status = $4",
        )
        .bind(to)
        .bind(reason)
        .bind(id)
        .bind(from)
        .execute(&self.writer)
        .await
        .map_err(query_error("set health"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Hands a ready pool member to an owner, atomically: false when someone else got it first
    /// or it is no longer ready.
    /// Hands the pooled sandbox `claimed.id` to `claimed.owner_key_id`, if it is still pooled
    /// and ready and the key has fewer than `limit` live sandboxes (no limit: `None`), in one
    /// statement: the quota is counted by the write itself, so a claim costs one round trip.
    /// False when nothing changed (then [`Store::count_live_sandboxes`] says which).
    pub async fn claim_pooled(&self, claimed: &SandboxRecord, limit: Option<i64>) -> Result<bool> {
        // The claim's two steps are timed apart (at debug level, which the claims benchmark
        // turns on and reads): waiting for the one writer connection, then the statement.
        let started = std::time::Instant::now();
        let mut writer = self
            .writer
            .acquire()
            .await
            .map_err(query_error("claim pooled sandbox"))?;
        let writer_wait = started.elapsed();
        let claim = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE sandboxes SET pooled = 0, owner_key_id = $1, metadata = $2, \
             idle_timeout_secs = $3, max_lifetime_secs = $4, created_at = $5, expires_at = $6, \
             last_active_at = $7, auto_resume = $10, idle_pause_secs = $11, \
             idle_hibernate_secs = $12 \
             WHERE id = $8 AND pooled = 1 AND status = 'ready' \
             AND (CAST($9 AS BIGINT) IS NULL OR (SELECT COUNT(*) FROM sandboxes \
             WHERE owner_key_id = $1 AND pooled = 0 \
             AND status IN {}) < CAST($9 AS BIGINT))",
            replicas::LIVE_STATUSES
        )))
        .bind(&claimed.owner_key_id)
        .bind(to_json(&claimed.metadata))
        .bind(claimed.idle_timeout_secs)
        .bind(claimed.max_lifetime_secs)
        .bind(claimed.created_at)
        .bind(claimed.expires_at)
        .bind(claimed.last_active_at)
        .bind(&claimed.id)
        .bind(limit)
        .bind(claimed.auto_resume as i64)
        .bind(claimed.idle_pause_secs)
        .bind(claimed.idle_hibernate_secs);
        let done = match (&claimed.owner_key_id, limit) {
            // Postgres counts the key's sandboxes in its own snapshot: two replicas' claims
            // at once could both see one place left, so the key's claims and creates take
            // turns there (SQLite has one writer).
            (Some(owner), Some(_)) if !self.is_sqlite => {
                use sqlx::Connection;
                let mut tx = writer.begin().await.map_err(query_error("begin"))?;
                replicas::lock_key_quota(&mut tx, owner).await?;
                let done = claim
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error("claim pooled sandbox"))?;
                tx.commit().await.map_err(query_error("commit claim"))?;
                done
            }
            _ => claim
                .execute(&mut *writer)
                .await
                .map_err(query_error("claim pooled sandbox"))?,
        };
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        tracing::debug!(
            sandbox_id = %claimed.id,
            writer_wait_ms = ms(writer_wait),
            write_ms = ms(started.elapsed().saturating_sub(writer_wait)),
            claimed = done.rows_affected() > 0,
            "claim written"
        );
        Ok(done.rows_affected() > 0)
    }

    pub async fn set_timeouts(&self, id: &str, timeouts: &Timeouts) -> Result<()> {
        sqlx::query(
            "UPDATE sandboxes SET idle_timeout_secs = $1, max_lifetime_secs = $2, expires_at = $3, \
             idle_pause_secs = $4, idle_hibernate_secs = $6 WHERE id = $5",
        )
        .bind(timeouts.idle_timeout_secs)
        .bind(timeouts.max_lifetime_secs)
        .bind(timeouts.expires_at)
        .bind(timeouts.idle_pause_secs)
        .bind(id)
        .bind(timeouts.idle_hibernate_secs)
        .execute(&self.writer)
        .await
        .map_err(query_error("set timeouts"))?;
        Ok(())
    }

    /// Marks a live sandbox paused at `at`; false when it was not live or a run is queued or
    /// running on it (nothing changed).
    pub async fn mark_paused(&self, id: &str, at: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'paused', paused_at = $1 WHERE id = $2 \
             AND status IN ('ready', 'degraded') AND NOT EXISTS (SELECT 1 FROM runs \
             WHERE runs.sandbox_id = $2 AND runs.status IN ('queued', 'running'))",
        )
        .bind(at)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark paused"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Puts a paused sandbox back as it was before a pause that failed (its status and error;
    /// its idle clock untouched).
    pub async fn unmark_paused(
        &self,
        id: &str,
        status: SandboxStatus,
        error: Option<&str>,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = $1, error = $2, paused_at = NULL WHERE id = $3 \
             AND status = 'paused'",
        )
        .bind(status.as_str())
        .bind(error)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("unmark paused"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Marks a paused sandbox ready again, active at `at`; false when it was not paused.
    pub async fn mark_resumed(&self, id: &str, at: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'ready', paused_at = NULL, error = NULL, \
             last_active_at = $1 WHERE id = $2 AND status = 'paused'",
        )
        .bind(at)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark resumed"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Records the last activity (only ever moves forward).
    pub async fn touch(&self, id: &str, at: i64) -> Result<()> {
        sqlx::query(
            "UPDATE sandboxes SET last_active_at = $1 WHERE id = $2 AND last_active_at < $1",
        )
        .bind(at)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("touch sandbox"))?;
        Ok(())
    }

    /// Deletes a sandbox and its tokens.
    pub async fn delete_sandbox(&self, id: &str) -> Result<bool> {
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        // Share links stay: they show a run, whose record outlives its sandbox.
        sqlx::query("DELETE FROM tokens WHERE sandbox_id = $1 AND run_id IS NULL")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("delete tokens"))?;
        let done = sqlx::query("DELETE FROM sandboxes WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("delete sandbox"))?;
        tx.commit().await.map_err(query_error("commit"))?;
        Ok(done.rows_affected() > 0)
    }

    // ---- tokens ----

    pub async fn insert_token(&self, token: &TokenRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO tokens (id, sandbox_id, scope, created_at, expires_at, revoked_at, \
             issuer_key_id, run_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&token.id)
        .bind(&token.sandbox_id)
        .bind(&token.scope)
        .bind(token.created_at)
        .bind(token.expires_at)
        .bind(token.revoked_at)
        .bind(&token.issuer_key_id)
        .bind(&token.run_id)
        .execute(&self.writer)
        .await
        .map_err(query_error("insert token"))?;
        Ok(())
    }

    pub async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let row = sqlx::query(
            "SELECT id, sandbox_id, scope, created_at, expires_at, revoked_at, issuer_key_id, \
             run_id FROM tokens WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("get token"))?;
        row.map(|row| token_from_row(&row)).transpose()
    }

    /// Revokes one token of a sandbox (or all of them with `token_id = None`); returns how many.
    pub async fn revoke_tokens(
        &self,
        sandbox_id: &str,
        token_id: Option<&str>,
        at: i64,
    ) -> Result<u64> {
        let done = match token_id {
            Some(token_id) => {
                sqlx::query(
                    "UPDATE tokens SET revoked_at = $1 WHERE sandbox_id = $2 AND id = $3 \
                 AND revoked_at IS NULL AND run_id IS NULL",
                )
                .bind(at)
                .bind(sandbox_id)
                .bind(token_id)
                .execute(&self.writer)
                .await
            }
            None => sqlx::query(
                "UPDATE tokens SET revoked_at = $1 WHERE sandbox_id = $2 AND revoked_at IS NULL \
                 AND run_id IS NULL",
            )
            .bind(at)
            .bind(sandbox_id)
            .execute(&self.writer)
            .await,
        }
        .map_err(query_error("revoke tokens"))?;
        Ok(done.rows_affected())
    }

    /// A run's share links that still open: not revoked, not expired at `now`, oldest first.
    pub async fn share_tokens(&self, run_id: &str, now: i64) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(
            "SELECT id, sandbox_id, scope, created_at, expires_at, revoked_at, issuer_key_id, \
             run_id FROM tokens WHERE run_id = $1 AND revoked_at IS NULL AND expires_at > $2 \
             ORDER BY created_at, id",
        )
        .bind(run_id)
        .bind(now)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("list share tokens"))?;
        rows.iter().map(token_from_row).collect()
    }

    /// Revokes one share link of a run (or all of them with `token_id = None`); returns how
    /// many.
    pub async fn revoke_share_tokens(
        &self,
        run_id: &str,
        token_id: Option<&str>,
        at: i64,
    ) -> Result<u64> {
        let done =
            match token_id {
                Some(token_id) => {
                    sqlx::query(
                        "UPDATE tokens SET revoked_at = $1 WHERE run_id = $2 AND id = $3 \
                     AND revoked_at IS NULL",
                    )
                    .bind(at)
                    .bind(run_id)
                    .bind(token_id)
                    .execute(&self.writer)
                    .await
                }
                None => sqlx::query(
                    "UPDATE tokens SET revoked_at = $1 WHERE run_id = $2 AND revoked_at IS NULL",
                )
                .bind(at)
                .bind(run_id)
                .execute(&self.writer)
                .await,
            }
            .map_err(query_error("revoke share tokens"))?;
        Ok(done.rows_affected())
    }

    /// Deletes token rows that expired before `before` (their signatures are worthless anyway).
    pub async fn purge_expired_tokens(&self, before: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM tokens WHERE expires_at < $1")
            .bind(before)
            .execute(&self.writer)
            .await
            .map_err(query_error("purge tokens"))?;
        Ok(done.rows_affected())
    }
}

fn to_json(map: &BTreeMap<String, String>) -> String {
    // A map of strings always serialises.
    serde_json::to_string(map).unwrap_or_else(|_| "{}".into())
}

fn from_json(what: &'static str, text: &str) -> Result<BTreeMap<String, String>> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what,
        message: e.to_string(),
    })
}

fn get<'r, T>(row: &'r AnyRow, column: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    row.try_get(column).map_err(query_error(column))
}

fn key_from_row(row: &AnyRow) -> Result<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: get(row, "id")?,
        name: get(row, "name")?,
        key_hash: get(row, "key_hash")?,
        is_admin: get::<i64>(row, "is_admin")? != 0,
        created_at: get(row, "created_at")?,
        revoked_at: get(row, "revoked_at")?,
    })
}

fn token_from_row(row: &AnyRow) -> Result<TokenRecord> {
    Ok(TokenRecord {
        id: get(row, "id")?,
        sandbox_id: get(row, "sandbox_id")?,
        issuer_key_id: get(row, "issuer_key_id")?,
        scope: get(row, "scope")?,
        created_at: get(row, "created_at")?,
        expires_at: get(row, "expires_at")?,
        revoked_at: get(row, "revoked_at")?,
        run_id: get(row, "run_id")?,
    })
}

/// Inserts a sandbox's row through `executor` (the writer pool, or a transaction).
async fn insert_sandbox_in<'e, E>(executor: E, s: &SandboxRecord) -> Result<()>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let sql = format!(
        "INSERT INTO sandboxes ({SANDBOX_COLUMNS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, \
         $20, $21, $22, $23, $24, $25, $26, $27, $28)"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&s.id)
        .bind(&s.owner_key_id)
        .bind(&s.image)
        .bind(s.status.as_str())
        .bind(s.pooled as i64)
        .bind(&s.container_id)
        .bind(&s.address)
        .bind(s.legacy_key.as_deref().unwrap_or(""))
        .bind(&s.resolution)
        .bind(to_json(&s.env))
        .bind(to_json(&s.metadata))
        .bind(s.idle_timeout_secs)
        .bind(s.max_lifetime_secs)
        .bind(s.created_at)
        .bind(s.ready_at)
        .bind(s.expires_at)
        .bind(s.last_active_at)
        .bind(s.ended_at)
        .bind(&s.error)
        .bind(&s.instance)
        .bind(s.paused_at)
        .bind(s.auto_resume as i64)
        .bind(s.idle_pause_secs)
        .bind(s.hibernated_at)
        .bind(s.idle_hibernate_secs)
        .bind(&s.replica)
        .bind(s.control_open as i64)
        .bind(s.control_seq)
        .execute(executor)
        .await
        .map_err(query_error("insert sandbox"))?;
    Ok(())
}

fn sandbox_from_row(row: &AnyRow) -> Result<SandboxRecord> {
    let status: String = get(row, "status")?;
    Ok(SandboxRecord {
        id: get(row, "id")?,
        owner_key_id: get(row, "owner_key_id")?,
        image: get(row, "image")?,
        status: status.parse().map_err(|message| StoreError::Corrupt {
            what: "sandboxes.status",
            message,
        })?,
        pooled: get::<i64>(row, "pooled")? != 0,
        container_id: get(row, "container_id")?,
        address: get(row, "address")?,
        instance: get(row, "instance")?,
        legacy_key: Some(get::<String>(row, "api_key")?).filter(|k| !k.is_empty()),
        resolution: get(row, "resolution")?,
        env: from_json("sandboxes.env", &get::<String>(row, "env")?)?,
        metadata: from_json("sandboxes.metadata", &get::<String>(row, "metadata")?)?,
        idle_timeout_secs: get(row, "idle_timeout_secs")?,
        max_lifetime_secs: get(row, "max_lifetime_secs")?,
        created_at: get(row, "created_at")?,
        ready_at: get(row, "ready_at")?,
        expires_at: get(row, "expires_at")?,
        last_active_at: get(row, "last_active_at")?,
        ended_at: get(row, "ended_at")?,
        error: get(row, "error")?,
        paused_at: get(row, "paused_at")?,
        auto_resume: get::<i64>(row, "auto_resume")? != 0,
        idle_pause_secs: get(row, "idle_pause_secs")?,
        hibernated_at: get(row, "hibernated_at")?,
        idle_hibernate_secs: get(row, "idle_hibernate_secs")?,
        replica: get(row, "replica")?,
        control_open: get::<i64>(row, "control_open")? != 0,
        control_seq: get(row, "control_seq")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://agent:secret@db:5432/x"),
            "postgres://agent:***@db:5432/x"
        );
        assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
    }

    /// The compiled-in list is the directory, as sqlx's own resolver (the one `migrate!` uses)
    /// reads it: the same versions, descriptions, checksums and transaction mode, in order.
    #[tokio::test]
    async fn the_migrations_listed_are_the_directory() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let resolved = sqlx::migrate::Migrator::new(dir.as_path())
            .await
            .expect("the migrations directory resolves");
        let summary = |migrator: &sqlx::migrate::Migrator| -> Vec<_> {
            migrator
                .iter()
                .map(|m| {
                    (
                        m.version,
                        m.description.to_string(),
                        m.checksum.to_vec(),
                        m.no_tx,
                        m.migration_type,
                    )
                })
                .collect()
        };
        assert_eq!(summary(&migrator()), summary(&resolved));
    }

    #[test]
    fn statuses_round_trip() {
        for status in SandboxStatus::ALL {
            assert_eq!(status.as_str().parse::<SandboxStatus>(), Ok(status));
        }
        assert!("bogus".parse::<SandboxStatus>().is_err());
    }
}
