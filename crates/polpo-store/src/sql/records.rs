//! `RecordStore` over SQL: revisioned records per collection.

/// `$head` over the entries of one record log (`$1` the collection, `$2` the log's id prefix,
/// compared by bytes whatever the database's collation): the one predicate its reads and its
/// clearing share.
macro_rules! log_entries {
    ($head:literal) => {
        concat!($head, " WHERE collection = $1 AND substr(id, 1, length($2)) = $2")
    };
}

/// Stamped out per driver by `sql_store_impl!` in the parent module.
macro_rules! sql_records {
    ($store:ty, $row:ty) => {
        #[async_trait]
        impl RecordStore for $store {
            /// One statement (see `write_record_text`); the value is converted to text once,
            /// its size measured as it is written.
            async fn put_record(
                &self,
                collection: &str,
                id: &str,
                value: Value,
                expected_revision: Option<u64>,
            ) -> Result<Record, StoreError> {
                model::check_record_ids(collection, id)?;
                let text = model::record_text(&value)?;
                let (revision, created_at, updated_at) =
                    self.write_record_text(collection, id, text, expected_revision).await?;
                Ok(Record { collection: collection.to_owned(), id: id.to_owned(), revision, value, created_at, updated_at })
            }

            /// The text bound as it is (bounded when it was made).
            async fn put_record_text(
                &self,
                collection: &str,
                id: &str,
                text: JsonText,
                expected_revision: Option<u64>,
            ) -> Result<u64, StoreError> {
                model::check_record_ids(collection, id)?;
                let (revision, ..) = self.write_record_text(collection, id, text.into_string(), expected_revision).await?;
                Ok(revision)
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
                model::check_record_ids(&r.collection, &r.id)?;
                let text = model::record_text(&r.value)?;
                let write = sqlx::query(
                    "INSERT INTO records (collection, id, revision, value, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (collection, id) DO NOTHING",
                )
                .bind(&r.collection)
                .bind(&r.id)
                .bind(to_db(r.revision))
                .bind(text)
                .bind(r.created_at.timestamp_millis())
                .bind(r.updated_at.timestamp_millis());
                let inserted = self.write_execute(write).await?;
                if inserted.rows_affected() > 0 {
                    return Ok(ImportOutcome::Imported);
                }
                let existing = self.get_record(&r.collection, &r.id).await?.ok_or_else(|| StoreError::not_found("record", &r.id))?;
                model::same_import("record", &r.id, &existing, r)
            }

            /// One row per entry, a record of the log's collection named by
            /// [`sql_entry_id`](crate::record_log::sql_entry_id): one statement, the entry's text
            /// bound as it is. Appending a number again replaces it (a retried append).
            async fn append_log(
                &self,
                collection: &str,
                log: &str,
                seq: u64,
                entry: &JsonText,
            ) -> Result<(), StoreError> {
                crate::record_log::check_log(collection, log)?;
                let now = self.now().timestamp_millis();
                let write = sqlx::query(
                    "INSERT INTO records (collection, id, revision, value, updated_at, created_at) \
                     VALUES ($1, $2, 1, $3, $4, $4) ON CONFLICT (collection, id) DO UPDATE SET \
                     revision = records.revision + 1, value = excluded.value, updated_at = excluded.updated_at",
                )
                .bind(collection)
                .bind(crate::record_log::sql_entry_id(log, seq))
                .bind(entry.as_str())
                .bind(now);
                self.write_execute(write).await?;
                Ok(())
            }

            async fn read_log(&self, collection: &str, log: &str) -> Result<Vec<Value>, StoreError> {
                crate::record_log::check_log(collection, log)?;
                let rows = sqlx::query(crate::sql::records::log_entries!("SELECT id, value FROM records"))
                    .bind(collection)
                    .bind(crate::record_log::sql_entry_prefix(log))
                    .fetch_all(&self.pool)
                    .await?;
                let mut entries = rows
                    .iter()
                    .map(|row| Ok((row.try_get::<String, _>("id")?, from_text(row.try_get::<&str, _>("value")?)?)))
                    .collect::<Result<Vec<(String, Value)>, StoreError>>()?;
                // Sorted here, by bytes, whatever the database's collation.
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(entries.into_iter().map(|(_, value)| value).collect())
            }

            async fn clear_log(&self, collection: &str, log: &str) -> Result<(), StoreError> {
                crate::record_log::check_log(collection, log)?;
                let write = sqlx::query(crate::sql::records::log_entries!("DELETE FROM records"))
                    .bind(collection)
                    .bind(crate::record_log::sql_entry_prefix(log));
                self.write_execute(write).await?;
                Ok(())
            }
        }


        impl $store {
            /// Write `text` over `collection/id` in one statement, whatever `expected_revision`
            /// asks: the revision check, the write and the new revision in a single round trip
            /// (a conditional update, or an insert that does nothing or updates on the key), so
            /// a checkpoint costs one statement and the old value is never read back. Only a
            /// refused write reads the revision it met. The new revision, creation and write
            /// times.
            async fn write_record_text(
                &self,
                collection: &str,
                id: &str,
                text: String,
                expected_revision: Option<u64>,
            ) -> Result<(u64, chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>), StoreError> {
                let now = self.now();
                let write = match expected_revision {
                    Some(0) => sqlx::query(
                        "INSERT INTO records (collection, id, revision, value, updated_at, created_at) \
                         VALUES ($1, $2, 1, $3, $4, $4) ON CONFLICT (collection, id) DO NOTHING \
                         RETURNING revision, created_at",
                    ),
                    Some(_) => sqlx::query(
                        "UPDATE records SET revision = revision + 1, value = $3, updated_at = $4 \
                         WHERE collection = $1 AND id = $2 AND revision = $5 RETURNING revision, created_at",
                    ),
                    None => sqlx::query(
                        "INSERT INTO records (collection, id, revision, value, updated_at, created_at) \
                         VALUES ($1, $2, 1, $3, $4, $4) ON CONFLICT (collection, id) DO UPDATE SET \
                         revision = records.revision + 1, value = excluded.value, updated_at = excluded.updated_at \
                         RETURNING revision, created_at",
                    ),
                };
                let mut write =
                    write.bind(collection).bind(id).bind(text).bind(now.timestamp_millis());
                if let Some(expected @ 1..) = expected_revision {
                    write = write.bind(to_db(expected));
                }
                let Some(row) = self.write_fetch_optional(write).await? else {
                    let actual: Option<i64> =
                        sqlx::query_scalar("SELECT revision FROM records WHERE collection = $1 AND id = $2")
                            .bind(collection)
                            .bind(id)
                            .fetch_optional(&self.pool)
                            .await?;
                    let (expected, actual) = (expected_revision.unwrap_or_default(), actual.map_or(0, from_db));
                    return Err(StoreError::stale_revision("record", &format!("{collection}/{id}"), expected, actual));
                };
                Ok((from_db(row.try_get("revision")?), from_millis(row.try_get("created_at")?), now))
            }
        }
    };
}
pub(crate) use log_entries;
pub(crate) use sql_records;
