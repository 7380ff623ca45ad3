//! The model providers a command runs agents with: the project's `providers` and
//! `settings.providers` over polpo-llm's built-ins, plus the in-process `local` model when polpo-assemble
//! is built with the `local-model` feature.
//!
//! The mapping from the project file's provider entries to [`polpo_llm::ProviderConfig`] lives
//! here because polpo-llm deliberately knows nothing of the project file format, and this crate
//! is the one place that knows both.

use anyhow::anyhow;
use polpo_core::config::{Project, ProviderConfig as ProjectProvider};
use polpo_llm::{ProviderConfig, Providers, WireApi};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Environment variable naming the models folder, for CI caches and tests; also read by the
/// `local` provider so that `polpo run` finds what `polpo models install` put there.
pub const MODELS_DIR_ENV: &str = "POLPO_MODELS_DIR";

/// The models folder: `explicit` (a flag), else `$POLPO_MODELS_DIR`, else the crate's default
/// (`$XDG_CACHE_HOME/polpo/models` or `~/.cache/polpo/models`).
pub fn models_dir(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = explicit {
        return Ok(dir);
    }
    if let Some(dir) = std::env::var_os(MODELS_DIR_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    polpo_llm_local::default_cache_dir().map_err(coded)
}

/// Provider name of the in-process offline model (`local/<model>`).
pub const LOCAL_PROVIDER: &str = "local";

/// The offline model used when none is named (`polpo models install` with no name, and the
/// model to fall back to when no provider key is set). Qwen2.5-Coder-1.5B is the only catalogued
/// model measured to choose the right tool unaided (`reference/local-model.md`); the smaller ones
/// only call tools correctly when told which one to call.
pub const LOCAL_DEFAULT_MODEL: &str = "local/qwen2.5-coder-1.5b";

/// The model name inside a `local/<name>` id (the whole string when it has no provider part).
pub fn local_model_name(id: &str) -> &str {
    id.strip_prefix("local/").unwrap_or(id)
}

/// A local-model error as `code: sentence`, the error shape of every command.
pub fn coded(e: polpo_llm_local::LocalModelError) -> anyhow::Error {
    anyhow!("{}: {e}", e.code())
}

/// The providers for `project`, reading API keys and SDK base-URL variables from the process
/// environment. Fails on a provider entry polpo cannot speak (unsupported `api`, or a custom
/// provider without `baseUrl`), before any model call.
///
/// With the `local-model` feature, `local` is the in-process model unless the project configures
/// a provider of that name itself (an explicit entry wins). Its weights are looked up at the first
/// call, so a missing model fails that call with `local_model_not_installed` and the
/// `polpo models install` command to run, never at startup.
pub fn providers(project: &Project) -> anyhow::Result<Providers> {
    build(project, || models_dir(None))
}

/// [`providers`] with the models folder of the `local` provider given (asked only when it is
/// registered).
fn build(project: &Project, models_dir: impl FnOnce() -> anyhow::Result<PathBuf>) -> anyhow::Result<Providers> {
    let configs = provider_configs(project, &|name| std::env::var(name).ok())?;
    let configured_local = configs.contains_key(LOCAL_PROVIDER);
    let providers = Providers::from_process_env(configs);
    if configured_local {
        return Ok(providers);
    }
    with_local_model(providers, models_dir)
}

/// `LOCAL_DEFAULT_MODEL` when this binary can run it and it is installed (or `POLPO_LOCAL_MODEL`
/// names weights): the model an agent can fall back to with no provider key and no network.
pub fn installed_local_default() -> Option<&'static str> {
    if !polpo_llm_local::LocalProvider::is_supported() {
        return None;
    }
    let dir = models_dir(None).ok()?;
    polpo_llm_local::locate(None, local_model_name(LOCAL_DEFAULT_MODEL), &dir).ok()?;
    Some(LOCAL_DEFAULT_MODEL)
}

#[cfg(feature = "local-model")]
fn with_local_model(
    providers: Providers,
    models_dir: impl FnOnce() -> anyhow::Result<PathBuf>,
) -> anyhow::Result<Providers> {
    use polpo_llm_local::{LocalProvider, LocalSettings};
    let dir = models_dir()?;
    Ok(providers.with_provider(LOCAL_PROVIDER, std::sync::Arc::new(LocalProvider::new(LocalSettings::new(dir)))))
}

#[cfg(not(feature = "local-model"))]
fn with_local_model(
    providers: Providers,
    _models_dir: impl FnOnce() -> anyhow::Result<PathBuf>,
) -> anyhow::Result<Providers> {
    Ok(providers)
}

