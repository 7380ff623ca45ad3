-- Revisioned JSON records by collection (tasks, missions, approvals, schedules, …).
CREATE TABLE records (
    collection TEXT NOT NULL,
    id         TEXT NOT NULL,
    revision   INTEGER NOT NULL,
    value      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (collection, id)
);
CREATE INDEX records_newest_first ON records (collection, created_at DESC, id DESC);
