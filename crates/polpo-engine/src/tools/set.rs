//! An agent's server tools as the runtime holds them: each tool with its argument schema
//! compiled once and its spec shared with every model request, so a request clones pointers
//! rather than schemas and a call's arguments are checked without recompiling anything.

use polpo_core::tool::ToolSpec;
use polpo_tools::Tool;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// A tool with its argument schema compiled once and its spec shared with model requests.
struct ToolEntry {
    tool: Arc<dyn Tool>,
    spec: Arc<ToolSpec>,
    validator: Option<jsonschema::Validator>,
}

/// An agent's server tools, compiled once and shared by every request to that agent.
pub struct ToolSet {
    entries: Vec<ToolEntry>,
    by_name: HashMap<String, usize>,
}

impl ToolSet {
    /// Compile the schemas of `tools`. A tool whose schema does not compile is kept but its
    /// calls are refused, so one bad custom tool cannot take the agent down.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let entries: Vec<ToolEntry> = tools
            .into_iter()
            .map(|tool| {
                let validator = jsonschema::draft202012::new(&tool.spec().parameters).ok();
                ToolEntry { spec: Arc::new(tool.spec().clone()), tool, validator }
            })
            .collect();
        let by_name = entries.iter().enumerate().map(|(i, e)| (e.spec.name.clone(), i)).collect();
        Self { entries, by_name }
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.entries[i].tool)
    }

    /// Specs in declaration order, shared: a model request clones the pointers, not the schemas.
    pub fn specs(&self) -> impl Iterator<Item = &Arc<ToolSpec>> {
        self.entries.iter().map(|e| &e.spec)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the agent has no server tools.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Check `arguments` against the schema of tool `name`; `Err` is a model-visible
    /// `invalid_arguments`/`invalid_tool`/`unknown_tool` sentence.
    pub fn check_arguments(&self, name: &str, arguments: &Value) -> Result<(), String> {
        let entry = self
            .by_name
            .get(name)
            .map(|&i| &self.entries[i])
            .ok_or_else(|| format!("unknown_tool: no tool named `{name}`"))?;
        let validator =
            entry.validator.as_ref().ok_or_else(|| format!("invalid_tool: the schema of `{name}` does not compile"))?;
        let problems: Vec<String> =
            validator.iter_errors(arguments).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
        if problems.is_empty() { Ok(()) } else { Err(format!("invalid_arguments: {}", problems.join("; "))) }
    }
}
