//! Orchestrator replicas sharing this database, and the leases through which they take turns
//! at the duties only one of them may do at a time (issue 25).
//!
//! A replica's row is written at its start and at every beat; one whose `seen_at` is old is
//! gone. A lease is one row per duty: taken when free, expired or already the taker's, in one
//! conditional upsert, so two replicas never both hold it.

use super::{Result, SANDBOX_COLUMNS, SandboxRecord, Store, get, query_error, sandbox_from_row};

/// One replica as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecord {
    pub id: String,
    /// The process (a new one at every start of the replica).
    pub boot: String,
    pub address: Option<String>,
    pub started_at: i64,
    pub seen_at: i64,
}

/// Makes the key's sandbox count and the write that depends on it take turns with every other
/// such transaction of the key, in any replica (a Postgres advisory lock held until the
/// transaction ends).
pub(super) async fn lock_key_quota(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    owner_key_id: &str,
) -> Result<()> {
    sqlx::query("SELECT 1 AS locked FROM pg_advisory_xact_lock(hashtext($1))")
        .bind(owner_key_id)
        .fetch_one(&mut **tx)
        .await
        .map_err(query_error("lock the key's quota"))?;
    Ok(())
}

/// The statuses in which a sandbox counts against its key's quota.
pub(super) const LIVE_STATUSES: &str =
    "('creating', 'ready', 'degraded', 'paused', 'hibernating', 'waking')";

/// How many sandboxes of `owner_key_id` count against its quota, read through `executor` (the
/// read pool, or a transaction that writes depending on it).
pub(super) async fn count_live_in<'e, E>(executor: E, owner_key_id: &str) -> Result<i64>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM sandboxes WHERE owner_key_id = $1 AND pooled = 0 \
         AND status IN {LIVE_STATUSES}"
    )))
    .bind(owner_key_id)
    .fetch_one(executor)
    .await
    .map_err(query_error("count sandboxes"))?;
    sqlx::Row::try_get::<i64, _>(&row, 0).map_err(query_error("count sandboxes"))
}

/// How an insert within a key's quota went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaInsert {
    Inserted,
    /// The key has `live` sandboxes already: nothing was written.
    Full {
        live: i64,
    },
}

impl Store {
    /// Inserts a new sandbox of a key unless the key has `limit` live ones already, the count
    /// and the insert in one transaction that every other of the key's takes turns with (in
    /// any replica).
    pub async fn insert_sandbox_within_quota(
        &self,
        record: &SandboxRecord,
        limit: i64,
    ) -> Result<QuotaInsert> {
        let Some(owner) = &record.owner_key_id else {
            self.insert_sandbox(record).await?;
            return Ok(QuotaInsert::Inserted);
        };
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        if !self.is_sqlite {
            lock_key_quota(&mut tx, owner).await?;
        }
        let live = count_live_in(&mut *tx, owner).await?;
        if live >= limit {
            return Ok(QuotaInsert::Full { live });
        }
        super::insert_sandbox_in(&mut *tx, record).await?;
        tx.commit().await.map_err(query_error("commit sandbox"))?;
        Ok(QuotaInsert::Inserted)
    }

