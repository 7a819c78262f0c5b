//! Who holds how many WebSocket relays: at most `--relays-per-key` open sessions per API key
//! (one more is a 429), and one [`Budget`] per key for the bytes of its clients' unfinished
//! messages, so that one key cannot pin the orchestrator's memory however many sockets it opens
//! (the attack review's finding: three sockets each holding a half-sent 200 MiB message took the
//! process from 29 to 629 MiB).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentbox_http::ws::{Budget, Limits};
use axum::http::StatusCode;

use super::error::ApiError;

/// Bytes of unfinished client messages one key's sessions may hold together.
pub const BUDGET_PER_KEY: usize = 64 * 1024 * 1024;

/// The relay sessions open per key.
#[derive(Debug)]
pub struct Relays {
    per_key: usize,
    unfinished_timeout: Duration,
    keys: Mutex<HashMap<String, Holding>>,
}

#[derive(Debug)]
struct Holding {
    sessions: usize,
    budget: Arc<Budget>,
}

/// One open relay session; dropping it gives the place back.
#[derive(Debug)]
pub struct RelaySlot {
    relays: Arc<Relays>,
    key: String,
}

impl Drop for RelaySlot {
    fn drop(&mut self) {
        let Ok(mut keys) = self.relays.keys.lock() else {
            return;
        };
        if let Some(holding) = keys.get_mut(&self.key) {
            holding.sessions = holding.sessions.saturating_sub(1);
            if holding.sessions == 0 {
                keys.remove(&self.key);
            }
        }
    }
}

impl Relays {
    pub fn new(per_key: usize, unfinished_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            per_key,
            unfinished_timeout,
            keys: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more session of `key` whose client may send messages up to
    /// `max_message` bytes, with the limits its socket keeps to; 429 when the key holds all
    /// its places.
    pub fn open(
        self: &Arc<Self>,
        key: &str,
        max_message: usize,
    ) -> Result<(RelaySlot, Limits), ApiError> {
        let mut keys = self
            .keys
            .lock()
            .map_err(|_| ApiError::unavailable("the relay ledger is unusable"))?;
        let holding = keys.entry(key.to_string()).or_insert_with(|| Holding {
            sessions: 0,
            budget: Budget::new(BUDGET_PER_KEY),
        });
        if holding.sessions >= self.per_key {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_sessions",
                format!(
                    "this API key already holds {} WebSocket sessions (viewers, CDP, sandbox \
                     API sockets), the limit: close one first",
                    self.per_key
                ),
            ));
        }
        holding.sessions += 1;
        let limits = Limits {
            max_message,
            unfinished_timeout: self.unfinished_timeout,
            budget: Some(holding.budget.clone()),
        };
        Ok((
            RelaySlot {
                relays: self.clone(),
                key: key.to_string(),
            },
            limits,
        ))
    }

    /// Sessions `key` holds now.
    pub fn held_by(&self, key: &str) -> usize {
        self.keys
            .lock()
            .ok()
            .and_then(|keys| keys.get(key).map(|holding| holding.sessions))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_its_places_and_gives_them_back() {
        let relays = Relays::new(2, Duration::from_secs(30));
        let (first, limits) = relays.open("key-a", 1024).expect("a place");
        assert_eq!(limits.max_message, 1024);
        let (_second, other) = relays.open("key-a", 1024).expect("a place");
        assert!(Arc::ptr_eq(
            limits.budget.as_ref().expect("a budget"),
            other.budget.as_ref().expect("a budget")
        ));
        let refused = relays.open("key-a", 1024).expect_err("no third place");
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            relays.open("key-b", 1024).is_ok(),
            "another key has its own"
        );
        drop(first);
        assert_eq!(relays.held_by("key-a"), 1);
        assert!(relays.open("key-a", 1024).is_ok());
    }
}
