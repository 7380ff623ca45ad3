//! The OpenAI embeddings wire: `POST {base}/embeddings` with `model`, an `input` array and
//! `encoding_format: float`. Spoken by OpenAI and by most servers that copy its API (vLLM,
//! Ollama, LM Studio, llama.cpp, Together…).
//!
//! Memory search waits on this call, and falls back to lexical retrieval when it fails, so a
//! call is one attempt under a total timeout, never retried: a quick failure serves the user
//! better than a search that hangs through backoffs. Every answer is checked before use, since a
//! vector of the wrong length or order would silently rank the wrong memories.

use crate::{EmbedError, Embedder, EmbeddingIdentity, normalize};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde_json::{Value, json};
use std::fmt;
use std::time::Duration;

/// Largest text sent, in bytes. OpenAI's models read at most 8,191 tokens (≈ 32 KB of English);
/// a longer text is refused before any request rather than cut by the server.
pub const MAX_TEXT_BYTES: usize = 32 * 1024;
/// Most bytes of text in one request; larger batches are split.
const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Largest error body read, to quote the provider's message.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// Upper bound on the JSON text of one float (`-0.012345678901234567,`) when bounding a body.
const MAX_FLOAT_JSON_BYTES: usize = 32;

/// OpenAI's embedding models: native length, and whether `dimensions` may shorten it.
const OPENAI_MODELS: &[(&str, usize, bool)] = &[
    ("text-embedding-3-small", 1536, true),
    ("text-embedding-3-large", 3072, true),
    ("text-embedding-ada-002", 1536, false),
];

/// The native vector length of one of OpenAI's embedding models, and whether the API accepts a
/// `dimensions` parameter for it; `None` for models this crate does not know.
pub fn known_openai_model(model: &str) -> Option<(usize, bool)> {
    OPENAI_MODELS.iter().find(|(name, ..)| *name == model).map(|&(_, native, shortens)| (native, shortens))
}

/// How to reach an OpenAI-wire embeddings endpoint.
#[derive(Clone)]
pub struct OpenAiSettings {
    /// Base URL including the API version, as `OPENAI_BASE_URL` takes it (`https://api.openai.com/v1`).
    pub base_url: String,
    /// Model name as the server knows it.
    pub model: String,
    /// Bearer token; `None` for keyless local servers. Never shown by `Debug`.
    pub api_key: Option<String>,
    /// Length of every vector. Sent as the request's `dimensions` only when it shortens the
    /// native length of a known model; otherwise every answer must already have this length.
    pub dimensions: usize,
    /// Total time one request may take, connection included.
    pub timeout: Duration,
    /// Most texts in one request; longer lists are sent in several requests, in order.
    pub max_batch: usize,
}

impl OpenAiSettings {
    /// Settings with a 30-second timeout and batches of at most 128 texts.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>, dimensions: usize) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dimensions,
            timeout: Duration::from_secs(30),
            max_batch: 128,
        }
    }
}

impl fmt::Debug for OpenAiSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("dimensions", &self.dimensions)
            .field("timeout", &self.timeout)
            .field("max_batch", &self.max_batch)
            .finish()
    }
}

/// Embeddings from an OpenAI-wire server.
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    auth: Option<HeaderValue>,
    /// Kept only to cut it out of error text a server might echo it in.
    key: Option<String>,
    /// The `dimensions` request parameter, when it shortens a known model's vectors.
    shorten_to: Option<usize>,
    settings: OpenAiSettings,
    identity: EmbeddingIdentity,
}

