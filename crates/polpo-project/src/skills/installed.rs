//! The project's installed skills under `.polpo/skills/<name>/`: reading them (for `list`,
//! the skill tools and request activation), changing them and their assignments as steps of
//! one [`Edit`] (so a failed change puts every file back), and checking them against the lock.

use super::bundle::{SkillBundle, read_bundle, read_bundle_file, read_tree};
use super::error::SkillError;
use super::lock::{LockEntry, lock_path, read_lock};
use super::meta::{SKILL_MD, SkillMeta, check_name, parse_skill_md};
use crate::agents::{read_agent, write_agent};
use crate::edit::Edit;
use crate::fsx;
use crate::paths::{AGENT_JSON, AGENTS_DIR, display, polpo_dir};
use polpo_core::config::Project;
use polpo_core::problem::Problem;
use std::path::{Path, PathBuf};

/// Installed bundles live here, inside `.polpo/`.
pub const SKILLS_DIR: &str = "skills";
/// Folder whose text files `skill_read({name})` assembles with `SKILL.md`.
pub const REFERENCES_DIR: &str = "references";

/// The folder of installed skill `name` (the name is checked first, so it is never a path).
pub fn skill_dir(root: &Path, name: &str) -> Result<PathBuf, SkillError> {
    check_name(name).map_err(|reason| SkillError::invalid(name, reason))?;
    Ok(polpo_dir(root).join(SKILLS_DIR).join(name))
}

/// The names of the installed skills, sorted (hidden folders, such as removed bundles waiting
/// to be deleted, are not skills).
pub fn installed_names(root: &Path) -> Result<Vec<String>, SkillError> {
    let dir = polpo_dir(root).join(SKILLS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SkillError::io("list", &dir)(e)),
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    Ok(names)
}

/// Front matter of installed skill `name`, whose `name` must equal its folder's.
pub fn read_meta(root: &Path, name: &str) -> Result<SkillMeta, SkillError> {
    let text = read_text(root, name, SKILL_MD)?;
    let meta = parse_skill_md(&text, &display(&[SKILLS_DIR, name, SKILL_MD]))?;
    if meta.name != name {
        return Err(SkillError::invalid(name, format!("SKILL.md names `{}` but its folder is `{name}`", meta.name)));
    }
    Ok(meta)
}

/// File `rel` of installed skill `name` as UTF-8 text (traversal and symlinks refused).
pub fn read_text(root: &Path, name: &str, rel: &str) -> Result<String, SkillError> {
    let dir = skill_dir(root, name)?;
    if !dir.is_dir() {
        return Err(SkillError::NotFound(format!("skill `{name}`")));
    }
    let bytes = read_bundle_file(&dir, rel)?;
    String::from_utf8(bytes).map_err(|_| SkillError::NotText(format!("{name}/{rel}")))
}

/// The UTF-8 files under `references/` of installed skill `name`, by bundle-relative path
/// (binary files are left out: a model reads them by exact path or not at all).
pub fn read_references(root: &Path, name: &str) -> Result<Vec<(String, String)>, SkillError> {
    let dir = skill_dir(root, name)?.join(REFERENCES_DIR);
    if std::fs::symlink_metadata(&dir).is_err() {
        return Ok(Vec::new());
    }
    Ok(read_tree(&dir)?
        .into_iter()
        .filter_map(|(rel, bytes)| Some((format!("{REFERENCES_DIR}/{rel}"), String::from_utf8(bytes).ok()?)))
        .collect())
}

/// Install `bundle` as a step of `edit`: a bundle of the same name is replaced whole, and the
/// lock records `entry` (its hash taken from the bundle).
pub fn install(edit: &mut Edit<'_>, bundle: &SkillBundle, mut entry: LockEntry) -> Result<(), SkillError> {
    let root = edit.root().to_path_buf();
    let dir = skill_dir(&root, &bundle.meta.name)?;
    if std::fs::symlink_metadata(&dir).is_ok() {
        edit.remove_dir(&dir)?;
    }
    for (rel, bytes) in &bundle.files {
        edit.write(&dir.join(rel), bytes)?;
    }
    entry.hash = bundle.hash();
    let mut lock = read_lock(&root)?;
    lock.skills.insert(bundle.meta.name.clone(), entry);
    write_lock(edit, &lock)
}

/// Remove installed skill `name` as a step of `edit`: its folder, its lock entry and its
/// assignment to every agent. Returns the agents it was unassigned from.
pub fn remove(edit: &mut Edit<'_>, project: &Project, name: &str) -> Result<Vec<String>, SkillError> {
    let root = edit.root().to_path_buf();
    let dir = skill_dir(&root, name)?;
    let mut lock = read_lock(&root)?;
    let locked = lock.skills.remove(name).is_some();
    let exists = std::fs::symlink_metadata(&dir).is_ok();
    if !exists && !locked {
        return Err(SkillError::NotFound(format!("skill `{name}`")));
    }
    if exists {
        edit.remove_dir(&dir)?;
    }
    if locked {
        write_lock(edit, &lock)?;
    }
    let holders: Vec<String> = assigned_to(project, name);
    for agent in &holders {
        set_assigned(edit, agent, name, false)?;
    }
    Ok(holders)
}

