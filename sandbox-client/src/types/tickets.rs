//! `POST /tickets`: single-use tickets that let a browser open the remote desktop or the
//! terminal page.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /tickets`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct TicketRequest {
    /// The desktop session the ticket opens is view-only (default false).
    pub view_only: Option<bool>,
    /// The ticket opens the terminal page (`/terminal`, a shell as the agent user) instead of
    /// the desktop (default false). Not with `view_only`.
    pub terminal: Option<bool>,
}

/// A ticket: bring it once, within `expires_in` seconds, as `?ticket=` on the page it opens
/// (`viewer_path`) or that page's WebSocket.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TicketResult {
    pub ticket: String,
    /// Seconds the ticket stays valid.
    pub expires_in: u64,
    /// Whether the session it opens is view-only.
    pub view_only: bool,
    /// Whether it opens the terminal page rather than the desktop.
    #[serde(default)]
    pub terminal: bool,
    /// The page the ticket opens, with the ticket (path only; prefix the address you reach
    /// sandboxd at): the desktop viewer, or the terminal page.
    pub viewer_path: String,
}

/// `GET /auth`: how a request was let in (AIO's authentication sub-request, for a proxy such
/// as nginx's `auth_request`). Every value is a string, as AIO's SDK reads it.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct AuthResult {
    /// Always `authenticated` (a request that is not gets 401).
    pub status: String,
    /// `key` (the API key), `ticket` (a ticket in `X-Original-URI`, used up by this request and
    /// traded for the viewer session cookie set on the answer) or `session` (a viewer session).
    pub method: String,
    /// `true` when only the desktop's picture may be seen (a view-only ticket or session).
    pub view_only: String,
}
