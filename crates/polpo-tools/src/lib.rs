//! Built-in tools of Polpo and the sandbox they run in.
//!
//! A [`Tool`] declares what the model sees ([`ToolSpec`]) and how its calls touch the world
//! ([`ToolEffect`]); the engine decides *whether* a call may run (policy, hooks), this crate
//! decides *how* it runs safely: file tools stay inside the allowed paths, processes run in
//! their own process group with bounded time and output and a scrubbed environment.

use polpo_core::tool::{ToolEffect, ToolSpec};
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// Everything a tool call may use, fixed by the runtime before the call.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The agent's working directory; relative paths resolve here.
    pub workspace: PathBuf,
    /// Roots that file tools may touch (canonical paths). Empty means just `workspace`.
    pub allowed_paths: Vec<PathBuf>,
    /// Cancelled when the run is aborted; tools stop promptly and kill their processes.
    pub cancel: CancellationToken,
}

/// What a successful call returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The model-visible result.
    pub text: String,
    /// Structured details for traces and UIs (never shown to the model).
    pub details: serde_json::Value,
}

/// A failed call; the engine shows the model `Error: <message>`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// Stable snake_case code (`path_outside_sandbox`, `not_unique`, `timeout`, …).
    pub code: String,
    /// Human sentence.
    pub message: String,
}

impl ToolError {
    /// An error with a code and a sentence.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into() }
    }
}

/// A tool the runtime can execute.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and argument schema, as shown to the model.
    fn spec(&self) -> &ToolSpec;
    /// How calls touch the world.
    fn effect(&self) -> ToolEffect;
    /// Run one call with arguments already validated against the schema.
    async fn call(&self, ctx: &ToolContext, args: serde_json::Value) -> Result<ToolOutput, ToolError>;
}
