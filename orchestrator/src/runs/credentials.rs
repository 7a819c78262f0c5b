//! The credentials a key stores for remote A2A agents (what an `a2a:` run sends as its bearer),
//! one per agent origin. Sealed at rest with a key derived from the master key and bound to
//! the owner and the origin ([`crate::keyring::Keyring::seal`]); never given back by the API,
//! and sent only to that origin ([`crate::a2a::client`]).

use crate::a2a::client;
use crate::db::CredentialRecord;
use crate::secret::new_id;
use crate::validate::invalid;

use super::remote::credential_context;
use super::{RunError, Runs};

/// Longest token stored.
const MAX_TOKEN_CHARS: usize = 8 * 1024;

impl Runs {
    /// Stores `token` for the agent at `agent_url` (its origin), replacing the key's earlier
    /// one for that origin.
    pub async fn put_credential(
        &self,
        owner_key_id: &str,
        agent_url: &str,
        token: &str,
    ) -> Result<CredentialRecord, RunError> {
        let url = client::card_url(agent_url).map_err(|message| invalid("agent", message))?;
        if token.is_empty() || token.len() > MAX_TOKEN_CHARS {
            return Err(invalid(
                "token",
                format!("must be 1 to {MAX_TOKEN_CHARS} characters"),
            )
            .into());
        }
        if token.chars().any(|c| c.is_control() || c == ' ') {
            return Err(invalid(
                "token",
                "must be one word of printable characters (it is sent as `Bearer <token>`)",
            )
            .into());
        }
        let origin = client::origin(&url);
        let sealed = self
            .sandboxes
            .keyring
            .seal(&credential_context(owner_key_id, &origin), token);
        let record = CredentialRecord {
            id: new_id("cred"),
            owner_key_id: owner_key_id.to_string(),
            origin,
            sealed,
            created_at: self.clock.now_ms(),
        };
        Ok(self.store.put_a2a_credential(&record).await?)
    }

    /// The key's credentials (their origins; the tokens stay sealed).
    pub async fn credentials(&self, owner_key_id: &str) -> Result<Vec<CredentialRecord>, RunError> {
        Ok(self.store.a2a_credentials(owner_key_id).await?)
    }

    /// Deletes one of the key's credentials.
    pub async fn delete_credential(&self, owner_key_id: &str, id: &str) -> Result<(), RunError> {
        if self.store.delete_a2a_credential(owner_key_id, id).await? {
            Ok(())
        } else {
            Err(RunError::NotFound(format!("credential {id}")))
        }
    }
}
