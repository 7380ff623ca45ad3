//! The HTTP face of Polpo: OpenAI-compatible `/v1/chat/completions`, the REST API under
//! `/api/v1`, live events over SSE, and authentication.
//!
//! [`app::router`] is the whole API over the shared [`state::AppState`]; [`serve`] binds it
//! safely (localhost only unless API keys are configured) and shuts it down gracefully.

// A streamed chat's task holds the provider's HTTP client future, deeper than the default
// limit lets rustc prove `Send`.
#![recursion_limit = "256"]

pub mod app;
pub mod auth;
pub mod chunks;
pub mod error;
pub mod guard;
pub mod hosts;
pub mod idempotency;
pub mod learning;
pub mod memory;
pub mod ratelimit;
pub mod routes;
pub mod serve;
pub mod sse;
pub mod state;
pub mod wire;

pub use app::router;
pub use serve::{Bind, bind_address};
pub use state::AppState;
