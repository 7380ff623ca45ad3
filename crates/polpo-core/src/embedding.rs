//! What every embedding shares, whoever made it: the identity that says which vectors may be
//! compared, and the vector arithmetic of cosine similarity. Pure data and math, so the stores
//! that keep vectors need no embedding provider to read and rank them (`polpo-embed` makes them).

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
