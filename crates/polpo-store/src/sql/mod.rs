//! The SQL backends: SQLite (one WAL file) and PostgreSQL.
//!
//! Both speak the same SQL (numbered `$n` parameters, `ON CONFLICT`, `RETURNING`), store times
//! as epoch milliseconds and JSON as text, so the store logic is written once, in
//! `sql_store_impl!`, and stamped out for each driver. What differs lives in the driver
//! module: connecting, how a write transaction starts, and the migration SQL.

mod postgres;
mod sqlite;

use std::borrow::Cow;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

use crate::error::StoreError;

/// The table recording applied schema versions.
const MIGRATIONS_TABLE: &str = "polpo_schema_migrations";

/// A migrator over embedded, versioned SQL (`(version, description, sql)`).
fn migrator(migrations: &[(i64, &'static str, &'static str)]) -> Migrator {
    let mut m = Migrator::with_migrations(
        migrations
            .iter()
            .map(|(v, d, sql)| Migration::new(*v, Cow::Borrowed(*d), MigrationType::Simple, sql.into_sql_str(), false))
            .collect(),
    );
    m.dangerous_set_table_name(MIGRATIONS_TABLE);
    m
}

/// Counters are unsigned in the API and signed in SQL.
fn to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn from_db(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn to_text<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid(e.to_string()))
}

fn from_text<T: DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Database(format!("stored JSON does not parse: {e}")))
}

