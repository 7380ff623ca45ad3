//! The Polpo runtime: runs an agent's turn loop (model → tools → model …) under tool policy
//! and hooks, and reports everything the run does as [`RunEvent`]s.
//!
//! Every surface asks for an agent run the same way: it builds a [`ChatInput`] and calls
//! [`runs::RunManager::invoke`], which prepares it ([`Runtime::prepare`]), decides how the
//! answer is delivered ([`DeliveryMode`]) and hands back its progress. The loop itself
//! ([`turn::run_turns`]) knows nothing about HTTP, files or stores: it takes an
//! [`Invocation`] (everything resolved for one request) and a conversation, and emits events
//! to a sink.
//!
//! Rooms: `request` and `loaded` (what comes in), `runtime` (preparation), `invocation`
//! (one resolved request), `turn` (the loop), `tools` (the tool set, progressive loading,
//! execution), `hooks` (handlers, `turn:stop` and the termination gate), `runs` (delivery,
//! durable runs), `events` (the sink, the bus, the typed journal).

// A spawned invocation holds the provider's HTTP client future, deeper than the default limit
// lets rustc prove `Send`.
#![recursion_limit = "256"]

pub mod approvals;
pub mod committed;
pub mod error;
pub mod events;
pub mod execution_route;
pub mod hooks;
pub mod interaction;
pub mod invocation;
pub mod loaded;
pub mod meter;
mod reasoning;
pub mod request;
pub mod routing;
pub mod runs;
pub mod runtime;
pub mod structured;
pub mod tools;
pub mod turn;

pub use committed::{CommittedTurn, TurnObserver};
pub use error::EngineError;
pub use events::bus::{BusEvent, Delivery, EventBus, EventsLost, Subscription};
pub use events::{EventSink, GateState, RunEvent};
pub use hooks::LoopContext;
pub use invocation::Invocation;
pub use loaded::Loaded;
/// `ChatError::Skill` carries it: why a request's `polpo.skills` was refused.
pub use polpo_skills::ActivationError;
pub use request::{ChatError, ChatInput, ChatOutput, DeliveryMode, Failure, Identity, RunAnswer, Surface};
pub use runtime::{PreparedChat, Runtime};
pub use turn::{RunControl, RunOutcome, run_turns, run_turns_controlled};
