//! The credentials keys store for remote A2A agents, one per (key, agent origin), sealed (the
//! store never sees a token in the clear: [`crate::keyring::Keyring::seal`]).

use sqlx::any::AnyRow;

// Dynamic SQL here is built only from constants and `$n` placeholders, never from input.
use super::{Result, Store, get, query_error};

/// A stored credential.
#[derive(Debug, Clone, PartialEq)]
pub struct CredentialRecord {
    pub id: String,
    pub owner_key_id: String,
    /// `scheme://host:port` of the remote agent.
    pub origin: String,
    /// The sealed bearer token.
    pub sealed: String,
    pub created_at: i64,
}

fn from_row(row: &AnyRow) -> Result<CredentialRecord> {
    Ok(CredentialRecord {
        id: get(row, "id")?,
        owner_key_id: get(row, "owner_key_id")?,
        origin: get(row, "origin")?,
        sealed: get(row, "sealed")?,
        created_at: get(row, "created_at")?,
    })
}

const COLUMNS: &str = "id, owner_key_id, origin, sealed, created_at";

impl Store {
    /// Stores `record`, replacing the key's credential for the same origin (the id stays).
    pub async fn put_a2a_credential(&self, record: &CredentialRecord) -> Result<CredentialRecord> {
        sqlx::query(
            "INSERT INTO a2a_credentials (id, owner_key_id, origin, sealed, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner_key_id, origin) \
             DO UPDATE SET sealed = excluded.sealed, created_at = excluded.created_at",
        )
        .bind(&record.id)
        .bind(&record.owner_key_id)
        .bind(&record.origin)
        .bind(&record.sealed)
        .bind(record.created_at)
        .execute(&self.writer)
        .await
        .map_err(query_error("put a2a credential"))?;
        self.a2a_credential(&record.owner_key_id, &record.origin)
            .await?
            .ok_or_else(|| super::StoreError::Corrupt {
                what: "a2a_credentials",
                message: "the credential just stored is not there".into(),
            })
    }

    /// The key's credential for `origin`.
    pub async fn a2a_credential(
        &self,
        owner_key_id: &str,
        origin: &str,
    ) -> Result<Option<CredentialRecord>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM a2a_credentials WHERE owner_key_id = $1 AND origin = $2"
        )))
        .bind(owner_key_id)
        .bind(origin)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("get a2a credential"))?;
        row.map(|row| from_row(&row)).transpose()
    }

    /// The key's credentials, by origin.
    pub async fn a2a_credentials(&self, owner_key_id: &str) -> Result<Vec<CredentialRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM a2a_credentials WHERE owner_key_id = $1 ORDER BY origin"
        )))
        .bind(owner_key_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("list a2a credentials"))?;
        rows.iter().map(from_row).collect()
    }

    /// Deletes the key's credential `id`; false when it has none by that id.
    pub async fn delete_a2a_credential(&self, owner_key_id: &str, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM a2a_credentials WHERE owner_key_id = $1 AND id = $2")
            .bind(owner_key_id)
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(query_error("delete a2a credential"))?;
        Ok(done.rows_affected() > 0)
    }
}
