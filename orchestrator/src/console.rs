//! Web console sign-ins: a person types an API key once; the console keeps a server-side
//! session row and hands the browser a random secret (its cookie), never the key.
//!
//! A secret authenticates while its row is neither ended nor expired and the key it was opened
//! with still stands. Signing out ends the row at once (this instance also ends every desktop
//! relay the session opened, through [`crate::sessions`]); other instances sharing the database
//! see it at their next lookup, since no lookup is cached.
//!
//! **Invariant:** this module knows nothing of HTTP (cookies, Origin and status codes are the
//! API's); it stores only hashes of secrets.

use std::sync::Arc;

use crate::auth::{ApiKeys, Caller, KeyError};
use crate::db::{ConsoleSessionRecord, Store, StoreError};
use crate::secret::{new_id, new_secret, now_ms, sha256_hex};
use crate::sessions::Sessions;

/// How long a sign-in lasts (a working day; signing in again is one paste).
pub const SESSION_TTL_MS: i64 = 12 * 3600 * 1000;

/// The longest API key text the sign-in accepts (ours are 47 characters).
const MAX_KEY_LEN: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("looking up the API key: {0}")]
    Key(#[from] KeyError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a sign-in was refused (told to the person as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignInRefused {
    #[error("paste an API key (it starts with abk_)")]
    Empty,
    #[error("that is not an API key: too long")]
    TooLong,
    #[error("unknown or revoked API key")]
    UnknownKey,
}

/// A new sign-in: the row and the secret for the cookie (shown to nobody else).
#[derive(Debug)]
pub struct SignedIn {
    pub record: ConsoleSessionRecord,
    pub secret: String,
    /// Who signed in (with the new session's id).
    pub caller: Caller,
}

/// The console's sign-ins.
pub struct ConsoleSessions {
    store: Store,
    keys: Arc<ApiKeys>,
    sessions: Arc<Sessions>,
}

impl ConsoleSessions {
    pub fn new(store: Store, keys: Arc<ApiKeys>, sessions: Arc<Sessions>) -> Arc<Self> {
        Arc::new(Self {
            store,
            keys,
            sessions,
        })
    }

    /// Checks `key` and opens a session for it.
    pub async fn sign_in(
        &self,
        key: &str,
    ) -> Result<Result<SignedIn, SignInRefused>, ConsoleError> {
        let key = key.trim();
        if key.is_empty() {
            return Ok(Err(SignInRefused::Empty));
        }
        if key.len() > MAX_KEY_LEN {
            return Ok(Err(SignInRefused::TooLong));
        }
        let Some(caller) = self.keys.authenticate(key).await? else {
            return Ok(Err(SignInRefused::UnknownKey));
        };
        let secret = new_secret("acs_");
        let now = now_ms();
        let record = ConsoleSessionRecord {
            id: new_id("con-"),
            secret_hash: sha256_hex(&secret),
            key_id: caller.key_id.clone(),
            created_at: now,
            expires_at: now + SESSION_TTL_MS,
            ended_at: None,
        };
        self.store.insert_console_session(&record).await?;
        tracing::info!(console_session = %record.id, key_id = %record.key_id, "console sign-in");
        let caller = Caller {
            console_session: Some(record.id.clone()),
            ..caller
        };
        Ok(Ok(SignedIn {
            record,
            secret,
            caller,
        }))
    }

    /// The session a cookie's secret stands for, with its caller; `None` when unknown, ended,
    /// expired, or its key was revoked.
    pub async fn resolve(
        &self,
        secret: &str,
    ) -> Result<Option<(ConsoleSessionRecord, Caller)>, ConsoleError> {
        if secret.is_empty() || secret.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        let Some(record) = self
            .store
            .console_session_by_hash(&sha256_hex(secret))
            .await?
        else {
            return Ok(None);
        };
        if !record.is_live(now_ms()) {
            return Ok(None);
        }
        let Some(key) = self.store.key(&record.key_id).await? else {
            return Ok(None);
        };
        if key.revoked_at.is_some() {
            return Ok(None);
        }
        let caller = Caller {
            key_id: key.id,
            is_admin: key.is_admin,
            console_session: Some(record.id.clone()),
        };
        Ok(Some((record, caller)))
    }

    /// Whether the session `id` still authenticates (for long streams opened under it).
    pub async fn is_live(&self, id: &str) -> Result<bool, ConsoleError> {
        let Some(record) = self.store.console_session(id).await? else {
            return Ok(false);
        };
        if !record.is_live(now_ms()) {
            return Ok(false);
        }
        Ok(self
            .store
            .key(&record.key_id)
            .await?
            .is_some_and(|key| key.revoked_at.is_none()))
    }

    /// Ends the session: its row, and every relay it opened on this instance.
    pub async fn sign_out(&self, id: &str) -> Result<(), ConsoleError> {
        self.store.end_console_session(id, now_ms()).await?;
        self.sessions.end_console_session(id);
        tracing::info!(console_session = %id, "console sign-out");
        Ok(())
    }
}
