//! How to reach a provider: wire, base URL, where the API key lives, extra headers, timeouts.
//!
//! This is a plain struct on purpose: `settings.providers` in project files is parsed elsewhere
//! and mapped into it, so this crate never depends on the project file format.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireApi {
    /// OpenAI chat completions (`POST {base}/chat/completions`); also OpenRouter, Groq,
    /// Together, vLLM, Ollama, LM Studio, llama.cpp server…
    OpenAiChat,
    /// Anthropic Messages (`POST {base}/v1/messages`).
    AnthropicMessages,
}

impl WireApi {
    /// Parse the `api` field of `settings.providers` (`openai-completions`, `anthropic-messages`).
    pub fn parse(api: &str) -> Option<Self> {
        match api {
            "openai-completions" | "openai-chat" | "openai" => Some(Self::OpenAiChat),
            "anthropic-messages" | "anthropic" => Some(Self::AnthropicMessages),
            _ => None,
        }
    }
}

/// An API key. Its `Debug` never shows the value, so it cannot leak through logs or errors.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wrap a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for the one place that puts it in a request header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// Timeouts and retries of one provider's HTTP calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPolicy {
    /// Longest wait for a TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Longest silence while waiting for headers or the next bytes of a stream. An idle
    /// timeout rather than a total one, so long answers that keep streaming are never cut.
    pub idle_timeout: Duration,
    /// Retries after the first attempt on 429, 5xx and connection errors.
    pub max_retries: u32,
    /// First backoff; doubles on each retry, with jitter.
    pub initial_backoff: Duration,
    /// Cap on one backoff.
    pub max_backoff: Duration,
    /// Longest `Retry-After` honoured; a longer one fails the call at once (so a fallback
    /// model can take over) with the wait reported in [`LlmError::retry_after`](crate::LlmError).
    pub max_retry_after: Duration,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(180),
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// One configured provider.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Wire format.
    pub api: WireApi,
    /// Base URL: with `/v1` for OpenAI-wire servers (`https://api.openai.com/v1`), without it
    /// for Anthropic (`https://api.anthropic.com`), as the official SDKs expect.
    pub base_url: String,
    /// Name of the environment variable holding the API key; `None` for keyless local servers.
    pub api_key_env: Option<String>,
    /// Extra headers sent on every call (e.g. OpenRouter's `HTTP-Referer`).
    pub headers: BTreeMap<String, String>,
    /// Stream answers (the default); `false` for servers without SSE support.
    pub stream: bool,
    /// Timeouts and retries.
    pub http: HttpPolicy,
}

impl fmt::Debug for ProviderConfig {
    /// Header values may carry credentials, so only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key_env", &self.api_key_env)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("stream", &self.stream)
            .field("http", &self.http)
            .finish()
    }
}

struct Builtin {
    name: &'static str,
    api: WireApi,
    base_url: &'static str,
    api_key_env: Option<&'static str>,
    base_url_env: Option<&'static str>,
}

const fn openai_wire(name: &'static str, base_url: &'static str, api_key_env: Option<&'static str>) -> Builtin {
    Builtin { name, api: WireApi::OpenAiChat, base_url, api_key_env, base_url_env: None }
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "openai",
        api: WireApi::OpenAiChat,
        base_url: "https://api.openai.com/v1",
        api_key_env: Some("OPENAI_API_KEY"),
        base_url_env: Some("OPENAI_BASE_URL"),
    },
    Builtin {
        name: "anthropic",
        api: WireApi::AnthropicMessages,
        base_url: "https://api.anthropic.com",
        api_key_env: Some("ANTHROPIC_API_KEY"),
        base_url_env: Some("ANTHROPIC_BASE_URL"),
    },
    openai_wire("openrouter", "https://openrouter.ai/api/v1", Some("OPENROUTER_API_KEY")),
    openai_wire("groq", "https://api.groq.com/openai/v1", Some("GROQ_API_KEY")),
    openai_wire("together", "https://api.together.xyz/v1", Some("TOGETHER_API_KEY")),
    openai_wire("mistral", "https://api.mistral.ai/v1", Some("MISTRAL_API_KEY")),
    openai_wire("deepseek", "https://api.deepseek.com/v1", Some("DEEPSEEK_API_KEY")),
    openai_wire("xai", "https://api.x.ai/v1", Some("XAI_API_KEY")),
    openai_wire("fireworks", "https://api.fireworks.ai/inference/v1", Some("FIREWORKS_API_KEY")),
    openai_wire("gemini", "https://generativelanguage.googleapis.com/v1beta/openai", Some("GEMINI_API_KEY")),
    openai_wire("ollama", "http://127.0.0.1:11434/v1", None),
    openai_wire("lmstudio", "http://127.0.0.1:1234/v1", None),
    openai_wire("vllm", "http://127.0.0.1:8000/v1", Some("VLLM_API_KEY")),
    openai_wire("llamacpp", "http://127.0.0.1:8080/v1", None),
];

/// Names of the providers that work with no configuration beyond an API key.
pub fn builtin_provider_names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.name)
}

impl ProviderConfig {
    /// A provider with default timeouts, streaming on, no key and no extra headers.
    pub fn new(api: WireApi, base_url: impl Into<String>) -> Self {
        Self {
            api,
            base_url: base_url.into(),
            api_key_env: None,
            headers: BTreeMap::new(),
            stream: true,
            http: HttpPolicy::default(),
        }
    }

    /// The built-in defaults for a well-known provider name. Like the official SDKs, `openai`
    /// takes its base URL from `OPENAI_BASE_URL` and `anthropic` from `ANTHROPIC_BASE_URL`
    /// when set, so any OpenAI-wire server can stand in for `openai/<model>`.
    pub fn builtin(name: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        let b = BUILTINS.iter().find(|b| b.name == name)?;
        let base_url =
            b.base_url_env.and_then(env).filter(|u| !u.trim().is_empty()).unwrap_or_else(|| b.base_url.to_owned());
        Some(Self { api_key_env: b.api_key_env.map(str::to_owned), ..Self::new(b.api, base_url) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_base_url_honours_the_sdk_variable() {
        let env = |k: &str| (k == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:9/v1".to_owned());
        let c = ProviderConfig::builtin("openai", &env).unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(c.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(ProviderConfig::builtin("groq", &env).unwrap().base_url, "https://api.groq.com/openai/v1");
        assert!(ProviderConfig::builtin("nope", &env).is_none());
    }

    #[test]
    fn secrets_do_not_show_in_debug_output() {
        let mut c = ProviderConfig::new(WireApi::OpenAiChat, "http://x");
        c.headers.insert("x-secret".into(), "hunter2".into());
        assert!(!format!("{c:?}").contains("hunter2"));
        assert_eq!(format!("{:?}", ApiKey::new("sk-live")), "ApiKey(***)");
    }
}
