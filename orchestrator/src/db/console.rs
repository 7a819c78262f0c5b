//! Web console sign-ins in SQL: one row per signed-in browser, found by the SHA-256 of its
//! cookie's secret, ended (never deleted while it could still be presented) at sign-out.

use sqlx::any::AnyRow;

use super::{Result, Store, get, query_error};

/// A console sign-in as stored (the secret itself is only in the browser's cookie).
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleSessionRecord {
    pub id: String,
    pub secret_hash: String,
    /// The API key the person signed in with.
    pub key_id: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// Set at sign-out; an ended session never authenticates again.
    pub ended_at: Option<i64>,
}

impl ConsoleSessionRecord {
    /// Not ended and not expired at `now`.
    pub fn is_live(&self, now: i64) -> bool {
        self.ended_at.is_none() && now < self.expires_at
    }
}

fn from_row(row: &AnyRow) -> Result<ConsoleSessionRecord> {
    Ok(ConsoleSessionRecord {
        id: get(row, "id")?,
        secret_hash: get(row, "secret_hash")?,
        key_id: get(row, "key_id")?,
        created_at: get(row, "created_at")?,
        expires_at: get(row, "expires_at")?,
        ended_at: get(row, "ended_at")?,
    })
}

impl Store {
    pub async fn insert_console_session(&self, session: &ConsoleSessionRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO console_sessions (id, secret_hash, key_id, created_at, expires_at, \
             ended_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&session.id)
        .bind(&session.secret_hash)
        .bind(&session.key_id)
        .bind(session.created_at)
        .bind(session.expires_at)
        .bind(session.ended_at)
        .execute(&self.writer)
        .await
        .map_err(query_error("insert console session"))?;
        Ok(())
    }

    pub async fn console_session_by_hash(
        &self,
        hash: &str,
    ) -> Result<Option<ConsoleSessionRecord>> {
        let row = sqlx::query(
            "SELECT id, secret_hash, key_id, created_at, expires_at, ended_at \
             FROM console_sessions WHERE secret_hash = $1",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("get console session"))?;
        row.map(|row| from_row(&row)).transpose()
    }

    pub async fn console_session(&self, id: &str) -> Result<Option<ConsoleSessionRecord>> {
        let row = sqlx::query(
            "SELECT id, secret_hash, key_id, created_at, expires_at, ended_at \
             FROM console_sessions WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("get console session"))?;
        row.map(|row| from_row(&row)).transpose()
    }

    /// Ends a session; false when it had already ended.
    pub async fn end_console_session(&self, id: &str, at: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE console_sessions SET ended_at = $1 WHERE id = $2 AND ended_at IS NULL",
        )
        .bind(at)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("end console session"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Deletes rows that expired or ended before `before` (their cookies are worthless).
    pub async fn purge_console_sessions(&self, before: i64) -> Result<u64> {
        let done =
            sqlx::query("DELETE FROM console_sessions WHERE expires_at < $1 OR ended_at < $1")
                .bind(before)
                .execute(&self.writer)
                .await
                .map_err(query_error("purge console sessions"))?;
        Ok(done.rows_affected())
    }
}
