//! Choosing an embedder from configuration: `{provider, model, baseUrl, apiKeyEnv, dimensions}`.
//!
//! Nothing is chosen silently: the provider is named, a remote model is named, a vector length
//! that cannot be known is asked for, and a field the chosen provider would ignore is an error
//! rather than a surprise. Every error carries a stable code and the JSON pointer of the field
//! (relative to this object; the caller prefixes where the object sits in its file).

use crate::local::{LOCAL_DIMENSIONS, LOCAL_MODEL};
use crate::openai::{OpenAiEmbedder, OpenAiSettings, known_openai_model};
use crate::{Embedder, HashingEmbedder};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// Longest vector accepted from configuration; the largest real models make 4,096.
const MAX_DIMENSIONS: usize = 16_384;
/// Vector length of the hashing embedder when none is configured.
const HASHING_DEFAULT_DIMENSIONS: usize = 256;

/// Which embedder to build, as written in a project's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// `openai` (any OpenAI-wire `/embeddings` server), `local` (the offline model, in builds
    /// with the `local` feature) or `hashing` (deterministic, no model: for tests and demos).
    pub provider: String,
    /// The model: required for `openai`; `all-minilm-l6-v2` (the default) for `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `openai` only: base URL with the API version (`http://127.0.0.1:11434/v1`). Default:
    /// `OPENAI_BASE_URL`, else `https://api.openai.com/v1`, like the `openai` model provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// `openai` only: the environment variable holding the API key. Default: `OPENAI_API_KEY`
    /// when `baseUrl` is not set, none (a keyless local server) when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Vector length: needed for `openai` models other than OpenAI's own; shortens
    /// `text-embedding-3-*`; must be 384 for `local` if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
}

/// A configuration that cannot make an embedder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} at {pointer}: {message}")]
pub struct ConfigError {
    /// Stable code: `embedding_provider_unknown`, `feature_unavailable`,
    /// `embedding_model_missing`, `embedding_model_unknown`, `embedding_dimensions_missing`,
    /// `embedding_dimensions_invalid`, `embedding_base_url_invalid`, `embedding_api_key_missing`,
    /// `embedding_api_key_invalid`,
    /// `embedding_field_unsupported`, or a local model's code (`local_model_not_installed`, …).
    pub code: &'static str,
    /// JSON pointer of the field at fault within the embedding configuration (`/dimensions`).
    pub pointer: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

impl ConfigError {
    fn new(code: &'static str, pointer: &'static str, message: impl Into<String>) -> Self {
        Self { code, pointer, message: message.into() }
    }
}

/// Where `embedder_from_config` looks things up: the environment (API keys, `OPENAI_BASE_URL`,
/// `POLPO_EMBEDDING_MODEL`, `POLPO_MODELS_DIR`) and the folder of installed models. Passed in,
/// so tests and servers never depend on the process environment by accident.
pub struct EmbedderEnv<'a> {
    /// Reads an environment variable.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Folder of installed models, for `local` (a `--models-dir` flag); when `None`,
    /// `$POLPO_MODELS_DIR`, else the user's cache (`~/.cache/polpo/models`).
    pub models_dir: Option<PathBuf>,
}

/// Build the embedder `config` describes. Checks every field first; contacts no server. For
/// `local`, loads the installed model (a fraction of a second).
pub fn embedder_from_config(config: &EmbeddingConfig, env: &EmbedderEnv<'_>) -> Result<Arc<dyn Embedder>, ConfigError> {
    if let Some(d) = config.dimensions.filter(|&d| d == 0 || d > MAX_DIMENSIONS) {
        return Err(ConfigError::new(
            "embedding_dimensions_invalid",
            "/dimensions",
            format!("{d} is not a vector length between 1 and {MAX_DIMENSIONS}"),
        ));
    }
    match config.provider.as_str() {
        "openai" => openai(config, env),
        "local" => {
            only_openai_fields(config, "local")?;
            let model = config.model.as_deref().unwrap_or(LOCAL_MODEL);
            if model != LOCAL_MODEL {
                return Err(ConfigError::new(
                    "embedding_model_unknown",
                    "/model",
                    format!("the local provider runs `{LOCAL_MODEL}` only, not `{model}`"),
                ));
            }
            if let Some(d) = config.dimensions.filter(|&d| d != LOCAL_DIMENSIONS) {
                return Err(ConfigError::new(
                    "embedding_dimensions_invalid",
                    "/dimensions",
                    format!("`{LOCAL_MODEL}` makes {LOCAL_DIMENSIONS}-number vectors, not {d}"),
                ));
            }
            local(env)
        }
        "hashing" => {
            only_openai_fields(config, "hashing")?;
            if config.model.is_some() {
                return Err(ConfigError::new(
                    "embedding_field_unsupported",
                    "/model",
                    "the hashing embedder has no model to choose",
                ));
            }
            Ok(Arc::new(HashingEmbedder::new(config.dimensions.unwrap_or(HASHING_DEFAULT_DIMENSIONS))))
        }
        other => Err(ConfigError::new(
            "embedding_provider_unknown",
            "/provider",
            format!("unknown embedding provider `{other}`; use `openai`, `local` or `hashing`"),
        )),
    }
}

