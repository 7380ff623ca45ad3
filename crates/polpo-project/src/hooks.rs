//! Hook packs on disk: `.polpo/hooks/<pack>.json`.
//!
//! Read here, once, by the loader like every other project file (into `Project::hook_packs`),
//! and checked by the pure validator in `polpo_core::hooks`; agents' `hooks` arrays must name
//! packs that exist, so an assignment with a typo is a load error instead of a hook that
//! silently never fires.

use crate::fsx::{MAX_FILE_BYTES, read_bounded};
use polpo_core::config::{Agent, Project};
use polpo_core::hooks::validate::{LOOPBACK_ENV, ValidateOptions, parse_pack};
use polpo_core::hooks::{Handler, HookPack, HookSet, Scope, resolve_named};
use polpo_core::problem::Problem;
use std::collections::BTreeMap;
use std::path::Path;

/// Every pack under `<root>/.polpo/hooks/`, by name, with every problem found in them.
pub(crate) fn load_hook_packs(root: &Path) -> (BTreeMap<String, HookPack>, Vec<Problem>) {
    let mut packs = BTreeMap::new();
    let mut problems = Vec::new();
    let dir = root.join(".polpo").join("hooks");
    let connections = crate::paths::polpo_dir(root).join(crate::paths::CONNECTIONS_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else { return (packs, problems) };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for path in files {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let file = format!(".polpo/hooks/{name}.json");
        let text = match read_bounded(&path, MAX_FILE_BYTES).map(String::from_utf8) {
            Ok(Ok(text)) => text,
            _ => {
                problems.push(Problem::new("unreadable_file", "cannot read this file as UTF-8 text").in_file(file));
                continue;
            }
        };
        let options = ValidateOptions::with_loopback_switch(std::env::var(LOOPBACK_ENV).ok().as_deref());
        match parse_pack(&name, &text, &file, &options) {
            Ok(pack) => {
                // Valid by the contract but not runnable here: refused now rather than failing
                // every matching call later.
                let known = |id: &str| connections.join(format!("{id}.json")).is_file();
                problems.extend(
                    polpo_core::hooks::capabilities::unrunnable_hooks(&pack, &known)
                        .into_iter()
                        .map(|p| p.in_file(file.clone())),
                );
                packs.insert(name, pack);
            }
            Err(p) => problems.extend(p),
        }
    }
    (packs, problems)
}

/// Problems with `hooks` assignments (the project's `settings.hooks`, each agent's `hooks`):
/// each name must be one of the project's packs, or a pack file that is `broken` (already
/// reported, so not reported twice).
fn check_hook_assignments(project: &Project, broken: &[Problem]) -> Vec<Problem> {
    let broken_files: Vec<&str> = broken.iter().filter_map(|p| p.file.as_deref()).collect();
    let project_hooks = (project.manifest_source.child("settings").child("hooks"), project.settings().hooks.as_deref());
    let agent_hooks = project.agents.values().map(|agent| (agent.source.child("hooks"), agent.config.hooks.as_deref()));
    let mut problems = Vec::new();
    for (at, names) in std::iter::once(project_hooks).chain(agent_hooks) {
        for (i, name) in names.unwrap_or_default().iter().enumerate() {
            let exists = project.hook_packs.contains_key(name)
                || broken_files.contains(&format!(".polpo/hooks/{name}.json").as_str());
            if !exists {
                problems.push(at.problem(
                    "unknown_hook_pack",
                    format!("no hook pack `.polpo/hooks/{name}.json`"),
                    &format!("/{i}"),
                ));
            }
        }
    }
    problems
}

/// The packs assigned to `agent` outside any loop, broadest scope first: the project's
/// `settings.hooks`, then the agent's `hooks`.
pub fn hook_assignments<'a>(project: &'a Project, agent: &'a Agent) -> [(Scope, &'a [String]); 2] {
    [
        (Scope::Project, project.settings().hooks.as_deref().unwrap_or_default()),
        (Scope::Agent, agent.config.hooks.as_deref().unwrap_or_default()),
    ]
}

/// The hooks `agent` runs, in running order: its project and agent packs plus `narrower`
/// ones (the loop and step packs of a loop node). The one resolution behind the runtime and
/// `polpo hooks explain`, so what explain prints is what a request runs.
pub fn resolve_agent_hooks(
    project: &Project,
    agent: &Agent,
    narrower: &[(Scope, &[String])],
) -> Result<HookSet, Vec<Problem>> {
    let assignments: Vec<(Scope, &[String])> =
        hook_assignments(project, agent).into_iter().chain(narrower.iter().copied()).collect();
    resolve_named(&project.hook_packs, &assignments)
}

/// Every problem with the project's hook references (assignments to packs, verifier agents),
/// given the problems of the pack files that did not load (`broken`). Part of loading: a
/// loaded [`Project`] has none.
pub(crate) fn check_hook_references(project: &Project, broken: &[Problem]) -> Vec<Problem> {
    let mut problems = check_hook_assignments(project, broken);
    problems.extend(check_verifier_agents(project));
    problems
}

/// Every `verifier` handler must name an agent of the project (`invalid_reference` at the
/// handler's `agent`), so a typo is caught by `polpo validate`, not by the first matching call.
fn check_verifier_agents(project: &Project) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (name, pack) in &project.hook_packs {
        for hook in &pack.hooks {
            if let Handler::Verifier { agent, .. } = hook.action.handler()
                && !project.agents.contains_key(agent)
            {
                problems.push(
                    Problem::new(
                        "invalid_reference",
                        format!("verifier agent `{agent}` is not an agent of this project"),
                    )
                    .at(format!("{}/agent", hook.handler_pointer()))
                    .in_file(format!(".polpo/hooks/{name}.json")),
                );
            }
        }
    }
    problems
}
