-- A fork's own snapshot (issue 26): `transient` = 1 for the snapshot a fork takes without
-- `keep_snapshot`, deleted once its forks are made. One found at start belongs to a fork a crash
-- interrupted, and reconcile removes it with its archive.
ALTER TABLE snapshots ADD COLUMN transient BIGINT NOT NULL DEFAULT 0;
