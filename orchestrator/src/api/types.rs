//! Every type on the wire of the orchestrator's REST API, in one place. The OpenAPI document
//! (`GET /v1/openapi.json`) is generated from these and the route annotations.
//!
//! Request types reject unknown fields (a misspelt `idle_timeout` should fail loudly, not be
//! ignored) and accept `null` for optional ones. Times are RFC 3339 strings in UTC.
//!
//! Every type is both `Serialize` and `Deserialize`: the server reads requests and writes
//! answers, the command line (`crate::cli`) writes requests and reads answers, with these same
//! definitions.

mod runs;

pub use runs::*;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/sandboxes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// Image to run; default: the server's sandbox image. Others must be allowed by the server.
    pub image: Option<String>,
    /// Screen size `WIDTHxHEIGHT`, e.g. `1280x800`, from 320x200 to 3840x2160.
    #[schema(pattern = r"^\s*[0-9]+\s*[xX]\s*[0-9]+\s*$")]
    pub resolution: Option<String>,
    /// Seconds without activity before the sandbox is removed (at most the server's lifetime
    /// cap).
    #[schema(minimum = 1)]
    pub idle_timeout_secs: Option<i64>,
    /// Absolute lifetime in seconds, counted from creation (at most the server's lifetime cap).
    #[schema(minimum = 1)]
    pub max_lifetime_secs: Option<i64>,
    /// Environment variables for the sandbox.
    pub env: Option<BTreeMap<String, String>>,
    /// Labels for your own bookkeeping; `GET /v1/sandboxes?metadata.KEY=VALUE` filters on them.
    pub metadata: Option<BTreeMap<String, String>>,
    /// When paused, a call through `/api`, `/cdp` or `/vnc` resumes the sandbox first instead
    /// of answering 409 (default false).
    pub auto_resume: Option<bool>,
    /// Seconds without activity before the sandbox is paused (frozen, its memory kept) until
    /// something resumes it; 0: never. Default: the server's `--idle-pause-secs` (0 unless
    /// set). Paused or not, it is removed after `idle_timeout_secs` without activity.
    #[schema(minimum = 0)]
    pub idle_pause_secs: Option<i64>,
    /// Seconds without activity before the sandbox is hibernated (its container removed, its
    /// home kept on disk) until something wakes it; 0: never. Default: the server's
    /// `--idle-hibernate-secs` (0 unless set). With `auto_resume`, a call wakes it.
    #[schema(minimum = 0)]
    pub idle_hibernate_secs: Option<i64>,
    /// Start from this snapshot (one of yours, `POST /v1/sandboxes/{id}/snapshots`): its home,
    /// files and browser profile (logins, cookies; the tabs it had open come back), its image
    /// and resolution. From the warm pool only when the server fills it from this snapshot
    /// (`--pool-snapshot`).
    pub snapshot: Option<String>,
    /// Use this browser profile (one of yours, by id or name: `POST /v1/profiles`): the
    /// browser starts with its cookies, logins and local storage, and it is saved back when
    /// the sandbox ends. One sandbox at a time per profile (409 naming the one that holds it).
    /// Never from the warm pool.
    pub profile: Option<String>,
    /// Which nodes may run it, on an orchestrator with the `swarm` backend (422 on others).
    /// Never from the warm pool.
    pub placement: Option<SandboxPlacement>,
}

/// Where a sandbox may run, by the labels the operator gave the cluster's nodes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxPlacement {
    /// Each must hold: `node.labels.<name>==<value>` or `node.labels.<name>!=<value>`
    /// (at most 8).
    #[serde(default)]
    pub constraints: Vec<String>,
    /// Spread sandboxes evenly over the values of these labels, first one first:
    /// `node.labels.<name>` (at most 8).
    #[serde(default)]
    pub preferences: Vec<String>,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Cluster {
    /// `docker` or `swarm` (`serve --backend`).
    pub backend: String,
    pub nodes: Vec<ClusterNode>,
    /// The orchestrator replicas serving this installation (seen in the last 10 s), by id.
    pub replicas: Vec<ClusterReplica>,
}

