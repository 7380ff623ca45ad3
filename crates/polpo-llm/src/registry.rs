//! From `provider/model` ids and model selections to ready providers.

use crate::config::{ApiKey, ProviderConfig, WireApi};
use crate::fallback::{FallbackProvider, Target};
use crate::{AnthropicProvider, LlmError, LlmErrorKind, ModelProvider, OpenAiProvider};
use polpo_core::model::{ModelProfileError, ModelProfiles, ModelSelection, resolve_model_chain};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// Reads an environment variable. Injected so tests (which may not mutate the process
/// environment) and embedders control where keys come from.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Why a model selection could not become a provider.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    /// The profile graph is broken or the agent may not use the profile.
    #[error(transparent)]
    Profile(#[from] ModelProfileError),
    /// A resolved id names no configured provider, or the provider cannot be built.
    #[error(transparent)]
    Model(#[from] LlmError),
}

impl ResolveError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Profile(e) => e.code(),
            Self::Model(e) => e.kind.code(),
        }
    }
}

/// Split `provider/model` at the first slash (`openrouter/anthropic/claude` → `openrouter`,
/// `anthropic/claude`).
pub fn split_model_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('/').filter(|(p, m)| !p.is_empty() && !m.is_empty())
}

/// The configured providers: the project's own (`settings.providers`, mapped by the caller)
/// over the built-in defaults. Each provider is built once, on first use, and shared.
pub struct Providers {
    configs: BTreeMap<String, ProviderConfig>,
    env: EnvLookup,
    built: Mutex<HashMap<String, Arc<dyn ModelProvider>>>,
}

impl Providers {
    /// Providers from `configs` (which override built-ins of the same name), reading API keys
    /// and SDK base-URL variables through `env`.
    pub fn new(configs: BTreeMap<String, ProviderConfig>, env: EnvLookup) -> Self {
        Self { configs, env, built: Mutex::new(HashMap::new()) }
    }

    /// Providers reading the process environment.
    pub fn from_process_env(configs: BTreeMap<String, ProviderConfig>) -> Self {
        Self::new(configs, Arc::new(|name| std::env::var(name).ok()))
    }

    /// Register a provider built elsewhere (the in-process `local` model, which lives in its
    /// own crate behind a feature) under `name`; it takes precedence over configs and built-ins.
    pub fn with_provider(self, name: impl Into<String>, provider: Arc<dyn ModelProvider>) -> Self {
        self.built.lock().unwrap_or_else(PoisonError::into_inner).insert(name.into(), provider);
        self
    }

    /// True when `name` resolves to a provider that has what it needs to run: a registered
    /// provider, or a configured/built-in one whose API key (if it names one) is set.
    pub fn is_ready(&self, name: &str) -> bool {
        if self.built.lock().unwrap_or_else(PoisonError::into_inner).contains_key(name) {
            return true;
        }
        self.config(name)
            .is_some_and(|c| c.api_key_env.as_deref().is_none_or(|var| (self.env)(var).is_some_and(|k| !k.is_empty())))
    }

    /// The configuration of provider `name`: the project's own entry, else the built-in one.
    fn config(&self, name: &str) -> Option<ProviderConfig> {
        self.configs.get(name).cloned().or_else(|| ProviderConfig::builtin(name, &*self.env))
    }

    /// The environment variable whose absence keeps `name` from being ready, so a caller can
    /// say what to set instead of sending a request without credentials.
    pub fn missing_key(&self, name: &str) -> Option<String> {
        if self.is_ready(name) {
            return None;
        }
        self.config(name)?.api_key_env
    }

    /// The provider called `name`.
    pub fn provider(&self, name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = built.get(name) {
            return Ok(p.clone());
        }
        let config = self.config(name).ok_or_else(|| {
            LlmError::new(
                LlmErrorKind::ModelNotFound,
                format!("unknown provider `{name}`: configure it in settings.providers"),
            )
        })?;
        let key =
            config.api_key_env.as_deref().and_then(|var| (self.env)(var)).filter(|k| !k.is_empty()).map(ApiKey::new);
        let provider: Arc<dyn ModelProvider> = match config.api {
            WireApi::OpenAiChat => Arc::new(OpenAiProvider::new(&config, key)?),
            WireApi::AnthropicMessages => Arc::new(AnthropicProvider::new(&config, key)?),
        };
        built.insert(name.to_owned(), provider.clone());
        Ok(provider)
    }

    /// The target for one `provider/model` id.
    pub fn target(&self, id: &str) -> Result<Target, LlmError> {
        let (provider, model) = split_model_id(id).ok_or_else(|| {
            LlmError::new(LlmErrorKind::ModelNotFound, format!("model id `{id}` must look like provider/model"))
        })?;
        Ok(Target { id: id.to_owned(), model: model.to_owned(), provider: self.provider(provider)? })
    }

    /// A fallback chain over already resolved ids.
    pub fn chain(&self, ids: &[String]) -> Result<FallbackProvider, LlmError> {
        Ok(FallbackProvider::new(ids.iter().map(|id| self.target(id)).collect::<Result<_, _>>()?))
    }

    /// Resolve an agent's model selection (profiles, fallbacks, `allowedModelProfiles`) and
    /// build its chain. Fails before any provider call.
    pub fn resolve(
        &self,
        selection: &ModelSelection,
        profiles: &ModelProfiles,
        allowed: Option<&[String]>,
    ) -> Result<FallbackProvider, ResolveError> {
        let ids = resolve_model_chain(selection, profiles, allowed)?;
        Ok(self.chain(&ids)?)
    }
}
