//! Opening a fresh, isolated store of each backend for a test: a temp dir for file and SQLite,
//! a schema of its own on the local PostgreSQL, so every test runs in parallel with the others.

#![allow(dead_code)]

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use polpo_store::{Clock, FileStore, ManualClock, PgStore, Seams, SqliteStore, Store, StoreError, StoreKind};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The local test database (trust auth).
pub fn database_url() -> String {
    std::env::var("POLPO_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Where the backend's data lives, so a test can reopen it.
#[derive(Debug, Clone)]
pub enum Location {
    /// A `.polpo/` directory (file) or database file (sqlite).
    Path(PathBuf),
    /// A PostgreSQL schema.
    Schema(String),
}

/// A store under test with its manual clock and whatever keeps its data alive.
pub struct TestStore {
    pub store: Store,
    pub clock: Arc<ManualClock>,
    pub kind: StoreKind,
    pub location: Location,
    _dir: Option<tempfile::TempDir>,
}

pub fn start_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc)
}

impl TestStore {
    /// A fresh, empty store of `kind`.
    pub async fn new(kind: StoreKind) -> TestStore {
        let clock = Arc::new(ManualClock::new(start_time()));
        let (location, dir) = match kind {
            StoreKind::File | StoreKind::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let path = match kind {
                    StoreKind::File => dir.path().join(".polpo"),
                    _ => dir.path().join(".polpo/polpo.db"),
                };
                (Location::Path(path), Some(dir))
            }
            StoreKind::Postgres => (Location::Schema(create_schema().await), None),
        };
        let store = open_at(kind, &location, clock.clone()).await.unwrap();
        TestStore { store, clock, kind, location, _dir: dir }
    }

    /// Close the store and open it again on the same data.
    pub async fn reopen(self) -> TestStore {
        self.reopen_timed().await.0
    }

    /// [`TestStore::reopen`], with how long the open alone took (not the close).
    pub async fn reopen_timed(self) -> (TestStore, std::time::Duration) {
        let TestStore { store, clock, kind, location, _dir } = self;
        // Drop our handles first: the file store holds a process lock until then.
        drop(store);
        let started = std::time::Instant::now();
        let store = open_at(kind, &location, clock.clone()).await.unwrap();
        let took = started.elapsed();
        (TestStore { store, clock, kind, location, _dir }, took)
    }

    /// Drop the PostgreSQL schema (temp dirs clean themselves).
    pub async fn finish(self) {
        if let Location::Schema(schema) = &self.location {
            drop_schema(schema).await;
        }
    }
}

/// Open a backend on existing data.
pub async fn open_at(kind: StoreKind, location: &Location, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
    let seams = Seams::from(clock);
    Ok(match (kind, location) {
        (StoreKind::File, Location::Path(p)) => {
            Store::from_backend(kind, FileStore::open(p, seams.clone()).await?, seams)
        }
        (StoreKind::Sqlite, Location::Path(p)) => {
            Store::from_backend(kind, SqliteStore::open(p, seams.clone()).await?, seams)
        }
        (StoreKind::Postgres, Location::Schema(s)) => {
            Store::from_backend(kind, pg_store(s, seams.clone()).await?, seams)
        }
        _ => unreachable!("location does not match backend"),
    })
}

/// A PostgreSQL store whose tables live in `schema`.
pub async fn pg_store(schema: &str, seams: impl Into<Seams>) -> Result<PgStore, StoreError> {
    let options = PgConnectOptions::from_str(&database_url()).unwrap().options([("search_path", schema)]);
    PgStore::connect_with(options, seams).await
}

pub async fn create_schema() -> String {
    let schema = format!("polpo_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = PgConnection::connect(&database_url()).await.unwrap();
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
    schema
}

pub async fn drop_schema(schema: &str) {
    let mut conn = PgConnection::connect(&database_url()).await.unwrap();
    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&mut conn).await.unwrap();
}
