//! Building the runtime for a project: providers, store, hook packs, custom tools,
//! Connections, MCP, vault redaction, typed memory, offline fallback. Shared by `polpo
//! serve`/`dev`, `polpo run` and a program embedding the orchestrator, so all run agents
//! exactly the same way.

use anyhow::Context as _;
use polpo_core::config::Project;
use polpo_core::config::settings::Settings;
use polpo_core::redact::Redactor;
use polpo_custom_tools::JsRuntime;
use polpo_embed::{EmbedderEnv, EmbeddingConfig, embedder_from_config};
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_mcp::McpClients;
use polpo_memory::Memory;
use polpo_store::MemoryItemStore;
use polpo_store::{StoreKind, SystemClock, open_store};
use polpo_tools::Tool;
use polpo_vault::{KeySources, Vault};
use std::sync::{Arc, LazyLock};

/// The MCP connections of this process: one set, shared by every invocation of every agent,
/// and stopped (stdio servers included) when the command ends.
pub static MCP: LazyLock<Arc<McpClients>> = LazyLock::new(|| Arc::new(McpClients::new()));

/// The runtime for `project`. When this binary can run the offline model and it is
/// installed, agents whose providers have no API key use it instead of failing.
pub async fn open(project: Project) -> anyhow::Result<Arc<Runtime>> {
    Ok(open_with_memory(project).await?.0)
}

/// [`open`], plus the project's typed memory (the one its `memory_item_*` tools use), for a
/// server that also answers the memory routes with it: one embedder (a local model's weights
/// are loaded once) for both.
pub async fn open_with_memory(project: Project) -> anyhow::Result<(Arc<Runtime>, Memory)> {
    polpo_llm::install_crypto_provider();
    let (settings, root) = (project.settings().clone(), project.root.clone());
    let (loaded, providers) = derive(project)?;
    let kind = StoreKind::parse(settings.storage().as_str())?;
    let database_url = std::env::var("DATABASE_URL").ok().or(settings.database_url.clone());
    let store = open_store(kind, &root, database_url.as_deref(), Arc::new(SystemClock))
        .await
        .context("cannot open the project store")?;
    let redactor = vault_redactor(&root);
    let connections = Arc::new(crate::connections::project_connections(&root, &redactor));
    let js = || JsRuntime::configured(settings.js_runtime());
    let custom =
        crate::tools::project_tools(&root, &connections, js)?.into_iter().map(|t| t as Arc<dyn Tool>).collect();
    // Typed memory tools reach only agents whose allowedTools name them, after their MCP tools.
    let memory = project_memory(&settings, store.memory.clone())?;
    let tools = polpo_memory::MemoryToolSource::new(&memory).chained(MCP.clone());
    let mut runtime = Runtime::new(loaded, providers, store)
        .with_tool_source(Arc::new(tools))
        .with_connections(connections)
        .with_redactor(redactor)
        .with_custom_tools(custom);
    if let Some(model) = crate::providers::installed_local_default() {
        runtime = runtime.with_offline_model(model);
    }
    Ok((Arc::new(runtime), memory))
}

/// The project's typed memory over `store`: lexical search, plus semantic candidates from the
/// embedder `settings.memory.embedding` names (checked now, so a wrong key name or a missing
/// local model stops start-up with the field at fault rather than degrading every search).
pub fn project_memory(settings: &Settings, store: Arc<dyn MemoryItemStore>) -> anyhow::Result<Memory> {
    let Some(memory) = &settings.memory else { return Ok(Memory::new(store, None)) };
    let embedder = match &memory.embedding {
        None => None,
        Some(raw) => {
            let at = "settings.memory.embedding";
            let config: EmbeddingConfig =
                serde_json::from_value(raw.clone()).map_err(|e| anyhow::anyhow!("invalid_config: {at}: {e}"))?;
            let env = EmbedderEnv { env: &|name| std::env::var(name).ok(), models_dir: None };
            let embedder = embedder_from_config(&config, &env)
                .map_err(|e| anyhow::anyhow!("{}: {at}{}: {}", e.code, e.pointer, e.message))?;
            Some(embedder)
        }
    };
    Ok(Memory::new(store, embedder).with_failure_mode(memory.embedding_failure_mode.unwrap_or_default()))
}

/// The redaction list, filled from the project's vault when this process has its key (no key:
/// no vault values can be read either, so there is nothing to hide). The same vault fills the
/// `${vault:…}` references of agents' `mcpServers` when they connect.
fn vault_redactor(root: &std::path::Path) -> Redactor {
    let redactor = Redactor::new();
    let vault = KeySources::from_env().load().map(|key| Vault::open(&root.join(".polpo"), key, redactor.clone()));
    if let Ok(Err(e)) = vault.as_ref().map(Vault::refresh) {
        eprintln!("warning: the vault cannot be read, its values are not redacted: {e}");
    }
    MCP.use_vault(vault);
    redactor
}

/// Everything the runtime serves that is derived from the project: its resolved hooks and its
/// model providers. Built the same way at startup and on every `polpo dev` reload, so an edit
/// of the project's `providers` reaches the next request like an edit of an agent.
pub fn derive(project: Project) -> anyhow::Result<(Loaded, Providers)> {
    let providers = crate::providers::providers(&project)?;
    let loaded = Loaded::new(project).map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::anyhow!(
            "the project's hook packs have {} problem(s); run `polpo validate`:\n{}",
            problems.len(),
            lines.join("\n")
        )
    })?;
    Ok((loaded, providers))
}