impl OpenAiEmbedder {
    /// An embedder for `settings`. Fails on a key that cannot go in a header or a client that
    /// cannot be built (no TLS provider); never contacts the server.
    pub fn new(settings: OpenAiSettings) -> Result<Self, EmbedError> {
        polpo_llm::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| EmbedError::Unavailable(format!("cannot build an HTTP client: {}", e.without_url())))?;
        let auth = match &settings.api_key {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    EmbedError::Unavailable("the API key contains characters not allowed in a header".into())
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let shorten_to = known_openai_model(&settings.model)
            .filter(|&(native, shortens)| shortens && settings.dimensions != native)
            .map(|_| settings.dimensions);
        let identity = EmbeddingIdentity {
            provider: "openai".into(),
            model: settings.model.clone(),
            dimensions: settings.dimensions,
            revision: "1".into(),
        };
        Ok(Self {
            client,
            url: format!("{}/embeddings", settings.base_url.trim_end_matches('/')),
            auth,
            key: settings.api_key.clone().filter(|k| !k.is_empty()),
            shorten_to,
            settings,
            identity,
        })
    }

    /// One request for `texts` (already within the batch bounds).
    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut body = json!({"model": self.settings.model, "input": texts, "encoding_format": "float"});
        if let Some(dimensions) = self.shorten_to {
            body["dimensions"] = json!(dimensions);
        }
        let mut request = self
            .client
            .post(&self.url)
            .timeout(self.settings.timeout)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let mut response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            let body = read_bounded(&mut response, MAX_ERROR_BODY_BYTES, true).await.unwrap_or_default();
            let message = self.redact(&polpo_llm::provider_message(&String::from_utf8_lossy(&body)));
            let sentence = format!("provider answered HTTP {}: {message}", status.as_u16());
            return Err(if status.as_u16() == 400 && over_length(&message) {
                EmbedError::TooLarge(sentence)
            } else {
                EmbedError::Unavailable(sentence)
            });
        }
        let limit = texts.len() * (self.settings.dimensions * MAX_FLOAT_JSON_BYTES + 1024) + 64 * 1024;
        let body = read_bounded(&mut response, limit, false).await.map_err(|e| match e {
            ReadError::Transport(e) => self.transport_error(&e),
            ReadError::TooLong => EmbedError::Invalid(format!("response larger than {limit} bytes")),
        })?;
        let body: Value =
            serde_json::from_slice(&body).map_err(|e| EmbedError::Invalid(format!("response is not JSON: {e}")))?;
        vectors(&body, texts.len(), self.settings.dimensions)
    }

    fn transport_error(&self, e: &reqwest::Error) -> EmbedError {
        if e.is_timeout() {
            return EmbedError::Unavailable(format!(
                "no answer from {} within {} ms",
                self.url,
                self.settings.timeout.as_millis()
            ));
        }
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        EmbedError::Unavailable(self.redact(&text))
    }

    fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(key) => text.replace(key.as_str(), "[redacted]"),
            None => text.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl Embedder for OpenAiEmbedder {
    fn identity(&self) -> &EmbeddingIdentity {
        &self.identity
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if let Some((i, text)) = texts.iter().enumerate().find(|(_, t)| t.len() > MAX_TEXT_BYTES) {
            return Err(EmbedError::TooLarge(format!(
                "text {i} has {} bytes, more than the {MAX_TEXT_BYTES} an embedding request takes",
                text.len()
            )));
        }
        let mut out = Vec::with_capacity(texts.len());
        for batch in batches(texts, self.settings.max_batch.max(1), MAX_BATCH_BYTES) {
            out.extend(self.embed_batch(batch).await?);
        }
        Ok(out)
    }
}

