//! Running Runtime Hooks around the turn loop: handlers (command, http, tool, prompt), the
//! sequential controlling chain with concurrent observers, and the termination gate.
//!
//! What a hook *means* (ordering, decision folding, gate budgets, the envelope) is decided in
//! `polpo_core::hooks`; this module only performs the effects — processes, HTTP, tool calls,
//! model calls — and reports each execution as [`RunEvent::HookStarted`] /
//! [`RunEvent::HookCompleted`](crate::RunEvent::HookCompleted) with a stable execution id.
//!
//! [`RunEvent::HookStarted`]: crate::RunEvent::HookStarted

mod command;
pub mod gate;
mod handlers;
mod http;
pub(crate) mod runner;
mod scopes;
pub(crate) mod termination;
mod verifier;

pub use gate::{GateCheckpoint, GateDecision, GateValidation};
pub use scopes::{LoopContext, invocation_info};

use polpo_core::hooks::{ExecutionMode, HookSet, InvocationInfo, Target};
use polpo_core::policy::ToolPolicy;
use polpo_llm::ModelProvider;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the emergency kill switch.
pub const KILL_SWITCH_ENV: &str = "POLPO_RUNTIME_HOOKS";

/// Elapsed time since the invocation started. A function, not a clock read, so tests (and
/// resumed durable runs, which start with the time already used) control it.
pub type Clock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// A clock that starts now and follows the machine's monotonic time.
pub fn system_clock() -> Clock {
    let start = Instant::now();
    Arc::new(move || start.elapsed())
}

/// How the host runs hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookRuntime {
    /// False when the kill switch is thrown: hooks do not run, and an agent with a
    /// termination gate refuses to run at all rather than run unvalidated.
    pub enabled: bool,
    /// A managed host: command hooks without `timeoutMs` get 60 s instead of 5 s.
    pub managed: bool,
    /// Let `http` handlers reach `http://127.0.0.1:<port>`: tests, or an operator's
    /// `POLPO_HOOKS_ALLOW_LOOPBACK=1` (the same switch lets such packs load).
    pub allow_loopback_http: bool,
}

impl HookRuntime {
    /// The production setting: enabled unless `POLPO_RUNTIME_HOOKS=off`, loopback endpoints only
    /// when `POLPO_HOOKS_ALLOW_LOOPBACK=1`, portable defaults.
    pub fn from_env() -> Self {
        let loopback = std::env::var(polpo_core::hooks::validate::LOOPBACK_ENV).ok();
        Self {
            enabled: hooks_enabled(std::env::var(KILL_SWITCH_ENV).ok().as_deref()),
            managed: false,
            allow_loopback_http: polpo_core::hooks::ValidateOptions::with_loopback_switch(loopback.as_deref())
                .allow_loopback_http,
        }
    }
}

impl Default for HookRuntime {
    fn default() -> Self {
        Self { enabled: true, managed: false, allow_loopback_http: false }
    }
}

/// Reads the kill switch value: `off` (also `0`, `false`, `disabled`) turns hooks off.
pub fn hooks_enabled(value: Option<&str>) -> bool {
    !matches!(value.map(|v| v.trim().to_ascii_lowercase()).as_deref(), Some("off" | "0" | "false" | "disabled"))
}

/// A project agent resolved as a verifier: what it runs with. Built when the invocation is
/// prepared, so an unknown verifier agent fails before any model call.
pub struct VerifierAgent {
    /// Its id.
    pub agent: String,
    /// Its system prompt (instructions, identity).
    pub system_prompt: String,
    /// Its own model chain.
    pub provider: Arc<dyn ModelProvider>,
    /// Its own tool policy (`allowedTools`); only read-only tools are ever offered on top.
    pub policy: ToolPolicy,
}

impl std::fmt::Debug for VerifierAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifierAgent").field("agent", &self.agent).finish_non_exhaustive()
    }
}

/// Everything the turn loop needs to run the hooks of one invocation.
#[derive(Clone)]
pub struct InvocationHooks {
    /// The agent's resolved hooks, in running order.
    pub set: Arc<HookSet>,
    /// Who is running (goes into every envelope).
    pub info: InvocationInfo,
    /// Host settings (kill switch, managed defaults).
    pub runtime: HookRuntime,
    /// Time since the invocation started, for `maxDurationMs`.
    pub clock: Clock,
    /// Vault values that must be redacted from envelopes wherever they appear.
    pub secrets: Vec<String>,
    /// The invocation is a durable agent node inside a parallel loop branch, where gate
    /// checkpoints are not supported yet: a gate there is rejected before inference.
    pub parallel_branch: bool,
    /// The project agents named by `verifier` handlers in `set`, resolved by id.
    pub verifiers: std::collections::BTreeMap<String, Arc<VerifierAgent>>,
    /// The project's Connections, through which `http` handlers with `connection`
    /// authenticate; `None` when the host has none (such handlers then fail, fail-closed).
    pub connections: Option<Arc<polpo_connections::Connections>>,
}

impl InvocationHooks {
    /// Hooks for `info` with the system clock, the environment's kill switch, no secrets, no
    /// verifier agents and no Connections.
    pub fn new(set: Arc<HookSet>, info: InvocationInfo) -> Self {
        Self {
            set,
            info,
            runtime: HookRuntime::from_env(),
            clock: system_clock(),
            secrets: Vec::new(),
            parallel_branch: false,
            verifiers: Default::default(),
            connections: None,
        }
    }

    /// Hook-authored text (reasons, feedback, diagnostics) with credentials and vault values
    /// removed, before it becomes model-visible.
    pub(crate) fn redact_text(&self, text: String) -> String {
        let mut v = serde_json::Value::String(text);
        polpo_core::hooks::redact(&mut v, &self.secrets);
        match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        }
    }

    /// What matchers see for this invocation (the tool is filled in per call).
    pub fn target<'a>(&'a self, tool: Option<&'a str>) -> Target<'a> {
        Target {
            mode: self.info.mode,
            step: self.info.step.as_deref().filter(|_| self.info.mode == ExecutionMode::Loop),
            tool,
        }
    }
}

impl std::fmt::Debug for InvocationHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvocationHooks")
            .field("hooks", &self.set.hooks().len())
            .field("info", &self.info)
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kill_switch_reads_off() {
        assert!(hooks_enabled(None));
        assert!(hooks_enabled(Some("on")));
        assert!(!hooks_enabled(Some("off")));
        assert!(!hooks_enabled(Some(" OFF ")));
    }
}
