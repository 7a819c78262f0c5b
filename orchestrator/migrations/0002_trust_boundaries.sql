-- Trust boundaries (issue 7).
-- Sandboxes belong to one orchestrator instance: only it reconciles, reaps and removes them.
ALTER TABLE sandboxes ADD COLUMN instance TEXT;
-- A viewer token remembers the API key that issued it: revoking the key ends the token.
ALTER TABLE tokens ADD COLUMN issuer_key_id TEXT;
-- Sandbox keys and the token-signing key are derived from the master key file now; the
-- database keeps neither (sandboxes.api_key stays empty for new rows).
DELETE FROM settings WHERE name = 'token_signing_key';
