-- The API client that created a session (a key id derived from the key's digest, never the
-- key), so a server with several keys shows each client only its own sessions (and their runs).
-- NULL: created without a key, or before owners were recorded.
ALTER TABLE sessions ADD COLUMN owner TEXT;
CREATE INDEX sessions_owner_newest_first ON sessions (owner, created_at DESC, id DESC);
