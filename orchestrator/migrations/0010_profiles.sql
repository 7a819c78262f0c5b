-- Browser profiles (issue 26). A profile is Chromium's profile folder kept as an archive in the
-- data directory (`profiles/<id>.tar`) that a sandbox mounts at create; `holder_sandbox_id`:
-- the one sandbox using it now (NULL, or a sandbox that no longer exists: free); `saved_at`:
-- when a sandbox that held it last saved it (NULL: never used, empty). Names are unique per key.
CREATE TABLE profiles (
    id TEXT PRIMARY KEY,
    owner_key_id TEXT NOT NULL,
    name TEXT NOT NULL,
    holder_sandbox_id TEXT,
    size_bytes BIGINT NOT NULL DEFAULT 0,
    instance TEXT,
    created_at BIGINT NOT NULL,
    saved_at BIGINT
);
CREATE UNIQUE INDEX profiles_by_owner_name ON profiles (owner_key_id, name);
CREATE INDEX profiles_by_holder ON profiles (holder_sandbox_id);
