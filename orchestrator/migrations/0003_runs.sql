-- Computer-use runs (issue 9): the run, its append-only event log and its artifacts.
-- Portable SQL as in 0001: timestamps in ms since the epoch, JSON as text.

CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    owner_key_id TEXT NOT NULL,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    -- The sandbox the run drives; NULL until one is taken.
    sandbox_id TEXT,
    -- 1 when the run took (and so removes) the sandbox, 0 when the caller named it.
    sandbox_taken BIGINT NOT NULL,
    status TEXT NOT NULL,
    limits TEXT NOT NULL,
    metadata TEXT NOT NULL,
    idempotency_key TEXT,
    -- Hash of the request an idempotency key was first used with.
    request_hash TEXT,
    answer TEXT,
    reason TEXT,
    -- The loop's resumable state (agent::Checkpoint as JSON).
    checkpoint TEXT,
    -- Who drives the run: `<instance>/<boot id>`, until `lease_expires_at`.
    lease_owner TEXT,
    lease_expires_at BIGINT,
    -- The seq of the newest event (events are numbered 1, 2, ... with no gap).
    last_seq BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    ended_at BIGINT
);
CREATE UNIQUE INDEX IF NOT EXISTS runs_idempotency ON runs (owner_key_id, idempotency_key);
-- One active run per sandbox, enforced by the database.
CREATE UNIQUE INDEX IF NOT EXISTS runs_active_sandbox ON runs (sandbox_id) WHERE ended_at IS NULL;
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner_key_id);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status);

CREATE TABLE IF NOT EXISTS run_events (
    run_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE IF NOT EXISTS run_artifacts (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    size BIGINT NOT NULL,
    content_type TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, name)
);