    /// Records that replica `id` started as process `boot` (replacing an earlier life's row).
    pub async fn register_replica(
        &self,
        id: &str,
        boot: &str,
        address: Option<&str>,
        now: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO replicas (id, boot, address, started_at, seen_at) VALUES ($1, $2, $3, $4, $4) \
             ON CONFLICT (id) DO UPDATE SET boot = excluded.boot, address = excluded.address, \
             started_at = excluded.started_at, seen_at = excluded.seen_at",
        )
        .bind(id)
        .bind(boot)
        .bind(address)
        .bind(now)
        .execute(&self.writer)
        .await
        .map_err(query_error("register replica"))?;
        Ok(())
    }

    /// Marks replica `id` seen now. `Ok(false)` when its row names another process: a second
    /// process started with the same replica id.
    pub async fn beat_replica(&self, id: &str, boot: &str, now: i64) -> Result<bool> {
        let done = sqlx::query("UPDATE replicas SET seen_at = $1 WHERE id = $2 AND boot = $3")
            .bind(now)
            .bind(id)
            .bind(boot)
            .execute(&self.writer)
            .await
            .map_err(query_error("replica beat"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Every replica on record, by id.
    pub async fn replicas(&self) -> Result<Vec<ReplicaRecord>> {
        let rows =
            sqlx::query("SELECT id, boot, address, started_at, seen_at FROM replicas ORDER BY id")
                .fetch_all(&self.pool)
                .await
                .map_err(query_error("list replicas"))?;
        rows.iter()
            .map(|row| {
                Ok(ReplicaRecord {
                    id: get(row, "id")?,
                    boot: get(row, "boot")?,
                    address: get(row, "address")?,
                    started_at: get(row, "started_at")?,
                    seen_at: get(row, "seen_at")?,
                })
            })
            .collect()
    }

    /// Forgets replicas not seen since `before`.
    pub async fn forget_replicas(&self, before: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM replicas WHERE seen_at < $1")
            .bind(before)
            .execute(&self.writer)
            .await
            .map_err(query_error("forget replicas"))?;
        Ok(done.rows_affected())
    }

    /// Takes or renews lease `name` for `holder` until `until`: granted when nobody holds it,
    /// `holder` does, or the holder's lease ended before `now`. `Ok(false)`: another holds it.
    pub async fn hold_lease(&self, name: &str, holder: &str, now: i64, until: i64) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at < $4",
        )
        .bind(name)
        .bind(holder)
        .bind(until)
        .bind(now)
        .execute(&self.writer)
        .await
        .map_err(query_error("hold lease"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives lease `name` up, if `holder` holds it (a replica stopping).
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.writer)
            .await
            .map_err(query_error("release lease"))?;
        Ok(())
    }

    /// Who holds lease `name` at `now`, if anyone.
    pub async fn lease_holder(&self, name: &str, now: i64) -> Result<Option<String>> {
        let row = sqlx::query("SELECT holder FROM leases WHERE name = $1 AND expires_at >= $2")
            .bind(name)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("read lease"))?;
        row.map(|row| get(&row, "holder")).transpose()
    }

    /// Gives up `replica`'s claim on deleting a sandbox (its removal failed): the reaper's
    /// holder retries it.
    pub async fn release_deleting(&self, id: &str, replica: &str) -> Result<()> {
        sqlx::query(
            "UPDATE sandboxes SET replica = NULL WHERE id = $1 AND replica = $2 AND status = 'deleting'",
        )
        .bind(id)
        .bind(replica)
        .execute(&self.writer)
        .await
        .map_err(query_error("release deleting"))?;
        Ok(())
    }

    /// How many pool members of `instance` exist or are being made (every replica's).
    pub async fn count_pool_members(&self, instance: &str) -> Result<i64> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS members FROM sandboxes WHERE pooled = 1 AND instance = $1 AND \
             status IN ('creating', 'ready', 'degraded')",
        )
        .bind(instance)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("count pool members"))?;
        get(&row, "members")
    }

    /// The warm pool's members of `instance` that are live, oldest first: what every replica's
    /// queue is made from (any replica may claim them).
    pub async fn pool_members(&self, instance: &str) -> Result<Vec<SandboxRecord>> {
        let sql = format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE pooled = 1 AND instance = $1 AND \
             status IN ('ready', 'degraded') ORDER BY created_at, id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(instance)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("list pool members"))?;
        rows.iter().map(sandbox_from_row).collect()
    }

    /// Records whether control viewers' input reaches a sandbox's desktop, as of `seq` (ms):
    /// written only over an older value, and an opening by `driver` (a run's lease holder)
    /// only while no other holder's run has its agent driving the sandbox. Returns the value
    /// the row holds afterwards (`None`: no row), whoever wrote it.
    pub async fn write_control_gate(
        &self,
        id: &str,
        open: bool,
        seq: i64,
        driver: Option<&str>,
    ) -> Result<Option<(bool, i64)>> {
        sqlx::query(
            "UPDATE sandboxes SET control_open = $1, control_seq = $2 WHERE id = $3 AND \
             control_seq < $2 AND ($1 = 0 OR CAST($4 AS TEXT) IS NULL OR NOT EXISTS \
             (SELECT 1 FROM runs WHERE runs.sandbox_id = $3 AND runs.status = 'running' \
             AND runs.lease_owner <> CAST($4 AS TEXT)))",
        )
        .bind(open as i64)
        .bind(seq)
        .bind(id)
        .bind(driver)
        .execute(&self.writer)
        .await
        .map_err(query_error("write control gate"))?;
        let row = sqlx::query("SELECT control_open, control_seq FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.writer)
            .await
            .map_err(query_error("read control gate"))?;
        row.map(|row| {
            Ok((
                get::<i64>(&row, "control_open")? != 0,
                get::<i64>(&row, "control_seq")?,
            ))
        })
        .transpose()
    }

    /// Marks a sandbox as being deleted by `replica` (as `set_status` to deleting does, and
    /// naming the replica, so no other replica removes it meanwhile unless `replica` is gone).
    pub async fn mark_deleting(&self, id: &str, replica: Option<&str>) -> Result<()> {
        sqlx::query(
            "UPDATE sandboxes SET status = 'deleting', error = NULL, ended_at = NULL, \
             replica = $1 WHERE id = $2",
        )
        .bind(replica)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark deleting"))?;
        Ok(())
    }
}
