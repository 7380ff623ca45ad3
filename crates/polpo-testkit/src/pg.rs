//! A schema of its own on the local PostgreSQL (127.0.0.1:5432, database `test`, trust auth)
//! for one test, so tests on the PostgreSQL backend run in parallel without seeing each other.

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The local test database (`POLPO_TEST_DATABASE_URL` overrides it).
pub fn database_url() -> String {
    std::env::var("POLPO_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh schema; [`PgSchema::url`] is a `DATABASE_URL` whose tables live in it.
#[derive(Debug, Clone)]
pub struct PgSchema {
    /// The schema name.
    pub name: String,
}

impl PgSchema {
    /// Create a uniquely named schema.
    pub async fn create() -> Result<Self, sqlx::Error> {
        let name = format!("polpo_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&database_url()).await?;
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {name}"))).execute(&mut conn).await?;
        Ok(Self { name })
    }

    /// A connection URL that puts every table of the store in this schema.
    pub fn url(&self) -> String {
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-c%20search_path%3D{}", self.name)
    }

    /// Drop the schema and everything in it.
    pub async fn drop_schema(self) -> Result<(), sqlx::Error> {
        let mut conn = PgConnection::connect(&database_url()).await?;
        sqlx::query(AssertSqlSafe(format!("DROP SCHEMA {} CASCADE", self.name))).execute(&mut conn).await?;
        Ok(())
    }
}