/// One orchestrator replica (`serve --replica`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClusterReplica {
    pub id: String,
    pub started_at: String,
    /// When it last said it is alive (every 2 s).
    pub seen_at: String,
    /// The duties it does for every replica now: `reaper`, `heartbeat`, `pool_refill`.
    pub duties: Vec<String>,
    /// Whether it answered this request.
    pub answering: bool,
}

/// One machine sandboxes run on.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClusterNode {
    pub id: String,
    /// Its host name.
    pub name: String,
    /// `manager` or `worker` (Swarm); `engine` (the `docker` backend's one engine).
    pub role: String,
    /// `ready`, `down`, `disconnected` or `unknown`: sandboxes on a node that is not `ready`
    /// are marked `lost`.
    pub state: String,
    /// `active`, `pause` or `drain`: whether new sandboxes may be placed there.
    pub availability: String,
    /// The node's labels, which `placement` names.
    pub labels: BTreeMap<String, String>,
    pub cpus: f64,
    pub memory_mib: i64,
    /// What this orchestrator's sandboxes reserve there; `null` where nothing is reserved
    /// (the `docker` backend: each sandbox's limits cap it, nothing is set aside).
    pub reserved_cpus: Option<f64>,
    pub reserved_memory_mib: Option<i64>,
    /// What is left for new sandboxes (`null` as above).
    pub free_cpus: Option<f64>,
    pub free_memory_mib: Option<i64>,
    /// Sandboxes on it (warm-pool members apart).
    pub sandboxes: Vec<String>,
    /// Warm-pool members on it.
    pub pool_members: usize,
}

/// Where to reach a sandbox through the orchestrator.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SandboxUrls {
    /// Base URL of the sandbox API (point the `agent-sandbox` SDK here, with your API key).
    pub api: String,
    /// The live-desktop page; open it with a token from `POST /v1/sandboxes/{id}/tokens` (its
    /// `viewer_url`).
    pub vnc: String,
    /// CDP WebSocket (or `http` base for `connect_over_cdp`), with your API key.
    pub cdp: String,
}

/// A sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Sandbox {
    pub id: String,
    /// `creating`, `ready`, `degraded` (running, a required program not ready: see `error`),
    /// `paused` (frozen: resume it with `POST /v1/sandboxes/{id}/resume`), `hibernating`,
    /// `hibernated` (no container, its home kept: wake it with `POST /v1/sandboxes/{id}/wake`),
    /// `waking`, `deleting` or `lost`.
    pub status: String,
    pub image: String,
    pub created_at: String,
    pub ready_at: Option<String>,
    /// End of the absolute lifetime.
    pub expires_at: String,
    pub last_active_at: String,
    pub idle_timeout_secs: i64,
    pub max_lifetime_secs: i64,
    pub resolution: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Why the sandbox is `lost` or `degraded`.
    pub error: Option<String>,
    /// When it was paused (while `paused`).
    pub paused_at: Option<String>,
    /// A call through the proxies resumes it when paused.
    pub auto_resume: bool,
    /// Idle this long, it is paused (`null`: never).
    pub idle_pause_secs: Option<i64>,
    /// When it was hibernated (while `hibernated`).
    pub hibernated_at: Option<String>,
    /// Idle this long, it is hibernated (`null`: never).
    pub idle_hibernate_secs: Option<i64>,
    pub urls: SandboxUrls,
}

/// `GET /v1/sandboxes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SandboxList {
    pub sandboxes: Vec<Sandbox>,
}

/// `POST /v1/sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetTimeoutRequest {
    /// Seconds without activity before the sandbox is removed (at most the server's lifetime
    /// cap).
    #[schema(minimum = 1)]
    pub idle_timeout_secs: Option<i64>,
    /// New absolute lifetime, counted from creation (at most the server's lifetime cap).
    #[schema(minimum = 1)]
    pub max_lifetime_secs: Option<i64>,
    /// Seconds without activity before the sandbox is paused; 0: never.
    #[schema(minimum = 0)]
    pub idle_pause_secs: Option<i64>,
    /// Seconds without activity before the sandbox is hibernated; 0: never.
    #[schema(minimum = 0)]
    pub idle_hibernate_secs: Option<i64>,
}

