//! PostgreSQL backend: the shared state when several polpo processes (or machines) serve one
//! project.

use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};

use crate::clock::{Clock, IdGen, Seams};

mod shared;
pub use shared::{FEED_CHANNEL, RUN_COMMANDS_CHANNEL};

/// The PostgreSQL backend.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
}

const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../../migrations/postgres/0001_init.sql")),
    (2, "records", include_str!("../../migrations/postgres/0002_records.sql")),
    (3, "session_owner", include_str!("../../migrations/postgres/0003_session_owner.sql")),
    (4, "tasks", include_str!("../../migrations/postgres/0004_tasks.sql")),
    (5, "memory_items", include_str!("../../migrations/postgres/0005_memory_items.sql")),
    (6, "many_servers", include_str!("../../migrations/postgres/0006_many_servers.sql")),
    (7, "running_runs", include_str!("../../migrations/postgres/0007_running_runs.sql")),
    (8, "task_agent", include_str!("../../migrations/postgres/0008_task_agent.sql")),
];

/// The oldest running run without a live lease. `FOR UPDATE … SKIP LOCKED` lets concurrent
/// workers pass over a run another worker is claiming instead of queueing behind it; the
/// conditional upsert on the lease row is what makes a double claim impossible.
const CLAIM_NEXT_RUN: &str = "WITH next AS ( \
       SELECT r.id FROM runs r LEFT JOIN run_leases l ON l.run_id = r.id \
       WHERE r.status = 'running' AND (l.run_id IS NULL OR l.expires_at <= $3) \
       ORDER BY r.created_at, r.id LIMIT 1 FOR UPDATE OF r SKIP LOCKED) \
     INSERT INTO run_leases (run_id, owner, expires_at) SELECT id, $1, $2 FROM next \
     ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
     WHERE run_leases.expires_at <= $3 \
     RETURNING run_id, owner, expires_at, generation";

/// How two writes (a session's row and its messages) make one statement, so they cost one
/// round trip to the server: the first as a data-modifying `WITH` (the messages' foreign key
/// is checked at the statement's end, when the session row is there).
const TWO_WRITES: (&str, &str) = ("WITH first_write AS (", ") ");

/// A run's lease generation for a fenced write, with a shared lock on the run row until
/// commit: a claim (which updates the row) waits for the write, or the write sees its grant.
const FENCE_LOCK: &str = "SELECT lease_generation FROM runs WHERE id = $1 FOR SHARE";

/// Ready tasks to claim, passing over rows another claimer has locked (`SKIP LOCKED`); the
/// claim columns re-checked on the locked row make a double claim impossible.
const CLAIM_READY_TASKS: &str =
    super::work::claim_ready_sql!("FOR UPDATE OF t SKIP LOCKED", "SELECT json_array_elements_text($3::json)");

/// Taken by a claim that counts agents' places, until it commits: claimers on every server
/// take turns, so each sees the places the others took (an agent's `maxConcurrency` holds
/// across servers).
const CLAIM_LOCK: Option<&str> = Some("SELECT pg_advisory_xact_lock(hashtext('polpo_task_claims'))");

/// The channel a new run is announced on, so idle workers wake instead of polling.
pub const RUNS_CHANNEL: &str = "polpo_runs";

/// Announce a created run (payload: its id) on [`RUNS_CHANNEL`].
const ANNOUNCE_RUN: Option<&str> = Some("SELECT pg_notify('polpo_runs', $1)");

/// The channel appended run events are announced on (payload: `<run id>:<last seq>`), so a
/// process streaming a run another process executes wakes instead of polling.
pub const RUN_EVENTS_CHANNEL: &str = "polpo_run_events";

/// Announce appended events on [`RUN_EVENTS_CHANNEL`].
const ANNOUNCE_EVENTS: Option<&str> = Some("SELECT pg_notify('polpo_run_events', $1)");

/// How long the database lets one of this store's transactions sit idle between statements
/// before it ends the session (unless the URL's `options` set it): a process stopped or starved
/// in the middle of a write would otherwise hold its row locks — a run's record, a lease —
/// for as long as its connection lives, and every other server waiting on them (a takeover
/// included) with it. The store's transactions only ever wait on their own statements, so a
/// live process is never near it; a stalled one finds its write refused when it wakes.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "10s";

impl PgStore {
    /// Connect to `url` and apply pending migrations. Times and new ids come from `seams` (a
    /// plain clock: UUID v7 ids).
    pub async fn connect(url: &str, seams: impl Into<Seams>) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|_| StoreError::Config("the PostgreSQL database URL does not parse".into()))?;
        Self::connect_with(options, seams).await
    }

    /// Connect with explicit options (e.g. a `search_path` that puts the tables in one schema)
    /// and apply pending migrations.
    pub async fn connect_with(options: PgConnectOptions, seams: impl Into<Seams>) -> Result<Self, StoreError> {
        let Seams { clock, ids } = seams.into();
        let options = match options.get_options() {
            Some(set) if set.contains("idle_in_transaction_session_timeout") => options,
            _ => options.options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_TIMEOUT)]),
        };
        let pool = PgPoolOptions::new().max_connections(8).connect_with(options).await?;
        super::migrator(MIGRATIONS).run(&pool).await?;
        Ok(PgStore { pool, clock, ids })
    }

    /// The connection pool, for work the store traits do not cover (claim queues, LISTEN).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A listener woken with a run id each time any process creates a run in this database.
    pub async fn run_listener(&self) -> Result<PgListener, StoreError> {
        self.listener(RUNS_CHANNEL).await
    }

    /// A listener woken with `<run id>:<last seq>` each time any process appends run events.
    pub async fn event_listener(&self) -> Result<PgListener, StoreError> {
        self.listener(RUN_EVENTS_CHANNEL).await
    }

    async fn listener(&self, channel: &str) -> Result<PgListener, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(channel).await?;
        Ok(listener)
    }

    async fn tx(&self) -> Result<WriteTx, sqlx::Error> {
        self.pool.begin().await
    }

    /// One write statement on its own: autocommit on a pooled connection.
    async fn write_execute(&self, query: PgQuery<'_>) -> Result<sqlx::postgres::PgQueryResult, StoreError> {
        Ok(query.execute(&self.pool).await?)
    }

    /// One write statement on its own returning at most a row: autocommit on a pooled connection.
    async fn write_fetch_optional(&self, query: PgQuery<'_>) -> Result<Option<sqlx::postgres::PgRow>, StoreError> {
        Ok(query.fetch_optional(&self.pool).await?)
    }
}

/// A write: a transaction on a pooled connection (PostgreSQL runs concurrent writers itself).
type WriteTx = sqlx::Transaction<'static, sqlx::Postgres>;

/// A query with its arguments bound.
type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

super::sql_store_impl!(PgStore, sqlx::postgres::PgRow);
