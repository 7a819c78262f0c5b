//! Browser profiles in SQL: named, owned by a key, held by one sandbox at a time. The hold is
//! one guarded update: a profile is free when nobody holds it or its holder's row is gone (a
//! sandbox removed, by any path or instance, frees its profile without another write).

use sqlx::any::AnyRow;

use super::{Result, Store, get, query_error};

/// One browser profile: Chromium's profile folder kept as an archive, owned by a key.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRecord {
    pub id: String,
    pub owner_key_id: String,
    /// Unique among the key's profiles.
    pub name: String,
    /// The sandbox using it now, if any (one whose row is gone does not count).
    pub holder_sandbox_id: Option<String>,
    pub size_bytes: i64,
    /// The orchestrator instance whose data directory holds its archive.
    pub instance: Option<String>,
    pub created_at: i64,
    /// When a sandbox that held it last saved it (`None`: never used, empty).
    pub saved_at: Option<i64>,
}

/// How taking a profile for a sandbox went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileTake {
    Taken,
    /// Another sandbox, still there, holds it.
    HeldBy(String),
    /// The profile is gone.
    Gone,
}

const PROFILE_COLUMNS: &str =
    "id, owner_key_id, name, holder_sandbox_id, size_bytes, instance, created_at, saved_at";

/// The holder as seen from `profiles`: NULL when the holding sandbox's row is gone.
const LIVE_HOLDER: &str = "CASE WHEN EXISTS (SELECT 1 FROM sandboxes s \
     WHERE s.id = profiles.holder_sandbox_id) THEN profiles.holder_sandbox_id END \
     AS holder_sandbox_id";

fn select_profiles() -> String {
    PROFILE_COLUMNS.replace("holder_sandbox_id", LIVE_HOLDER)
}

fn profile_from_row(row: &AnyRow) -> Result<ProfileRecord> {
    Ok(ProfileRecord {
        id: get(row, "id")?,
        owner_key_id: get(row, "owner_key_id")?,
        name: get(row, "name")?,
        holder_sandbox_id: get(row, "holder_sandbox_id")?,
        size_bytes: get(row, "size_bytes")?,
        instance: get(row, "instance")?,
        created_at: get(row, "created_at")?,
        saved_at: get(row, "saved_at")?,
    })
}

impl Store {
    /// Records a new profile; false when the key already has one of that name.
    pub async fn insert_profile(&self, p: &ProfileRecord) -> Result<bool> {
        let sql = format!(
            "INSERT INTO profiles ({PROFILE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (owner_key_id, name) DO NOTHING"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&p.id)
            .bind(&p.owner_key_id)
            .bind(&p.name)
            .bind(&p.holder_sandbox_id)
            .bind(p.size_bytes)
            .bind(&p.instance)
            .bind(p.created_at)
            .bind(p.saved_at)
            .execute(&self.writer)
            .await
            .map_err(query_error("insert profile"))?;
        Ok(done.rows_affected() > 0)
    }

