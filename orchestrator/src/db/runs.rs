//! Runs in SQL: the run rows, their append-only event log and their artifacts.
//!
//! Every change of a run goes through a compare-and-set: an event is appended only by the
//! lease holder of a run that has not ended, in one transaction that also takes the next
//! `seq` (so seq has no gap) and, for a status event, moves the status. Once a run is in a
//! terminal state nothing more is written to its log.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;

use super::{Result, Store, StoreError, from_json, get, query_error, to_json};

/// Where a run is: the agent's own status type, stored by its `as_str` name.
pub use agent::RunStatus;

/// One run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: String,
    pub owner_key_id: String,
    pub task: String,
    pub model: String,
    pub sandbox_id: Option<String>,
    /// The run took its sandbox (and removes it at the end); `false` when the caller named it.
    pub sandbox_taken: bool,
    pub status: RunStatus,
    /// `agent::Limits` as JSON.
    /// Stored as JSON; decoded once, here.
    pub limits: agent::Limits,
    pub metadata: BTreeMap<String, String>,
    pub idempotency_key: Option<String>,
    pub request_hash: Option<String>,
    pub answer: Option<String>,
    pub reason: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub last_seq: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub ended_at: Option<i64>,
    /// The A2A context the run belongs to (`None`: its own id stands for it).
    pub context_id: Option<String>,
    /// The id of the A2A message that created it.
    pub message_id: Option<String>,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub seq: i64,
    /// The event's `type`.
    pub kind: String,
    /// The event as JSON (with its `type`).
    pub data: String,
    pub at: i64,
}

/// One stored artifact (its bytes are in the artifact store).
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactRecord {
    pub run_id: String,
    pub name: String,
    /// `output` (a file the agent saved) or `screenshot`.
    pub kind: String,
    pub size: i64,
    pub content_type: String,
    pub sha256: String,
    pub created_at: i64,
}

/// A status change that goes with an appended event.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusChange {
    pub status: RunStatus,
    pub answer: Option<String>,
    pub reason: Option<String>,
}

/// What creating a run found.
#[derive(Debug, Clone, PartialEq)]
pub enum RunInsert {
    Created,
    /// The caller's idempotency key is taken by this run.
    SameKey(Box<RunRecord>),
    /// The sandbox already has an active run.
    SandboxBusy,
}

/// Which runs to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub owner_key_id: Option<String>,
    pub status: Option<RunStatus>,
    /// Runs of this A2A context (a run without one is its own context).
    pub context_id: Option<String>,
    /// Order by the last change (`updated_at`) rather than by creation.
    pub by_update: bool,
    /// Only runs after this one in the order (keyset paging): its time and id.
    pub after: Option<(i64, String)>,
    /// At most this many.
    pub limit: Option<i64>,
    /// Only runs whose last change is after this time (ms since the epoch).
    pub updated_after: Option<i64>,
}

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

impl RunFilter {
    /// The owner, status and context conditions (`1 = 1` when none), and the number of
    /// placeholders they use.
    fn conditions(&self) -> (String, usize) {
        let mut sql = "1 = 1".to_string();
        let mut n = 0;
        if self.owner_key_id.is_some() {
            n += 1;
            sql.push_str(&format!(" AND owner_key_id = ${n}"));
        }
        if self.status.is_some() {
            n += 1;
            sql.push_str(&format!(" AND status = ${n}"));
        }
        if self.context_id.is_some() {
            sql.push_str(&format!(
                " AND (context_id = ${} OR (context_id IS NULL AND id = ${}))",
                n + 1,
                n + 2
            ));
            n += 2;
        }
        if self.updated_after.is_some() {
            n += 1;
            sql.push_str(&format!(" AND updated_at > ${n}"));
        }
        (sql, n)
    }

    /// Binds what [`conditions`](Self::conditions) names, in its order.
    fn bind<'q>(&'q self, mut query: AnyQuery<'q>) -> AnyQuery<'q> {
        if let Some(owner) = &self.owner_key_id {
            query = query.bind(owner);
        }
        if let Some(status) = self.status {
            query = query.bind(status.as_str());
        }
        if let Some(context) = &self.context_id {
            query = query.bind(context).bind(context);
        }
        if let Some(after) = self.updated_after {
            query = query.bind(after);
        }
        query
    }
}