/// The store logic shared by both SQL backends. `$store` has `pool`, `clock` and
/// `async fn tx(&self)` starting a write transaction; `$row` is the driver's row type. The
/// invoking module also defines `CLAIM_NEXT_RUN` (the claim query, which differs in locking)
/// and `ANNOUNCE_RUN` (SQL run after a run is created to wake waiting workers, if any).
macro_rules! sql_store_impl {
    ($store:ty, $row:ty) => {
        use std::time::Duration;

        use async_trait::async_trait;
        use serde_json::Value;
        use sqlx::Row;

        use crate::clock::{from_millis, now_ms};
        use crate::error::StoreError;
        use crate::model::{
            self, Checkpoint, Effect, EffectClaim, EffectStatus, ImportOutcome, Lease, MessagesAppended, NewMessage, NewRun, NewRunEvent, NewSession,
            Record, Run, RunEvent, RunFilter, RunStatus, Session, SessionFilter, SessionPatch, StoredMessage,
        };
        use crate::page::{Cursor, Page, PageRequest};
        use crate::sql::{from_db, from_text, to_db, to_text};
        use crate::traits::{EffectLedger, RecordStore, RunStore, SessionStore};

        fn session_from_row(row: &$row) -> Result<Session, StoreError> {
            Ok(Session {
                id: row.try_get("id")?,
                agent: row.try_get("agent")?,
                title: row.try_get("title")?,
                user: row.try_get("user_id")?,
                metadata: from_text(row.try_get::<&str, _>("metadata")?)?,
                created_at: from_millis(row.try_get("created_at")?),
                updated_at: from_millis(row.try_get("updated_at")?),
                message_count: from_db(row.try_get("message_count")?),
                revision: from_db(row.try_get("revision")?),
            })
        }

        fn run_from_row(row: &$row) -> Result<Run, StoreError> {
            let status: String = row.try_get("status")?;
            Ok(Run {
                id: row.try_get("id")?,
                agent: row.try_get("agent")?,
                session_id: row.try_get("session_id")?,
                status: RunStatus::parse(&status)
                    .ok_or_else(|| StoreError::Database(format!("unknown run status `{status}`")))?,
                created_at: from_millis(row.try_get("created_at")?),
                updated_at: from_millis(row.try_get("updated_at")?),
                error: row.try_get("error")?,
                revision: from_db(row.try_get("revision")?),
                last_seq: from_db(row.try_get("last_seq")?),
            })
        }

        fn event_from_row(row: &$row) -> Result<RunEvent, StoreError> {
            Ok(RunEvent {
                run_id: row.try_get("run_id")?,
                seq: from_db(row.try_get("seq")?),
                event_type: row.try_get("event_type")?,
                data: from_text(row.try_get::<&str, _>("data")?)?,
                created_at: from_millis(row.try_get("created_at")?),
            })
        }

        fn lease_from_row(row: &$row) -> Result<Lease, StoreError> {
            Ok(Lease {
                run_id: row.try_get("run_id")?,
                owner: row.try_get("owner")?,
                expires_at: from_millis(row.try_get("expires_at")?),
            })
        }

        fn effect_from_row(row: &$row) -> Result<Effect, StoreError> {
            let status: String = row.try_get("status")?;
            let result: Option<String> = row.try_get("result")?;
            let completed_at: Option<i64> = row.try_get("completed_at")?;
            Ok(Effect {
                key: row.try_get("key")?,
                status: EffectStatus::parse(&status)
                    .ok_or_else(|| StoreError::Database(format!("unknown effect status `{status}`")))?,
                result: result.as_deref().map(from_text).transpose()?,
                created_at: from_millis(row.try_get("created_at")?),
                completed_at: completed_at.map(from_millis),
            })
        }

        fn record_from_row(row: &$row) -> Result<Record, StoreError> {
            Ok(Record {
                collection: row.try_get("collection")?,
                id: row.try_get("id")?,
                revision: from_db(row.try_get("revision")?),
                value: from_text(row.try_get::<&str, _>("value")?)?,
                created_at: from_millis(row.try_get("created_at")?),
                updated_at: from_millis(row.try_get("updated_at")?),
            })
        }

        /// Read a record inside a write transaction, locking its row until commit.
        async fn lock_record(
            tx: &mut sqlx::Transaction<'static, <$row as sqlx::Row>::Database>,
            collection: &str,
            id: &str,
        ) -> Result<Option<Record>, StoreError> {
            sqlx::query(
                "UPDATE records SET revision = revision WHERE collection = $1 AND id = $2 \
                 RETURNING collection, id, revision, value, created_at, updated_at",
            )
            .bind(collection)
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
            .as_ref()
            .map(record_from_row)
            .transpose()
        }

        fn time_cursor(page: &PageRequest) -> Result<(Option<i64>, Option<String>), StoreError> {
            Ok(match page.after.as_ref().map(Cursor::time_key).transpose()? {
                Some((ms, id)) => (Some(ms), Some(id)),
                None => (None, None),
            })
        }

        impl $store {
            /// The newest schema version applied to this database (`polpo db status`); equal
            /// to the newest embedded migration once the store is open.
            pub async fn schema_version(&self) -> Result<Option<i64>, StoreError> {
                Ok(sqlx::query("SELECT MAX(version) AS version FROM polpo_schema_migrations WHERE success")
                    .fetch_one(&self.pool)
                    .await?
                    .try_get("version")?)
            }

            /// The newest schema version this build knows.
            pub fn latest_schema_version() -> i64 {
                MIGRATIONS.iter().map(|(v, _, _)| *v).max().unwrap_or(0)
            }

            fn now(&self) -> chrono::DateTime<chrono::Utc> {
                now_ms(self.clock.as_ref())
            }

            async fn run_exists(&self, id: &str) -> Result<bool, StoreError> {
                Ok(sqlx::query("SELECT 1 FROM runs WHERE id = $1").bind(id).fetch_optional(&self.pool).await?.is_some())
            }

            async fn session_exists(&self, id: &str) -> Result<bool, StoreError> {
                Ok(sqlx::query("SELECT 1 FROM sessions WHERE id = $1").bind(id).fetch_optional(&self.pool).await?.is_some())
            }

            /// Read a session inside a write transaction, locking its row until commit.
            async fn lock_session(
                tx: &mut sqlx::Transaction<'static, <$row as sqlx::Row>::Database>,
                id: &str,
            ) -> Result<Session, StoreError> {
                let row = sqlx::query(
                    "UPDATE sessions SET revision = revision WHERE id = $1 \
                     RETURNING id, agent, title, user_id, metadata, created_at, updated_at, message_count, revision",
                )
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?
                .ok_or_else(|| StoreError::not_found("session", id))?;
                session_from_row(&row)
            }

            async fn write_session(
                tx: &mut sqlx::Transaction<'static, <$row as sqlx::Row>::Database>,
                s: &Session,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "UPDATE sessions SET title = $2, metadata = $3, updated_at = $4, message_count = $5, revision = $6 \
                     WHERE id = $1",
                )
                .bind(&s.id)
                .bind(&s.title)
                .bind(to_text(&s.metadata)?)
                .bind(s.updated_at.timestamp_millis())
                .bind(to_db(s.message_count))
                .bind(to_db(s.revision))
                .execute(&mut **tx)
                .await?;
                Ok(())
            }

            async fn lease_of(&self, run_id: &str) -> Result<Option<Lease>, StoreError> {
                sqlx::query("SELECT run_id, owner, expires_at FROM run_leases WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await?
                    .as_ref()
                    .map(lease_from_row)
                    .transpose()
            }
        }

        #[async_trait]
        impl SessionStore for $store {
            async fn create_session(&self, new: NewSession) -> Result<Session, StoreError> {
                let s = model::session_from_new(new, self.now())?;
                sqlx::query(
                    "INSERT INTO sessions (id, agent, title, user_id, metadata, created_at, updated_at, message_count, revision) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(&s.id)
                .bind(&s.agent)
                .bind(&s.title)
                .bind(&s.user)
                .bind(to_text(&s.metadata)?)
                .bind(s.created_at.timestamp_millis())
                .bind(s.updated_at.timestamp_millis())
                .bind(to_db(s.message_count))
                .bind(to_db(s.revision))
                .execute(&self.pool)
                .await?;
                Ok(s)
            }

            async fn get_session(&self, id: &str) -> Result<Option<Session>, StoreError> {
                sqlx::query(
                    "SELECT id, agent, title, user_id, metadata, created_at, updated_at, message_count, revision \
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
                    "SELECT id, agent, title, user_id, metadata, created_at, updated_at, message_count, revision \
                     FROM sessions \
                     WHERE ($1 IS NULL OR agent = $1) AND ($2 IS NULL OR user_id = $2) \
                       AND ($3 IS NULL OR created_at < $3 OR (created_at = $3 AND id < $4)) \
                     ORDER BY created_at DESC, id DESC LIMIT $5",
                )
                .bind(&filter.agent)
                .bind(&filter.user)
                .bind(after_ms)
                .bind(after_id)
                .bind(to_db(size as u64 + 1))
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

            async fn append_messages(
                &self,
                session_id: &str,
                messages: Vec<NewMessage>,
                expected_revision: Option<u64>,
            ) -> Result<MessagesAppended, StoreError> {
                let now = self.now();
                let mut tx = self.tx().await?;
                let mut session = Self::lock_session(&mut tx, session_id).await?;
                model::check_revision("session", session_id, expected_revision, session.revision)?;
                let stored = model::apply_append(&mut session, messages, now)?;
                for m in &stored {
                    sqlx::query("INSERT INTO messages (session_id, seq, body) VALUES ($1, $2, $3)")
                        .bind(session_id)
                        .bind(to_db(m.seq))
                        .bind(to_text(m)?)
                        .execute(&mut *tx)
                        .await?;
                }
                Self::write_session(&mut tx, &session).await?;
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
                let inserted = sqlx::query(
                    "INSERT INTO sessions (id, agent, title, user_id, metadata, created_at, updated_at, message_count, revision) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                )
                .bind(&s.id)
                .bind(&s.agent)
                .bind(&s.title)
                .bind(&s.user)
                .bind(to_text(&s.metadata)?)
                .bind(s.created_at.timestamp_millis())
                .bind(s.updated_at.timestamp_millis())
                .bind(to_db(s.message_count))
                .bind(to_db(s.revision))
                .execute(&mut *tx)
                .await?;
                if inserted.rows_affected() == 0 {
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
                for m in messages {
                    sqlx::query("INSERT INTO messages (session_id, seq, body) VALUES ($1, $2, $3)")
                        .bind(&s.id)
                        .bind(to_db(m.seq))
                        .bind(to_text(m)?)
                        .execute(&mut *tx)
                        .await?;
                }
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

        #[async_trait]
        impl RunStore for $store {
            async fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
                let now = self.now();
                let run = Run {
                    id: model::id_or_new("run", new.id)?,
                    agent: new.agent,
                    session_id: new.session_id,
                    status: RunStatus::Running,
                    created_at: now,
                    updated_at: now,
                    error: None,
                    revision: 1,
                    last_seq: 0,
                };
                sqlx::query(
                    "INSERT INTO runs (id, agent, session_id, status, error, created_at, updated_at, revision, last_seq) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(&run.id)
                .bind(&run.agent)
                .bind(&run.session_id)
                .bind(run.status.as_str())
                .bind(&run.error)
                .bind(now.timestamp_millis())
                .bind(now.timestamp_millis())
                .bind(to_db(run.revision))
                .bind(to_db(run.last_seq))
                .execute(&self.pool)
                .await?;
                if let Some(announce) = ANNOUNCE_RUN {
                    sqlx::query(announce).bind(&run.id).execute(&self.pool).await?;
                }
                Ok(run)
            }

            async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
                sqlx::query(
                    "SELECT id, agent, session_id, status, error, created_at, updated_at, revision, last_seq \
                     FROM runs WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .as_ref()
                .map(run_from_row)
                .transpose()
            }

            async fn list_runs(&self, filter: &RunFilter, page: &PageRequest) -> Result<Page<Run>, StoreError> {
                let (after_ms, after_id) = time_cursor(page)?;
                let size = page.size();
                let rows = sqlx::query(
                    "SELECT id, agent, session_id, status, error, created_at, updated_at, revision, last_seq \
                     FROM runs \
                     WHERE ($1 IS NULL OR agent = $1) AND ($2 IS NULL OR session_id = $2) AND ($3 IS NULL OR status = $3) \
                       AND ($4 IS NULL OR created_at < $4 OR (created_at = $4 AND id < $5)) \
                     ORDER BY created_at DESC, id DESC LIMIT $6",
                )
                .bind(&filter.agent)
                .bind(&filter.session_id)
                .bind(filter.status.map(RunStatus::as_str))
                .bind(after_ms)
                .bind(after_id)
                .bind(to_db(size as u64 + 1))
                .fetch_all(&self.pool)
                .await?;
                let items = rows.iter().map(run_from_row).collect::<Result<Vec<_>, _>>()?;
                Ok(Page::from_overfetch(items, size, |r| Cursor::at_time(r.created_at.timestamp_millis(), &r.id)))
            }

            async fn update_run_status(
                &self,
                id: &str,
                status: RunStatus,
                error: Option<String>,
                expected_revision: Option<u64>,
            ) -> Result<Run, StoreError> {
                let now = self.now();
                let mut tx = self.tx().await?;
                let row = sqlx::query(
                    "UPDATE runs SET revision = revision WHERE id = $1 \
                     RETURNING id, agent, session_id, status, error, created_at, updated_at, revision, last_seq",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found("run", id))?;
                let mut run = run_from_row(&row)?;
                model::check_revision("run", id, expected_revision, run.revision)?;
                run.status.check_transition(status)?;
                run.status = status;
                run.error = error;
                run.revision += 1;
                run.updated_at = now;
                sqlx::query("UPDATE runs SET status = $2, error = $3, updated_at = $4, revision = $5 WHERE id = $1")
                    .bind(id)
                    .bind(status.as_str())
                    .bind(&run.error)
                    .bind(now.timestamp_millis())
                    .bind(to_db(run.revision))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(run)
            }

            async fn append_events(
                &self,
                run_id: &str,
                events: Vec<NewRunEvent>,
            ) -> Result<std::ops::RangeInclusive<u64>, StoreError> {
                let texts = model::encode_event_batch(&events)?;
                let now = self.now().timestamp_millis();
                let n = events.len() as i64;
                let mut tx = self.tx().await?;
                // The row lock taken by this UPDATE serialises appends to one run: gap-free seqs.
                let last: i64 = sqlx::query(
                    "UPDATE runs SET last_seq = last_seq + $3, updated_at = $2 WHERE id = $1 RETURNING last_seq",
                )
                .bind(run_id)
                .bind(now)
                .bind(n)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found("run", run_id))?
                .try_get("last_seq")?;
                let first = last - n + 1;
                for ((event, text), seq) in events.iter().zip(texts).zip(first..) {
                    sqlx::query("INSERT INTO run_events (run_id, seq, event_type, data, created_at) VALUES ($1, $2, $3, $4, $5)")
                        .bind(run_id)
                        .bind(seq)
                        .bind(&event.event_type)
                        .bind(text)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(from_db(first)..=from_db(last))
            }

            async fn events_after(&self, run_id: &str, after_seq: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
                let size = PageRequest::first(limit).size();
                let rows = sqlx::query(
                    "SELECT run_id, seq, event_type, data, created_at FROM run_events \
                     WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                )
                .bind(run_id)
                .bind(to_db(after_seq))
                .bind(to_db(size as u64))
                .fetch_all(&self.pool)
                .await?;
                if rows.is_empty() && !self.run_exists(run_id).await? {
                    return Err(StoreError::not_found("run", run_id));
                }
                rows.iter().map(event_from_row).collect()
            }

            async fn put_checkpoint(&self, run_id: &str, seq: u64, state: Value) -> Result<Checkpoint, StoreError> {
                model::check_size("checkpoint", &state, model::MAX_CHECKPOINT_BYTES)?;
                if !self.run_exists(run_id).await? {
                    return Err(StoreError::not_found("run", run_id));
                }
                let checkpoint = Checkpoint { run_id: run_id.to_owned(), seq, state, created_at: self.now() };
                let written = sqlx::query(
                    "INSERT INTO run_checkpoints (run_id, seq, state, created_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, created_at = excluded.created_at \
                     WHERE run_checkpoints.seq <= excluded.seq",
                )
                .bind(run_id)
                .bind(to_db(seq))
                .bind(to_text(&checkpoint.state)?)
                .bind(checkpoint.created_at.timestamp_millis())
                .execute(&self.pool)
                .await?;
                if written.rows_affected() == 0 {
                    return Err(StoreError::Conflict(format!("run `{run_id}` has a newer checkpoint")));
                }
                Ok(checkpoint)
            }

            async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
                let Some(row) = sqlx::query("SELECT run_id, seq, state, created_at FROM run_checkpoints WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                Ok(Some(Checkpoint {
                    run_id: row.try_get("run_id")?,
                    seq: from_db(row.try_get("seq")?),
                    state: from_text(row.try_get::<&str, _>("state")?)?,
                    created_at: from_millis(row.try_get("created_at")?),
                }))
            }

            async fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
                let ttl = model::lease_ttl(ttl)?;
                let now = self.now();
                if !self.run_exists(run_id).await? {
                    return Err(StoreError::not_found("run", run_id));
                }
                let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: now + ttl };
                let granted = sqlx::query(
                    "INSERT INTO run_leases (run_id, owner, expires_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
                     WHERE run_leases.owner = excluded.owner OR run_leases.expires_at <= $4",
                )
                .bind(run_id)
                .bind(owner)
                .bind(lease.expires_at.timestamp_millis())
                .bind(now.timestamp_millis())
                .execute(&self.pool)
                .await?;
                if granted.rows_affected() > 0 {
                    return Ok(lease);
                }
                match self.lease_of(run_id).await? {
                    Some(held) => {
                        model::lease_grantable(Some(&held), owner, now)?;
                        Err(StoreError::Conflict(format!("lease on run `{run_id}` changed concurrently; retry")))
                    }
                    None => Err(StoreError::Conflict(format!("lease on run `{run_id}` changed concurrently; retry"))),
                }
            }

            async fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
                let ttl = model::lease_ttl(ttl)?;
                let now = self.now();
                let mut tx = self.tx().await?;
                let claimed = sqlx::query(CLAIM_NEXT_RUN)
                    .bind(owner)
                    .bind((now + ttl).timestamp_millis())
                    .bind(now.timestamp_millis())
                    .fetch_optional(&mut *tx)
                    .await?
                    .as_ref()
                    .map(lease_from_row)
                    .transpose()?;
                tx.commit().await?;
                Ok(claimed)
            }

            async fn import_run(
                &self,
                run: &Run,
                events: &[RunEvent],
                checkpoint: Option<&Checkpoint>,
            ) -> Result<ImportOutcome, StoreError> {
                model::check_run_import(run, events, checkpoint)?;
                let mut tx = self.tx().await?;
                let inserted = sqlx::query(
                    "INSERT INTO runs (id, agent, session_id, status, error, created_at, updated_at, revision, last_seq) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                )
                .bind(&run.id)
                .bind(&run.agent)
                .bind(&run.session_id)
                .bind(run.status.as_str())
                .bind(&run.error)
                .bind(run.created_at.timestamp_millis())
                .bind(run.updated_at.timestamp_millis())
                .bind(to_db(run.revision))
                .bind(to_db(run.last_seq))
                .execute(&mut *tx)
                .await?;
                if inserted.rows_affected() == 0 {
                    tx.rollback().await?;
                    let existing = self.get_run(&run.id).await?.ok_or_else(|| StoreError::not_found("run", &run.id))?;
                    model::same_import("run", &run.id, &existing, run)?;
                    let mut stored = Vec::with_capacity(events.len());
                    loop {
                        let page = self.events_after(&run.id, stored.len() as u64, crate::page::MAX_PAGE).await?;
                        if page.is_empty() {
                            break;
                        }
                        stored.extend(page);
                    }
                    model::same_import("run", &run.id, &stored.as_slice(), &events)?;
                    let stored_checkpoint = self.latest_checkpoint(&run.id).await?;
                    return model::same_import("run", &run.id, &stored_checkpoint.as_ref(), &checkpoint);
                }
                for e in events {
                    sqlx::query("INSERT INTO run_events (run_id, seq, event_type, data, created_at) VALUES ($1, $2, $3, $4, $5)")
                        .bind(&run.id)
                        .bind(to_db(e.seq))
                        .bind(&e.event_type)
                        .bind(to_text(&e.data)?)
                        .bind(e.created_at.timestamp_millis())
                        .execute(&mut *tx)
                        .await?;
                }
                if let Some(c) = checkpoint {
                    sqlx::query("INSERT INTO run_checkpoints (run_id, seq, state, created_at) VALUES ($1, $2, $3, $4)")
                        .bind(&run.id)
                        .bind(to_db(c.seq))
                        .bind(to_text(&c.state)?)
                        .bind(c.created_at.timestamp_millis())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(ImportOutcome::Imported)
            }

            async fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
                let ttl = model::lease_ttl(ttl)?;
                let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: self.now() + ttl };
                let renewed = sqlx::query("UPDATE run_leases SET expires_at = $3 WHERE run_id = $1 AND owner = $2")
                    .bind(run_id)
                    .bind(owner)
                    .bind(lease.expires_at.timestamp_millis())
                    .execute(&self.pool)
                    .await?;
                if renewed.rows_affected() == 0 {
                    return Err(StoreError::LeaseLost { run_id: run_id.to_owned(), owner: owner.to_owned() });
                }
                Ok(lease)
            }

            async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
                sqlx::query("DELETE FROM run_leases WHERE run_id = $1 AND owner = $2")
                    .bind(run_id)
                    .bind(owner)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn expired_runs(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
                sqlx::query(
                    "SELECT l.run_id, l.owner, l.expires_at FROM run_leases l JOIN runs r ON r.id = l.run_id \
                     WHERE l.expires_at <= $1 AND r.status IN ('running', 'paused') \
                     ORDER BY l.expires_at, l.run_id LIMIT $2",
                )
                .bind(self.now().timestamp_millis())
                .bind(to_db(PageRequest::first(limit).size() as u64))
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(lease_from_row)
                .collect()
            }
        }

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
                     WHERE collection = $1 AND ($2 IS NULL OR created_at < $2 OR (created_at = $2 AND id < $3)) \
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

        #[async_trait]
        impl EffectLedger for $store {
            async fn record_effect_intent(&self, key: &str) -> Result<EffectClaim, StoreError> {
                model::validate_effect_key(key)?;
                let inserted = sqlx::query(
                    "INSERT INTO effects (key, status, result, created_at, completed_at) VALUES ($1, 'pending', NULL, $2, NULL) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(key)
                .bind(self.now().timestamp_millis())
                .execute(&self.pool)
                .await?;
                if inserted.rows_affected() > 0 {
                    return Ok(EffectClaim::Fresh);
                }
                let effect = self.get_effect(key).await?.ok_or_else(|| StoreError::not_found("effect", key))?;
                Ok(match effect.status {
                    EffectStatus::Pending => EffectClaim::Pending(effect),
                    EffectStatus::Done => EffectClaim::Done(effect),
                })
            }

            async fn record_effect_result(&self, key: &str, result: Value) -> Result<Effect, StoreError> {
                let now = self.now().timestamp_millis();
                let done = sqlx::query(
                    "UPDATE effects SET status = 'done', result = $2, completed_at = $3 WHERE key = $1 AND status = 'pending'",
                )
                .bind(key)
                .bind(to_text(&result)?)
                .bind(now)
                .execute(&self.pool)
                .await?;
                let effect = self.get_effect(key).await?.ok_or_else(|| StoreError::not_found("effect", key))?;
                if done.rows_affected() > 0 { Ok(effect) } else { model::same_result(effect, &result) }
            }

            async fn list_effects(&self, page: &PageRequest) -> Result<Page<Effect>, StoreError> {
                let after = page.after.as_ref().map(Cursor::key).transpose()?;
                let size = page.size();
                let rows = sqlx::query(
                    "SELECT key, status, result, created_at, completed_at FROM effects \
                     WHERE ($1 IS NULL OR key > $1) ORDER BY key LIMIT $2",
                )
                .bind(after)
                .bind(to_db(size as u64 + 1))
                .fetch_all(&self.pool)
                .await?;
                let items = rows.iter().map(effect_from_row).collect::<Result<Vec<_>, _>>()?;
                Ok(Page::from_overfetch(items, size, |e| Cursor::at_key(&e.key)))
            }

            async fn import_effect(&self, e: &Effect) -> Result<ImportOutcome, StoreError> {
                model::validate_effect_key(&e.key)?;
                let inserted = sqlx::query(
                    "INSERT INTO effects (key, status, result, created_at, completed_at) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(&e.key)
                .bind(e.status.as_str())
                .bind(e.result.as_ref().map(to_text).transpose()?)
                .bind(e.created_at.timestamp_millis())
                .bind(e.completed_at.map(|c| c.timestamp_millis()))
                .execute(&self.pool)
                .await?;
                if inserted.rows_affected() > 0 {
                    return Ok(ImportOutcome::Imported);
                }
                let existing = self.get_effect(&e.key).await?.ok_or_else(|| StoreError::not_found("effect", &e.key))?;
                model::same_import("effect", &e.key, &existing, e)
            }

            async fn get_effect(&self, key: &str) -> Result<Option<Effect>, StoreError> {
                sqlx::query("SELECT key, status, result, created_at, completed_at FROM effects WHERE key = $1")
                    .bind(key)
                    .fetch_optional(&self.pool)
                    .await?
                    .as_ref()
                    .map(effect_from_row)
                    .transpose()
            }
        }
    };
}
use sql_store_impl;
