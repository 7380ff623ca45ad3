//! What the runtime reports, and to whom.
//!
//! - `sink`: the [`RunEvent`]s one run emits while it works, to whatever sink its caller
//!   gave (an SSE stream, a terminal, the run manager).
//! - [`bus`]: the runtime's live feed for observers (`GET /api/v1/events`), with ordered ids
//!   and exact resume.
//! - [`journal`]: the typed entries of a durable run's journal, serialised and parsed there
//!   and nowhere else; [`EventKind`] names every event of the journal and of the bus.

pub mod bus;
pub mod journal;
mod sink;

pub use journal::{EventKind, JournalEvent};
pub use sink::{EventSink, GateState, RunEvent};
