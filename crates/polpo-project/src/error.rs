//! Errors of project writes and migration. Each has a stable code (`conflict`,
//! `backup_exists`, …) that the CLI prints and the server maps to HTTP statuses.

use polpo_core::problem::Problem;
use std::path::PathBuf;

/// Something a write, create or migration could not do.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// A file system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done ("write", "rename", …).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The project does not load; these are its problems.
    #[error("the project has {} problem(s); run `polpo validate`", .0.len())]
    Invalid(Vec<Problem>),
    /// No agent with this id.
    #[error("agent `{0}` does not exist")]
    AgentNotFound(String),
    /// An agent with this id (or one equal after NFKC + lowercase) already exists.
    #[error("agent `{0}` already exists")]
    AgentExists(String),
    /// Not a usable id.
    #[error("invalid id `{id}`: {reason}")]
    InvalidId {
        /// The id.
        id: String,
        /// Why not.
        reason: String,
    },
    /// The files changed since the caller read them (a hand edit or another writer).
    /// Holds what changed (``agent `coder` ``, ``loop `triage` ``).
    #[error("{0} changed on disk since it was read; reload and retry")]
    Conflict(String),
    /// No loop with this id.
    #[error("loop `{0}` does not exist")]
    LoopNotFound(String),
    /// A loop with this id already exists.
    #[error("loop `{0}` already exists")]
    LoopExists(String),
    /// The loop is defined by `loops/<id>.ts`, which only its source changes.
    #[error("loop `{0}` is compiled from loops/{0}.ts; edit that file instead")]
    LoopReadOnly(String),
    /// Agent and team writes need the directory layout.
    #[error("the project uses a legacy aggregate file (agents.json, teams.json); run `polpo migrate` first")]
    LegacyLayout,
    /// `.polpo/` already exists where a new project was to be created.
    #[error("{0} already contains a .polpo/ folder")]
    ProjectExists(PathBuf),
    /// A migration backup from an earlier run exists.
    #[error("backup {0} already exists; a migration was already done, remove it to migrate again")]
    BackupExists(PathBuf),
    /// A file migration would write already exists.
    #[error("{0} already exists; refusing to overwrite it")]
    TargetExists(PathBuf),
    /// There is no legacy file to migrate.
    #[error("nothing to migrate: the project already uses the directory layout")]
    NothingToMigrate,
}

impl ProjectError {
    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Io { .. } => "io_error",
            Self::Invalid(_) => "invalid_project",
            Self::AgentNotFound(_) => "agent_not_found",
            Self::AgentExists(_) => "agent_exists",
            Self::InvalidId { .. } => "invalid_value",
            Self::Conflict(_) => "conflict",
            Self::LoopNotFound(_) => "loop_not_found",
            Self::LoopExists(_) => "loop_exists",
            Self::LoopReadOnly(_) => "loop_read_only",
            Self::LegacyLayout => "legacy_layout",
            Self::ProjectExists(_) => "project_exists",
            Self::BackupExists(_) => "backup_exists",
            Self::TargetExists(_) => "target_exists",
            Self::NothingToMigrate => "nothing_to_migrate",
        }
    }

    /// Wrap an I/O error with what was being done and where.
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { action, path, source }
    }
}
