-- Orchestrator state. Portable SQL: the same file runs on SQLite and Postgres (sqlx Any).
-- Timestamps are milliseconds since the Unix epoch; flags are 0/1 BIGINTs; maps are JSON text.

CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    is_admin BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    owner_key_id TEXT,
    image TEXT NOT NULL,
    status TEXT NOT NULL,
    pooled BIGINT NOT NULL,
    container_id TEXT,
    address TEXT,
    api_key TEXT NOT NULL,
    resolution TEXT,
    env TEXT NOT NULL,
    metadata TEXT NOT NULL,
    idle_timeout_secs BIGINT NOT NULL,
    max_lifetime_secs BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    ready_at BIGINT,
    expires_at BIGINT NOT NULL,
    last_active_at BIGINT NOT NULL,
    ended_at BIGINT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS sandboxes_status ON sandboxes (status);
CREATE INDEX IF NOT EXISTS sandboxes_owner ON sandboxes (owner_key_id);

CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX IF NOT EXISTS tokens_sandbox ON tokens (sandbox_id);
