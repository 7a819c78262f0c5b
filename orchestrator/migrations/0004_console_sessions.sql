-- Web console sign-ins (issue 10). A row per signed-in browser: the cookie holds a random
-- secret, the row only its SHA-256. Signing out (or revoking the key) ends the row; an ended or
-- expired row never authenticates again.
CREATE TABLE IF NOT EXISTS console_sessions (
    id TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL UNIQUE,
    key_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    ended_at BIGINT
);
CREATE INDEX IF NOT EXISTS console_sessions_key ON console_sessions (key_id);
