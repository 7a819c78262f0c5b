//! Kept homes in SQL: a sandbox's moves in and out of hibernation (each a guarded update that
//! changes nothing when the sandbox is no longer where it was), and the snapshots table.

use sqlx::any::AnyRow;

use super::{Result, SandboxStatus, Store, StoreError, get, query_error};

/// Where a snapshot is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotStatus {
    /// Its archive is being written (a row left in this state by a crash is removed at start).
    Taking,
    /// Whole; new sandboxes can start from it.
    Ready,
}

impl SnapshotStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Taking => "taking",
            Self::Ready => "ready",
        }
    }
}

/// One snapshot: a sandbox's home, kept as an archive, owned by the key that took it.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRecord {
    pub id: String,
    pub owner_key_id: String,
    /// The sandbox it was taken from (which may be gone since).
    pub parent_sandbox_id: Option<String>,
    /// The parent's image and resolution: a sandbox started from it gets the same.
    pub image: String,
    pub resolution: Option<String>,
    pub status: SnapshotStatus,
    pub size_bytes: i64,
    /// The orchestrator instance whose data directory holds its archive.
    pub instance: Option<String>,
    pub created_at: i64,
    /// Taken by a fork for its own use, deleted once the forks are made.
    pub transient: bool,
}

const SNAPSHOT_COLUMNS: &str = "id, owner_key_id, parent_sandbox_id, image, resolution, status, size_bytes, instance, \
     created_at, transient";

fn snapshot_from_row(row: &AnyRow) -> Result<SnapshotRecord> {
    let status: String = get(row, "status")?;
    Ok(SnapshotRecord {
        id: get(row, "id")?,
        owner_key_id: get(row, "owner_key_id")?,
        parent_sandbox_id: get(row, "parent_sandbox_id")?,
        image: get(row, "image")?,
        resolution: get(row, "resolution")?,
        status: match status.as_str() {
            "taking" => SnapshotStatus::Taking,
            "ready" => SnapshotStatus::Ready,
            other => {
                return Err(StoreError::Corrupt {
                    what: "snapshots.status",
                    message: format!("unknown status `{other}`"),
                });
            }
        },
        size_bytes: get(row, "size_bytes")?,
        instance: get(row, "instance")?,
        created_at: get(row, "created_at")?,
        transient: get::<i64>(row, "transient")? != 0,
    })
}

/// What [`Store::mark_waking_within_quota`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeMark {
    /// The sandbox is `waking` now.
    Marked,
    /// The key has `live` sandboxes already: nothing was written.
    Full { live: i64 },
    /// It was not hibernated (woken, deleted or lost meanwhile): nothing was written.
    Changed,
}

impl Store {
    // ---- hibernation ----

