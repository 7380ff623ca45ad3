//! The project's custom tools (`.polpo/tools/<name>/`), ready for the runtime and for
//! `polpo tools`.

use polpo_core::redact::Redactor;
use polpo_custom_tools::{CustomTool, JsRuntime};
use std::path::Path;
use std::sync::Arc;

/// The project's custom tools, ready to register: authenticated through its Connections
/// (secrets from its vault, feeding `redactor`), JS entrypoints run by the runtime the project
/// configures (`settings.customTools.runtime`: Node by default, Deno or Bun) found here.
pub fn project_tools(root: &Path, redactor: &Redactor) -> anyhow::Result<Vec<Arc<CustomTool>>> {
    let dirs = polpo_custom_tools::load_all(&root.join(".polpo"))?;
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let connections = Arc::new(crate::connections::project_connections(root, redactor));
    let runtime = JsRuntime::for_project(root);
    Ok(dirs.into_iter().map(|d| Arc::new(CustomTool::new(d, connections.clone(), runtime.clone()))).collect())
}