/// Top-level `providers`, then `settings.providers` (which wins for the same name), mapped.
fn provider_configs(
    project: &Project,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<BTreeMap<String, ProviderConfig>> {
    let manifest = &project.manifest;
    let entries = manifest.providers.iter().chain(manifest.settings.providers.iter()).flatten();
    let mut configs = BTreeMap::new();
    for (name, entry) in entries {
        configs.insert(name.clone(), map_provider(name, entry, env)?);
    }
    Ok(configs)
}

/// One project entry over the built-in of the same name, if any: fields the entry leaves out
/// (base URL, key variable, wire) come from the built-in, so `{"openai": {"baseUrl": …}}` keeps
/// reading `OPENAI_API_KEY`.
fn map_provider(
    name: &str,
    entry: &ProjectProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<ProviderConfig> {
    let builtin = ProviderConfig::builtin(name, env);
    let api = match entry.api {
        Some(api) => WireApi::parse(api.as_str()).ok_or_else(|| {
            anyhow!(
                "provider_api_unsupported: providers.{name}.api `{}` is not supported; use `openai-completions` or `anthropic-messages`",
                api.as_str()
            )
        })?,
        None => builtin.as_ref().map_or(WireApi::OpenAiChat, |b| b.api),
    };
    let base_url = entry
        .base_url
        .clone()
        .or_else(|| builtin.as_ref().map(|b| b.base_url.clone()))
        .ok_or_else(|| anyhow!("provider_base_url_missing: providers.{name} needs a `baseUrl`"))?;
    let mut config = builtin.unwrap_or_else(|| ProviderConfig::new(api, base_url.clone()));
    config.api = api;
    config.base_url = base_url;
    if let Some(var) = &entry.api_key_env {
        config.api_key_env = Some(var.clone());
    }
    config.headers.extend(entry.headers.clone().unwrap_or_default());
    Ok(config)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use polpo_core::config::ProjectFile;

    fn project(manifest: serde_json::Value) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".polpo")).unwrap();
        let mut file: ProjectFile = serde_json::from_value(manifest).unwrap();
        file.schema_version = Some(polpo_core::config::SCHEMA_VERSION);
        std::fs::write(dir.path().join(".polpo/project.json"), serde_json::to_string(&file).unwrap()).unwrap();
        polpo_project::load_project(dir.path()).unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn project_entries_override_builtins_field_by_field() {
        let p = project(serde_json::json!({
            "providers": {"corp": {"baseUrl": "http://top/v1"}, "mine": {"baseUrl": "http://top-mine/v1"}},
            "settings": {"providers": {
                "openai": {"baseUrl": "http://127.0.0.1:9/v1", "headers": {"x-team": "a"}},
                "mine": {"baseUrl": "http://127.0.0.1:8/v1", "api": "anthropic-messages", "apiKeyEnv": "MINE_KEY"},
            }},
        }));
        let configs = provider_configs(&p, &no_env).unwrap();
        let openai = &configs["openai"];
        assert_eq!(openai.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(openai.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(openai.headers["x-team"], "a");
        let mine = &configs["mine"];
        assert_eq!((mine.api, mine.base_url.as_str()), (WireApi::AnthropicMessages, "http://127.0.0.1:8/v1"));
        assert_eq!(mine.api_key_env.as_deref(), Some("MINE_KEY"));
        assert_eq!((configs["corp"].api, configs["corp"].api_key_env.clone()), (WireApi::OpenAiChat, None));
        assert!(providers(&p).unwrap().is_ready("corp"));
    }

    #[test]
    fn unusable_entries_fail_with_a_code_before_any_call() {
        let e = provider_configs(&project(serde_json::json!({"providers": {"x": {"apiKeyEnv": "K"}}})), &no_env);
        assert!(e.unwrap_err().to_string().starts_with("provider_base_url_missing: providers.x"));
        let responses =
            serde_json::json!({"settings": {"providers": {"r": {"baseUrl": "http://h", "api": "openai-responses"}}}});
        let e = provider_configs(&project(responses), &no_env).unwrap_err().to_string();
        assert!(e.starts_with("provider_api_unsupported:") && e.contains("openai-responses"), "{e}");
    }

    #[test]
    fn the_default_local_model_is_in_the_catalog() {
        let name = local_model_name(LOCAL_DEFAULT_MODEL);
        assert!(polpo_llm_local::KNOWN_MODELS.iter().any(|m| m.name == name), "{name}");
        assert!(LOCAL_DEFAULT_MODEL.starts_with("local/"));
    }

    #[test]
    fn local_is_registered_only_when_this_build_can_run_it() {
        let p = project(serde_json::json!({}));
        assert_eq!(providers(&p).unwrap().is_ready(LOCAL_PROVIDER), cfg!(feature = "local-model"));
        let own = serde_json::json!({"settings": {"providers": {"local": {"baseUrl": "http://127.0.0.1:8080/v1"}}}});
        assert!(providers(&project(own)).unwrap().is_ready(LOCAL_PROVIDER));
    }

    #[cfg(feature = "local-model")]
    #[test]
    fn a_local_model_that_is_not_installed_fails_its_call_saying_how_to_install_it() {
        use polpo_llm::ModelRequest;
        if std::env::var_os(polpo_llm_local::MODEL_PATH_ENV).is_some() {
            return; // a developer's POLPO_LOCAL_MODEL wins over the empty folder
        }
        let empty = tempfile::tempdir().unwrap();
        let dir = empty.path().to_path_buf();
        let providers = build(&project(serde_json::json!({})), move || Ok(dir)).unwrap();
        let target = providers.target("local/smollm2-135m").unwrap();
        let request = ModelRequest { model: target.model.clone(), ..ModelRequest::default() };
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let Err(e) = runtime.block_on(target.provider.stream(request)) else {
            panic!("a missing model must fail the call");
        };
        assert!(e.to_string().contains("run `polpo models install smollm2-135m`"), "{e}");
    }
}
