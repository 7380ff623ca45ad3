//! Built-in tools of Polpo and the sandbox they run in.
//!
//! A [`Tool`] declares what the model sees ([`ToolSpec`]) and how its calls touch the world
//! ([`ToolEffect`]); the engine decides *whether* a call may run (policy, hooks), this crate
//! decides *how* it runs safely: file tools stay inside the allowed paths, processes run in
//! their own process group with bounded time and output and a scrubbed environment.

use polpo_core::redact::Redactor;
use polpo_core::tool::{ToolEffect, ToolSpec};
use sandbox::SandboxPolicy;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

mod args;
pub mod net;
pub mod registry;
pub mod sandbox;
pub mod source;
pub mod tools;

pub use registry::{RegistryError, ToolRegistry};
pub use source::ToolSource;

/// Everything a tool call may use, fixed by the runtime before the call.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The agent's working directory; relative paths resolve here.
    pub workspace: PathBuf,
    /// Roots that file tools may touch (canonical paths). Empty means just `workspace`.
    pub allowed_paths: Vec<PathBuf>,
    /// Paths no file tool may read, write or list, even inside `allowed_paths`, and that `bash`
    /// may not write: the engine sets the project's `.polpo/`, so an agent cannot edit its own
    /// configuration, install hooks, or read other sessions and keys.
    pub protected_paths: Vec<PathBuf>,
    /// Cancelled when the run is aborted; tools stop promptly and kill their processes.
    pub cancel: CancellationToken,
    /// The agent's markdown memory file (e.g. `.polpo/memory/<agent>.md`); `None` disables the
    /// memory tools. Chosen by the runtime, so it is trusted and not subject to `allowed_paths`.
    pub memory_file: Option<PathBuf>,
    /// Extra environment variable names passed to processes on top of the built-in allow-list
    /// (PATH, HOME, LANG, …). Names that look like secrets are dropped even when listed here.
    pub env_allow: Vec<String>,
    /// Lets `http_*` reach loopback, private and link-local addresses. Off by default (SSRF guard).
    pub allow_private_network: bool,
    /// Exact `host:port` authorities that `http_*` may reach even though they resolve to private
    /// addresses (a local dev API, say), without opening the whole private network.
    pub private_network_allowlist: Vec<String>,
    /// How `bash` is confined (limits, user, whether it may run where Landlock is missing).
    pub sandbox: SandboxPolicy,
    /// The Agent Skills `skill_list` and `skill_read` may reach; `None` when the agent has none.
    /// Chosen by the runtime, so it is trusted; the file tools never reach skill files.
    pub skills: Option<SkillAccess>,
    /// Secret values (the vault's) cut out of every result before the model, the session,
    /// events or hooks see it.
    pub redactor: Redactor,
    /// The agent the call runs for (custom tools resolve its Connections and vault entries).
    pub agent: String,
    /// Who invoked the agent (`requestId`, `runId`, `sessionId`, `user`, `metadata`,
    /// `surface`), as custom tools' `ctx.invocation` and `serverBindings` read it; `null`
    /// outside an invocation.
    pub invocation: serde_json::Value,
}

/// Which installed skills one call may read, and where they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillAccess {
    /// The project root (the folder holding `.polpo/skills/`).
    pub root: PathBuf,
    /// The skills assigned to the agent (the only ones listed and readable).
    pub names: Vec<String>,
}

impl ToolContext {
    /// A context confined to `workspace`, with no protected paths, no memory file, the default
    /// environment allow-list, the private network closed, the default `bash` sandbox policy,
    /// no skills, a fresh cancellation token, an empty redaction list and no invocation.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            allowed_paths: Vec::new(),
            protected_paths: Vec::new(),
            cancel: CancellationToken::new(),
            memory_file: None,
            env_allow: Vec::new(),
            allow_private_network: false,
            private_network_allowlist: Vec::new(),
            sandbox: SandboxPolicy::default(),
            skills: None,
            redactor: Redactor::new(),
            agent: String::new(),
            invocation: serde_json::Value::Null,
        }
    }
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
    /// How calls touch the world, in the worst case over all arguments.
    fn effect(&self) -> ToolEffect;
    /// How this particular call touches the world. Defaults to [`Tool::effect`]; a tool whose
    /// effect depends on its arguments (`http_fetch` with `GET` vs `POST`) narrows it here, so a
    /// GET can join a parallel read batch while a POST is never replayed.
    fn call_effect(&self, _args: &serde_json::Value) -> ToolEffect {
        self.effect()
    }
    /// Run one call with arguments already validated against the schema.
    async fn call(&self, ctx: &ToolContext, args: serde_json::Value) -> Result<ToolOutput, ToolError>;
}
