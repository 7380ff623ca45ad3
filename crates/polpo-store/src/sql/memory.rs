//! `MemoryItemStore` over SQL: items in `memory_items`, vectors in `memory_vectors`, lexical
//! search through the database's own full-text index — FTS5 (BM25) on SQLite, a `tsvector`
//! column with a GIN index on PostgreSQL — so a query reads the index, not every item.

use crate::memory::MemoryFilter;

/// The columns an item is read from, on `memory_items m`.
pub(super) const ITEM_COLUMNS: &str =
    "m.id, m.scope_kind, m.scope_subject, m.kind, m.content, m.source, m.revision, m.created_at, m.updated_at";
/// The same columns unqualified, for `RETURNING`.
pub(super) const ITEM_FIELDS: &str =
    "id, scope_kind, scope_subject, kind, content, source, revision, created_at, updated_at";

/// What differs between the two databases for memory: the full-text query.
pub(super) trait MemoryDialect {
    /// The lexical search: `$1` is [`MemoryDialect::text_query`]'s output, `filter` the
    /// extra `AND …` conditions on `m`, `limit` the number of the limit parameter. Selects
    /// [`ITEM_COLUMNS`] and a `score` column, higher is better.
    fn lexical_sql(filter: &str, limit: usize) -> String;

    /// The engine's query for `terms` (letters and digits only, so nothing in them is
    /// syntax): any term matches.
    fn text_query(terms: &[String]) -> String;
}

impl MemoryDialect for super::SqliteStore {
    fn lexical_sql(filter: &str, limit: usize) -> String {
        format!(
            "SELECT {ITEM_COLUMNS}, -bm25(memory_items_fts) AS score FROM memory_items_fts \
             JOIN memory_items m ON m.seq = memory_items_fts.rowid \
             WHERE memory_items_fts MATCH $1{filter} ORDER BY score DESC, m.id LIMIT ${limit}"
        )
    }

    fn text_query(terms: &[String]) -> String {
        terms.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR ")
    }
}

impl MemoryDialect for super::PgStore {
    fn lexical_sql(filter: &str, limit: usize) -> String {
        format!(
            "SELECT {ITEM_COLUMNS}, ts_rank(m.search, to_tsquery('simple', $1))::float8 AS score \
             FROM memory_items m WHERE m.search @@ to_tsquery('simple', $1){filter} \
             ORDER BY score DESC, m.id LIMIT ${limit}"
        )
    }

    fn text_query(terms: &[String]) -> String {
        terms.join(" | ")
    }
}

/// The `AND …` conditions of `filter` on `m`, numbering parameters from `*next` on and
/// pushing their values (all text) to `binds`.
pub(super) fn filter_sql(filter: &MemoryFilter, next: &mut usize, binds: &mut Vec<String>) -> String {
    let mut param = |value: &str, binds: &mut Vec<String>| {
        binds.push(value.to_owned());
        *next += 1;
        format!("${}", *next - 1)
    };
    let mut sql = String::new();
    if !filter.scopes.is_empty() {
        let alternatives: Vec<String> = filter
            .scopes
            .iter()
            .map(|s| {
                let kind = param(s.kind.as_str(), binds);
                match &s.subject_id {
                    Some(subject) => format!("(m.scope_kind = {kind} AND m.scope_subject = {})", param(subject, binds)),
                    None => format!("m.scope_kind = {kind}"),
                }
            })
            .collect();
        sql.push_str(&format!(" AND ({})", alternatives.join(" OR ")));
    }
    if !filter.kinds.is_empty() {
        let kinds: Vec<String> = filter.kinds.iter().map(|k| param(k, binds)).collect();
        sql.push_str(&format!(" AND m.kind IN ({})", kinds.join(", ")));
    }
    sql
}

