//! Long-lived sessions through the proxies (CDP, terminals and other WebSockets, VNC viewers)
//! and the authority each rests on: the API key that opened it (or issued its token), the
//! token, the sandbox. A session ends as soon as its authority does:
//!
//! - at once, when this instance revokes the key or the token or ends the sandbox
//!   ([`Sessions::end_key`], [`Sessions::end_token`], [`Sessions::end_sandbox`]);
//! - at its token's expiry, to the millisecond ([`SessionGuard::ended`]);
//! - within one sweep when another instance sharing the database revoked or ended it (the
//!   sweeper in [`crate::sandboxes`] re-checks every live session's authority in the store).
//!
//! **Invariant:** this module knows nothing of HTTP or the database; callers tell it what ended.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::secret::now_ms;

/// What a session rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub sandbox_id: String,
    /// The API key that opened the session, or that issued its token.
    pub key_id: Option<String>,
    /// The viewer token it was opened with.
    pub token_id: Option<String>,
    /// When the token expires (ms since the epoch).
    pub expires_at: Option<i64>,
    /// The web console sign-in that opened it (signing out ends it).
    pub console_session: Option<String>,
    /// What kind of session (for logs and metrics): `cdp`, `api`, `vnc`.
    pub kind: &'static str,
}

struct Entry {
    authority: Authority,
    stop: Option<oneshot::Sender<String>>,
}

/// The live sessions of this instance.
#[derive(Default)]
pub struct Sessions {
    next: AtomicU64,
    live: Mutex<HashMap<u64, Entry>>,
}

/// One open session; dropping it forgets the session.
pub struct SessionGuard {
    id: u64,
    sessions: Arc<Sessions>,
    stopped: oneshot::Receiver<String>,
    expires_at: Option<i64>,
}

impl SessionGuard {
    /// Resolves with the reason once the session's authority ended.
    pub async fn ended(&mut self) -> String {
        let expiry = async {
            match self.expires_at {
                Some(at) => {
                    let left = (at - now_ms()).max(0) as u64;
                    tokio::time::sleep(Duration::from_millis(left)).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            why = &mut self.stopped => why.unwrap_or_else(|_| "the server is stopping".into()),
            () = expiry => "the token expired".into(),
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Ok(mut live) = self.sessions.live.lock() {
            live.remove(&self.id);
        }
    }
}

impl Sessions {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Registers a session resting on `authority`.
    pub fn open(self: &Arc<Self>, authority: Authority) -> SessionGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let expires_at = authority.expires_at;
        if let Ok(mut live) = self.live.lock() {
            live.insert(
                id,
                Entry {
                    authority,
                    stop: Some(tx),
                },
            );
        }
        SessionGuard {
            id,
            sessions: self.clone(),
            stopped: rx,
            expires_at,
        }
    }

    /// Ends every session whose authority matches; returns how many.
    pub fn end_where(&self, matches: impl Fn(&Authority) -> bool, reason: &str) -> usize {
        let Ok(mut live) = self.live.lock() else {
            return 0;
        };
        let mut ended = 0;
        for entry in live.values_mut() {
            if matches(&entry.authority)
                && let Some(stop) = entry.stop.take()
            {
                let _ = stop.send(reason.to_string());
                ended += 1;
            }
        }
        if ended > 0 {
            tracing::info!(ended, reason, "sessions ended");
        }
        ended
    }

    /// A key was revoked: its sessions and those of the tokens it issued end.
    pub fn end_key(&self, key_id: &str) -> usize {
        self.end_where(
            |a| a.key_id.as_deref() == Some(key_id),
            "the API key was revoked",
        )
    }

    /// A token was revoked.
    pub fn end_token(&self, token_id: &str) -> usize {
        self.end_where(
            |a| a.token_id.as_deref() == Some(token_id),
            "the token was revoked",
        )
    }

    /// The sandbox stopped being ready (deleted, reaped, lost).
    pub fn end_sandbox(&self, sandbox_id: &str, reason: &str) -> usize {
        self.end_where(|a| a.sandbox_id == sandbox_id, reason)
    }

    /// A web console sign-in ended (signed out, or found ended by the sweeper).
    pub fn end_console_session(&self, console_session: &str) -> usize {
        self.end_where(
            |a| a.console_session.as_deref() == Some(console_session),
            "signed out of the console",
        )
    }

    /// Every token of a sandbox was revoked.
    pub fn end_sandbox_tokens(&self, sandbox_id: &str) -> usize {
        self.end_where(
            |a| a.sandbox_id == sandbox_id && a.token_id.is_some(),
            "the token was revoked",
        )
    }

    /// The authorities of the live sessions (for the sweeper).
    pub fn authorities(&self) -> Vec<Authority> {
        self.live
            .lock()
            .map(|live| {
                live.values()
                    .filter(|e| e.stop.is_some())
                    .map(|e| e.authority.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Live sessions.
    pub fn count(&self) -> usize {
        self.live.lock().map(|l| l.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority(sandbox: &str, key: Option<&str>, token: Option<&str>) -> Authority {
        Authority {
            sandbox_id: sandbox.into(),
            key_id: key.map(str::to_owned),
            token_id: token.map(str::to_owned),
            expires_at: None,
            console_session: None,
            kind: "cdp",
        }
    }

    #[tokio::test]
    async fn sessions_end_with_their_key_token_or_sandbox() {
        let sessions = Sessions::new();
        let mut by_key = sessions.open(authority("s1", Some("k1"), None));
        let mut by_token = sessions.open(authority("s1", Some("k2"), Some("t1")));
        let mut other = sessions.open(authority("s2", Some("k3"), None));
        assert_eq!(sessions.end_key("k1"), 1);
        assert_eq!(by_key.ended().await, "the API key was revoked");
        assert_eq!(sessions.end_token("t1"), 1);
        assert_eq!(by_token.ended().await, "the token was revoked");
        assert_eq!(sessions.end_sandbox("s2", "gone"), 1);
        assert_eq!(other.ended().await, "gone");
        assert_eq!(sessions.end_sandbox("s2", "again"), 0, "ended once");
        let mut by_console = sessions.open(Authority {
            console_session: Some("con-1".into()),
            ..authority("s3", Some("k4"), None)
        });
        assert_eq!(sessions.end_console_session("con-2"), 0);
        assert_eq!(sessions.end_console_session("con-1"), 1);
        assert_eq!(by_console.ended().await, "signed out of the console");
        drop(by_console);
        drop((by_key, by_token, other));
        assert_eq!(sessions.count(), 0);
    }

    #[tokio::test]
    async fn a_session_ends_at_its_tokens_expiry() {
        let sessions = Sessions::new();
        let mut guard = sessions.open(Authority {
            expires_at: Some(now_ms() + 50),
            ..authority("s", None, Some("t"))
        });
        let started = std::time::Instant::now();
        assert_eq!(guard.ended().await, "the token expired");
        assert!(started.elapsed() >= Duration::from_millis(40));
    }
}
