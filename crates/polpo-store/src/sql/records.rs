//! `RecordStore` over SQL: revisioned records per collection.

/// Stamped out per driver by `sql_store_impl!` in the parent module.
macro_rules! sql_records {
    ($store:ty, $row:ty) => {
        #[async_trait]
        impl RecordStore for $store {
            async fn put_record(
                &self,
                collection: &str,
                id: &str,
                value: Value,
                expected_revision: Option<u64>,
            ) -> Result<Record, StoreError> {
                model::check_record_write(collection, id, &value)?;
                let now = self.now();
                let mut tx = self.tx().await?;
                let current = lock_record(&mut tx, collection, id).await?;
                let next = model::next_record(current.as_ref(), collection, id, value, expected_revision, now)?;
                let write = match current {
                    Some(_) => sqlx::query(
                        "UPDATE records SET revision = $3, value = $4, updated_at = $5 WHERE collection = $1 AND id = $2",
                    ),
                    // A concurrent creator makes this a unique violation: `conflict`.
                    None => sqlx::query(
                        "INSERT INTO records (collection, id, revision, value, updated_at, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $5)",
                    ),
                };
                write
                    .bind(collection)
                    .bind(id)
                    .bind(to_db(next.revision))
                    .bind(to_text(&next.value)?)
                    .bind(now.timestamp_millis())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(next)
            }

            async fn get_record(&self, collection: &str, id: &str) -> Result<Option<Record>, StoreError> {
                sqlx::query(
                    "SELECT collection, id, revision, value, created_at, updated_at FROM records \
                     WHERE collection = $1 AND id = $2",
                )
                .bind(collection)
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .as_ref()
                .map(record_from_row)
                .transpose()
            }

            async fn list_records(&self, collection: &str, page: &PageRequest) -> Result<Page<Record>, StoreError> {
                let (after_ms, after_id) = time_cursor(page)?;
                let size = page.size();
                let rows = sqlx::query(
                    "SELECT collection, id, revision, value, created_at, updated_at FROM records \
                     WHERE collection = $1 AND (created_at, id) < ($2, $3) \
                     ORDER BY created_at DESC, id DESC LIMIT $4",
                )
                .bind(collection)
                .bind(after_ms)
                .bind(after_id)
                .bind(to_db(size as u64 + 1))
                .fetch_all(&self.pool)
                .await?;
                let items = rows.iter().map(record_from_row).collect::<Result<Vec<_>, _>>()?;
                Ok(Page::from_overfetch(items, size, |r| Cursor::at_time(r.created_at.timestamp_millis(), &r.id)))
            }

            async fn delete_record(&self, collection: &str, id: &str, expected_revision: Option<u64>) -> Result<bool, StoreError> {
                let mut tx = self.tx().await?;
                let Some(current) = lock_record(&mut tx, collection, id).await? else { return Ok(false) };
                model::check_revision("record", &format!("{collection}/{id}"), expected_revision, current.revision)?;
                sqlx::query("DELETE FROM records WHERE collection = $1 AND id = $2")
                    .bind(collection)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn collections(&self) -> Result<Vec<String>, StoreError> {
                sqlx::query("SELECT DISTINCT collection FROM records ORDER BY collection")
                    .fetch_all(&self.pool)
                    .await?
                    .iter()
                    .map(|r| Ok(r.try_get("collection")?))
                    .collect()
            }

            async fn import_record(&self, r: &Record) -> Result<ImportOutcome, StoreError> {
                model::check_record_write(&r.collection, &r.id, &r.value)?;
                let inserted = sqlx::query(
                    "INSERT INTO records (collection, id, revision, value, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (collection, id) DO NOTHING",
                )
                .bind(&r.collection)
                .bind(&r.id)
                .bind(to_db(r.revision))
                .bind(to_text(&r.value)?)
                .bind(r.created_at.timestamp_millis())
                .bind(r.updated_at.timestamp_millis())
                .execute(&self.pool)
                .await?;
                if inserted.rows_affected() > 0 {
                    return Ok(ImportOutcome::Imported);
                }
                let existing = self.get_record(&r.collection, &r.id).await?.ok_or_else(|| StoreError::not_found("record", &r.id))?;
                model::same_import("record", &r.id, &existing, r)
            }
        }

    };
}
pub(crate) use sql_records;
