//! Why an orchestrator operation was refused, each with a stable code.

use polpo_core::tasks::{MissionTransitionError, TransitionError};
use polpo_store::StoreError;

/// Why a task or mission operation failed.
#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    /// No task or mission with that id.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed (unknown agent, bad plan …).
    #[error("{0}")]
    Invalid(String),
    /// The task state machine refused the event.
    #[error("{0}")]
    Transition(#[from] TransitionError),
    /// The mission state machine refused the event.
    #[error("{0}")]
    MissionTransition(#[from] MissionTransitionError),
    /// The store failed or refused.
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl OrchestratorError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not_found",
            Self::Invalid(_) => "invalid_input",
            Self::Transition(e) => e.code(),
            Self::MissionTransition(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}
