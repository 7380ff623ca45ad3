//! Building the runtime for a project: providers, store, hook packs, offline fallback. Shared
//! by `polpo serve`/`dev` and `polpo run`, so both run agents exactly the same way.

use anyhow::Context as _;
use polpo_core::config::Project;
use polpo_engine::{Loaded, Runtime};
use polpo_store::{StoreKind, SystemClock, open_store};
use std::sync::Arc;

/// The runtime for `project`. When this binary can run the offline model and it is
/// installed, agents whose providers have no API key use it instead of failing.
pub async fn open(project: Project) -> anyhow::Result<Arc<Runtime>> {
    polpo_llm::install_crypto_provider();
    let settings = project.settings().clone();
    let providers = super::providers::providers(&project)?;
    let kind = StoreKind::parse(settings.storage().as_str())?;
    let database_url = std::env::var("DATABASE_URL").ok().or(settings.database_url.clone());
    let store = open_store(kind, &project.root, database_url.as_deref(), Arc::new(SystemClock)).await.context("cannot open the project store")?;
    let loaded = Loaded::new(project).map_err(|problems| {
        super::print_problems_to_stderr(&problems);
        anyhow::anyhow!("the project's hook packs have {} problem(s); run `polpo validate`", problems.len())
    })?;
    let mut runtime = Runtime::new(loaded, providers, store);
    if let Some(model) = super::providers::installed_local_default() {
        runtime = runtime.with_offline_model(model);
    }
    Ok(Arc::new(runtime))
}
