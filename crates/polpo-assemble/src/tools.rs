//! The project's custom tools (`.polpo/tools/<name>/`), ready for the runtime and for
//! `polpo tools`.

use polpo_connections::Connections;
use polpo_custom_tools::{CustomTool, CustomToolError, JsRuntime};
use std::path::Path;
use std::sync::Arc;

/// The project's custom tools, ready to register: authenticated through `connections` (the
/// project's, built once by the caller, which the runtime serves too), JS entrypoints run by
/// the JS runtime `runtime` finds (the one `settings.customTools.runtime` names: Node by
/// default, Deno or Bun), looked for only when the project has custom tools.
pub fn project_tools(
    root: &Path,
    connections: &Arc<Connections>,
    runtime: impl FnOnce() -> Result<JsRuntime, CustomToolError>,
) -> anyhow::Result<Vec<Arc<CustomTool>>> {
    let dirs = polpo_custom_tools::load_all(&root.join(".polpo"))?;
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let runtime = runtime();
    Ok(dirs.into_iter().map(|d| Arc::new(CustomTool::new(d, connections.clone(), runtime.clone()))).collect())
}
