//! Test support: scripted fake LLM servers that speak the real OpenAI and Anthropic wire
//! formats over real HTTP, and a fake OpenAI embeddings server ([`FakeEmbeddings`]). The only
//! way a Polpo test replaces a model.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use polpo_testkit::{FakeLlm, Turn};
//! use serde_json::json;
//! let fake = FakeLlm::start([
//!     Turn::tool_calls(vec![("read", json!({"path": "a.txt"}))]),
//!     Turn::text("The file says hello."),
//! ])
//! .await?;
//! // point a provider at fake.base_url() (OpenAI) or fake.anthropic_base_url() (Anthropic)
//! assert_eq!(fake.requests().len(), 0);
//! # Ok(()) }
//! ```

mod anthropic;
mod embeddings;
pub mod mcp_demo;
pub mod mcp_sse;
mod openai;
pub mod pg;
mod project;
mod render;
pub mod review_flow;
mod script;
mod server;
pub mod site;
pub mod strict;

pub use embeddings::{EmbeddingsReply, FAKE_EMBEDDINGS_KEY, FakeEmbeddings};
pub use project::ProjectFixture;
pub use script::{Interruption, ScriptedError, Turn};
pub use server::{EnvLookup, FakeLlm, Options, RecordedRequest};