    /// Marks a live or paused sandbox as hibernating; false when it is in another state or a
    /// run is queued or running on it (nothing changed).
    pub async fn mark_hibernating(&self, id: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'hibernating' WHERE id = $1 \
             AND status IN ('ready', 'degraded', 'paused') AND NOT EXISTS (SELECT 1 FROM runs \
             WHERE runs.sandbox_id = $1 AND runs.status IN ('queued', 'running'))",
        )
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark hibernating"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Puts a hibernating sandbox back as it was (a hibernation that failed before its
    /// container went).
    pub async fn unmark_hibernating(
        &self,
        id: &str,
        status: SandboxStatus,
        error: Option<&str>,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = $1, error = $2 WHERE id = $3 \
             AND status = 'hibernating'",
        )
        .bind(status.as_str())
        .bind(error)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("unmark hibernating"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Records a hibernating sandbox's home as kept and its container as gone.
    pub async fn mark_hibernated(&self, id: &str, at: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'hibernated', hibernated_at = $1, paused_at = NULL, \
             container_id = NULL, address = NULL, error = NULL WHERE id = $2 \
             AND status = 'hibernating'",
        )
        .bind(at)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark hibernated"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Marks a hibernated sandbox as waking; false when it is not hibernated.
    pub async fn mark_waking(&self, id: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'waking' WHERE id = $1 AND status = 'hibernated'",
        )
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark waking"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Marks hibernated sandbox `id` waking when its key (`owner`) has fewer than `limit` live
    /// sandboxes (a limit of 0, or no owner: no quota): the count and the write in one
    /// transaction, under the key's advisory lock on Postgres, so two replicas waking, creating
    /// or claiming for one key at once cannot pass the limit together.
    pub async fn mark_waking_within_quota(
        &self,
        id: &str,
        owner: Option<&str>,
        limit: i64,
    ) -> Result<WakeMark> {
        let Some(owner) = owner.filter(|_| limit > 0) else {
            return Ok(if self.mark_waking(id).await? {
                WakeMark::Marked
            } else {
                WakeMark::Changed
            });
        };
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        if !self.is_sqlite {
            super::replicas::lock_key_quota(&mut tx, owner).await?;
        }
        let live = super::replicas::count_live_in(&mut *tx, owner).await?;
        if live >= limit {
            return Ok(WakeMark::Full { live });
        }
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'waking' WHERE id = $1 AND status = 'hibernated'",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(query_error("mark waking"))?;
        if done.rows_affected() == 0 {
            return Ok(WakeMark::Changed);
        }
        tx.commit().await.map_err(query_error("commit waking"))?;
        Ok(WakeMark::Marked)
    }

    /// Puts a waking sandbox back to hibernated, without a container (a wake that failed).
    pub async fn unmark_waking(&self, id: &str, error: Option<&str>) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'hibernated', container_id = NULL, address = NULL, \
             error = $1 WHERE id = $2 AND status = 'waking'",
        )
        .bind(error)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("unmark waking"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Marks a waking sandbox ready, active at `at`.
    pub async fn mark_woken(&self, id: &str, at: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE sandboxes SET status = 'ready', hibernated_at = NULL, error = NULL, \
             last_active_at = $1 WHERE id = $2 AND status = 'waking'",
        )
        .bind(at)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark woken"))?;
        Ok(done.rows_affected() > 0)
    }

    // ---- snapshots ----

    pub async fn insert_snapshot(&self, s: &SnapshotRecord) -> Result<()> {
        let sql = format!(
            "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
             $10)"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&s.id)
            .bind(&s.owner_key_id)
            .bind(&s.parent_sandbox_id)
            .bind(&s.image)
            .bind(&s.resolution)
            .bind(s.status.as_str())
            .bind(s.size_bytes)
            .bind(&s.instance)
            .bind(s.created_at)
            .bind(i64::from(s.transient))
            .execute(&self.writer)
            .await
            .map_err(query_error("insert snapshot"))?;
        Ok(())
    }

    /// Marks a snapshot whole, with its size.
    pub async fn mark_snapshot_ready(&self, id: &str, size_bytes: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE snapshots SET status = 'ready', size_bytes = $1 WHERE id = $2 \
             AND status = 'taking'",
        )
        .bind(size_bytes)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark snapshot ready"))?;
        Ok(done.rows_affected() > 0)
    }

    pub async fn snapshot(&self, id: &str) -> Result<Option<SnapshotRecord>> {
        let sql = format!("SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("get snapshot"))?;
        row.as_ref().map(snapshot_from_row).transpose()
    }

    /// A key's snapshots (everyone's with `None`), oldest first.
    pub async fn snapshots(&self, owner_key_id: Option<&str>) -> Result<Vec<SnapshotRecord>> {
        let sql = format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots \
             WHERE (CAST($1 AS TEXT) IS NULL OR owner_key_id = $1) ORDER BY created_at, id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(owner_key_id)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("list snapshots"))?;
        rows.iter().map(snapshot_from_row).collect()
    }

    /// How many snapshots a key holds and their bytes (those being taken count as one each).
    pub async fn snapshot_usage(&self, owner_key_id: &str) -> Result<(i64, i64)> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) AS bytes \
             FROM snapshots WHERE owner_key_id = $1",
        )
        .bind(owner_key_id)
        .fetch_one(&self.writer)
        .await
        .map_err(query_error("count snapshots"))?;
        Ok((get(&row, "n")?, get(&row, "bytes")?))
    }

    pub async fn delete_snapshot(&self, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM snapshots WHERE id = $1")
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(query_error("delete snapshot"))?;
        Ok(done.rows_affected() > 0)
    }
}
