//! Versioned migrations are applied when a SQL store opens, once, and recorded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use polpo_store::{PgStore, SqliteStore, SystemClock};

#[tokio::test]
async fn sqlite_migrates_on_open_and_reopening_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".polpo/polpo.db");
    let first = SqliteStore::open(&path, Arc::new(SystemClock)).await.unwrap();
    assert_eq!(first.schema_version().await.unwrap(), Some(SqliteStore::latest_schema_version()));
    drop(first);
    let again = SqliteStore::open(&path, Arc::new(SystemClock)).await.unwrap();
    assert_eq!(again.schema_version().await.unwrap(), Some(SqliteStore::latest_schema_version()));
}

#[tokio::test]
async fn postgres_migrates_on_open_and_concurrent_openers_agree() {
    let schema = support::create_schema().await;
    let (a, b) = tokio::join!(
        support::pg_store(&schema, Arc::new(SystemClock)),
        support::pg_store(&schema, Arc::new(SystemClock))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.schema_version().await.unwrap(), Some(PgStore::latest_schema_version()));
    assert_eq!(b.schema_version().await.unwrap(), Some(PgStore::latest_schema_version()));
    support::drop_schema(&schema).await;
}
