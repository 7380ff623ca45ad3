//! A project as the runtime serves it: the validated configuration and what is derived from it
//! once (hook sets and system prompts per agent), swapped whole on reload. Built from a loaded
//! project without reading any file: the hook packs came with it.

use crate::hooks::LoopContext;
use polpo_core::config::{Agent, Project};
use polpo_core::hooks::HookSet;
use polpo_core::problem::Problem;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A project as the runtime serves it: configuration plus what was derived from it once
/// (hook sets and system prompts per agent). Swapped whole on reload, so a request never sees
/// half of an edit.
pub struct Loaded {
    /// The validated project (with its hook packs).
    pub project: Project,
    /// Each agent's resolved hooks (absent: the agent has none).
    hooks: BTreeMap<String, Arc<HookSet>>,
    /// Each agent's system prompt (its instructions and identity), made once: every run and
    /// every loop tool step starts from it.
    prompts: BTreeMap<String, String>,
}

impl Loaded {
    /// Resolve every agent's hook packs; a project whose packs do not resolve is refused.
    pub fn new(project: Project) -> Result<Self, Vec<Problem>> {
        let mut hooks = BTreeMap::new();
        let mut prompts = BTreeMap::new();
        for (id, agent) in &project.agents {
            prompts.insert(id.clone(), polpo_core::prompt::system_prompt(agent));
            let set = polpo_project::hooks::resolve_agent_hooks(&project, agent, &[])?;
            if !set.is_empty() {
                hooks.insert(id.clone(), Arc::new(set));
            }
        }
        Ok(Self { project, hooks, prompts })
    }

    /// `agent`'s system prompt ([`polpo_core::prompt::system_prompt`]): as made at load when
    /// `agent` is this project's own (not a copy a caller changed), else made now.
    pub fn system_prompt(&self, agent: &Agent) -> String {
        match (self.project.agent(&agent.id), self.prompts.get(&agent.id)) {
            (Some(loaded), Some(prompt)) if std::ptr::eq(loaded, agent) => prompt.clone(),
            _ => polpo_core::prompt::system_prompt(agent),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use polpo_testkit::ProjectFixture;
    use serde_json::json;

    /// The prompt made at load is the one made from the agent; an agent a caller changed (a
    /// copy with other instructions, under the same id) gets its own.
    #[test]
    fn system_prompts_are_made_once_for_the_projects_own_agents() {
        let dir = tempfile::tempdir().unwrap();
        ProjectFixture::new(dir.path(), json!({}))
            .unwrap()
            .agent("helper", json!({"model": "openai/m", "role": "reviewer"}), "You help.")
            .unwrap();
        let loaded = Loaded::new(polpo_project::load_project(dir.path()).unwrap()).unwrap();
        let agent = loaded.agent("helper").unwrap();
        let made = loaded.system_prompt(agent);
        assert_eq!(made, polpo_core::prompt::system_prompt(agent));
        assert!(made.starts_with("You help.") && made.contains("- Role: reviewer"), "{made}");
        let mut changed = agent.clone();
        changed.instructions = "You review.".into();
        assert!(loaded.system_prompt(&changed).starts_with("You review."));
    }
}
