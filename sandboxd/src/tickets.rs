//! Tickets and browser sessions, for browsers that cannot send headers.
//!
//! A browser opening the remote desktop or the terminal page cannot put the API key on its page
//! loads and WebSocket. A holder of the key asks for a **ticket** (`POST /tickets`): random,
//! single-use, valid for [`TICKET_TTL`], for one [`Scope`]. The browser brings it once, in the
//! URL of the page; sandboxd trades it for a **session** in an HttpOnly, SameSite=Strict cookie,
//! valid for [`SESSION_TTL`], that opens that page's files and its WebSocket and nothing else:
//! a desktop session never opens the terminal, nor a terminal session the desktop. A desktop
//! ticket may be view-only; its session is then view-only whatever the page asks for.
//!
//! Only SHA-256 digests of tickets and sessions are kept, in memory, with bounded counts.
//!
//! **Invariant:** this module knows nothing of HTTP; the API layer decides where a session
//! is accepted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// How long a ticket may wait to be used.
pub const TICKET_TTL: Duration = Duration::from_secs(60);
/// How long a viewer session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(3600);
/// Most tickets (and, separately, sessions) held at once; the oldest go first.
const MAX_ENTRIES: usize = 256;

/// What a ticket, and the session it opens, give access to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The remote desktop, watched and used.
    Desktop,
    /// The remote desktop, watched only.
    DesktopViewOnly,
    /// The terminal page: a shell as the agent user.
    Terminal,
}

/// What a ticket or session allows, until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub scope: Scope,
    pub expires: Instant,
}

impl Grant {
    /// Whether only the desktop's picture may be seen.
    pub fn view_only(&self) -> bool {
        self.scope == Scope::DesktopViewOnly
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TicketError {
    #[error("the system's random number generator failed: {0}")]
    Random(String),
}

/// The tickets and sessions of this sandbox.
#[derive(Debug, Default)]
pub struct Tickets {
    tickets: Mutex<HashMap<[u8; 32], Grant>>,
    sessions: Mutex<HashMap<[u8; 32], Grant>>,
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn new_secret() -> Result<String, TicketError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| TicketError::Random(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Adds an entry, dropping expired ones and, past the bound, the one expiring first.
fn insert(map: &Mutex<HashMap<[u8; 32], Grant>>, key: [u8; 32], grant: Grant) {
    let Ok(mut map) = map.lock() else { return };
    let now = Instant::now();
    map.retain(|_, g| g.expires > now);
    while map.len() >= MAX_ENTRIES {
        let Some(first) = map.iter().min_by_key(|(_, g)| g.expires).map(|(k, _)| *k) else {
            break;
        };
        map.remove(&first);
    }
    map.insert(key, grant);
}

impl Tickets {
    pub fn new() -> Self {
        Self::default()
    }

    /// A new single-use ticket.
    pub fn issue(&self, scope: Scope) -> Result<(String, Grant), TicketError> {
        let ticket = new_secret()?;
        let grant = Grant {
            scope,
            expires: Instant::now() + TICKET_TTL,
        };
        insert(&self.tickets, digest(&ticket), grant);
        Ok((ticket, grant))
    }

    /// Trades a valid ticket (once) for a session of its scope: `(session secret, grant)`.
    pub fn redeem(&self, ticket: &str) -> Result<Option<(String, Grant)>, TicketError> {
        let grant = {
            let Ok(mut tickets) = self.tickets.lock() else {
                return Ok(None);
            };
            match tickets.remove(&digest(ticket)) {
                Some(grant) if grant.expires > Instant::now() => grant,
                _ => return Ok(None),
            }
        };
        let session = new_secret()?;
        let grant = Grant {
            scope: grant.scope,
            expires: Instant::now() + SESSION_TTL,
        };
        insert(&self.sessions, digest(&session), grant);
        Ok(Some((session, grant)))
    }

    /// The grant of a live session.
    pub fn session(&self, session: &str) -> Option<Grant> {
        let sessions = self.sessions.lock().ok()?;
        sessions
            .get(&digest(session))
            .copied()
            .filter(|g| g.expires > Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_redeemed_once_for_a_session_that_keeps_its_mode() {
        let tickets = Tickets::new();
        let (ticket, _) = tickets.issue(Scope::DesktopViewOnly).unwrap();
        let (session, grant) = tickets.redeem(&ticket).unwrap().unwrap();
        assert!(grant.view_only());
        assert!(tickets.redeem(&ticket).unwrap().is_none(), "single use");
        assert_eq!(
            tickets.session(&session).map(|g| g.scope),
            Some(Scope::DesktopViewOnly)
        );
        assert!(tickets.session("forged").is_none());
        assert!(tickets.redeem("forged").unwrap().is_none());
    }

    #[test]
    fn counts_are_bounded() {
        let tickets = Tickets::new();
        let first = tickets.issue(Scope::Desktop).unwrap().0;
        for _ in 0..MAX_ENTRIES {
            tickets.issue(Scope::Desktop).unwrap();
        }
        assert!(tickets.tickets.lock().unwrap().len() <= MAX_ENTRIES);
        assert!(
            tickets.redeem(&first).unwrap().is_none(),
            "the oldest went first"
        );
    }
}
