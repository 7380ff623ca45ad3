//! The SQL backends: SQLite (one WAL file) and PostgreSQL.
//!
//! Both speak the same SQL (numbered `$n` parameters, `ON CONFLICT`, `RETURNING`), store times
//! as epoch milliseconds and JSON as text, so the store logic is written once, in
//! `sql_store_impl!` (row mapping, shared helpers) plus one macro per store trait in
//! `sessions`, `runs`, `records`, `effects` and `work` (tasks and missions), and stamped out
//! for each driver. What differs
//! lives in the driver module: connecting, how a write transaction starts, the claim queries,
//! and the migration SQL.

mod effects;
mod memory;
mod postgres;
mod records;
mod runs;
mod sessions;
mod sqlite;
mod work;

use std::borrow::Cow;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

pub use postgres::{FEED_CHANNEL, PgStore, RUN_COMMANDS_CHANNEL, RUN_EVENTS_CHANNEL, RUNS_CHANNEL};
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

/// Messages inserted by one statement (3 parameters each, well under SQLite's and
/// PostgreSQL's limits on parameters per statement).
const MESSAGES_PER_INSERT: usize = 100;

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

/// The store logic shared by both SQL backends. `$store` has `pool` (for reads), `clock`,
/// `async fn tx(&self)` starting a write (a `WriteTx`, the type the invoking module names so:
/// dereferences to the driver's connection, ends with `commit` or `rollback`) and
/// `write_execute` / `write_fetch_optional` running one write statement on its own; `$row` is
/// the driver's row type. The
/// invoking module also defines `CLAIM_NEXT_RUN` (the claim query, which differs in locking),
/// `FENCE_LOCK` (reads a run's lease generation, locking the row where the database can),
/// `TWO_WRITES` (the text before and between two writes made one query text) and
/// `ANNOUNCE_RUN` / `ANNOUNCE_EVENTS` (SQL run after a run is created / events are appended,
/// to wake waiting workers and stream followers, if the database can).
macro_rules! sql_store_impl {
    ($store:ty, $row:ty) => {
        use std::time::Duration;

        /// A query of the driver with its arguments bound, as the shared code builds them.
        type BoundQuery<'q> = sqlx::query::Query<
            'q,
            <$row as sqlx::Row>::Database,
            <<$row as sqlx::Row>::Database as sqlx::Database>::Arguments,
        >;

        use async_trait::async_trait;
        use serde_json::Value;
        use sqlx::Row;

        use crate::clock::{from_millis, now_ms};
        use crate::error::StoreError;
        use crate::json_text::JsonText;
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
                owner: row.try_get("owner")?,
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
                generation: from_db(row.try_get("generation")?),
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
            tx: &mut WriteTx,
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

        /// The (creation time, id) key a list resumes before; without a cursor, a key after every
        /// stored row (none is created at i64::MAX ms). Lists compare `(created_at, id) < ($n, $m)`:
        /// a range of the newest-first index, which SQLite and PostgreSQL search instead of
        /// scanning it from the top, so a page deep in a large table costs what the first one does.
        fn time_cursor(page: &PageRequest) -> Result<(i64, String), StoreError> {
            Ok(page.after.as_ref().map(Cursor::time_key).transpose()?.unwrap_or((i64::MAX, String::new())))
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

            fn ids(&self) -> &dyn crate::clock::IdGen {
                self.ids.as_ref()
            }

            async fn run_exists(&self, id: &str) -> Result<bool, StoreError> {
                Ok(sqlx::query("SELECT 1 FROM runs WHERE id = $1").bind(id).fetch_optional(&self.pool).await?.is_some())
            }

            async fn session_exists(&self, id: &str) -> Result<bool, StoreError> {
                Ok(sqlx::query("SELECT 1 FROM sessions WHERE id = $1").bind(id).fetch_optional(&self.pool).await?.is_some())
            }

            /// Read a session inside a write transaction, locking its row until commit.
            async fn lock_session(
                tx: &mut WriteTx,
                id: &str,
            ) -> Result<Session, StoreError> {
                let row = sqlx::query(
                    "UPDATE sessions SET revision = revision WHERE id = $1 \
                     RETURNING id, agent, title, user_id, metadata, owner, created_at, updated_at, message_count, revision",
                )
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?
                .ok_or_else(|| StoreError::not_found("session", id))?;
                session_from_row(&row)
            }

            /// Inside a write transaction, check that `fence` (if any) still holds run
            /// `run_id`'s lease, and keep the run row from being claimed until commit
            /// (`FENCE_LOCK`: a shared row lock where the database has one), so the write
            /// that follows cannot land after a later grant.
            async fn lock_fence(
                tx: &mut WriteTx,
                run_id: &str,
                fence: Option<&Lease>,
            ) -> Result<(), StoreError> {
                let row = sqlx::query(FENCE_LOCK)
                    .bind(run_id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or_else(|| StoreError::not_found("run", run_id))?;
                model::check_fence(run_id, fence, from_db(row.try_get("lease_generation")?))
            }

            async fn lease_of(&self, run_id: &str) -> Result<Option<Lease>, StoreError> {
                sqlx::query("SELECT run_id, owner, expires_at, generation FROM run_leases WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await?
                    .as_ref()
                    .map(lease_from_row)
                    .transpose()
            }
        }


        crate::sql::sessions::sql_sessions!($store, $row);
        crate::sql::runs::sql_runs!($store, $row);
        crate::sql::records::sql_records!($store, $row);
        crate::sql::effects::sql_effects!($store, $row);
        crate::sql::work::sql_work!($store, $row);
        crate::sql::memory::sql_memory!($store, $row);
    };
}
use sql_store_impl;
