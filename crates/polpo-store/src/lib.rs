//! Persistence for Polpo: one set of store traits, three backends (file, SQLite, PostgreSQL),
//! one conformance suite that every backend passes.
//!
//! The engine and server hold a [`Store`] (a bundle of `Arc<dyn …>` trait objects) opened by
//! [`open_store`] from `settings.storage`; they never know which backend is behind it. Time
//! and new ids come from the [`Seams`] given at open (a [`Clock`] and an [`IdGen`]), which the
//! store passes on ([`Store::seams`]), so tests move time by hand and fix every id.
//!
//! | trait | what it keeps |
//! |---|---|
//! | [`SessionStore`] | sessions and their messages |
//! | [`RunStore`] | runs, their gap-free event journal, checkpoints, execution leases, the run work queue |
//! | [`EffectLedger`] | write-tool effects by idempotency key, so none runs twice |
//! | [`RecordStore`] | revisioned JSON records per collection (approvals, schedules …) |
//! | [`TaskStore`] | tasks: created with their dependencies, moved by compare-and-set, claimed by workers |
//! | [`MissionStore`] | missions, moved by compare-and-set |
//! | [`MemoryItemStore`] | typed memory items with a full-text index, and their derived vectors |
//! | [`LearningStore`] | memory learning's outbox and reviewable candidates, as records |
//!
//! Every list is keyset-paginated ([`PageRequest`] → [`Page`] with an opaque [`Cursor`]);
//! every place two writers can meet takes an `expected_revision` and answers `conflict`.
//! Errors carry a stable code ([`StoreError::code`]).
//!
//! ```
//! # async fn demo() -> Result<(), polpo_store::StoreError> {
//! use std::sync::Arc;
//! use polpo_core::message::Message;
//! use polpo_store::{open_store, NewMessage, NewSession, StoreKind, SystemClock};
//!
//! let project = tempfile::tempdir().map_err(|e| polpo_store::StoreError::Config(e.to_string()))?;
//! let store = open_store(StoreKind::File, project.path(), None, Arc::new(SystemClock)).await?;
//! let session = store.sessions.create_session(NewSession { agent: "coder".into(), ..Default::default() }).await?;
//! let appended = store.sessions.append_messages(&session.id, vec![NewMessage::new(Message::user("hi"))], Some(session.revision)).await?;
//! assert_eq!(appended.session.title, "hi");
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```

pub mod clock;
pub mod copy;
pub mod error;
pub mod file;
pub mod json_text;
pub mod learning;
pub mod memory;
pub mod model;
pub mod page;
pub mod record_log;
pub mod shared;
pub mod sql;
pub mod traits;
pub mod work;

use std::path::Path;
use std::sync::Arc;

pub use clock::{Clock, IdGen, ManualClock, Seams, SequentialIds, SystemClock, UuidV7Ids};
pub use copy::{CopyReport, copy_store};
pub use error::StoreError;
pub use file::{FileStore, SESSION_CACHE};
pub use json_text::JsonText;
pub use learning::{AuditEntry, CandidateStatus, LearningJob, LearningStore, MemoryCandidate, SourceTurn};
pub use memory::{
    MemoryFilter, MemoryItem, MemoryItemPatch, MemoryItemStore, MemoryScope, NewMemoryItem, ScopeKind, ScoredItem,
};
pub use model::*;
pub use page::{Cursor, Page, PageRequest};
pub use shared::{EventFeed, FeedEvent, NewFeedEvent, RunCommand, RunCommands, Shared, Signal, Signals};
pub use sql::{PgStore, SqliteStore};
pub use traits::{EffectLedger, MissionStore, RecordStore, RunStore, SessionStore, TaskStore};
pub use work::{AgentLimits, MissionFilter, StoredMission, StoredTask, TaskClaim, TaskFilter};

/// Which backend holds the project's state (`settings.storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// JSON/JSONL under `.polpo/` (the default).
    #[default]
    File,
    /// One SQLite file, `.polpo/polpo.db`, in WAL mode.
    Sqlite,
    /// A PostgreSQL database (`DATABASE_URL` or `settings.databaseUrl`).
    Postgres,
}

