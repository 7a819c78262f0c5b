-- Hibernation and snapshots (issue 26). A hibernated sandbox has no container: its home is an
-- archive in the data directory (`homes/<id>.tar`); `hibernated_at` says since when (NULL
-- unless hibernated); `idle_hibernate_secs`: the reaper hibernates it after this long idle
-- (NULL: never). A snapshot is a home archive (`snapshots/<id>.tar`) that new sandboxes start
-- from; `status` is `taking` until its archive is whole, then `ready`.
ALTER TABLE sandboxes ADD COLUMN hibernated_at BIGINT;
ALTER TABLE sandboxes ADD COLUMN idle_hibernate_secs BIGINT;

CREATE TABLE snapshots (
    id TEXT PRIMARY KEY,
    owner_key_id TEXT NOT NULL,
    parent_sandbox_id TEXT,
    image TEXT NOT NULL,
    resolution TEXT,
    status TEXT NOT NULL,
    size_bytes BIGINT NOT NULL DEFAULT 0,
    instance TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX snapshots_by_owner ON snapshots (owner_key_id, created_at);
