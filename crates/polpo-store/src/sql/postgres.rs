//! PostgreSQL backend: the shared state when several polpo processes (or machines) serve one
//! project.

use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::clock::Clock;

/// The PostgreSQL backend.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    clock: Arc<dyn Clock>,
}

const MIGRATIONS: &[(i64, &str, &str)] = &[(1, "init", include_str!("../../migrations/postgres/0001_init.sql"))];

impl PgStore {
    /// Connect to `url` and apply pending migrations.
    pub async fn connect(url: &str, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|_| StoreError::Config("the PostgreSQL database URL does not parse".into()))?;
        Self::connect_with(options, clock).await
    }

    /// Connect with explicit options (e.g. a `search_path` that puts the tables in one schema)
    /// and apply pending migrations.
    pub async fn connect_with(options: PgConnectOptions, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new().max_connections(8).connect_with(options).await?;
        super::migrator(MIGRATIONS).run(&pool).await?;
        Ok(PgStore { pool, clock })
    }

    /// The connection pool, for work the store traits do not cover (claim queues, LISTEN).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.pool.begin().await
    }
}

super::sql_store_impl!(PgStore, sqlx::postgres::PgRow);
