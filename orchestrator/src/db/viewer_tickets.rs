//! AIO viewer tickets in SQL: single use, found by the SHA-256 of the ticket, so a ticket one
//! replica made is redeemed by any (issue 25).

use super::{Result, Store, get, query_error};

/// What a waiting ticket opens, for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewerTicketRecord {
    pub sandbox_id: String,
    pub key_id: String,
    /// The key's owner filter (`None` for an admin key).
    pub owner: Option<String>,
    pub view_only: bool,
    pub made_at: i64,
}

impl Store {
    /// Keeps a ticket (by its hash); a key with more than `max_per_key` waiting loses its
    /// oldest ones; tickets made before `expired_before` are dropped.
    pub async fn insert_viewer_ticket(
        &self,
        ticket_hash: &str,
        ticket: &ViewerTicketRecord,
        max_per_key: i64,
        expired_before: i64,
    ) -> Result<()> {
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        sqlx::query("DELETE FROM viewer_tickets WHERE made_at < $1")
            .bind(expired_before)
            .execute(&mut *tx)
            .await
            .map_err(query_error("drop expired tickets"))?;
        sqlx::query(
            "INSERT INTO viewer_tickets (ticket_hash, sandbox_id, key_id, owner, view_only, made_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(ticket_hash)
        .bind(&ticket.sandbox_id)
        .bind(&ticket.key_id)
        .bind(&ticket.owner)
        .bind(ticket.view_only as i64)
        .bind(ticket.made_at)
        .execute(&mut *tx)
        .await
        .map_err(query_error("insert ticket"))?;
        sqlx::query(
            "DELETE FROM viewer_tickets WHERE key_id = $1 AND ticket_hash NOT IN \
             (SELECT ticket_hash FROM viewer_tickets WHERE key_id = $1 \
             ORDER BY made_at DESC, ticket_hash LIMIT $2)",
        )
        .bind(&ticket.key_id)
        .bind(max_per_key)
        .execute(&mut *tx)
        .await
        .map_err(query_error("drop a key's oldest tickets"))?;
        tx.commit().await.map_err(query_error("commit ticket"))?;
        Ok(())
    }

    /// Uses a ticket up: removes it and returns what it opens (once, whoever asks).
    pub async fn take_viewer_ticket(
        &self,
        ticket_hash: &str,
    ) -> Result<Option<ViewerTicketRecord>> {
        // Looked for first with a read (it waits for no writer): an unknown ticket, which
        // anyone can send without a key, costs no write.
        let known = sqlx::query("SELECT 1 AS known FROM viewer_tickets WHERE ticket_hash = $1")
            .bind(ticket_hash)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("find ticket"))?;
        if known.is_none() {
            return Ok(None);
        }
        let row = sqlx::query(
            "DELETE FROM viewer_tickets WHERE ticket_hash = $1 \
             RETURNING sandbox_id, key_id, owner, view_only, made_at",
        )
        .bind(ticket_hash)
        .fetch_optional(&self.writer)
        .await
        .map_err(query_error("take ticket"))?;
        row.map(|row| {
            Ok(ViewerTicketRecord {
                sandbox_id: get(&row, "sandbox_id")?,
                key_id: get(&row, "key_id")?,
                owner: get(&row, "owner")?,
                view_only: get::<i64>(&row, "view_only")? != 0,
                made_at: get(&row, "made_at")?,
            })
        })
        .transpose()
    }
}
