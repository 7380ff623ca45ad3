-- Typed memory items. `seq` is the rowid the full-text index points at (an INTEGER PRIMARY
-- KEY, so VACUUM never renumbers it); `id` is the public key. `scope_subject` is '' for the
-- project scope.
CREATE TABLE memory_items (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    scope_kind    TEXT NOT NULL,
    scope_subject TEXT NOT NULL,
    kind          TEXT NOT NULL,
    content       TEXT NOT NULL,
    source        TEXT NOT NULL,
    revision      INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX memory_items_newest_first ON memory_items (created_at DESC, id DESC);
CREATE INDEX memory_items_by_scope ON memory_items (scope_kind, scope_subject, created_at DESC, id DESC);

-- BM25 over the content, kept in step with the table by triggers (external content).
CREATE VIRTUAL TABLE memory_items_fts USING fts5 (content, content = 'memory_items', content_rowid = 'seq');
CREATE TRIGGER memory_items_fts_insert AFTER INSERT ON memory_items BEGIN
    INSERT INTO memory_items_fts (rowid, content) VALUES (new.seq, new.content);
END;
CREATE TRIGGER memory_items_fts_delete AFTER DELETE ON memory_items BEGIN
    INSERT INTO memory_items_fts (memory_items_fts, rowid, content) VALUES ('delete', old.seq, old.content);
END;
CREATE TRIGGER memory_items_fts_update AFTER UPDATE OF content ON memory_items BEGIN
    INSERT INTO memory_items_fts (memory_items_fts, rowid, content) VALUES ('delete', old.seq, old.content);
    INSERT INTO memory_items_fts (rowid, content) VALUES (new.seq, new.content);
END;

-- Derived vectors, one per item, with the identity of the model that made them.
CREATE TABLE memory_vectors (
    item_id    TEXT PRIMARY KEY REFERENCES memory_items (id) ON DELETE CASCADE,
    provider   TEXT NOT NULL,
    model      TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    revision   TEXT NOT NULL,
    vector     BLOB NOT NULL
);
CREATE INDEX memory_vectors_by_identity ON memory_vectors (provider, model, dimensions, revision);
