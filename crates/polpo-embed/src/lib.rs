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

use serde::{Deserialize, Serialize};

/// Which model made a vector. Two vectors are comparable only when their identities are equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EmbeddingIdentity {
    /// The provider kind, e.g. `openai`, `local`, `hashing`.
    pub provider: String,
    /// The model name as the provider knows it.
    pub model: String,
    /// Length of every vector this identity makes.
    pub dimensions: usize,
    /// Weights revision (e.g. their sha256) or API revision: a new revision invalidates old vectors.
    pub revision: String,
}

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

/// Cosine similarity of two L2-normalised vectors (their dot product); 0 when the lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Scale a vector to unit length so that [`cosine`] is a dot product; a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}