/// `baseUrl` and `apiKeyEnv` mean something to `openai` only.
fn only_openai_fields(config: &EmbeddingConfig, provider: &str) -> Result<(), ConfigError> {
    let unsupported = |pointer, field| {
        Err(ConfigError::new(
            "embedding_field_unsupported",
            pointer,
            format!("`{field}` applies to the `openai` provider, not `{provider}`"),
        ))
    };
    if config.base_url.is_some() {
        return unsupported("/baseUrl", "baseUrl");
    }
    if config.api_key_env.is_some() {
        return unsupported("/apiKeyEnv", "apiKeyEnv");
    }
    Ok(())
}

fn openai(config: &EmbeddingConfig, env: &EmbedderEnv<'_>) -> Result<Arc<dyn Embedder>, ConfigError> {
    let Some(model) = config.model.as_deref().filter(|m| !m.trim().is_empty()) else {
        return Err(ConfigError::new(
            "embedding_model_missing",
            "/model",
            "name the embedding model (e.g. `text-embedding-3-small`); none is chosen for you",
        ));
    };
    let dimensions = match (known_openai_model(model), config.dimensions) {
        (Some((native, _)), None) => native,
        (Some((native, shortens)), Some(d)) if d == native || (shortens && d < native) => d,
        (Some((native, shortens)), Some(d)) => {
            let can = if shortens { format!("at most {native}") } else { format!("exactly {native}") };
            return Err(ConfigError::new(
                "embedding_dimensions_invalid",
                "/dimensions",
                format!("`{model}` makes vectors of {can} numbers, not {d}"),
            ));
        }
        (None, Some(d)) => d,
        (None, None) => {
            return Err(ConfigError::new(
                "embedding_dimensions_missing",
                "/dimensions",
                format!("set `dimensions` to the length of `{model}`'s vectors; it is not one Polpo knows"),
            ));
        }
    };
    let builtin = polpo_llm::ProviderConfig::builtin("openai", env.env);
    let (base_url, default_key_env) = match &config.base_url {
        Some(url) => (url.trim().to_owned(), None),
        None => match builtin {
            Some(b) => (b.base_url, b.api_key_env),
            None => ("https://api.openai.com/v1".to_owned(), Some("OPENAI_API_KEY".to_owned())),
        },
    };
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) || reqwest::Url::parse(&base_url).is_err()
    {
        return Err(ConfigError::new(
            "embedding_base_url_invalid",
            "/baseUrl",
            format!("`{base_url}` is not an http(s) URL"),
        ));
    }
    let mut settings = OpenAiSettings::new(base_url, model, dimensions);
    if let Some(var) = config.api_key_env.clone().or(default_key_env) {
        let key = (env.env)(&var).filter(|k| !k.is_empty()).ok_or_else(|| {
            ConfigError::new(
                "embedding_api_key_missing",
                "/apiKeyEnv",
                format!("environment variable {var} is not set"),
            )
        })?;
        settings.api_key = Some(key);
    }
    if settings.api_key.as_deref().is_some_and(|k| reqwest::header::HeaderValue::from_str(k).is_err()) {
        return Err(ConfigError::new(
            "embedding_api_key_invalid",
            "/apiKeyEnv",
            "the API key holds characters an HTTP header cannot carry",
        ));
    }
    let embedder = OpenAiEmbedder::new(settings).map_err(|e| ConfigError::new(e.code(), "/provider", e.to_string()))?;
    Ok(Arc::new(embedder))
}

