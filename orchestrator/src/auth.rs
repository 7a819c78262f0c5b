//! API keys: created, checked, listed and revoked. Only a SHA-256 of each key is stored; a key
//! is 256 random bits, so a fast hash is enough (nothing to brute-force).
//!
//! The first start creates an admin key and returns it once (the binary prints it), unless
//! `AGENTBOX_ADMIN_KEY` provides one. Checks go through a small cache (hash -> record) that a
//! revocation on this instance clears at once; other instances sharing a Postgres database see a
//! revocation within [`CACHE_TTL`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::db::{ApiKeyRecord, Store, StoreError};
use crate::secret::{new_id, new_secret, now_ms, sha256_hex};

/// How long a successful lookup is trusted without asking the database again.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// The smallest key this accepts from `AGENTBOX_ADMIN_KEY`.
pub const MIN_KEY_LEN: usize = 24;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("AGENTBOX_ADMIN_KEY is too short: use at least {MIN_KEY_LEN} random characters")]
    WeakAdminKey,
    #[error("key name must be 1 to 100 characters")]
    BadName,
}

/// Who is calling: the key that authenticated the request.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    pub key_id: String,
    pub is_admin: bool,
    /// The web console sign-in the request came through (its cookie), `None` for a key sent
    /// as a header. What such a request opens ends at sign-out.
    pub console_session: Option<String>,
}

/// The key registry.
pub struct ApiKeys {
    store: Store,
    cache: Mutex<HashMap<String, (ApiKeyRecord, Instant)>>,
}

impl ApiKeys {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Makes sure an admin key exists. Returns the new key's text when one was generated (the
    /// caller prints it once), `None` when keys existed or `env_key` was used.
    pub async fn bootstrap(&self, env_key: Option<&str>) -> Result<Option<String>, KeyError> {
        if let Some(key) = env_key {
            if key.len() < MIN_KEY_LEN {
                return Err(KeyError::WeakAdminKey);
            }
            let hash = sha256_hex(key);
            if self.store.key_by_hash(&hash).await?.is_none() {
                self.store
                    .insert_key(&ApiKeyRecord {
                        id: new_id("key-"),
                        name: "admin (AGENTBOX_ADMIN_KEY)".into(),
                        key_hash: hash,
                        is_admin: true,
                        created_at: now_ms(),
                        revoked_at: None,
                    })
                    .await?;
            }
            return Ok(None);
        }
        if self.store.count_keys().await? > 0 {
            return Ok(None);
        }
        let (_, key) = self.create("admin", true).await?;
        Ok(Some(key))
    }

    /// Creates a key; returns its record and its text (shown once, never stored).
    pub async fn create(
        &self,
        name: &str,
        is_admin: bool,
    ) -> Result<(ApiKeyRecord, String), KeyError> {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(KeyError::BadName);
        }
        let key = new_secret("abk_");
        let record = ApiKeyRecord {
            id: new_id("key-"),
            name: name.to_string(),
            key_hash: sha256_hex(&key),
            is_admin,
            created_at: now_ms(),
            revoked_at: None,
        };
        self.store.insert_key(&record).await?;
        Ok((record, key))
    }

    /// The caller a presented key stands for, or `None` for an unknown or revoked key.
    pub async fn authenticate(&self, presented: &str) -> Result<Option<Caller>, KeyError> {
        let hash = sha256_hex(presented);
        let cached = self
            .cache
            .lock()
            .ok()
            .and_then(|cache| cache.get(&hash).cloned());
        let record = match cached {
            Some((record, at)) if at.elapsed() < CACHE_TTL => Some(record),
            _ => {
                let record = self.store.key_by_hash(&hash).await?;
                if let (Some(record), Ok(mut cache)) = (&record, self.cache.lock()) {
                    if cache.len() > 10_000 {
                        cache.clear();
                    }
                    cache.insert(hash, (record.clone(), Instant::now()));
                }
                record
            }
        };
        Ok(record.filter(|r| r.revoked_at.is_none()).map(|r| Caller {
            key_id: r.id,
            is_admin: r.is_admin,
            console_session: None,
        }))
    }

    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>, KeyError> {
        Ok(self.store.list_keys().await?)
    }

    /// Revokes a key; false when there is no such active key.
    pub async fn revoke(&self, id: &str) -> Result<bool, KeyError> {
        let revoked = self.store.revoke_key(id, now_ms()).await?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.clear();
        }
        Ok(revoked)
    }
}
