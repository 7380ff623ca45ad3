//! SQLite backend: one file (`.polpo/polpo.db`) in WAL mode with full fsync, so an acknowledged
//! write survives a crash and readers never block the writer. Reads use a small pool; every
//! write goes through the one [`writer`] connection, which commits concurrent writes together.

mod writer;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use sqlx::ConnectOptions;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};

use crate::clock::{Clock, IdGen, Seams};

/// The SQLite backend.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Reads (WAL: they never wait for the writer).
    pool: SqlitePool,
    writer: writer::Writer,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
}

const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../../migrations/sqlite/0001_init.sql")),
    (2, "records", include_str!("../../migrations/sqlite/0002_records.sql")),
    (3, "session_owner", include_str!("../../migrations/sqlite/0003_session_owner.sql")),
    (4, "tasks", include_str!("../../migrations/sqlite/0004_tasks.sql")),
    (5, "memory_items", include_str!("../../migrations/sqlite/0005_memory_items.sql")),
    (6, "lease_generation", include_str!("../../migrations/sqlite/0006_lease_generation.sql")),
    (7, "running_runs", include_str!("../../migrations/sqlite/0007_running_runs.sql")),
    (8, "task_agent", include_str!("../../migrations/sqlite/0008_task_agent.sql")),
];

/// The oldest running run without a live lease. Writes run one at a time (on the store's one
/// writer connection, and SQLite lets one connection write), so no row locking is needed.
const CLAIM_NEXT_RUN: &str = "WITH next AS ( \
       SELECT r.id FROM runs r LEFT JOIN run_leases l ON l.run_id = r.id \
       WHERE r.status = 'running' AND (l.run_id IS NULL OR l.expires_at <= $3) \
       ORDER BY r.created_at, r.id LIMIT 1) \
     INSERT INTO run_leases (run_id, owner, expires_at) SELECT id, $1, $2 FROM next WHERE true \
     ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
     WHERE run_leases.expires_at <= $3 \
     RETURNING run_id, owner, expires_at, generation";

/// How two writes (a session's row and its messages) make one query text, so they cost one
/// round trip to the connection's thread: SQLite runs the two statements of one text in turn
/// (numbered parameters count across them).
const TWO_WRITES: (&str, &str) = ("", "; ");

/// A run's lease generation for a fenced write; the write already holds the writer connection
/// inside the group's `BEGIN IMMEDIATE`, so no claim can come between the check and the write.
const FENCE_LOCK: &str = "SELECT lease_generation FROM runs WHERE id = $1";

/// Ready tasks to claim; one claimer at a time already (one writer), so no row locks.
const CLAIM_READY_TASKS: &str = super::work::claim_ready_sql!("", "SELECT value FROM json_each($3)");

/// Claimers already take turns (one writer): no lock to take.
const CLAIM_LOCK: Option<&str> = None;

/// Nobody else shares a SQLite file across machines: nothing to wake.
const ANNOUNCE_RUN: Option<&str> = None;
const ANNOUNCE_EVENTS: Option<&str> = None;

impl SqliteStore {
    /// Open (creating if needed) the database file at `path` and apply pending migrations.
    /// Times and new ids come from `seams` (a plain clock: UUID v7 ids).
    pub async fn open(path: &Path, seams: impl Into<Seams>) -> Result<Self, StoreError> {
        let Seams { clock, ids } = seams.into();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        }
        let options = SqliteConnectOptions::from_str("sqlite:")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options.clone()).await?;
        super::migrator(MIGRATIONS).run(&pool).await?;
        let writer = writer::Writer::new(options.connect().await?);
        Ok(SqliteStore { pool, writer, clock, ids })
    }

    /// A write: the writer connection, in its own savepoint of the group transaction
    /// (`BEGIN IMMEDIATE`, so another process writing to the file is waited for up front
    /// instead of failing to upgrade a read lock).
    async fn tx(&self) -> Result<WriteTx, StoreError> {
        self.writer.begin().await
    }

    /// One write statement on its own, through the writer: alone when nothing else is being
    /// written (one round trip, as autocommit), else in the group.
    async fn write_execute(&self, query: SqliteQuery<'_>) -> Result<SqliteQueryResult, StoreError> {
        let mut tx = self.writer.begin_one().await?;
        let done = query.execute(&mut *tx).await;
        // A refused statement (a taken key) left nothing behind: the group goes on.
        tx.commit().await?;
        Ok(done?)
    }

    /// One write statement on its own returning at most a row, through the writer (as
    /// [`write_execute`](Self::write_execute)).
    async fn write_fetch_optional(
        &self,
        query: SqliteQuery<'_>,
    ) -> Result<Option<sqlx::sqlite::SqliteRow>, StoreError> {
        let mut tx = self.writer.begin_one().await?;
        let row = query.fetch_optional(&mut *tx).await;
        tx.commit().await?;
        Ok(row?)
    }
}

use writer::WriteTx;

/// A query with its arguments bound.
type SqliteQuery<'q> = sqlx::query::Query<'q, sqlx::Sqlite, SqliteArguments>;

super::sql_store_impl!(SqliteStore, sqlx::sqlite::SqliteRow);