const RUN_COLUMNS: &str = "id, owner_key_id, task, model, sandbox_id, sandbox_taken, status, \
    limits, metadata, idempotency_key, request_hash, answer, reason, lease_owner, \
    lease_expires_at, last_seq, created_at, updated_at, ended_at, context_id, message_id";

/// Statuses that never change again (`RunStatus::is_terminal`; a unit test holds them equal).
pub(super) const TERMINAL: &str = "('completed', 'failed', 'canceled', 'unknown')";

fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|e| e.is_unique_violation())
}

impl Store {
    /// Inserts a new run (status queued, holding `run.lease_owner`'s lease). A run with the
    /// same owner and idempotency key, or an active run on the same sandbox, is reported
    /// instead and nothing is written.
    pub async fn insert_run(&self, run: &RunRecord) -> Result<RunInsert> {
        if let Some(key) = &run.idempotency_key
            && let Some(existing) = self.run_by_idempotency(&run.owner_key_id, key).await?
        {
            return Ok(RunInsert::SameKey(Box::new(existing)));
        }
        let sql = format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
             $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&run.id)
            .bind(&run.owner_key_id)
            .bind(&run.task)
            .bind(&run.model)
            .bind(&run.sandbox_id)
            .bind(i64::from(run.sandbox_taken))
            .bind(run.status.as_str())
            .bind(limits_json(&run.limits))
            .bind(to_json(&run.metadata))
            .bind(&run.idempotency_key)
            .bind(&run.request_hash)
            .bind(&run.answer)
            .bind(&run.reason)
            .bind(&run.lease_owner)
            .bind(run.lease_expires_at)
            .bind(run.last_seq)
            .bind(run.created_at)
            .bind(run.updated_at)
            .bind(run.ended_at)
            .bind(&run.context_id)
            .bind(&run.message_id)
            .execute(&self.writer)
            .await;
        match done {
            Ok(_) => Ok(RunInsert::Created),
            Err(error) if is_unique_violation(&error) => {
                // Either a concurrent request with the same key won, or the sandbox is busy.
                if let Some(key) = &run.idempotency_key
                    && let Some(existing) = self.run_by_idempotency(&run.owner_key_id, key).await?
                {
                    return Ok(RunInsert::SameKey(Box::new(existing)));
                }
                Ok(RunInsert::SandboxBusy)
            }
            Err(source) => Err(StoreError::Query {
                what: "insert run",
                source,
            }),
        }
    }

    async fn run_by_idempotency(&self, owner: &str, key: &str) -> Result<Option<RunRecord>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE owner_key_id = $1 AND idempotency_key = $2"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(owner)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("run by idempotency key"))?;
        row.as_ref().map(run_from_row).transpose()
    }

    pub async fn run(&self, id: &str) -> Result<Option<RunRecord>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("get run"))?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// Runs, newest first (by creation, or by last change with `by_update`).
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>> {
        let (conditions, mut n) = filter.conditions();
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE {conditions}");
        let time = if filter.by_update {
            "updated_at"
        } else {
            "created_at"
        };
        if filter.after.is_some() {
            sql.push_str(&format!(
                " AND ({time} < ${} OR ({time} = ${} AND id < ${}))",
                n + 1,
                n + 2,
                n + 3
            ));
            n += 3;
        }
        sql.push_str(&format!(" ORDER BY {time} DESC, id DESC"));
        if filter.limit.is_some() {
            sql.push_str(&format!(" LIMIT ${}", n + 1));
        }
        let mut query = filter.bind(sqlx::query(sqlx::AssertSqlSafe(sql)));
        if let Some((time, id)) = &filter.after {
            query = query.bind(*time).bind(*time).bind(id);
        }
        if let Some(limit) = filter.limit {
            query = query.bind(limit);
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("list runs"))?;
        rows.iter().map(run_from_row).collect()
    }

    /// How many runs match `filter`'s owner, status and context (its paging ignored).
    pub async fn count_runs(&self, filter: &RunFilter) -> Result<usize> {
        let (conditions, _) = filter.conditions();
        let sql = format!("SELECT COUNT(*) AS n FROM runs WHERE {conditions}");
        let row = filter
            .bind(sqlx::query(sqlx::AssertSqlSafe(sql)))
            .fetch_one(&self.pool)
            .await
            .map_err(query_error("count runs"))?;
        let count: i64 = get(&row, "n")?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// The run that holds a sandbox (at most one is active per sandbox): its id and status.
    pub async fn active_run_on(&self, sandbox_id: &str) -> Result<Option<(String, RunStatus)>> {
        let sql = format!(
            "SELECT id, status FROM runs WHERE sandbox_id = $1 AND status NOT IN {TERMINAL}"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(sandbox_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("active run on a sandbox"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let status: String = get(&row, "status")?;
        let status = status.parse().map_err(|message| StoreError::Corrupt {
            what: "runs.status",
            message,
        })?;
        Ok(Some((get(&row, "id")?, status)))
    }

    /// Records the sandbox a queued run took. Fails (`Ok(false)`) when the sandbox has another
    /// active run or the run is no longer the lease holder's.
    pub async fn set_run_sandbox(
        &self,
        id: &str,
        lease_owner: &str,
        sandbox_id: &str,
        taken: bool,
    ) -> Result<bool> {
        let sql = format!(
            "UPDATE runs SET sandbox_id = $1, sandbox_taken = $2 WHERE id = $3 AND \
             lease_owner = $4 AND status NOT IN {TERMINAL}"
        );
        match sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(sandbox_id)
            .bind(i64::from(taken))
            .bind(id)
            .bind(lease_owner)
            .execute(&self.writer)
            .await
        {
            Ok(done) => Ok(done.rows_affected() == 1),
            Err(error) if is_unique_violation(&error) => Ok(false),
            Err(source) => Err(StoreError::Query {
                what: "set run sandbox",
                source,
            }),
        }
    }

    /// Appends one event as the lease holder: takes the next seq and applies `change`, in one
    /// transaction. `Ok(None)` when the run has ended or `lease_owner` no longer holds it (the
    /// event is not written).
    pub async fn append_event(
        &self,
        run_id: &str,
        lease_owner: &str,
        kind: &str,
        data: &str,
        at: i64,
        change: Option<&StatusChange>,
    ) -> Result<Option<i64>> {
        self.append(run_id, lease_owner, kind, data, at, change, None)
            .await
    }

    /// Like [`append_event`](Self::append_event), storing `checkpoint` (the run's resume
    /// state) in the same transaction.
    pub async fn append_event_with_checkpoint(
        &self,
        run_id: &str,
        lease_owner: &str,
        kind: &str,
        data: &str,
        at: i64,
        checkpoint: &str,
    ) -> Result<Option<i64>> {
        self.append(run_id, lease_owner, kind, data, at, None, Some(checkpoint))
            .await
    }

    #[allow(clippy::too_many_arguments)] // Reason: the two public forms above name the cases.
    async fn append(
        &self,
        run_id: &str,
        lease_owner: &str,
        kind: &str,
        data: &str,
        at: i64,
        change: Option<&StatusChange>,
        checkpoint: Option<&str>,
    ) -> Result<Option<i64>> {
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        let sql = format!(
            "UPDATE runs SET last_seq = last_seq + 1, updated_at = $1, \
             checkpoint = COALESCE($4, checkpoint) WHERE id = $2 AND \
             lease_owner = $3 AND status NOT IN {TERMINAL} RETURNING last_seq"
        );
        let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(at)
            .bind(run_id)
            .bind(lease_owner)
            .bind(checkpoint)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error("take the next seq"))?
        else {
            return Ok(None);
        };
        let seq: i64 = get(&row, "last_seq")?;
        sqlx::query(
            "INSERT INTO run_events (run_id, seq, kind, data, at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(run_id)
        .bind(seq)
        .bind(kind)
        .bind(data)
        .bind(at)
        .execute(&mut *tx)
        .await
        .map_err(query_error("append event"))?;
        if let Some(change) = change {
            let ended_at = change.status.is_terminal().then_some(at);
            sqlx::query(
                "UPDATE runs SET status = $1, answer = COALESCE($2, answer), \
                 reason = COALESCE($3, reason), ended_at = $4 WHERE id = $5",
            )
            .bind(change.status.as_str())
            .bind(&change.answer)
            .bind(&change.reason)
            .bind(ended_at)
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("change run status"))?;
        }
        if !self.is_sqlite {
            // Delivered at commit, to every replica's followers of the run.
            sqlx::query("SELECT 1 AS sent FROM pg_notify($1, $2)")
                .bind(super::notifications::RUN_EVENTS)
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error("announce event"))?;
        }
        tx.commit().await.map_err(query_error("commit event"))?;
        Ok(Some(seq))
    }

    /// Events with `seq > after`, oldest first, at most `limit`.
    pub async fn events_after(
        &self,
        run_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EventRecord>> {
        let rows = sqlx::query(
            "SELECT seq, kind, data, at FROM run_events WHERE run_id = $1 AND seq > $2 \
             ORDER BY seq LIMIT $3",
        )
        .bind(run_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("events after"))?;
        rows.iter()
            .map(|row| {
                Ok(EventRecord {
                    seq: get(row, "seq")?,
                    kind: get(row, "kind")?,
                    data: get(row, "data")?,
                    at: get(row, "at")?,
                })
            })
            .collect()
    }

    /// Stores the loop's checkpoint (lease holder only).
    pub async fn set_checkpoint(
        &self,
        run_id: &str,
        lease_owner: &str,
        json: &str,
    ) -> Result<bool> {
        let sql = format!(
            "UPDATE runs SET checkpoint = $1 WHERE id = $2 AND lease_owner = $3 AND status NOT IN {TERMINAL}"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(json)
            .bind(run_id)
            .bind(lease_owner)
            .execute(&self.writer)
            .await
            .map_err(query_error("set checkpoint"))?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn checkpoint(&self, run_id: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT checkpoint FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("get checkpoint"))?;
        match row {
            Some(row) => get(&row, "checkpoint"),
            None => Ok(None),
        }
    }

    /// Takes the lease of an unfinished run when it is free, expired, already ours, or held by
    /// an earlier life of this replica (`owner` is `<replica>/<boot>`; `replica_prefix` is
    /// `<replica>/`). `Ok(false)` when another driver holds it.
    pub async fn acquire_run_lease(
        &self,
        run_id: &str,
        owner: &str,
        replica_prefix: &str,
        now: i64,
        until: i64,
    ) -> Result<bool> {
        let sql = format!(
            "UPDATE runs SET lease_owner = $1, lease_expires_at = $2 WHERE id = $3 AND \
             status NOT IN {TERMINAL} AND (lease_owner IS NULL OR lease_owner = $1 OR \
             lease_expires_at < $4 OR substr(lease_owner, 1, CAST($5 AS INTEGER)) = $6)"
        );
        let prefix_len = i64::try_from(replica_prefix.len()).unwrap_or(i64::MAX);
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(owner)
            .bind(until)
            .bind(run_id)
            .bind(now)
            .bind(prefix_len)
            .bind(replica_prefix)
            .execute(&self.writer)
            .await
            .map_err(query_error("acquire run lease"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Extends a lease `owner` holds; `Ok(false)` when it lost it (or the run ended).
    pub async fn renew_run_lease(&self, run_id: &str, owner: &str, until: i64) -> Result<bool> {
        let sql = format!(
            "UPDATE runs SET lease_expires_at = $1 WHERE id = $2 AND lease_owner = $3 AND \
             status NOT IN {TERMINAL}"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(until)
            .bind(run_id)
            .bind(owner)
            .execute(&self.writer)
            .await
            .map_err(query_error("renew run lease"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Unfinished runs nobody drives: lease expired, or held by an earlier life of this
    /// replica (other than `owner`).
    pub async fn orphaned_runs(
        &self,
        owner: &str,
        replica_prefix: &str,
        now: i64,
    ) -> Result<Vec<RunRecord>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status NOT IN {TERMINAL} AND \
             (lease_owner IS NULL OR lease_expires_at < $1 OR \
             (substr(lease_owner, 1, CAST($2 AS INTEGER)) = $3 AND lease_owner <> $4)) ORDER BY created_at"
        );
        let prefix_len = i64::try_from(replica_prefix.len()).unwrap_or(i64::MAX);
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(now)
            .bind(prefix_len)
            .bind(replica_prefix)
            .bind(owner)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("orphaned runs"))?;
        rows.iter().map(run_from_row).collect()
    }

    /// Deletes an ended run with its events and artifact records, in one transaction; false
    /// when there is no such run or it has not ended.
    pub async fn delete_ended_run(&self, id: &str) -> Result<bool> {
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        let deleted = sqlx::query("DELETE FROM runs WHERE id = $1 AND ended_at IS NOT NULL")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("delete run"))?;
        if deleted.rows_affected() == 0 {
            tx.rollback().await.map_err(query_error("rollback"))?;
            return Ok(false);
        }
        sqlx::query("DELETE FROM run_events WHERE run_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("delete run events"))?;
        sqlx::query("DELETE FROM run_artifacts WHERE run_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("delete run artifacts"))?;
        sqlx::query("DELETE FROM tokens WHERE run_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error("delete run share links"))?;
        tx.commit()
            .await
            .map_err(query_error("commit run deletion"))?;
        Ok(true)
    }

    /// Up to `limit` ids of runs that ended before `before` (ms since the epoch), oldest first.
    pub async fn runs_ended_before(&self, before: i64, limit: i64) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT id FROM runs WHERE ended_at IS NOT NULL AND ended_at < $1 \
             ORDER BY ended_at, id LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("runs ended before"))?;
        rows.iter().map(|row| get(row, "id")).collect()
    }

    /// Bytes of artifacts kept by run `run_id` and by every run of key `owner_key_id`, leaving
    /// out the artifact `name` of that run (a file saved again replaces it).
    pub async fn artifact_usage(
        &self,
        run_id: &str,
        owner_key_id: &str,
        name: &str,
    ) -> Result<(i64, i64)> {
        let run = sqlx::query(
            "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) AS used FROM run_artifacts \
             WHERE run_id = $1 AND name <> $2",
        )
        .bind(run_id)
        .bind(name)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("run artifact usage"))?;
        let key = sqlx::query(
            "SELECT CAST(COALESCE(SUM(a.size), 0) AS BIGINT) AS used FROM run_artifacts a \
             JOIN runs r ON r.id = a.run_id \
             WHERE r.owner_key_id = $1 AND NOT (a.run_id = $2 AND a.name = $3)",
        )
        .bind(owner_key_id)
        .bind(run_id)
        .bind(name)
        .fetch_one(&self.pool)
        .await
        .map_err(query_error("key artifact usage"))?;
        Ok((get(&run, "used")?, get(&key, "used")?))
    }

    /// Records an artifact; replaces the row of the same name (a file saved again).
    pub async fn upsert_artifact(&self, artifact: &ArtifactRecord) -> Result<()> {
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        replace_artifact(&mut tx, artifact).await?;
        tx.commit().await.map_err(query_error("commit artifact"))?;
        Ok(())
    }

    /// Whether `lease_owner` still drives `run_id` (holds its lease, and the run has not ended):
    /// asked before an artifact's bytes are written, so a process that lost the run, or a run
    /// that ended, never replaces a kept file.
    pub async fn drives_run(&self, run_id: &str, lease_owner: &str) -> Result<bool> {
        let sql = format!(
            "SELECT 1 FROM runs WHERE id = $1 AND lease_owner = $2 AND status NOT IN {TERMINAL}"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(run_id)
            .bind(lease_owner)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("check the run's driver"))?;
        Ok(row.is_some())
    }

    /// Records `artifact` as [`upsert_artifact`](Self::upsert_artifact) does, only while
    /// `lease_owner` drives its run (the run's row is locked for the check, as an event's
    /// append locks it); false when it does not, and nothing is written.
    pub async fn keep_artifact(
        &self,
        artifact: &ArtifactRecord,
        lease_owner: &str,
    ) -> Result<bool> {
        let mut tx = self.writer.begin().await.map_err(query_error("begin"))?;
        let sql = format!(
            "UPDATE runs SET updated_at = updated_at WHERE id = $1 AND lease_owner = $2 AND \
             status NOT IN {TERMINAL} RETURNING id"
        );
        let held = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&artifact.run_id)
            .bind(lease_owner)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error("lock the run"))?;
        if held.is_none() {
            return Ok(false);
        }
        replace_artifact(&mut tx, artifact).await?;
        tx.commit().await.map_err(query_error("commit artifact"))?;
        Ok(true)
    }

    /// A run's artifacts, by name.
    pub async fn artifacts(&self, run_id: &str) -> Result<Vec<ArtifactRecord>> {
        let rows = sqlx::query(
            "SELECT run_id, name, kind, size, content_type, sha256, created_at FROM \
             run_artifacts WHERE run_id = $1 ORDER BY name",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("list artifacts"))?;
        rows.iter().map(artifact_from_row).collect()
    }

    pub async fn artifact(&self, run_id: &str, name: &str) -> Result<Option<ArtifactRecord>> {
        let row = sqlx::query(
            "SELECT run_id, name, kind, size, content_type, sha256, created_at FROM \
             run_artifacts WHERE run_id = $1 AND name = $2",
        )
        .bind(run_id)
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("get artifact"))?;
        row.as_ref().map(artifact_from_row).transpose()
    }
}

fn run_from_row(row: &AnyRow) -> Result<RunRecord> {
    let status: String = get(row, "status")?;
    let metadata: String = get(row, "metadata")?;
    Ok(RunRecord {
        id: get(row, "id")?,
        owner_key_id: get(row, "owner_key_id")?,
        task: get(row, "task")?,
        model: get(row, "model")?,
        sandbox_id: get(row, "sandbox_id")?,
        sandbox_taken: get::<i64>(row, "sandbox_taken")? != 0,
        status: status.parse().map_err(|message| StoreError::Corrupt {
            what: "runs.status",
            message,
        })?,
        limits: serde_json::from_str(&get::<String>(row, "limits")?).map_err(|e| {
            StoreError::Corrupt {
                what: "runs.limits",
                message: e.to_string(),
            }
        })?,
        metadata: from_json("runs.metadata", &metadata)?,
        idempotency_key: get(row, "idempotency_key")?,
        request_hash: get(row, "request_hash")?,
        answer: get(row, "answer")?,
        reason: get(row, "reason")?,
        lease_owner: get(row, "lease_owner")?,
        lease_expires_at: get(row, "lease_expires_at")?,
        last_seq: get(row, "last_seq")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
        ended_at: get(row, "ended_at")?,
        context_id: get(row, "context_id")?,
        message_id: get(row, "message_id")?,
    })
}

fn limits_json(limits: &agent::Limits) -> String {
    // Three numbers always serialise.
    serde_json::to_string(limits).unwrap_or_else(|_| "{}".into())
}

fn artifact_from_row(row: &AnyRow) -> Result<ArtifactRecord> {
    Ok(ArtifactRecord {
        run_id: get(row, "run_id")?,
        name: get(row, "name")?,
        kind: get(row, "kind")?,
        size: get(row, "size")?,
        content_type: get(row, "content_type")?,
        sha256: get(row, "sha256")?,
        created_at: get(row, "created_at")?,
    })
}

/// Replaces `artifact`'s row (same run and name) inside `tx`.
async fn replace_artifact(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    artifact: &ArtifactRecord,
) -> Result<()> {
    sqlx::query("DELETE FROM run_artifacts WHERE run_id = $1 AND name = $2")
        .bind(&artifact.run_id)
        .bind(&artifact.name)
        .execute(&mut **tx)
        .await
        .map_err(query_error("replace artifact"))?;
    sqlx::query(
        "INSERT INTO run_artifacts (run_id, name, kind, size, content_type, sha256, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&artifact.run_id)
    .bind(&artifact.name)
    .bind(&artifact.kind)
    .bind(artifact.size)
    .bind(&artifact.content_type)
    .bind(&artifact.sha256)
    .bind(artifact.created_at)
    .execute(&mut **tx)
    .await
    .map_err(query_error("insert artifact"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sql_terminal_statuses_are_the_terminal_run_statuses() {
        let terminal: Vec<String> = RunStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        assert_eq!(TERMINAL, format!("({})", terminal.join(", ")));
    }
}