/// The agents of `project` that have skill `name` assigned.
pub fn assigned_to(project: &Project, name: &str) -> Vec<String> {
    project
        .agents
        .values()
        .filter(|a| a.config.skills.iter().flatten().any(|s| s == name))
        .map(|a| a.id.clone())
        .collect()
}

/// Assign (or unassign) skill `name` to `agent` in its `agent.json`, as a step of `edit`.
/// Assigning needs the skill installed. Returns whether the file changed.
pub fn set_assigned(edit: &mut Edit<'_>, agent: &str, name: &str, assigned: bool) -> Result<bool, SkillError> {
    let root = edit.root().to_path_buf();
    if assigned && !skill_dir(&root, name)?.is_dir() {
        return Err(SkillError::NotFound(format!("skill `{name}` (install it with `polpo skills add`)")));
    }
    let snapshot = read_agent(&root, agent)?;
    let mut config = snapshot.agent.config.clone();
    let mut skills = config.skills.take().unwrap_or_default();
    let had = skills.iter().any(|s| s == name);
    match (assigned, had) {
        (true, false) => skills.push(name.to_owned()),
        (false, true) => skills.retain(|s| s != name),
        _ => {
            config.skills = Some(skills);
            return Ok(false);
        }
    }
    config.skills = (!skills.is_empty()).then_some(skills);
    write_agent(edit, agent, &config, &snapshot.agent.instructions, Some(&snapshot.revision))?;
    Ok(true)
}

fn write_lock(edit: &mut Edit<'_>, lock: &super::lock::SkillsLock) -> Result<(), SkillError> {
    let path = lock_path(edit.root());
    let bytes = fsx::to_json_bytes(lock).map_err(SkillError::io("encode", &path))?;
    Ok(edit.write(&path, &bytes)?)
}

/// What `polpo validate` reports about skills: a lock entry whose bundle is missing or whose
/// files no longer hash to what was installed (`skill_lock_mismatch`), a bundle that does not
/// read (`invalid_skill`, `skill_symlink_refused`, …), and an agent assigned a skill that is
/// not installed (`skill_not_found`, at its `/skills/<i>` pointer).
pub fn check(root: &Path, project: &Project) -> Vec<Problem> {
    let lock_file = display(&["skills.lock.json"]);
    let mut problems = Vec::new();
    let lock = match read_lock(root) {
        Ok(lock) => lock,
        Err(e) => return vec![Problem::new(e.code(), e.to_string()).in_file(lock_file)],
    };
    let names = installed_names(root).unwrap_or_default();
    for name in &names {
        let dir = polpo_dir(root).join(SKILLS_DIR).join(name);
        let shown = display(&[SKILLS_DIR, name]);
        match read_bundle(&dir) {
            Err(e) => problems.push(Problem::new(e.code(), e.to_string()).in_file(shown)),
            Ok(bundle) if bundle.meta.name != *name => problems.push(
                Problem::new(
                    "invalid_skill",
                    format!("SKILL.md names `{}` but its folder is `{name}`", bundle.meta.name),
                )
                .in_file(shown),
            ),
            Ok(bundle) => {
                if let Some(entry) = lock.skills.get(name).filter(|e| e.hash != bundle.hash()) {
                    problems.push(
                        Problem::new(
                            "skill_lock_mismatch",
                            format!(
                                "the files of skill `{name}` changed since they were installed ({} ≠ {}); run `polpo skills update {name}` or restore them",
                                bundle.hash(), entry.hash
                            ),
                        )
                        .in_file(lock_file.clone())
                        .at(format!("/skills/{name}/hash")),
                    );
                }
            }
        }
    }
    for name in lock.skills.keys().filter(|n| !names.contains(n)) {
        problems.push(
            Problem::new(
                "skill_lock_mismatch",
                format!("skill `{name}` is in the lock but not installed under .polpo/skills/"),
            )
            .in_file(lock_file.clone())
            .at(format!("/skills/{name}")),
        );
    }
    for agent in project.agents.values() {
        for (i, skill) in agent.config.skills.iter().flatten().enumerate() {
            if !names.contains(skill) {
                problems.push(
                    Problem::new(
                        "skill_not_found",
                        format!("agent `{}` is assigned skill `{skill}`, which is not installed", agent.id),
                    )
                    .in_file(display(&[AGENTS_DIR, &agent.id, AGENT_JSON]))
                    .at(format!("/skills/{i}")),
                );
            }
        }
    }
    problems
}
