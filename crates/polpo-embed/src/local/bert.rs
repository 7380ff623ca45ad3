//! all-MiniLM-L6-v2 run by candle: WordPiece tokens → 6-layer BERT → mean of the token vectors
//! under the attention mask → unit length, exactly as sentence-transformers computes this
//! model's sentence embeddings, so its published similarity quality holds here.

use super::{LOCAL_DIMENSIONS, LOCAL_MODEL, LOCAL_REVISION};
use crate::{EmbedError, Embedder, EmbeddingIdentity, normalize};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use polpo_llm_local::LocalModelError;
use std::path::Path;
use std::sync::Arc;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Tokens read per text: the model was trained on 256 (its `max_seq_length`); a longer text is
/// embedded by its beginning, as sentence-transformers does.
const MAX_TOKENS: usize = 256;
/// Texts run through the model at once: bounds the activations' memory on long lists.
const CHUNK: usize = 16;

/// The offline embedder. Loading reads 90 MB of weights; embedding runs on a blocking thread so
/// it never stalls the async runtime.
pub struct LocalEmbedder {
    inner: Arc<Inner>,
    identity: EmbeddingIdentity,
}

struct Inner {
    model: BertModel,
    tokenizer: Tokenizer,
}

impl LocalEmbedder {
    /// Load the model from `dir`, the folder [`super::install`] or [`super::locate`] returned.
    pub fn load(dir: &Path) -> Result<Self, LocalModelError> {
        let failed = |detail: String| LocalModelError::LoadFailed { path: dir.to_path_buf(), detail };
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path)
                .map_err(|e| LocalModelError::Io { context: format!("reading {}", path.display()), source: e })
        };
        let config: Config =
            serde_json::from_slice(&read("config.json")?).map_err(|e| failed(format!("config.json: {e}")))?;
        if config.hidden_size != LOCAL_DIMENSIONS {
            return Err(failed(format!("config.json: hidden size {} is not {LOCAL_DIMENSIONS}", config.hidden_size)));
        }
        let mut tokenizer =
            Tokenizer::from_bytes(read("tokenizer.json")?).map_err(|e| failed(format!("tokenizer.json: {e}")))?;
        tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..Default::default() }));
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))
            .map_err(|e| failed(format!("tokenizer.json: {e}")))?;
        let weights = VarBuilder::from_buffered_safetensors(read("model.safetensors")?, DType::F32, &Device::Cpu)
            .map_err(|e| failed(format!("model.safetensors: {e}")))?;
        let model = BertModel::load(weights, &config).map_err(|e| failed(format!("model.safetensors: {e}")))?;
        let identity = EmbeddingIdentity {
            provider: "local".into(),
            model: LOCAL_MODEL.into(),
            dimensions: LOCAL_DIMENSIONS,
            revision: LOCAL_REVISION.into(),
        };
        Ok(Self { inner: Arc::new(Inner { model, tokenizer }), identity })
    }
}

impl Inner {
    /// Sentence vectors of `texts`, normalised.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(CHUNK) {
            out.extend(self.embed_chunk(chunk)?);
        }
        Ok(out)
    }

    fn embed_chunk(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| format!("tokenizing: {e}"))?;
        let rows = |pick: fn(&tokenizers::Encoding) -> &[u32]| -> Result<Tensor, String> {
            let rows = encodings
                .iter()
                .map(|e| Tensor::new(pick(e), &Device::Cpu))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            Tensor::stack(&rows, 0).map_err(|e| e.to_string())
        };
        let ids = rows(tokenizers::Encoding::get_ids)?;
        let types = rows(tokenizers::Encoding::get_type_ids)?;
        let mask = rows(tokenizers::Encoding::get_attention_mask)?;
        let pooled = (|| {
            let hidden = self.model.forward(&ids, &types, Some(&mask))?;
            // Mean pooling: padding positions (mask 0) neither add to the sum nor to the count.
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            // Never zero: every encoding holds at least [CLS] and [SEP].
            let counts = mask.sum(1)?;
            summed.broadcast_div(&counts)?.to_vec2::<f32>()
        })()
        .map_err(|e: candle_core::Error| format!("running the model: {e}"))?;
        Ok(pooled
            .into_iter()
            .map(|mut v| {
                normalize(&mut v);
                v
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl Embedder for LocalEmbedder {
    fn identity(&self) -> &EmbeddingIdentity {
        &self.identity
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || inner.embed(&texts))
            .await
            .map_err(|e| EmbedError::Unavailable(format!("the local embedding task failed: {e}")))?
            .map_err(|e| EmbedError::Unavailable(format!("local embedding model: {e}")))
    }
}
