//! The loop and step scopes of an invocation.
//!
//! An agent node inside a Project Loop runs through the same chat path as direct chat; what
//! differs is this context: the execution mode (`loop`), the step its matchers see, and the
//! packs the loop and the step assign, which run after the project's and the agent's.

use polpo_core::config::ReasoningLevel;
use polpo_core::hooks::{ExecutionMode, InvocationInfo, Scope};
use polpo_core::model::ModelSelection;
use serde::{Deserialize, Serialize};

/// Where an agent invocation runs inside a Project Loop: the hook packs that loop and step
/// assign, the tools they narrow to, and the model settings the step overrides. Part of a run's durable request, so a resumed loop node keeps its hooks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopContext {
    /// The Project Loop id (`loop` in hook envelopes).
    pub loop_id: String,
    /// The step being executed (`step` in envelopes; what `steps` matchers test).
    pub step: String,
    /// Packs assigned to the whole loop (loop scope).
    #[serde(default)]
    pub loop_hooks: Vec<String>,
    /// Packs assigned to this step (step scope).
    #[serde(default)]
    pub step_hooks: Vec<String>,
    /// The loop's `allowedTools` (the `Loop` policy layer, which replaces the chat layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// The step's `allowedTools` (the `Step` policy layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_allowed_tools: Option<Vec<String>>,
    /// The step's `skills`: the agent's assigned skills this step may use (`None`: all of
    /// them). Only narrows: a name the agent is not assigned is never offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_skills: Option<Vec<String>>,
    /// The step's `model` (a model or a profile the agent may use), instead of the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSelection>,
    /// The step's `reasoning` level, instead of the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningLevel>,
    /// The step's `maxTurns`, instead of the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// The step's sampling `temperature` (0 to 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<serde_json::Number>,
}

impl LoopContext {
    /// The loop- and step-scope assignments, narrowest last, for `resolve_agent_hooks`.
    pub fn assignments(&self) -> [(Scope, &[String]); 2] {
        [(Scope::Loop, &self.loop_hooks), (Scope::Step, &self.step_hooks)]
    }
}

/// Who is running, as hook envelopes and matchers see it: chat, or a loop node with its loop
/// id and step.
pub fn invocation_info(run_id: &str, agent: &str, loop_context: Option<&LoopContext>) -> InvocationInfo {
    InvocationInfo {
        run_id: run_id.to_owned(),
        session_id: None,
        agent: agent.to_owned(),
        mode: if loop_context.is_some() { ExecutionMode::Loop } else { ExecutionMode::Chat },
        loop_id: loop_context.map(|c| c.loop_id.clone()),
        step: loop_context.map(|c| c.step.clone()),
    }
}