#[cfg(feature = "local")]
fn local(env: &EmbedderEnv<'_>) -> Result<Arc<dyn Embedder>, ConfigError> {
    let model_error = |e: polpo_llm_local::LocalModelError| ConfigError::new(e.code(), "/model", e.to_string());
    let cache = match env.models_dir.clone() {
        Some(dir) => dir,
        None => crate::local::models_dir(env.env).map_err(model_error)?,
    };
    let explicit = (env.env)(crate::local::MODEL_DIR_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = crate::local::locate(explicit.as_deref(), &cache).map_err(|e| match e {
        // Not `polpo models install`: that command installs chat models only, so far.
        polpo_llm_local::LocalModelError::NotInstalled { .. } => ConfigError::new(
            e.code(),
            "/model",
            format!(
                "the embedding model `{LOCAL_MODEL}` is not installed in {}; install it with \
                 `POLPO_MODELS_DIR={} cargo run -p polpo-embed --example install-embedding-model`",
                cache.display(),
                cache.display()
            ),
        ),
        other => model_error(other),
    })?;
    Ok(Arc::new(crate::local::LocalEmbedder::load(&dir).map_err(model_error)?))
}

#[cfg(not(feature = "local"))]
fn local(_: &EmbedderEnv<'_>) -> Result<Arc<dyn Embedder>, ConfigError> {
    Err(ConfigError::new(
        "feature_unavailable",
        "/provider",
        "this build cannot run the local embedding model: rebuild with the `local` feature of polpo-embed",
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn build(json: serde_json::Value, vars: &[(&str, &str)]) -> Result<Arc<dyn Embedder>, ConfigError> {
        let config: EmbeddingConfig = serde_json::from_value(json).unwrap();
        let lookup = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
        let empty = tempfile::tempdir().unwrap();
        embedder_from_config(&config, &EmbedderEnv { env: &lookup, models_dir: Some(empty.path().to_path_buf()) })
    }

    fn code(json: serde_json::Value, vars: &[(&str, &str)]) -> (&'static str, &'static str) {
        let e = build(json, vars).err().unwrap();
        (e.code, e.pointer)
    }

    #[test]
    fn openai_configs_name_their_model_and_know_their_length() {
        use serde_json::json;
        let key = [("OPENAI_API_KEY", "sk-x")];
        let e = build(json!({"provider": "openai", "model": "text-embedding-3-small"}), &key).unwrap();
        assert_eq!(e.identity().dimensions, 1536);
        assert_eq!(e.identity().provider, "openai");
        let short = build(json!({"provider": "openai", "model": "text-embedding-3-large", "dimensions": 256}), &key);
        assert_eq!(short.unwrap().identity().dimensions, 256);
        let local_server = json!({"provider": "openai", "model": "nomic-embed-text", "baseUrl": "http://127.0.0.1:11434/v1", "dimensions": 768});
        assert_eq!(build(local_server, &[]).unwrap().identity().model, "nomic-embed-text");

        assert_eq!(code(json!({"provider": "openai"}), &key), ("embedding_model_missing", "/model"));
        assert_eq!(
            code(json!({"provider": "openai", "model": "nomic-embed-text"}), &key),
            ("embedding_dimensions_missing", "/dimensions")
        );
        assert_eq!(
            code(json!({"provider": "openai", "model": "text-embedding-ada-002", "dimensions": 512}), &key),
            ("embedding_dimensions_invalid", "/dimensions")
        );
        assert_eq!(
            code(json!({"provider": "openai", "model": "text-embedding-3-small", "dimensions": 4096}), &key),
            ("embedding_dimensions_invalid", "/dimensions")
        );
        assert_eq!(
            code(json!({"provider": "openai", "model": "text-embedding-3-small"}), &[]),
            ("embedding_api_key_missing", "/apiKeyEnv")
        );
        assert_eq!(
            code(json!({"provider": "openai", "model": "m", "dimensions": 8, "baseUrl": "ftp://x"}), &[]),
            ("embedding_base_url_invalid", "/baseUrl")
        );
        assert_eq!(
            code(
                json!({"provider": "openai", "model": "m", "dimensions": 8, "baseUrl": "http://x/v1", "apiKeyEnv": "MY_KEY"}),
                &[]
            ),
            ("embedding_api_key_missing", "/apiKeyEnv")
        );
    }

    #[test]
    fn unknown_providers_ignored_fields_and_bad_lengths_are_refused() {
        use serde_json::json;
        assert_eq!(code(json!({"provider": "cohere"}), &[]), ("embedding_provider_unknown", "/provider"));
        assert_eq!(
            code(json!({"provider": "hashing", "dimensions": 0}), &[]),
            ("embedding_dimensions_invalid", "/dimensions")
        );
        assert_eq!(
            code(json!({"provider": "hashing", "baseUrl": "http://x"}), &[]),
            ("embedding_field_unsupported", "/baseUrl")
        );
        assert_eq!(code(json!({"provider": "hashing", "model": "m"}), &[]), ("embedding_field_unsupported", "/model"));
        assert_eq!(build(json!({"provider": "hashing"}), &[]).unwrap().identity().dimensions, 256);
        assert_eq!(
            code(json!({"provider": "local", "apiKeyEnv": "K"}), &[]),
            ("embedding_field_unsupported", "/apiKeyEnv")
        );
        assert_eq!(
            code(json!({"provider": "local", "model": "bge-small"}), &[]),
            ("embedding_model_unknown", "/model")
        );
        assert_eq!(
            code(json!({"provider": "local", "dimensions": 768}), &[]),
            ("embedding_dimensions_invalid", "/dimensions")
        );
        assert!(serde_json::from_value::<EmbeddingConfig>(json!({"provider": "hashing", "size": 3})).is_err());
    }

    #[test]
    fn local_is_unavailable_without_the_feature_and_not_installed_without_the_model() {
        let local = serde_json::json!({"provider": "local"});
        if !cfg!(feature = "local") {
            assert_eq!(code(local, &[]), ("feature_unavailable", "/provider"));
        } else {
            assert_eq!(code(local, &[]), ("local_model_not_installed", "/model"), "an empty models folder");
        }
    }
}
