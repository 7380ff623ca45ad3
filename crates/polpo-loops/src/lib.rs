//! The Project Loop executor: a graph interpreter over the loops `polpo-core` parses and
//! validates. Agent steps run through the engine's one invocation path
//! (`RunManager::invoke`, surface `loop`, the loop and step policy layers, `LoopContext` for
//! hook scopes); tool steps call the agent's tools through the engine's tool gates under the
//! same policy, without a model; human steps suspend the run until a person answers
//! ([`HumanDesk`]); `parallel` runs branches on copies of the context and joins `all`, `any`
//! or N of them; `while` repeats a body at most `maxIterations` times. Back-edges are allowed
//! and bounded by the run's step budget. Everything the run does is a [`TraceEvent`].
//!
//! A run's state is plain serde data ([`LoopState`]: context bag, frontier, while counters,
//! steps executed), stored as a [`LoopRunRecord`] (collection `loop_runs`) when the run starts,
//! after every top-level step and when it ends; a server that starts resumes the runs a crash
//! left running from their last checkpoint. A run waiting for a person holds no lease, and its
//! answer, given to any server on the store, resumes it once ([`LoopExecutor::answer_human`]).

mod answers;
mod approvals;
mod context;
mod durable;
mod error;
mod executor;
mod human;
mod reconcile;
mod record;
mod trace;

pub use approvals::{Decision, StoredApproval};
pub use context::REQUEST;
pub use durable::{LoopRunPage, StoredLoopRun};
pub use error::LoopError;
pub use executor::{DEFAULT_STEP_BUDGET, LoopExecutor, LoopFinished, LoopOptions, LoopRequest, MAX_PROJECTION_BYTES};
pub use human::HumanDesk;
pub use reconcile::EffectDecision;
pub use record::{
    APPROVALS, AgentRun, ApprovalRecord, ApprovalStatus, ApprovalSubject, ApprovedGate, LOOP_RUNS, LoopGateRequest,
    LoopRunRecord, LoopRunStatus, LoopState, PendingHuman, RunFailure, StoredRequest,
};
pub use trace::{TraceEvent, TraceKind, TraceSink, TraceStatus};
