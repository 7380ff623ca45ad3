//! The set of tools a runtime can execute, by name.

use crate::Tool;
use polpo_core::tool::ToolSpec;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Another tool already has this name.
    #[error("duplicate_tool: a tool named {0} is already registered")]
    Duplicate(String),
}

impl RegistryError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            RegistryError::Duplicate(_) => "duplicate_tool",
        }
    }
}

/// Tools by name, in registration order, so the catalog shown to the model is stable from run
/// to run (prompt caching and reproducible traces depend on it).
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    index: HashMap<String, usize>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every built-in system tool, in the reference's order: read, write, edit, bash, glob,
    /// grep, ls, http_fetch, http_download, register_outcome, memory_get, memory_save,
    /// memory_append, memory_update. Which of them an agent may use is the policy's decision.
    pub fn system_tools() -> Self {
        let mut registry = Self::new();
        for tool in crate::tools::system_tools() {
            // Built-in names are distinct by construction; a clash would be a bug caught by tests.
            let _ = registry.register(tool);
        }
        registry
    }

    /// Adds a tool; names are unique.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.spec().name.clone();
        if self.index.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.index.insert(name, self.tools.len());
        self.tools.push(tool);
        Ok(())
    }

    /// The tool with exactly this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// True when a tool has this name.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Tools in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }

    /// Tool names in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.spec().name.as_str())
    }

    /// Specs in registration order, as shown to the model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec().clone()).collect()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}
