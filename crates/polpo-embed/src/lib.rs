//! Text embeddings for semantic memory retrieval.
//!
//! Memory stores vectors as derived data next to the items they were made from. A vector is only
//! meaningful next to vectors made by the same model, so every [`Embedder`] names its
//! [`EmbeddingIdentity`] and stores keep it with each vector: a query is compared only with vectors
//! of the identity that embedded it, and a change of model means a reindex, never a silent mix.
//!
//! Providers: [`OpenAiEmbedder`] (any OpenAI-wire `/embeddings` server), the offline
//! all-MiniLM-L6-v2 model run by candle ([`local`], cargo feature `local`), and
//! [`HashingEmbedder`] for tests. [`embedder_from_config`] picks one from configuration.

mod config;
mod hashing;
pub mod local;
pub mod openai;

pub use config::{ConfigError, EmbedderEnv, EmbeddingConfig, embedder_from_config};
pub use hashing::HashingEmbedder;
#[cfg(feature = "local")]
pub use local::LocalEmbedder;
pub use openai::{OpenAiEmbedder, OpenAiSettings};

pub use polpo_core::embedding::{EmbeddingIdentity, cosine, normalize};

/// Why texts could not be embedded. Memory search falls back to lexical retrieval on
/// [`EmbedError::Unavailable`] and stops on [`EmbedError::Aborted`].
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The provider could not be reached or answered with an error status.
    #[error("embedding provider unavailable: {0}")]
    Unavailable(String),
    /// The provider answered something that is not one vector of the right size per text.
    #[error("invalid embedding response: {0}")]
    Invalid(String),
    /// The input was over the provider's or Polpo's bounds.
    #[error("embedding input too large: {0}")]
    TooLarge(String),
    /// The request that needed the embedding was aborted.
    #[error("embedding aborted")]
    Aborted,
}

impl EmbedError {
    /// The stable error code clients and events see.
    pub fn code(&self) -> &'static str {
        match self {
            EmbedError::Unavailable(_) => "embedding_unavailable",
            EmbedError::Invalid(_) => "embedding_invalid",
            EmbedError::TooLarge(_) => "embedding_input_too_large",
            EmbedError::Aborted => "embedding_aborted",
        }
    }
}

/// Turns texts into vectors of [`EmbeddingIdentity::dimensions`] floats, L2-normalised, one per text
/// and in the same order.
#[async_trait::async_trait]
pub trait Embedder: Send + Sync {
    /// The identity stored with every vector this embedder makes.
    fn identity(&self) -> &EmbeddingIdentity;
    /// Embed a batch of texts.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}
