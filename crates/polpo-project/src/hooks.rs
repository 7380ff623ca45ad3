//! Hook packs on disk: `.polpo/hooks/<pack>.json`.
//!
//! Read here, once, like every other project file, and checked by the pure validator in
//! `polpo_core::hooks`; agents' `hooks` arrays must name packs that exist, so an assignment
//! with a typo is an error instead of a hook that silently never fires.

use crate::fsx::{MAX_FILE_BYTES, read_bounded};
use polpo_core::config::Project;
use polpo_core::hooks::HookPack;
use polpo_core::hooks::validate::{ValidateOptions, parse_pack};
use polpo_core::problem::Problem;
use std::collections::BTreeMap;
use std::path::Path;

/// Every pack under `<root>/.polpo/hooks/`, by name, with every problem found in them.
pub fn load_hook_packs(root: &Path) -> (BTreeMap<String, HookPack>, Vec<Problem>) {
    let mut packs = BTreeMap::new();
    let mut problems = Vec::new();
    let dir = root.join(".polpo").join("hooks");
    let Ok(entries) = std::fs::read_dir(&dir) else { return (packs, problems) };
    let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
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
        match parse_pack(&name, &text, &file, &ValidateOptions::default()) {
            Ok(pack) => {
                packs.insert(name, pack);
            }
            Err(p) => problems.extend(p),
        }
    }
    (packs, problems)
}

/// Problems with agents' `hooks` assignments: each name must be a pack that loaded.
pub fn check_hook_assignments(project: &Project, packs: &BTreeMap<String, HookPack>, broken: &[Problem]) -> Vec<Problem> {
    let broken_files: Vec<&str> = broken.iter().filter_map(|p| p.file.as_deref()).collect();
    let mut problems = Vec::new();
    for agent in project.agents.values() {
        for (i, name) in agent.config.hooks.iter().flatten().enumerate() {
            let exists = packs.contains_key(name) || broken_files.contains(&format!(".polpo/hooks/{name}.json").as_str());
            if !exists {
                problems.push(
                    Problem::new("unknown_hook_pack", format!("no hook pack `.polpo/hooks/{name}.json`"))
                        .in_file(agent.source.file.clone())
                        .at(format!("{}/hooks/{i}", agent.source.pointer)),
                );
            }
        }
    }
    problems
}

/// The project's packs and every problem with them or with their assignments.
pub fn check_project_hooks(project: &Project) -> (BTreeMap<String, HookPack>, Vec<Problem>) {
    let (packs, mut problems) = load_hook_packs(&project.root);
    let assignments = check_hook_assignments(project, &packs, &problems);
    problems.extend(assignments);
    (packs, problems)
}
