//! A project as the runtime serves it: the validated configuration and what is derived from it
//! once (hook sets, system prompts and tool contexts per agent), swapped whole on reload. Built
//! from a loaded project without reading any file: the hook packs came with it.

use crate::hooks::LoopContext;
use polpo_core::config::{Agent, Project};
use polpo_core::hooks::HookSet;
use polpo_core::problem::Problem;
use polpo_tools::ToolContext;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A project as the runtime serves it: configuration plus what was derived from it once
/// (hook sets, system prompts and tool contexts per agent). Swapped whole on reload, so a
/// request never sees half of an edit.
pub struct Loaded {
    /// The validated project (with its hook packs).
    pub project: Project,
    /// Each agent's resolved hooks (absent: the agent has none).
    hooks: BTreeMap<String, Arc<HookSet>>,
    /// What every run and every loop tool step of each agent starts from, made once.
    derived: BTreeMap<String, Derived>,
}

/// What an agent's invocations start from, made from its configuration at load.
struct Derived {
    /// Its system prompt (instructions and identity).
    prompt: String,
    /// Where its tools run ([`tool_context`]), with a cancellation token of its own that no
    /// call uses: each call gets a child of its request's.
    tool_context: ToolContext,
}

impl Loaded {
    /// Resolve every agent's hook packs; a project whose packs do not resolve is refused.
    pub fn new(project: Project) -> Result<Self, Vec<Problem>> {
        let mut hooks = BTreeMap::new();
        let mut derived = BTreeMap::new();
        for (id, agent) in &project.agents {
            let prompt = polpo_core::prompt::system_prompt(agent);
            let tool_context = tool_context(&project, agent, &CancellationToken::new());
            derived.insert(id.clone(), Derived { prompt, tool_context });
            let set = polpo_project::hooks::resolve_agent_hooks(&project, agent, &[])?;
            if !set.is_empty() {
                hooks.insert(id.clone(), Arc::new(set));
            }
        }
        Ok(Self { project, hooks, derived })
    }

    /// What was made at load for `agent`, when it is this project's own (not a copy a caller
    /// changed under the same id, which gets its own made per call).
    fn derived(&self, agent: &Agent) -> Option<&Derived> {
        let loaded = self.project.agent(&agent.id)?;
        self.derived.get(&agent.id).filter(|_| std::ptr::eq(loaded, agent))
    }

    /// `agent`'s system prompt ([`polpo_core::prompt::system_prompt`]).
    pub fn system_prompt(&self, agent: &Agent) -> String {
        match self.derived(agent) {
            Some(derived) => derived.prompt.clone(),
            None => polpo_core::prompt::system_prompt(agent),
        }
    }

    /// Where `agent`'s tools run for one call cancelled with `cancel` ([`tool_context`]).
    pub fn tool_context(&self, agent: &Agent, cancel: &CancellationToken) -> ToolContext {
        match self.derived(agent) {
            Some(derived) => ToolContext { cancel: cancel.child_token(), ..derived.tool_context.clone() },
            None => tool_context(&self.project, agent, cancel),
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

/// Where the agent's tools run: the project's work dir, confined to `allowedPaths`, with the
/// agent's memory file, cancelled with the request. Public for the tools started outside a
/// request under the same confinement (`polpo mcp list` connecting an agent's MCP servers).
pub fn tool_context(project: &Project, agent: &Agent, cancel: &CancellationToken) -> ToolContext {
    let workspace: PathBuf = match project.settings().work_dir.as_deref() {
        Some(dir) => project.root.join(dir),
        None => project.root.clone(),
    };
    let polpo_dir = project.root.join(".polpo");
    let mut ctx = ToolContext::new(workspace.clone());
    ctx.allowed_paths = agent.config.allowed_paths.iter().flatten().map(|p| workspace.join(p)).collect();
    // The project's own folder (agents, hooks, sessions, keys) is never the agent's to read or
    // edit, whatever the workspace or allowedPaths say; only the memory tools reach their file.
    ctx.protected_paths = vec![polpo_dir.clone()];
    ctx.sandbox = project.settings().sandbox.as_ref().map(Into::into).unwrap_or_default();
    ctx.memory_file = Some(polpo_dir.join("memory").join(format!("{}.md", agent.id)));
    ctx.skills = skill_access(project, assigned_skills(agent));
    ctx.cancel = cancel.child_token();
    ctx.agent = agent.id.clone();
    ctx
}

/// The skills assigned to `agent` (`skills` in its agent.json).
pub(crate) fn assigned_skills(agent: &Agent) -> &[String] {
    agent.config.skills.as_deref().unwrap_or_default()
}

/// What `skill_list` and `skill_read` may reach: these skills of the project (`None`: no skills).
pub(crate) fn skill_access(project: &Project, names: &[String]) -> Option<polpo_tools::SkillAccess> {
    (!names.is_empty()).then(|| polpo_tools::SkillAccess { root: project.root.clone(), names: names.to_vec() })
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

    /// A call's tool context is the one made at load, cancelled with its own request only; an
    /// agent a caller changed (other `allowedPaths`, same id) gets the context its fields make.
    #[test]
    fn tool_contexts_are_made_once_and_cancelled_per_call() {
        let dir = tempfile::tempdir().unwrap();
        ProjectFixture::new(dir.path(), json!({}))
            .unwrap()
            .agent("helper", json!({"model": "openai/m", "allowedPaths": ["src"], "skills": []}), "You help.")
            .unwrap();
        let loaded = Loaded::new(polpo_project::load_project(dir.path()).unwrap()).unwrap();
        let agent = loaded.agent("helper").unwrap();
        let (first, second) = (CancellationToken::new(), CancellationToken::new());
        let (a, b) = (loaded.tool_context(agent, &first), loaded.tool_context(agent, &second));
        let fresh = tool_context(&loaded.project, agent, &first);
        assert_eq!(format!("{:?}", ToolContext { cancel: fresh.cancel.clone(), ..a.clone() }), format!("{fresh:?}"));
        assert_eq!(a.allowed_paths, vec![loaded.project.root.join("src")]);
        assert_eq!(a.protected_paths, vec![loaded.project.root.join(".polpo")]);
        first.cancel();
        assert!(a.cancel.is_cancelled() && !b.cancel.is_cancelled());
        let mut changed = agent.clone();
        changed.config.allowed_paths = Some(vec!["docs".into()]);
        let own = loaded.tool_context(&changed, &second);
        assert_eq!(own.allowed_paths, vec![loaded.project.root.join("docs")]);
    }
}
