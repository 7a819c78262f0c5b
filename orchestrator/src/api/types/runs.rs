//! Wire types of `/v1/runs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/runs` (send an `Idempotency-Key` header to make retries safe).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    /// What to do, in words.
    pub task: String,
    /// `anthropic:<model>`, `openai:<model>`, `openai-chat:<model>` or `script:<path>` (a
    /// model driving a sandbox), or `a2a:<agent card URL>` (a remote A2A agent is handed the
    /// task; no sandbox is taken; store its token with `POST /v1/a2a/credentials`).
    pub model: String,
    /// A sandbox of yours to drive; without it the run takes one (warm pool first).
    pub sandbox_id: Option<String>,
    pub limits: Option<RunLimitsRequest>,
    /// Labels; `GET /v1/runs?metadata.KEY=VALUE` filters on them.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// Bounds of a run; each defaults to the server's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunLimitsRequest {
    /// Model calls (1 to 1000; default 100).
    pub max_steps: Option<u32>,
    /// Seconds the agent drives, pauses not counted (1 to 86400; default 3600).
    pub max_seconds: Option<u64>,
    /// Screenshots kept in the conversation, oldest dropped first (1 to 50; default 5).
    pub max_images: Option<usize>,
}

/// Where a run is (the agent's own type: one status for the loop, the store and the API).
pub use agent::RunStatus;

/// The bounds a run has.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunLimits {
    pub max_steps: u32,
    pub max_seconds: u64,
    pub max_images: usize,
}

/// Where to follow a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunUrls {
    /// Server-Sent Events (or `?format=json` for a page).
    pub events: String,
    pub artifacts: String,
    /// The sandbox it drives (issue a viewer token there to watch it live).
    pub sandbox: Option<String>,
}

/// A run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Run {
    pub id: String,
    pub status: RunStatus,
    pub task: String,
    pub model: String,
    pub sandbox_id: Option<String>,
    pub limits: RunLimits,
    pub metadata: BTreeMap<String, String>,
    /// The final answer of a completed run.
    pub answer: Option<String>,
    /// Why it failed.
    pub reason: Option<String>,
    /// The seq of its newest event.
    pub last_seq: i64,
    pub created_at: String,
    pub updated_at: String,
    pub ended_at: Option<String>,
    pub urls: RunUrls,
}

/// `GET /v1/runs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<Run>,
}

/// `POST /v1/runs/{id}/handback`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandbackRequest {
    /// Told to the model with the fresh screenshot (what the person did).
    pub note: Option<String>,
}

/// `POST /v1/runs/{id}/input`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunInputRequest {
    /// The answer to the agent's question (for a safety check: `approve` to let the action
    /// run, anything else declines it).
    pub text: String,
}

/// One event of a run's log: `seq`, `at`, and one `RunEventData` (its `type` and that type's
/// fields: `run.status`, `agent.message`, `agent.reasoning`, `action.started`,
/// `action.finished`, `control.taken`, `control.returned`, `input.requested`, `input.received`,
/// `artifact.created`, `artifact.skipped`, `usage`, `error`), whose schema lists each.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunEvent {
    /// 1, 2, 3, ... with no gap; the SSE event id.
    pub seq: i64,
    pub at: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// `GET /v1/runs/{id}/events?format=json`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunEventPage {
    pub events: Vec<RunEvent>,
    /// Pass as `after_seq` for the next page.
    pub next_after_seq: i64,
    pub status: RunStatus,
    /// The run has ended and this page holds its last event.
    pub done: bool,
}

/// A file a run produced.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Artifact {
    /// `outputs/<file>` (saved under `~/outputs`) or `screenshots/<observation id>.<ext>`.
    pub name: String,
    /// `output` or `screenshot`.
    pub kind: String,
    pub size: i64,
    pub content_type: String,
    pub sha256: String,
    pub created_at: String,
    pub url: String,
}

/// `GET /v1/runs/{id}/artifacts`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ArtifactList {
    pub artifacts: Vec<Artifact>,
}

/// `POST /v1/runs/{id}/shares`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateShareRequest {
    /// Lifetime in seconds (default 3600, at most 86400).
    pub ttl_secs: Option<i64>,
}

/// A share link: one run's page (its task, timeline, files and a watch-only desktop) for
/// someone without a key. It opens no other run, no sandbox route and no API route.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Share {
    /// For `DELETE /v1/runs/{id}/shares/{share_id}`.
    pub id: String,
    /// The link itself: given once, when it is made (the list does not repeat it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub created_at: String,
    pub expires_at: String,
}

/// `GET /v1/runs/{id}/shares`: the run's links that still open.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ShareList {
    pub shares: Vec<Share>,
}

/// `POST /v1/a2a/credentials`: the bearer token `a2a:` runs of this key send to one remote
/// agent.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCredentialRequest {
    /// The agent's card URL (or any URL on its origin): the token is sent to that origin only.
    pub agent: String,
    /// The bearer token. Stored sealed; never returned.
    pub token: String,
}

/// A stored credential for a remote A2A agent (the token itself is never returned).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Credential {
    /// For `DELETE /v1/a2a/credentials/{id}`.
    pub id: String,
    /// `scheme://host:port` it is sent to.
    pub origin: String,
    pub created_at: String,
}

/// `GET /v1/a2a/credentials`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialList {
    pub credentials: Vec<Credential>,
}
