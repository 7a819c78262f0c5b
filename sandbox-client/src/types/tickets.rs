//! `POST /tickets`: single-use tickets that let a browser open the remote desktop.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /tickets`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct TicketRequest {
    /// The viewer session the ticket opens is view-only (default false).
    pub view_only: Option<bool>,
}

/// A ticket: bring it once, within `expires_in` seconds, as `?ticket=` on a `/vnc/` page (or
/// the `/vnc/websockify` WebSocket).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TicketResult {
    pub ticket: String,
    /// Seconds the ticket stays valid.
    pub expires_in: u64,
    /// Whether the session it opens is view-only.
    pub view_only: bool,
    /// The viewer page with the ticket (path only; prefix the address you reach sandboxd at).
    pub viewer_path: String,
}
