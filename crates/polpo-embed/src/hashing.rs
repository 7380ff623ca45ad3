//! A deterministic embedder with no model: each lower-cased word is hashed into one of a fixed
//! number of buckets. Texts that share words get similar vectors; paraphrases do not. It exists
//! for tests that exercise the vector path (storage, identity, fusion) without model weights.

use crate::{EmbedError, Embedder, EmbeddingIdentity, normalize};

/// Bag-of-hashed-words vectors, stable across runs and machines (FNV-1a, no random seed).
pub struct HashingEmbedder {
    identity: EmbeddingIdentity,
}

impl HashingEmbedder {
    /// An embedder making vectors of `dimensions` buckets.
    pub fn new(dimensions: usize) -> Self {
        let identity = EmbeddingIdentity {
            provider: "hashing".into(),
            model: "fnv1a-words".into(),
            dimensions: dimensions.max(1),
            revision: "1".into(),
        };
        HashingEmbedder { identity }
    }

    fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.identity.dimensions];
        for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            let hash = word
                .to_lowercase()
                .bytes()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
            let bucket = (hash % self.identity.dimensions as u64) as usize;
            v[bucket] += 1.0;
        }
        normalize(&mut v);
        v
    }
}

#[async_trait::async_trait]
impl Embedder for HashingEmbedder {
    fn identity(&self) -> &EmbeddingIdentity {
        &self.identity
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosine;

    #[tokio::test]
    async fn shared_words_are_closer_than_unrelated_ones() {
        let e = HashingEmbedder::new(256);
        let texts = ["the cat sat on the mat", "a cat on a mat", "quarterly revenue report"].map(String::from);
        let v = e.embed(&texts).await.unwrap_or_default();
        assert_eq!(v.len(), 3);
        assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]));
        assert!((cosine(&v[0], &v[0]) - 1.0).abs() < 1e-5);
    }
}
