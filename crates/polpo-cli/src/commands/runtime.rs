//! Building the runtime for a project: providers, store, hook packs, offline fallback. Shared
//! by `polpo serve`/`dev` and `polpo run`, so both run agents exactly the same way.

use anyhow::Context as _;
use polpo_core::config::Project;
use polpo_core::redact::Redactor;
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_mcp::McpClients;
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
    polpo_llm::install_crypto_provider();
    let (settings, root) = (project.settings().clone(), project.root.clone());
    let (loaded, providers) = derive(project)?;
    let kind = StoreKind::parse(settings.storage().as_str())?;
    let database_url = std::env::var("DATABASE_URL").ok().or(settings.database_url.clone());
    let store = open_store(kind, &root, database_url.as_deref(), Arc::new(SystemClock))
        .await
        .context("cannot open the project store")?;
    let redactor = vault_redactor(&root);
    let custom = super::tools::project_tools(&root, &redactor)?.into_iter().map(|t| t as Arc<dyn Tool>).collect();
    let connections = Arc::new(super::connections::project_connections(&root, &redactor));
    // Typed memory tools reach only agents whose allowedTools name them, after their MCP tools.
    let memory = polpo_memory::Memory::new(store.memory.clone(), None);
    let tools = polpo_memory::MemoryToolSource::new(&memory).chained(MCP.clone());
    let mut runtime = Runtime::new(loaded, providers, store)
        .with_tool_source(Arc::new(tools))
        .with_connections(connections)
        .with_redactor(redactor)
        .with_custom_tools(custom);
    if let Some(model) = super::providers::installed_local_default() {
        runtime = runtime.with_offline_model(model);
    }
    Ok(Arc::new(runtime))
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
    let providers = super::providers::providers(&project)?;
    let loaded = Loaded::new(project).map_err(|problems| {
        super::print_problems_to_stderr(&problems);
        anyhow::anyhow!("the project's hook packs have {} problem(s); run `polpo validate`", problems.len())
    })?;
    Ok((loaded, providers))
}
