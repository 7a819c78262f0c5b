-- A2A (issue 24): every run is an A2A task. `context_id` groups a client's related tasks (NULL:
-- the run's own id stands for it); `message_id` is the id of the client message that created
-- the run (NULL for runs made through /v1/runs).
ALTER TABLE runs ADD COLUMN context_id TEXT;
ALTER TABLE runs ADD COLUMN message_id TEXT;
CREATE INDEX IF NOT EXISTS runs_owner_context ON runs (owner_key_id, context_id);
CREATE INDEX IF NOT EXISTS runs_owner_updated ON runs (owner_key_id, updated_at);
