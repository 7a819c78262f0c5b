-- Share links (issue 28): a share token names the one run it shows. The column is NULL for
-- every sandbox token (view, control, cdp). A share token outlives its run's sandbox (the run's
-- timeline and files stay shareable) and is deleted with the run.
ALTER TABLE tokens ADD COLUMN run_id TEXT;
CREATE INDEX IF NOT EXISTS tokens_run ON tokens (run_id);
