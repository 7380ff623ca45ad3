-- Typed memory items; `scope_subject` is '' for the project scope. `search` is the content's
-- full-text vector ('simple': no stemming, the same terms as the other backends), indexed
-- with GIN so a search reads the index, not every row.
CREATE TABLE memory_items (
    id            TEXT PRIMARY KEY,
    scope_kind    TEXT NOT NULL,
    scope_subject TEXT NOT NULL,
    kind          TEXT NOT NULL,
    content       TEXT NOT NULL,
    source        TEXT NOT NULL,
    revision      BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    search        TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED
);
CREATE INDEX memory_items_newest_first ON memory_items (created_at DESC, id DESC);
CREATE INDEX memory_items_by_scope ON memory_items (scope_kind, scope_subject, created_at DESC, id DESC);
CREATE INDEX memory_items_search ON memory_items USING GIN (search);

-- Derived vectors, one per item, with the identity of the model that made them.
CREATE TABLE memory_vectors (
    item_id    TEXT PRIMARY KEY REFERENCES memory_items (id) ON DELETE CASCADE,
    provider   TEXT NOT NULL,
    model      TEXT NOT NULL,
    dimensions BIGINT NOT NULL,
    revision   TEXT NOT NULL,
    vector     BYTEA NOT NULL
);
CREATE INDEX memory_vectors_by_identity ON memory_vectors (provider, model, dimensions, revision);
