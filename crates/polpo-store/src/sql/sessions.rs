//! `SessionStore` over SQL: sessions and their messages.

/// A session row's insert, its columns bound as `$1`…`$10` (`bind_session`).
macro_rules! insert_session_sql {
    () => {
        "INSERT INTO sessions (id, agent, title, user_id, metadata, created_at, updated_at, message_count, revision, owner) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    };
}
pub(crate) use insert_session_sql;

/// A session header's update, its columns bound as `$1`…`$6` (`bind_session_update`).
macro_rules! update_session_sql {
    () => {
        "UPDATE sessions SET title = $2, metadata = $3, updated_at = $4, message_count = $5, revision = $6 WHERE id = $1"
    };
}
pub(crate) use update_session_sql;

/// The insert of `count` messages of session `$1`, their seq and body numbered from `$from`.
pub(crate) fn insert_messages_sql(count: usize, from: usize) -> String {
    use std::fmt::Write as _;
    let mut sql = String::with_capacity(60 + 16 * count);
    sql.push_str("INSERT INTO messages (session_id, seq, body) VALUES ");
    for i in 0..count {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(sql, "{sep}($1, ${}, ${})", from + 2 * i, from + 1 + 2 * i);
    }
    sql
}

/// Two writes as one query text, joined the driver's way (its `TWO_WRITES`: the text before
/// the first and between the two).
pub(crate) fn joined((before, between): (&str, &str), first: &str, second: &str) -> String {
    [before, first, between, second].concat()
}

/// Stamped out per driver by `sql_store_impl!` in the parent module.
macro_rules! sql_sessions {
    ($store:ty, $row:ty) => {
        #[async_trait]
        impl SessionStore for $store {
            async fn create_session(&self, new: NewSession) -> Result<Session, StoreError> {
                self.create_session_with_messages(new, Vec::new()).await.map(|created| created.session)
            }

            /// One transaction (one commit, one WAL fsync) instead of a create and an append.
            async fn create_session_with_messages(
                &self,
                new: NewSession,
                messages: Vec<NewMessage>,
            ) -> Result<MessagesAppended, StoreError> {
                let now = self.now();
                let mut session = model::session_from_new(new, now, self.ids())?;
                let stored = match messages.is_empty() {
                    true => Vec::new(),
                    false => model::apply_append(&mut session, messages, now, self.ids())?,
                };
                let mut tx = self.tx().await?;
                let (first, rest) = stored.split_at(stored.len().min(crate::sql::MESSAGES_PER_INSERT));
                Self::insert_new_session(&mut tx, &session, first).await?;
                Self::insert_messages(&mut tx, &session.id, rest).await?;
                tx.commit().await?;
                Ok(MessagesAppended { session, messages: stored })
            }

            async fn get_session(&self, id: &str) -> Result<Option<Session>, StoreError> {
                sqlx::query(
                    "SELECT id, agent, title, user_id, metadata, owner, created_at, updated_at, message_count, revision \
                     FROM sessions WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .as_ref()
                .map(session_from_row)
                .transpose()
            }

            async fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>, StoreError> {
                let (after_ms, after_id) = time_cursor(page)?;
                let size = page.size();
                let rows = sqlx::query(
                    "SELECT id, agent, title, user_id, metadata, owner, created_at, updated_at, message_count, revision \
                     FROM sessions \
                     WHERE ($1 IS NULL OR agent = $1) AND ($2 IS NULL OR user_id = $2) \
                       AND (created_at, id) < ($3, $4) \
                       AND ($6 IS NULL OR owner = $6) \
                     ORDER BY created_at DESC, id DESC LIMIT $5",
                )
                .bind(&filter.agent)
                .bind(&filter.user)
                .bind(after_ms)
                .bind(after_id)
                .bind(to_db(size as u64 + 1))
                .bind(&filter.owner)
                .fetch_all(&self.pool)
                .await?;
                let items = rows.iter().map(session_from_row).collect::<Result<Vec<_>, _>>()?;
                Ok(Page::from_overfetch(items, size, |s| Cursor::at_time(s.created_at.timestamp_millis(), &s.id)))
            }

            async fn update_session(
                &self,
                id: &str,
                patch: SessionPatch,
                expected_revision: Option<u64>,
            ) -> Result<Session, StoreError> {
                let now = self.now();
                let mut tx = self.tx().await?;
                let mut s = Self::lock_session(&mut tx, id).await?;
                model::check_revision("session", id, expected_revision, s.revision)?;
                model::apply_patch(&mut s, patch, now)?;
                Self::write_session(&mut tx, &s).await?;
                tx.commit().await?;
                Ok(s)
            }

            async fn append_messages_fenced(
                &self,
                session_id: &str,
                messages: Vec<NewMessage>,
                expected_revision: Option<u64>,
                fence: Option<&Lease>,
            ) -> Result<MessagesAppended, StoreError> {
                let now = self.now();
                let mut tx = self.tx().await?;
                if let Some(f) = fence {
                    Self::lock_fence(&mut tx, &f.run_id, fence).await?;
                }
                let mut session = Self::lock_session(&mut tx, session_id).await?;
                model::check_revision("session", session_id, expected_revision, session.revision)?;
                let stored = model::apply_append(&mut session, messages, now, self.ids())?;
                let (first, rest) = stored.split_at(stored.len().min(crate::sql::MESSAGES_PER_INSERT));
                Self::insert_messages_and_write_session(&mut tx, &session, first).await?;
                Self::insert_messages(&mut tx, session_id, rest).await?;
                tx.commit().await?;
                Ok(MessagesAppended { session, messages: stored })
            }

            async fn list_messages(&self, session_id: &str, page: &PageRequest) -> Result<Page<StoredMessage>, StoreError> {
                let after = page.after.as_ref().map(Cursor::seq).transpose()?.unwrap_or(0);
                let size = page.size();
                let rows = sqlx::query("SELECT body FROM messages WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
                    .bind(session_id)
                    .bind(to_db(after))
                    .bind(to_db(size as u64 + 1))
                    .fetch_all(&self.pool)
                    .await?;
                if rows.is_empty() && !self.session_exists(session_id).await? {
                    return Err(StoreError::not_found("session", session_id));
                }
                let items = rows
                    .iter()
                    .map(|r| from_text::<StoredMessage>(r.try_get::<&str, _>("body")?))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Page::from_overfetch(items, size, |m| Cursor::at_seq(m.seq)))
            }

            async fn recent_messages(&self, session_id: &str, limit: u32) -> Result<Vec<StoredMessage>, StoreError> {
                let rows = sqlx::query(
                    "SELECT body FROM (SELECT seq, body FROM messages WHERE session_id = $1 ORDER BY seq DESC LIMIT $2) tail \
                     ORDER BY seq",
                )
                .bind(session_id)
                .bind(to_db(PageRequest::first(limit).size() as u64))
                .fetch_all(&self.pool)
                .await?;
                if rows.is_empty() && !self.session_exists(session_id).await? {
                    return Err(StoreError::not_found("session", session_id));
                }
                rows.iter().map(|r| from_text::<StoredMessage>(r.try_get::<&str, _>("body")?)).collect()
            }

            async fn import_session(&self, s: &Session, messages: &[StoredMessage]) -> Result<ImportOutcome, StoreError> {
                model::check_session_import(s, messages)?;
                let mut tx = self.tx().await?;
                let inserted = Self::insert_session(&mut *tx, s, true).await?;
                if inserted == 0 {
                    tx.rollback().await?;
                    let existing = self.get_session(&s.id).await?.ok_or_else(|| StoreError::not_found("session", &s.id))?;
                    model::same_import("session", &s.id, &existing, s)?;
                    let stored = sqlx::query("SELECT body FROM messages WHERE session_id = $1 ORDER BY seq")
                        .bind(&s.id)
                        .fetch_all(&self.pool)
                        .await?
                        .iter()
                        .map(|r| from_text::<StoredMessage>(r.try_get::<&str, _>("body")?))
                        .collect::<Result<Vec<_>, _>>()?;
                    return model::same_import("session", &s.id, &stored.as_slice(), &messages);
                }
                Self::insert_messages(&mut tx, &s.id, messages).await?;
                tx.commit().await?;
                Ok(ImportOutcome::Imported)
            }

            async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
                let mut tx = self.tx().await?;
                sqlx::query("DELETE FROM messages WHERE session_id = $1").bind(id).execute(&mut *tx).await?;
                let gone = sqlx::query("DELETE FROM sessions WHERE id = $1").bind(id).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(gone.rows_affected() > 0)
            }
        }

        impl $store {
            /// Insert session `s`'s row; the number of rows inserted: 0 when the id is taken and
            /// `skip_taken` (an import's re-run), else a taken id is a `conflict`.
            async fn insert_session<'e, E>(executor: E, s: &Session, skip_taken: bool) -> Result<u64, StoreError>
            where
                E: sqlx::Executor<'e, Database = <$row as sqlx::Row>::Database>,
            {
                let sql = if skip_taken {
                    concat!(crate::sql::sessions::insert_session_sql!(), " ON CONFLICT (id) DO NOTHING")
                } else {
                    crate::sql::sessions::insert_session_sql!()
                };
                let inserted = Self::bind_session(sqlx::query(sql), s)?.execute(executor).await?;
                Ok(inserted.rows_affected())
            }

            /// A new session's row and its first `messages` (at most
            /// [`MESSAGES_PER_INSERT`](crate::sql::MESSAGES_PER_INSERT)) in one query text
            /// (`TWO_WRITES`): one round trip to the database instead of two.
            async fn insert_new_session(
                tx: &mut WriteTx,
                s: &Session,
                messages: &[StoredMessage],
            ) -> Result<(), StoreError> {
                if messages.is_empty() {
                    Self::insert_session(&mut **tx, s, false).await?;
                    return Ok(());
                }
                // The session's ten parameters first; each message's seq and body after them.
                let messages_sql = crate::sql::sessions::insert_messages_sql(messages.len(), 11);
                let sql = crate::sql::sessions::joined(TWO_WRITES, crate::sql::sessions::insert_session_sql!(), &messages_sql);
                let query = Self::bind_session(sqlx::query(sqlx::AssertSqlSafe(sql)), s)?;
                Self::bind_messages(query, messages)?.execute(&mut **tx).await?;
                Ok(())
            }

            /// An append's first `messages` (at most
            /// [`MESSAGES_PER_INSERT`](crate::sql::MESSAGES_PER_INSERT)) and the session's new
            /// header in one query text (`TWO_WRITES`): one round trip instead of two.
            async fn insert_messages_and_write_session(
                tx: &mut WriteTx,
                s: &Session,
                messages: &[StoredMessage],
            ) -> Result<(), StoreError> {
                if messages.is_empty() {
                    return Self::write_session(tx, s).await;
                }
                // The header's six parameters first; each message's seq and body after them.
                let messages_sql = crate::sql::sessions::insert_messages_sql(messages.len(), 7);
                let sql = crate::sql::sessions::joined(TWO_WRITES, &messages_sql, crate::sql::sessions::update_session_sql!());
                let query = Self::bind_session_update(sqlx::query(sqlx::AssertSqlSafe(sql)), s)?;
                Self::bind_messages(query, messages)?.execute(&mut **tx).await?;
                Ok(())
            }

            /// Bind each message's seq and body, in order, after the parameters bound so far.
            fn bind_messages<'q>(
                mut query: BoundQuery<'q>,
                messages: &[StoredMessage],
            ) -> Result<BoundQuery<'q>, StoreError> {
                for m in messages {
                    query = query.bind(to_db(m.seq)).bind(to_text(m)?);
                }
                Ok(query)
            }

            /// Write session `s`'s header (title, metadata, counts, revision) inside a write
            /// transaction.
            async fn write_session(
                tx: &mut WriteTx,
                s: &Session,
            ) -> Result<(), StoreError> {
                let query = sqlx::query(crate::sql::sessions::update_session_sql!());
                Self::bind_session_update(query, s)?.execute(&mut **tx).await?;
                Ok(())
            }

            /// Bind a session header's columns as `$1`…`$6`, in `update_session_sql!`'s order.
            fn bind_session_update<'q>(
                query: BoundQuery<'q>,
                s: &'q Session,
            ) -> Result<BoundQuery<'q>, StoreError> {
                Ok(query
                    .bind(&s.id)
                    .bind(&s.title)
                    .bind(to_text(&s.metadata)?)
                    .bind(s.updated_at.timestamp_millis())
                    .bind(to_db(s.message_count))
                    .bind(to_db(s.revision)))
            }

            /// Bind a session's columns as `$1`…`$10`, in `insert_session_sql!`'s order.
            fn bind_session<'q>(
                query: BoundQuery<'q>,
                s: &'q Session,
            ) -> Result<BoundQuery<'q>, StoreError> {
                Ok(query
                    .bind(&s.id)
                    .bind(&s.agent)
                    .bind(&s.title)
                    .bind(&s.user)
                    .bind(to_text(&s.metadata)?)
                    .bind(s.created_at.timestamp_millis())
                    .bind(s.updated_at.timestamp_millis())
                    .bind(to_db(s.message_count))
                    .bind(to_db(s.revision))
                    .bind(&s.owner))
            }

            /// Insert `messages` of session `session_id` inside a write transaction: one
            /// statement per [`MESSAGES_PER_INSERT`](crate::sql::MESSAGES_PER_INSERT) messages, as
            /// each statement is a round trip to the database (SQLite's runs one writer at a time).
            async fn insert_messages(
                tx: &mut WriteTx,
                session_id: &str,
                messages: &[StoredMessage],
            ) -> Result<(), StoreError> {
                for chunk in messages.chunks(crate::sql::MESSAGES_PER_INSERT) {
                    let sql = crate::sql::sessions::insert_messages_sql(chunk.len(), 2);
                    let query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(session_id);
                    Self::bind_messages(query, chunk)?.execute(&mut **tx).await?;
                }
                Ok(())
            }
        }
    };
}
pub(crate) use sql_sessions;
