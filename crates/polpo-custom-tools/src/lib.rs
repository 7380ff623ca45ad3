//! Custom tools: `.polpo/tools/<name>/tool.json` plus an entrypoint, registered into the same
//! tool set as the built-in ones (so policy, hooks and schema checks apply unchanged).
//!
//! The model sees only the manifest's `parameters`. Before each call the host reads the hidden
//! bindings from the immutable invocation (`serverBindings`, validated by `bindingsSchema`) and
//! resolves each Connection slot to headers; any failure stops the call before tool code runs.
//! The entrypoint then runs as a sandboxed process speaking JSON over stdin/stdout
//! ([`run`]); `index.ts|.js|.mjs` written with `defineTool(...)` runs under Node (or Deno or
//! Bun, as `settings.customTools.runtime` says: [`JsRuntime`]) through a small bridge, its
//! TypeScript stripped in Rust first ([`strip`]).

pub mod manifest;
pub mod run;
pub mod strip;

pub use manifest::{Manifest, ToolDir, load_all};
pub use run::{CustomTool, JsRuntime};

/// Why a custom tool could not be loaded or called. No variant carries a binding value or a
/// credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CustomToolError {
    /// A manifest or entrypoint that fails its checks.
    #[error("custom_tool_invalid: {file}:{pointer}: {message}")]
    Invalid {
        /// The file, relative to the project.
        file: String,
        /// JSON pointer (empty for the whole file).
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// Hidden bindings missing or failing `bindingsSchema`.
    #[error("tool_binding_invalid: {0}")]
    BindingInvalid(String),
    /// No JS runtime (Node ≥ 20, or the configured Deno or Bun) for a JavaScript or
    /// TypeScript entrypoint.
    #[error("custom_tool_runtime_unavailable: {0}")]
    RuntimeUnavailable(String),
    /// The tool's source does not transpile, or imports something it may not.
    #[error("custom_tool_source_invalid: {0}")]
    Source(String),
    /// The process failed or answered something that is not the protocol.
    #[error("custom_tool_failed: {0}")]
    Failed(String),
    /// Reading the tools folder failed.
    #[error("custom_tool_io: {0}")]
    Io(String),
}

impl CustomToolError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            CustomToolError::Invalid { .. } => "custom_tool_invalid",
            CustomToolError::BindingInvalid(_) => "tool_binding_invalid",
            CustomToolError::RuntimeUnavailable(_) => "custom_tool_runtime_unavailable",
            CustomToolError::Source(_) => "custom_tool_source_invalid",
            CustomToolError::Failed(_) => "custom_tool_failed",
            CustomToolError::Io(_) => "custom_tool_io",
        }
    }
}
