-- Fencing: every grant of a run's lease takes the next generation, kept on the run so it
-- survives released leases; a write carrying an older generation is refused.
ALTER TABLE runs ADD COLUMN lease_generation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE run_leases ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;

-- Commands for a run (steering, follow-ups, aborts) written by whichever server was asked and
-- delivered by the one executing the run (NOTIFY polpo_run_commands wakes it). The id is the
-- sender's idempotent id, so a repeated command is the same row; outcome is set once.
CREATE TABLE run_commands (
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    id         TEXT NOT NULL,
    n          BIGINT GENERATED ALWAYS AS IDENTITY,
    body       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    outcome    TEXT,
    settled_at BIGINT,
    PRIMARY KEY (run_id, id)
);
CREATE INDEX run_commands_pending ON run_commands (run_id, n) WHERE outcome IS NULL;

-- The live event feed every server shows on /api/v1/events. Ids come from the one counter
-- row, whose lock is held until commit, so ids become visible in order: a reader that saw
-- id n has seen every id below it. The counter starts at the current time in microseconds,
-- above any id a single server's own bus ever issued.
CREATE TABLE feed_events (
    id    BIGINT PRIMARY KEY,
    ts    BIGINT NOT NULL,
    event TEXT NOT NULL,
    data  TEXT NOT NULL
);
CREATE TABLE feed_counter (
    one     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    last_id BIGINT NOT NULL
);
INSERT INTO feed_counter (one, last_id) VALUES (TRUE, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT);