/// Stamped out per driver by `sql_store_impl!` in the parent module.
macro_rules! sql_memory {
    ($store:ty, $row:ty) => {
        use crate::memory::{
            self as mem, MemoryFilter, MemoryItem, MemoryItemPatch, MemoryItemStore, MemoryScope, NewMemoryItem,
            ScoredItem,
        };
        use crate::sql::memory::{ITEM_COLUMNS, ITEM_FIELDS, MemoryDialect, filter_sql};
        use polpo_core::embedding::EmbeddingIdentity;

        fn memory_item_from_row(row: &$row) -> Result<MemoryItem, StoreError> {
            Ok(MemoryItem {
                id: row.try_get("id")?,
                scope: MemoryScope::from_columns(row.try_get("scope_kind")?, row.try_get("scope_subject")?)?,
                kind: row.try_get("kind")?,
                content: row.try_get("content")?,
                source: row.try_get("source")?,
                revision: from_db(row.try_get("revision")?),
                created_at: from_millis(row.try_get("created_at")?),
                updated_at: from_millis(row.try_get("updated_at")?),
            })
        }

        /// Read an item inside a write transaction, locking its row until commit.
        async fn lock_memory_item(tx: &mut WriteTx, id: &str) -> Result<Option<MemoryItem>, StoreError> {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE memory_items SET revision = revision WHERE id = $1 RETURNING {ITEM_FIELDS}"
            )))
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
            .as_ref()
            .map(memory_item_from_row)
            .transpose()
        }

        #[async_trait]
        impl MemoryItemStore for $store {
            async fn create_memory_item(&self, new: NewMemoryItem) -> Result<MemoryItem, StoreError> {
                let item = mem::item_from_new(new, self.now(), self.ids())?;
                // A taken id is a unique violation: `conflict`.
                self.write_execute(
                    sqlx::query(
                        "INSERT INTO memory_items \
                     (id, scope_kind, scope_subject, kind, content, source, revision, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)",
                    )
                    .bind(&item.id)
                    .bind(item.scope.kind.as_str())
                    .bind(item.scope.subject())
                    .bind(&item.kind)
                    .bind(&item.content)
                    .bind(&item.source)
                    .bind(to_db(item.revision))
                    .bind(item.created_at.timestamp_millis()),
                )
                .await?;
                Ok(item)
            }

            async fn get_memory_item(&self, id: &str) -> Result<Option<MemoryItem>, StoreError> {
                sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {ITEM_COLUMNS} FROM memory_items m WHERE m.id = $1")))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?
                    .as_ref()
                    .map(memory_item_from_row)
                    .transpose()
            }

            async fn update_memory_item(
                &self,
                id: &str,
                patch: MemoryItemPatch,
                expected_revision: Option<u64>,
            ) -> Result<MemoryItem, StoreError> {
                let now = self.now();
                let mut tx = self.tx().await?;
                let current =
                    lock_memory_item(&mut tx, id).await?.ok_or_else(|| StoreError::not_found("memory item", id))?;
                let (next, content_changed) = mem::patched(&current, patch, expected_revision, now)?;
                sqlx::query(
                    "UPDATE memory_items SET kind = $2, content = $3, source = $4, revision = $5, updated_at = $6 \
                     WHERE id = $1",
                )
                .bind(id)
                .bind(&next.kind)
                .bind(&next.content)
                .bind(&next.source)
                .bind(to_db(next.revision))
                .bind(next.updated_at.timestamp_millis())
                .execute(&mut *tx)
                .await?;
                if content_changed {
                    sqlx::query("DELETE FROM memory_vectors WHERE item_id = $1").bind(id).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(next)
            }

            async fn delete_memory_item(&self, id: &str, expected_revision: Option<u64>) -> Result<bool, StoreError> {
                let mut tx = self.tx().await?;
                let Some(current) = lock_memory_item(&mut tx, id).await? else { return Ok(false) };
                model::check_revision("memory item", id, expected_revision, current.revision)?;
                sqlx::query("DELETE FROM memory_vectors WHERE item_id = $1").bind(id).execute(&mut *tx).await?;
                sqlx::query("DELETE FROM memory_items WHERE id = $1").bind(id).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn list_memory_items_page(
                &self,
                filter: &MemoryFilter,
                page: &PageRequest,
            ) -> Result<Page<MemoryItem>, StoreError> {
                let (after_ms, after_id) = time_cursor(page)?;
                let mut binds = Vec::new();
                let mut next = 3;
                let filter = filter_sql(filter, &mut next, &mut binds);
                let sql = format!(
                    "SELECT {ITEM_COLUMNS} FROM memory_items m WHERE (m.created_at, m.id) < ($1, $2){filter} \
                     ORDER BY m.created_at DESC, m.id DESC LIMIT ${next}"
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(after_ms).bind(after_id);
                for value in binds {
                    query = query.bind(value);
                }
                let rows = query.bind(to_db(page.size() as u64 + 1)).fetch_all(&self.pool).await?;
                let items = rows.iter().map(memory_item_from_row).collect::<Result<Vec<_>, _>>()?;
                Ok(mem::page_of(items, page))
            }

            async fn search_memory_lexical(
                &self,
                filter: &MemoryFilter,
                query: &str,
                limit: usize,
            ) -> Result<Vec<ScoredItem>, StoreError> {
                let terms = mem::terms(query);
                if terms.is_empty() || limit == 0 {
                    return Ok(Vec::new());
                }
                let mut binds = Vec::new();
                let mut next = 2;
                let filter = filter_sql(filter, &mut next, &mut binds);
                let sql = <$store as MemoryDialect>::lexical_sql(&filter, next);
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(<$store as MemoryDialect>::text_query(&terms));
                for value in binds {
                    q = q.bind(value);
                }
                let limit = limit.min(mem::MAX_MEMORY_RESULTS);
                let rows = q.bind(to_db(limit as u64)).fetch_all(&self.pool).await?;
                let scored = rows
                    .iter()
                    .map(|row| Ok(ScoredItem { item: memory_item_from_row(row)?, score: row.try_get("score")? }))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                Ok(mem::rank(scored, limit))
            }

            async fn put_memory_vector(
                &self,
                id: &str,
                revision: u64,
                identity: &EmbeddingIdentity,
                vector: &[f32],
            ) -> Result<(), StoreError> {
                mem::check_vector(identity, vector)?;
                let mut tx = self.tx().await?;
                let current =
                    lock_memory_item(&mut tx, id).await?.ok_or_else(|| StoreError::not_found("memory item", id))?;
                model::check_revision("memory item", id, Some(revision), current.revision)?;
                sqlx::query(
                    "INSERT INTO memory_vectors (item_id, provider, model, dimensions, revision, vector) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (item_id) DO UPDATE SET \
                     provider = excluded.provider, model = excluded.model, dimensions = excluded.dimensions, \
                     revision = excluded.revision, vector = excluded.vector",
                )
                .bind(id)
                .bind(&identity.provider)
                .bind(&identity.model)
                .bind(to_db(identity.dimensions as u64))
                .bind(&identity.revision)
                .bind(mem::vector_bytes(vector))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn nearest_memory_items(
                &self,
                filter: &MemoryFilter,
                identity: &EmbeddingIdentity,
                query: &[f32],
                limit: usize,
            ) -> Result<Vec<ScoredItem>, StoreError> {
                mem::check_vector(identity, query)?;
                let mut binds = Vec::new();
                let mut next = 5;
                let filter = filter_sql(filter, &mut next, &mut binds);
                let sql = format!(
                    "SELECT {ITEM_COLUMNS}, v.vector FROM memory_vectors v JOIN memory_items m ON m.id = v.item_id \
                     WHERE v.provider = $1 AND v.model = $2 AND v.dimensions = $3 AND v.revision = $4{filter}"
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(&identity.provider)
                    .bind(&identity.model)
                    .bind(to_db(identity.dimensions as u64))
                    .bind(&identity.revision);
                for value in binds {
                    q = q.bind(value);
                }
                let rows = q.fetch_all(&self.pool).await?;
                let mut scored = Vec::with_capacity(rows.len());
                for row in &rows {
                    let vector = mem::vector_from_bytes(&row.try_get::<Vec<u8>, _>("vector")?)?;
                    let score = f64::from(polpo_core::embedding::cosine(query, &vector));
                    scored.push(ScoredItem { item: memory_item_from_row(row)?, score });
                }
                Ok(mem::rank(scored, limit))
            }
        }
    };
}
pub(crate) use sql_memory;
