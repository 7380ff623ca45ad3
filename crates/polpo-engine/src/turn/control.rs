//! What a run adds to the turn loop from outside: steering at safe boundaries and, for a
//! durable run, the termination gate's checkpointed state. The loop and the gate read it; the
//! run manager implements it.

use crate::hooks::gate::GateCheckpoint;
use futures::future::BoxFuture;
use polpo_core::message::Message;

/// What a durable run adds to the loop: messages that arrive while it works (steering). The
/// loop asks only at safe boundaries — before a model call, and when it would finish — so a
/// tool call in progress is never interrupted.
///
/// A durable run also keeps the termination gate's state (budgets consumed, the validation of
/// the latest candidate) in its checkpoint, so a resume continues the same validation; the
/// defaults are for runs that keep nothing.
pub trait RunControl: Send + Sync {
    /// `steer` messages to add before the next model call, oldest first.
    fn take_steering(&self) -> Vec<Message>;
    /// Messages that start another turn when the run would otherwise finish: `follow_up`s,
    /// and steering that arrived during the last model call.
    fn take_follow_ups(&self) -> Vec<Message>;
    /// Model calls the run made before this invocation began (a resumed run goes on counting,
    /// so hook idempotency keys and gate execution ids stay the same across a restart).
    fn model_calls_before(&self) -> u32 {
        0
    }
    /// The gate state the run's checkpoint holds (a resumed run), if any.
    fn gate_checkpoint(&self) -> Option<GateCheckpoint> {
        None
    }
    /// Keep `gate` for the next checkpoint.
    fn keep_gate(&self, _gate: &GateCheckpoint) {}
    /// Wait until a checkpoint with everything kept so far is durable.
    fn commit(&self) -> BoxFuture<'_, Result<(), CheckpointError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Why a checkpoint the run waited for was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointError {
    /// The state is larger than the store accepts.
    TooLarge(String),
    /// The store refused or failed the write.
    Failed(String),
}