impl StoreKind {
    /// Parse `settings.storage` (`file`, `sqlite`, `postgres`).
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "file" => Ok(StoreKind::File),
            "sqlite" => Ok(StoreKind::Sqlite),
            "postgres" | "postgresql" => Ok(StoreKind::Postgres),
            other => Err(StoreError::Config(format!("unknown storage `{other}` (expected file, sqlite or postgres)"))),
        }
    }

    /// The `settings.storage` spelling, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::File => "file",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// Everything the runtime persists, behind trait objects so callers do not depend on the
/// backend. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    /// Which backend this is.
    pub kind: StoreKind,
    /// Sessions and messages.
    pub sessions: Arc<dyn SessionStore>,
    /// Runs, run events, checkpoints and leases.
    pub runs: Arc<dyn RunStore>,
    /// The effect ledger.
    pub effects: Arc<dyn EffectLedger>,
    /// Revisioned records (tasks, missions, approvals, schedules …).
    pub records: Arc<dyn RecordStore>,
    /// Tasks, their revisions and worker claims.
    pub tasks: Arc<dyn TaskStore>,
    /// Missions.
    pub missions: Arc<dyn MissionStore>,
    /// Typed memory items and their vectors.
    pub memory: Arc<dyn MemoryItemStore>,
    /// What several servers on one database share (run commands, the live feed, wake-ups):
    /// `Some` on PostgreSQL only, the one store several servers can use at once.
    pub shared: Option<Arc<Shared>>,
    seams: Seams,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("kind", &self.kind).finish_non_exhaustive()
    }
}

impl Store {
    /// Bundle one backend that implements every store trait, opened with `seams`.
    pub fn from_backend<B>(kind: StoreKind, backend: B, seams: Seams) -> Self
    where
        B: SessionStore + RunStore + EffectLedger + RecordStore + TaskStore + MissionStore + MemoryItemStore + 'static,
    {
        let backend = Arc::new(backend);
        Store {
            kind,
            sessions: backend.clone(),
            runs: backend.clone(),
            effects: backend.clone(),
            records: backend.clone(),
            tasks: backend.clone(),
            missions: backend.clone(),
            memory: backend,
            shared: None,
            seams,
        }
    }

    /// This store with the parts several servers share through it.
    pub fn sharing(mut self, shared: Shared) -> Self {
        self.shared = Some(Arc::new(shared));
        self
    }

    /// The clock and id generator this store was opened with, for the runtime above it.
    pub fn seams(&self) -> &Seams {
        &self.seams
    }
}

/// Open the project's store: `file` under `<project_root>/.polpo/`, `sqlite` at
/// `<project_root>/.polpo/polpo.db`, `postgres` at `database_url`. SQL backends apply pending
/// migrations before returning. Times and new ids come from `seams` (a plain clock: UUID v7
/// ids).
pub async fn open_store(
    kind: StoreKind,
    project_root: &Path,
    database_url: Option<&str>,
    seams: impl Into<Seams>,
) -> Result<Store, StoreError> {
    let data_dir = project_root.join(".polpo");
    let seams = seams.into();
    Ok(match kind {
        StoreKind::File => Store::from_backend(kind, FileStore::open(&data_dir, seams.clone()).await?, seams),
        StoreKind::Sqlite => {
            Store::from_backend(kind, SqliteStore::open(&data_dir.join("polpo.db"), seams.clone()).await?, seams)
        }
        StoreKind::Postgres => {
            let url = database_url.ok_or_else(|| {
                StoreError::Config("postgres storage needs DATABASE_URL or settings.databaseUrl".into())
            })?;
            let pg = PgStore::connect(url, seams.clone()).await?;
            let shared = pg.shared();
            Store::from_backend(kind, pg, seams).sharing(shared)
        }
    })
}
