-- A2A client (issue 24): the credential a key stores for a remote A2A agent, by the agent's
-- origin. `sealed` is the bearer token encrypted with a key derived from the master key
-- (XChaCha20-Poly1305, bound to the row's owner and origin): a copy of the database reveals none.
CREATE TABLE IF NOT EXISTS a2a_credentials (
    id TEXT PRIMARY KEY,
    owner_key_id TEXT NOT NULL,
    origin TEXT NOT NULL,
    sealed TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (owner_key_id, origin)
);
