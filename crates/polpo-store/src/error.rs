//! The one error type every store returns, each variant with a stable code.
//!
//! Callers (the engine, the HTTP layer) branch on [`StoreError::code`], never on the text, so
//! the same situation reads the same from every backend.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The session, run, effect … does not exist.
    #[error("{kind} `{id}` not found")]
    NotFound {
        /// What was looked up (`session`, `run`, `effect`).
        kind: &'static str,
        /// The id that was asked for.
        id: String,
    },
    /// Another writer changed the thing since the caller read it (stale `expected_revision`),
    /// or the write contradicts what is already stored.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Another process holds the file store of this project.
    #[error("the store at {} is locked by another polpo process", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The run is leased by another owner whose lease has not expired.
    #[error("run `{run_id}` is leased by `{owner}` until {expires_at}")]
    LeaseHeld {
        /// The run.
        run_id: String,
        /// Who holds it.
        owner: String,
        /// When the lease runs out unless renewed.
        expires_at: DateTime<Utc>,
    },
    /// The caller no longer holds the lease it tries to renew (it expired and was taken over,
    /// or was never held).
    #[error("lease on run `{run_id}` is not held by `{owner}`")]
    LeaseLost {
        /// The run.
        run_id: String,
        /// The owner that believed it held the lease.
        owner: String,
    },
    /// A status change that the run, task or mission state machine forbids (e.g. leaving a
    /// terminal state).
    #[error("status cannot go from {from} to {to}")]
    InvalidTransition {
        /// Current status.
        from: String,
        /// Requested status.
        to: String,
    },
    /// A pagination cursor that this store did not issue.
    #[error("invalid pagination cursor")]
    InvalidCursor,
    /// Input the store refuses (bad id, oversized payload, empty batch …).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// A filesystem operation failed.
    #[error("i/o error on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A stored file is not what the store wrote (and is not a torn journal tail).
    #[error("corrupt store file {}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(String),
    /// Applying schema migrations failed.
    #[error("migration failed: {0}")]
    Migration(String),
    /// The store cannot be opened as configured (unknown kind, missing database URL).
    #[error("store configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// Stable snake_case code for scripts, HTTP problem bodies and tests.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "not_found",
            StoreError::Conflict(_) => "conflict",
            StoreError::Locked { .. } => "store_locked",
            StoreError::LeaseHeld { .. } => "lease_held",
            StoreError::LeaseLost { .. } => "lease_lost",
            StoreError::InvalidTransition { .. } => "invalid_transition",
            StoreError::InvalidCursor => "invalid_cursor",
            StoreError::Invalid(_) => "invalid_input",
            StoreError::Io { .. } => "io_error",
            StoreError::Corrupt { .. } => "store_corrupt",
            StoreError::Database(_) => "database_error",
            StoreError::Migration(_) => "migration_failed",
            StoreError::Config(_) => "store_config",
        }
    }

    pub(crate) fn not_found(kind: &'static str, id: &str) -> Self {
        StoreError::NotFound { kind, id: id.to_owned() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io { path: path.into(), source }
    }

    pub(crate) fn stale_revision(kind: &str, id: &str, expected: u64, actual: u64) -> Self {
        StoreError::Conflict(format!("{kind} `{id}` is at revision {actual}, not {expected}"))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(db.message().to_owned()),
            _ => StoreError::Database(e.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migration(e.to_string())
    }
}
