//! A project as the runtime serves it: the validated configuration and what is derived from it
//! once (hook sets per agent), swapped whole on reload. Built from a loaded project without
//! reading any file: the hook packs came with it.

use crate::hooks::LoopContext;
use polpo_core::config::{Agent, Project};
use polpo_core::hooks::HookSet;
use polpo_core::problem::Problem;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A project as the runtime serves it: configuration plus what was derived from it once
/// (hook sets per agent). Swapped whole on reload, so a request never sees half of an edit.
pub struct Loaded {
    /// The validated project (with its hook packs).
    pub project: Project,
    /// Each agent's resolved hooks (absent: the agent has none).
    hooks: BTreeMap<String, Arc<HookSet>>,
}

impl Loaded {
    /// Resolve every agent's hook packs; a project whose packs do not resolve is refused.
    pub fn new(project: Project) -> Result<Self, Vec<Problem>> {
        let mut hooks = BTreeMap::new();
        for (id, agent) in &project.agents {
            let set = polpo_project::hooks::resolve_agent_hooks(&project, agent, &[])?;
            if !set.is_empty() {
                hooks.insert(id.clone(), Arc::new(set));
            }
        }
        Ok(Self { project, hooks })
    }

    /// The agent called `id`.
    pub fn agent(&self, id: &str) -> Option<&Agent> {
        self.project.agent(id)
    }

    /// The hooks one invocation of `agent` runs: its project and agent packs (resolved once,
    /// above), plus — for a loop node — the loop's and the step's, resolved per request.
    /// `None` when no hook applies; an unknown pack name is a problem, never silently skipped.
    pub fn hooks_for(
        &self,
        agent: &Agent,
        loop_context: Option<&LoopContext>,
    ) -> Result<Option<Arc<HookSet>>, Vec<Problem>> {
        let Some(ctx) = loop_context else { return Ok(self.hooks.get(&agent.id).cloned()) };
        let set = polpo_project::hooks::resolve_agent_hooks(&self.project, agent, &ctx.assignments())?;
        Ok((!set.is_empty()).then(|| Arc::new(set)))
    }
}
