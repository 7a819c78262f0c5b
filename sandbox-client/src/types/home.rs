//! The home archive (`/v1/sandbox/home/*`): how the orchestrator takes a sandbox's files for
//! hibernation, snapshots and browser profiles, and gives a held sandbox back.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/sandbox/home/archive`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct HomeArchiveRequest {
    /// A folder inside the home (relative, no `..`) to archive alone, with the folders leading
    /// to it; default: the whole home.
    #[serde(default)]
    pub path: Option<String>,
    /// Keep the sandbox held (browser stopped, the agent's processes frozen) after the archive,
    /// because it is about to be removed: released by `POST /v1/sandbox/home/release`, or by
    /// itself after 60 s. Default `false`: released as soon as the archive is written.
    #[serde(default)]
    pub keep_held: bool,
}

/// `POST /v1/sandbox/home/release`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct HomeReleased {
    /// Whether a held sandbox was released (`false`: none was held).
    pub released: bool,
}
