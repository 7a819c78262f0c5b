-- Pause and resume (issue 26). `paused_at`: when the sandbox was frozen (NULL unless paused);
-- `auto_resume`: an API call or a viewer through the proxies thaws a paused sandbox instead of
-- answering 409; `idle_pause_secs`: the reaper pauses the sandbox after this long idle (NULL:
-- never; it is still removed after `idle_timeout_secs`).
ALTER TABLE sandboxes ADD COLUMN paused_at BIGINT;
ALTER TABLE sandboxes ADD COLUMN auto_resume BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN idle_pause_secs BIGINT;
