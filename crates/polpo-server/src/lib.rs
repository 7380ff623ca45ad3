//! The HTTP face of Polpo: OpenAI-compatible `/v1/chat/completions`, the REST API under
//! `/api/v1`, live events over SSE, and authentication.

pub mod auth;
pub mod chunks;
pub mod wire;