    pub async fn profile(&self, id: &str) -> Result<Option<ProfileRecord>> {
        let sql = format!("SELECT {} FROM profiles WHERE id = $1", select_profiles());
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.writer)
            .await
            .map_err(query_error("get profile"))?;
        row.as_ref().map(profile_from_row).transpose()
    }

    /// A key's profile by its name.
    pub async fn profile_named(
        &self,
        owner_key_id: &str,
        name: &str,
    ) -> Result<Option<ProfileRecord>> {
        let sql = format!(
            "SELECT {} FROM profiles WHERE owner_key_id = $1 AND name = $2",
            select_profiles()
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(owner_key_id)
            .bind(name)
            .fetch_optional(&self.writer)
            .await
            .map_err(query_error("get profile by name"))?;
        row.as_ref().map(profile_from_row).transpose()
    }

    /// A key's profiles (everyone's with `None`), oldest first.
    pub async fn profiles(&self, owner_key_id: Option<&str>) -> Result<Vec<ProfileRecord>> {
        let sql = format!(
            "SELECT {} FROM profiles \
             WHERE (CAST($1 AS TEXT) IS NULL OR owner_key_id = $1) ORDER BY created_at, id",
            select_profiles()
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(owner_key_id)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error("list profiles"))?;
        rows.iter().map(profile_from_row).collect()
    }

    /// How many profiles a key has.
    pub async fn profile_count(&self, owner_key_id: &str) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM profiles WHERE owner_key_id = $1")
            .bind(owner_key_id)
            .fetch_one(&self.writer)
            .await
            .map_err(query_error("count profiles"))?;
        get(&row, "n")
    }

    /// Makes `sandbox_id` (whose row exists) the profile's holder, unless a sandbox that is
    /// still there holds it.
    pub async fn take_profile(&self, id: &str, sandbox_id: &str) -> Result<ProfileTake> {
        let done = sqlx::query(
            "UPDATE profiles SET holder_sandbox_id = $1 WHERE id = $2 \
             AND (holder_sandbox_id IS NULL OR holder_sandbox_id = $1 OR NOT EXISTS \
             (SELECT 1 FROM sandboxes s WHERE s.id = profiles.holder_sandbox_id))",
        )
        .bind(sandbox_id)
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("take profile"))?;
        if done.rows_affected() > 0 {
            return Ok(ProfileTake::Taken);
        }
        Ok(match self.profile(id).await? {
            Some(ProfileRecord {
                holder_sandbox_id: Some(holder),
                ..
            }) => ProfileTake::HeldBy(holder),
            // Freed between the two statements: the caller may try again.
            Some(_) => ProfileTake::HeldBy("(none any more; try again)".into()),
            None => ProfileTake::Gone,
        })
    }

    /// The profile `sandbox_id` holds, if any.
    pub async fn profile_held_by(&self, sandbox_id: &str) -> Result<Option<ProfileRecord>> {
        let sql = format!(
            "SELECT {} FROM profiles WHERE profiles.holder_sandbox_id = $1",
            select_profiles()
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(sandbox_id)
            .fetch_optional(&self.writer)
            .await
            .map_err(query_error("get held profile"))?;
        row.as_ref().map(profile_from_row).transpose()
    }

    /// Records a save of the profile's archive by its holder.
    pub async fn mark_profile_saved(
        &self,
        id: &str,
        sandbox_id: &str,
        size_bytes: i64,
        at: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE profiles SET size_bytes = $1, saved_at = $2 WHERE id = $3 \
             AND holder_sandbox_id = $4",
        )
        .bind(size_bytes)
        .bind(at)
        .bind(id)
        .bind(sandbox_id)
        .execute(&self.writer)
        .await
        .map_err(query_error("mark profile saved"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Frees the profile `sandbox_id` holds (nothing when it holds none).
    pub async fn release_profile(&self, sandbox_id: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE profiles SET holder_sandbox_id = NULL WHERE holder_sandbox_id = $1",
        )
        .bind(sandbox_id)
        .execute(&self.writer)
        .await
        .map_err(query_error("release profile"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Frees the profiles whose holder's row is gone (a crash between a removal and its
    /// release); how many.
    pub async fn release_orphaned_profiles(&self) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE profiles SET holder_sandbox_id = NULL WHERE holder_sandbox_id IS NOT NULL \
             AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = profiles.holder_sandbox_id)",
        )
        .execute(&self.writer)
        .await
        .map_err(query_error("release orphaned profiles"))?;
        Ok(done.rows_affected())
    }

    /// Deletes a profile nobody (still there) holds; false when it is held or gone.
    pub async fn delete_free_profile(&self, id: &str) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM profiles WHERE id = $1 AND (holder_sandbox_id IS NULL OR NOT EXISTS \
             (SELECT 1 FROM sandboxes s WHERE s.id = profiles.holder_sandbox_id))",
        )
        .bind(id)
        .execute(&self.writer)
        .await
        .map_err(query_error("delete profile"))?;
        Ok(done.rows_affected() > 0)
    }
}