/// Consecutive slices of `texts` of at most `max_count` texts and, unless a text is alone,
/// `max_bytes` bytes.
fn batches(texts: &[String], max_count: usize, max_bytes: usize) -> Vec<&[String]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, text) in texts.iter().enumerate() {
        let full = i - start == max_count || (i > start && bytes + text.len() > max_bytes);
        if full {
            out.push(&texts[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += text.len();
    }
    if start < texts.len() {
        out.push(&texts[start..]);
    }
    out
}

/// The vectors of an embeddings response, in input order, normalised; `Invalid` unless there is
/// exactly one finite vector of `dimensions` numbers for each of the `count` inputs.
fn vectors(body: &Value, count: usize, dimensions: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let invalid = |why: String| Err(EmbedError::Invalid(why));
    let Some(data) = body["data"].as_array() else {
        return invalid("no `data` array".into());
    };
    if data.len() != count {
        return invalid(format!("{} vectors for {count} texts", data.len()));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; count];
    for item in data {
        let Some(index) = item["index"].as_u64().map(|i| i as usize).filter(|&i| i < count) else {
            return invalid(format!("index {} is not one of the {count} inputs", item["index"]));
        };
        if out[index].is_some() {
            return invalid(format!("index {index} appears twice"));
        }
        let Some(numbers) = item["embedding"].as_array() else {
            return invalid(format!("vector {index} is not an array of numbers"));
        };
        if numbers.len() != dimensions {
            return invalid(format!("vector {index} has {} numbers, expected {dimensions}", numbers.len()));
        }
        let mut vector = Vec::with_capacity(dimensions);
        for n in numbers {
            match n.as_f64().map(|x| x as f32).filter(|x| x.is_finite()) {
                Some(x) => vector.push(x),
                None => return invalid(format!("vector {index} holds {n}, not a finite number")),
            }
        }
        normalize(&mut vector);
        out[index] = Some(vector);
    }
    // Every slot is filled: `count` items, each at a distinct index below `count`.
    Ok(out.into_iter().flatten().collect())
}

/// True when a provider's 400 says the input is over the model's length.
fn over_length(message: &str) -> bool {
    let text = message.to_ascii_lowercase();
    ["maximum context length", "too many tokens", "too long", "maximum input length"].iter().any(|n| text.contains(n))
}

enum ReadError {
    Transport(reqwest::Error),
    TooLong,
}

/// The body, failing once it passes `limit` bytes, or with `truncate` just its first `limit`.
async fn read_bounded(response: &mut reqwest::Response, limit: usize, truncate: bool) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Transport)? {
        if body.len() + chunk.len() > limit {
            if truncate {
                body.extend_from_slice(&chunk[..limit - body.len()]);
                return Ok(body);
            }
            return Err(ReadError::TooLong);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn batches_respect_count_and_bytes_and_keep_order() {
        let texts: Vec<String> = (0..7).map(|i| "x".repeat(i + 1)).collect();
        let sizes: Vec<usize> = batches(&texts, 3, usize::MAX).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let by_bytes: Vec<usize> = batches(&texts, 100, 6).iter().map(|b| b.len()).collect();
        assert_eq!(by_bytes, [3, 1, 1, 1, 1], "a text over the byte bound still goes, alone");
        assert_eq!(batches(&texts, 3, 10).concat(), texts);
        assert!(batches(&[], 3, 10).is_empty());
    }

    #[test]
    fn answers_are_checked_and_put_in_input_order() {
        let body = json!({"data": [
            {"index": 1, "embedding": [0.0, 2.0]},
            {"index": 0, "embedding": [3.0, 4.0]},
        ]});
        let v = vectors(&body, 2, 2).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        for (bad, why) in [
            (json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}]}), "vectors for 2"),
            (json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 0.0]}]}), "1 numbers"),
            (json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": [1.0, 0.0]}]}), "twice"),
            (
                json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 2, "embedding": [1.0, 0.0]}]}),
                "index 2",
            ),
            (
                json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [1e39, 0.0]}]}),
                "finite",
            ),
            (json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": "AAAA"}]}), "array"),
            (json!({"object": "list"}), "no `data`"),
        ] {
            let e = vectors(&bad, 2, 2).unwrap_err();
            assert_eq!(e.code(), "embedding_invalid");
            assert!(e.to_string().contains(why), "{e} should say {why}");
        }
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let mut s = OpenAiSettings::new("http://x/v1", "m", 4);
        s.api_key = Some("sk-secret".into());
        assert!(!format!("{s:?}").contains("sk-secret"));
    }
}
