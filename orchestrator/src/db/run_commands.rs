//! Commands for a run another replica drives, in SQL: written by the replica that received the
//! request, taken (once) and answered by the replica holding the run's lease.

use super::runs::TERMINAL;
use super::{Result, Store, get, query_error};

/// A command waiting for the run's driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCommandRecord {
    pub id: String,
    pub run_id: String,
    /// The command, JSON.
    pub command: String,
}

impl Store {
    pub async fn insert_run_command(
        &self,
        id: &str,
        run_id: &str,
        command: &str,
        now: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO run_commands (id, run_id, command, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(run_id)
        .bind(command)
        .bind(now)
        .execute(&self.writer)
        .await
        .map_err(query_error("insert run command"))?;
        Ok(())
    }

    /// Takes the commands written since `since` for the unfinished runs `lease_owner` drives:
    /// each is returned to one taker only.
    pub async fn take_run_commands(
        &self,
        lease_owner: &str,
        since: i64,
    ) -> Result<Vec<RunCommandRecord>> {
        let sql = format!(
            "SELECT c.id, c.run_id, c.command FROM run_commands c JOIN runs r ON r.id = c.run_id \
             WHERE c.taken_by IS NULL AND c.created_at >= $1 AND r.lease_owner = $2 AND \
             r.status NOT IN {TERMINAL} ORDER BY c.created_at, c.id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(since)
            .bind(lease_owner)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("list run commands"))?;
        let mut taken = Vec::new();
        for row in rows {
            let command = RunCommandRecord {
                id: get(&row, "id")?,
                run_id: get(&row, "run_id")?,
                command: get(&row, "command")?,
            };
            let done = sqlx::query(
                "UPDATE run_commands SET taken_by = $1 WHERE id = $2 AND taken_by IS NULL",
            )
            .bind(lease_owner)
            .bind(&command.id)
            .execute(&self.writer)
            .await
            .map_err(query_error("take run command"))?;
            if done.rows_affected() == 1 {
                taken.push(command);
            }
        }
        Ok(taken)
    }

    pub async fn answer_run_command(&self, id: &str, answer: &str, now: i64) -> Result<()> {
        sqlx::query("UPDATE run_commands SET answer = $1, answered_at = $2 WHERE id = $3")
            .bind(answer)
            .bind(now)
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(query_error("answer run command"))?;
        Ok(())
    }

    /// The answer to a command, once written.
    pub async fn run_command_answer(&self, id: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT answer FROM run_commands WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error("read run command"))?;
        Ok(match row {
            Some(row) => get::<Option<String>>(&row, "answer")?,
            None => None,
        })
    }

    /// Deletes commands written before `before` (answered or given up on).
    pub async fn purge_run_commands(&self, before: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM run_commands WHERE created_at < $1")
            .bind(before)
            .execute(&self.writer)
            .await
            .map_err(query_error("purge run commands"))?;
        Ok(done.rows_affected())
    }
}
