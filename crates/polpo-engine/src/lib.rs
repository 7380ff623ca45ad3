//! The Polpo runtime: runs an agent's turn loop (model → tools → model …) under tool policy
//! and hooks, and reports everything the run does as [`RunEvent`]s.
//!
//! The loop itself ([`turn::run_turns`]) knows nothing about HTTP, files or stores: it takes
//! an [`Invocation`] (everything resolved for one request) and a conversation, and emits
//! events to a sink. The server, the CLI and durable runs are callers that decide where the
//! events go (an SSE stream, a terminal, a journal).

pub mod bus;
pub mod error;
pub mod events;
pub mod hooks;
pub mod interaction;
pub mod invocation;
pub mod meter;
mod reasoning;
pub mod routing;
pub mod runs;
pub mod runtime;
pub mod runtime_tools;
pub mod structured;
pub mod tool_exec;
pub mod tool_loading;
pub mod turn;

pub use bus::{BusEvent, Delivery, EventBus, EventsLost, Subscription};
pub use error::EngineError;
pub use events::{EventSink, GateState, RunEvent};
pub use invocation::Invocation;
pub use turn::{RunControl, RunOutcome, run_turns, run_turns_controlled};
pub use runtime::{ChatError, ChatInput, ChatOutput, Loaded, PreparedChat, Runtime};
pub use hooks::LoopContext;
