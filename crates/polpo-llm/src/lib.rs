//! Model providers for Polpo.
//!
//! One seam, [`ModelProvider`], between the runtime and every model: a single streaming call
//! that yields text, reasoning and tool-call deltas, complete tool calls, usage and a finish
//! reason. Dropping the stream cancels the call. Providers speak one wire each (OpenAI chat
//! completions, Anthropic Messages); model profiles and fallbacks are resolved above them.
//!
//! How the runtime gets a model for an agent:
//!
//! ```no_run
//! # fn demo(profiles: &polpo_core::model::ModelProfiles, agent_model: &polpo_core::model::ModelSelection) -> Result<(), polpo_llm::ResolveError> {
//! use polpo_llm::{ModelProvider, Providers};
//! use std::collections::BTreeMap;
//! // settings.providers mapped to `ProviderConfig`s; built-ins (openai, anthropic, groq…) fill the rest.
//! let providers = Providers::from_process_env(BTreeMap::new());
//! // profiles → ordered chain of `provider/model` ids → one provider that falls back in order.
//! let model = providers.resolve(agent_model, profiles, None)?;
//! println!("will try {:?}", model.ids());
//! # Ok(()) }
//! ```
//!
//! Wire-level details live in one module each: [`OpenAiProvider`] and [`AnthropicProvider`];
//! the fallback rule (only before the first content delta) is documented on
//! [`FallbackProvider`].

mod anthropic;
mod config;
mod decode;
mod fallback;
mod http;
mod openai;
mod registry;
mod sse;
mod wire_tools;

pub use anthropic::AnthropicProvider;
pub use config::{ApiKey, HttpPolicy, ProviderConfig, WireApi, builtin_provider_names};
pub use fallback::{FallbackProvider, Target, falls_back};
pub use http::provider_message;
pub use openai::OpenAiProvider;
pub use registry::{EnvLookup, Providers, ResolveError, split_model_id};
pub use sse::{SseDecoder, SseEvent};

use futures::Stream;
use polpo_core::message::{FinishReason, Message, ToolCall, Usage};
use polpo_core::tool::ToolSpec;
use std::pin::Pin;
use std::sync::Arc;

/// Which tool, if any, the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool, by name.
    Tool(String),
}

/// One model call, provider-neutral.
#[derive(Debug, Clone, Default)]
pub struct ModelRequest {
    /// The provider's own model name (the part after `provider/`).
    pub model: String,
    /// The conversation, system messages first. Shared, not owned: the runtime sends the whole
    /// history on every model call, and deep-copying it each time grew the cost of a turn with
    /// the length of the session. Providers only read it; a caller that changes a request's
    /// messages does so with `Arc::make_mut`, which copies only if the list is still shared.
    pub messages: Arc<Vec<Message>>,
    /// Tools the model may call (already filtered by policy). Shared, not owned: the runtime
    /// builds this list for every model call, and deep-cloning the schemas each time was most
    /// of its own cost per turn.
    pub tools: Vec<Arc<ToolSpec>>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// OpenAI-style `response_format`, passed to providers that support it natively.
    pub response_format: Option<serde_json::Value>,
    /// Reasoning effort (`off|minimal|low|medium|high|xhigh`).
    pub reasoning: Option<String>,
    /// Cap on output tokens.
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
}

/// Something the model produced, in stream order.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// A piece of the visible answer.
    TextDelta(String),
    /// A piece of a reasoning summary (never sent back to the model).
    ReasoningDelta(String),
    /// A fragment of a tool call as it streams; `index` identifies the call within the turn.
    ToolCallDelta {
        /// Position of the call within this model turn.
        index: usize,
        /// Call id, present on the first fragment.
        id: Option<String>,
        /// Tool name, present on the first fragment.
        name: Option<String>,
        /// Next piece of the arguments JSON text.
        arguments: String,
    },
    /// A complete tool call, reassembled from its fragments.
    ToolCall(ToolCall),
    /// Token usage for this call.
    Usage(Usage),
    /// The model finished; always the last event of a successful stream.
    Finish(FinishReason),
}

/// The stream a provider returns. Dropping it cancels the call.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, LlmError>> + Send>>;

/// What kind of failure a model call met; decides retries and fallbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmErrorKind {
    /// 429 or provider rate limiting.
    RateLimited,
    /// The prompt does not fit the model's context window.
    ContextLengthExceeded,
    /// Bad or missing credentials (401/403).
    AuthFailed,
    /// 5xx, connection refused, reset, DNS: the provider is not answering.
    ProviderUnavailable,
    /// The provider filtered the content.
    ContentFiltered,
    /// The call took longer than its timeout.
    Timeout,
    /// The model id is not known to the provider or to the project.
    ModelNotFound,
    /// The request was rejected as malformed (400).
    InvalidRequest,
    /// The provider's answer could not be understood.
    InvalidResponse,
    /// The stream broke after content was already delivered.
    StreamInterrupted,
    /// No model of the chain can be called from here: its provider's API key is not set and no
    /// offline model stands in. Said before any request goes out, with the ways forward.
    NotConfigured,
}

impl LlmErrorKind {
    /// Stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::ContextLengthExceeded => "context_length_exceeded",
            Self::AuthFailed => "auth_failed",
            Self::ProviderUnavailable => "provider_unavailable",
            Self::ContentFiltered => "content_filtered",
            Self::Timeout => "model_timeout",
            Self::ModelNotFound => "model_not_found",
            Self::InvalidRequest => "invalid_request",
            Self::InvalidResponse => "invalid_response",
            Self::StreamInterrupted => "stream_interrupted",
            Self::NotConfigured => "provider_not_configured",
        }
    }
}

/// A failed model call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", kind.code())]
pub struct LlmError {
    /// Classification.
    pub kind: LlmErrorKind,
    /// Human sentence (never contains credentials).
    pub message: String,
    /// Provider's `Retry-After`, when given.
    pub retry_after: Option<std::time::Duration>,
}

impl LlmError {
    /// An error of `kind` with a sentence.
    pub fn new(kind: LlmErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), retry_after: None }
    }
}

/// A model behind one wire format.
#[async_trait::async_trait]
pub trait ModelProvider: Send + Sync {
    /// Start one model call. Errors before the first byte are returned here; errors later
    /// arrive in the stream.
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, LlmError>;
}

/// Install ring as the process-wide rustls crypto provider. reqwest is built without a
/// default provider (aws-lc-rs costs five times ring's compile time), so one must be installed
/// before the first HTTPS client exists. Idempotent; every provider constructor calls it, and
/// binaries may call it first thing in `main`.
pub fn install_crypto_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err means another provider was installed first, which serves just as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
