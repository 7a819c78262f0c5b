-- Several orchestrator replicas on one database (issue 25).
-- `replicas`: one row per replica (`--replica`), written at start and every heartbeat;
-- `seen_at` older than a few heartbeats means the replica is gone. `address`: where its peers
-- reach it (informational).
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    boot TEXT NOT NULL,
    address TEXT,
    started_at BIGINT NOT NULL,
    seen_at BIGINT NOT NULL
);
-- `leases`: a named duty (the reaper, the warm pool's refill, ...) held by one replica until
-- `expires_at`; the holder renews it, another replica takes it once it expired.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
-- The replica that is creating a sandbox: only it, or once it is gone its successor, may
-- undo a create that did not finish.
ALTER TABLE sandboxes ADD COLUMN replica TEXT;
-- Whether control viewers' input reaches the desktop (0 while a run's agent drives it): every
-- replica's viewers follow the replica that drives the run. `control_seq`: when it was last
-- written (ms): an older value never replaces a newer one.
ALTER TABLE sandboxes ADD COLUMN control_open BIGINT NOT NULL DEFAULT 1;
ALTER TABLE sandboxes ADD COLUMN control_seq BIGINT NOT NULL DEFAULT 0;
-- Commands for a run another replica drives (cancel, take over, hand back, answer): the replica
-- that received the request writes one, the driving replica takes it (`taken_by`), carries it
-- out and writes `answer` (JSON); the receiving replica returns that.
CREATE TABLE run_commands (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    command TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    taken_by TEXT,
    answer TEXT,
    answered_at BIGINT
);
CREATE INDEX run_commands_open ON run_commands (run_id, answered_at);
-- AIO viewer tickets (single use, a minute), so any replica redeems a ticket another made:
-- found by the SHA-256 of the ticket; `owner`: the key's owner filter (NULL for an admin key).
CREATE TABLE viewer_tickets (
    ticket_hash TEXT PRIMARY KEY,
    sandbox_id TEXT NOT NULL,
    key_id TEXT NOT NULL,
    owner TEXT,
    view_only BIGINT NOT NULL,
    made_at BIGINT NOT NULL
);
CREATE INDEX viewer_tickets_by_key ON viewer_tickets (key_id, made_at);