/// A snapshot: a sandbox's home (files, browser profile) kept to start new sandboxes from.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Snapshot {
    pub id: String,
    /// The sandbox it was taken from (it may be gone since).
    pub parent_sandbox_id: Option<String>,
    /// The image and resolution a sandbox started from it gets.
    pub image: String,
    pub resolution: Option<String>,
    /// `taking` (its archive is being written) or `ready`.
    pub status: String,
    /// The size of its archive.
    pub size_bytes: i64,
    pub created_at: String,
}

/// `GET /v1/snapshots`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
}

/// `POST /v1/profiles`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProfileRequest {
    /// 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or a digit; unique
    /// among your profiles (and not starting with `prf-`).
    pub name: String,
}

/// A browser profile: Chromium's profile folder (cookies, logins, local storage, history,
/// settings), kept between sandboxes. Not in it: open tabs, caches, the rest of the home.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Profile {
    pub id: String,
    pub name: String,
    /// The sandbox using it now (`null`: free).
    pub in_use_by: Option<String>,
    /// The size of its archive (0 until a sandbox saved it).
    pub size_bytes: i64,
    pub created_at: String,
    /// When a sandbox that used it last saved it (`null`: never used).
    pub saved_at: Option<String>,
}

/// `GET /v1/profiles`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProfileList {
    pub profiles: Vec<Profile>,
}

/// `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many sandboxes to make, 1 to 20.
    #[schema(minimum = 1, maximum = 20)]
    pub count: i64,
    /// Keep the snapshot the forks start from (listed under `/v1/snapshots`, counted against
    /// the key's snapshots); default false: it is deleted once the forks are made.
    pub keep_snapshot: Option<bool>,
    /// Labels for every fork.
    pub metadata: Option<BTreeMap<String, String>>,
    /// As in `POST /v1/sandboxes`, for every fork.
    #[schema(minimum = 1)]
    pub idle_timeout_secs: Option<i64>,
    #[schema(minimum = 1)]
    pub max_lifetime_secs: Option<i64>,
}

/// What a fork made.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ForkResult {
    /// The new sandboxes, each with its own id, key and tokens.
    pub sandboxes: Vec<Sandbox>,
    /// The snapshot they started from (`null` unless `keep_snapshot`).
    pub snapshot: Option<Snapshot>,
}

/// `POST /v1/sandboxes/{id}/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// `view` (watch only: input is dropped) or `control`.
    #[schema(value_type = String)]
    pub scope: crate::tokens::Scope,
    /// Lifetime in seconds (default 900, at most 86400).
    #[schema(minimum = 1, maximum = 86400)]
    pub ttl_secs: Option<i64>,
}

/// A viewer token.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Token {
    /// Token id, for `DELETE /v1/sandboxes/{id}/tokens/{token_id}`.
    pub id: String,
    pub token: String,
    pub scope: String,
    pub expires_at: String,
    /// The noVNC page, logged in with this token.
    pub viewer_url: String,
}

/// Answer to a revocation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Revoked {
    pub revoked: u64,
}

/// `POST /v1/keys`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    pub name: String,
    /// Admin keys manage keys and see every sandbox.
    #[serde(default)]
    pub admin: Option<bool>,
}

/// An API key (never its text, except once at creation).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApiKey {
    pub id: String,
    pub name: String,
    pub admin: bool,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// `POST /v1/keys`: the key's text is in `key`, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedKey {
    #[serde(flatten)]
    pub api_key: ApiKey,
    pub key: String,
}

/// `GET /v1/keys`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<ApiKey>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
}

/// Every error: `{error: {code, message}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `unauthorized`, `forbidden`, `not_found`, `bad_request`,
    /// `invalid_field`, `conflict`, `payload_too_large`, `sandbox_not_ready`,
    /// `backend_unavailable`, `unavailable`, `internal`.
    pub code: String,
    pub message: String,
    /// The container's last output, when a sandbox failed to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,
    /// For `invalid_field`: where the bad value is (`["body", "limits", "memory_mib"]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loc: Option<Vec<String>>,
}
