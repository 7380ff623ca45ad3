-- Sessions and their messages. Times are milliseconds since the epoch; JSON is stored as text
-- so a value reads back byte for byte on every backend.
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    agent         TEXT NOT NULL,
    title         TEXT NOT NULL,
    user_id       TEXT,
    metadata      TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    message_count BIGINT NOT NULL,
    revision      BIGINT NOT NULL
);
CREATE INDEX sessions_newest_first ON sessions (created_at DESC, id DESC);

CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- Runs and their append-only journal; runs.last_seq hands out gap-free sequence numbers.
CREATE TABLE runs (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    session_id TEXT,
    status     TEXT NOT NULL,
    error      TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    revision   BIGINT NOT NULL,
    last_seq   BIGINT NOT NULL
);
CREATE INDEX runs_newest_first ON runs (created_at DESC, id DESC);

CREATE TABLE run_events (
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    event_type TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE run_checkpoints (
    run_id     TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    state      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE run_leases (
    run_id     TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    owner      TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX run_leases_by_expiry ON run_leases (expires_at);

-- The effect ledger: one row per idempotency key.
CREATE TABLE effects (
    key          TEXT PRIMARY KEY,
    status       TEXT NOT NULL,
    result       TEXT,
    created_at   BIGINT NOT NULL,
    completed_at BIGINT
);
