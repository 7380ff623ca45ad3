//! `polpo skills add|list|assign|unassign|remove|update`: the project's Agent Skills.
//!
//! `add` fetches a source (a local folder, a local or remote git repository, or `owner/repo`
//! on GitHub), installs its bundles (or those `--skill` names) under `.polpo/skills/`, records
//! them in `.polpo/skills.lock.json` and assigns them to each `--agent`; `update` fetches the
//! recorded source again and changes nothing when the files are the same. Every change is one
//! project edit: written, the whole project loaded, or every file put back.

use super::{Global, print_json, print_problems_to_stderr};
use polpo_project::ProjectEditor;
use polpo_project::skills::{self, LockEntry, SkillError};
use polpo_skills::source::{Source, checkout, pick, refetch};
use std::process::ExitCode;

/// `polpo skills` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Install skills from a folder, a git repository (URL or path) or owner/repo (GitHub).
    Add {
        /// Where the skills are.
        source: String,
        /// Install only this skill (repeatable); default: every bundle in the source.
        #[arg(long = "skill", value_name = "NAME")]
        skills: Vec<String>,
        /// Assign the installed skills to this agent (repeatable).
        #[arg(long = "agent", value_name = "AGENT")]
        agents: Vec<String>,
    },
    /// The installed skills: name, description, agents, source and revision.
    List {
        /// Print `[{name, description, assignedTo, lock}]` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add an installed skill to agents' `skills`.
    Assign {
        /// The skill.
        name: String,
        /// The agents (repeatable).
        #[arg(long = "agent", value_name = "AGENT", required = true)]
        agents: Vec<String>,
    },
    /// Remove a skill from agents' `skills`.
    Unassign {
        /// The skill.
        name: String,
        /// The agents (repeatable).
        #[arg(long = "agent", value_name = "AGENT", required = true)]
        agents: Vec<String>,
    },
    /// Uninstall a skill: its folder, its lock entry and every assignment.
    Remove {
        /// The skill.
        name: String,
    },
    /// Fetch a skill's recorded source again and install what changed.
    Update {
        /// The skill (or `--all`).
        name: Option<String>,
        /// Every skill in the lock file.
        #[arg(long, conflicts_with = "name")]
        all: bool,
    },
}

/// Run a skills subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let root = global.root()?;
    let editor = ProjectEditor::new(&root);
    let result = match command {
        Command::Add { source, skills, agents } => add(&editor, &source, &skills, &agents),
        Command::List { json } => return list(global, json),
        Command::Assign { name, agents } => assign(&editor, &name, &agents, true),
        Command::Unassign { name, agents } => assign(&editor, &name, &agents, false),
        Command::Remove { name } => remove(global, &editor, &name),
        Command::Update { name, all } => update(&editor, name, all),
    };
    result.map(|()| ExitCode::SUCCESS).or_else(report)
}

/// A refused command: its problems (a project that would no longer load) or its code and
/// sentence, on stderr; exit 1.
fn report(e: SkillError) -> anyhow::Result<ExitCode> {
    match &e {
        SkillError::Project(polpo_project::ProjectError::Invalid(problems)) => print_problems_to_stderr(problems),
        _ => eprintln!("error: {}: {e}", e.code()),
    }
    Ok(ExitCode::FAILURE)
}

fn add(editor: &ProjectEditor, spec: &str, wanted: &[String], agents: &[String]) -> Result<(), SkillError> {
    let cwd = std::env::current_dir().map_err(|e| SkillError::Source(format!("no current directory: {e}")))?;
    let source = Source::parse(spec, &cwd)?;
    let checkout = checkout(&source)?;
    let found = pick(&checkout, wanted)?;
    editor.edit(
        |edit| {
            for f in &found {
                skills::install(edit, &f.bundle, f.lock_entry(&source, &checkout))?;
                for agent in agents {
                    skills::set_assigned(edit, agent, &f.bundle.meta.name, true)?;
                }
            }
            Ok::<_, SkillError>(())
        },
        |_| Ok(()),
    )?;
    for f in &found {
        let entry = f.lock_entry(&source, &checkout);
        println!("installed {} ({}) from {}", f.bundle.meta.name, entry.revision, entry.source);
    }
    if !agents.is_empty() {
        println!("assigned to {}", agents.join(", "));
    }
    Ok(())
}

fn list(global: &Global, json: bool) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    let (names, lock) =
        match skills::installed_names(&project.root).and_then(|n| Ok((n, skills::read_lock(&project.root)?))) {
            Ok(found) => found,
            Err(e) => return report(e),
        };
    let rows: Vec<serde_json::Value> = names
        .iter()
        .map(|name| {
            let description = skills::read_meta(&project.root, name).map(|m| m.description);
            serde_json::json!({
                "name": name,
                "description": description.as_ref().ok(),
                "error": description.as_ref().err().map(|e| e.code()),
                "assignedTo": skills::assigned_to(&project, name),
                "lock": lock.skills.get(name),
            })
        })
        .collect();
    if json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        println!("no skills installed; add one with `polpo skills add <source>`");
    }
    for (name, row) in names.iter().zip(&rows) {
        let what = row["description"].as_str().or(row["error"].as_str()).unwrap_or_default();
        let agents = skills::assigned_to(&project, name);
        let from = lock
            .skills
            .get(name)
            .map_or_else(|| "not in the lock".to_owned(), |e| format!("{}@{}", e.source, e.revision));
        println!(
            "{name}\t{what}\tagents: {}\t{from}",
            if agents.is_empty() { "-".to_owned() } else { agents.join(",") }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn assign(editor: &ProjectEditor, name: &str, agents: &[String], assigned: bool) -> Result<(), SkillError> {
    let changed = editor.edit(
        |edit| agents.iter().map(|a| skills::set_assigned(edit, a, name, assigned)).collect::<Result<Vec<_>, _>>(),
        |_| Ok(()),
    )?;
    for (agent, changed) in agents.iter().zip(changed) {
        let verb = if assigned { "assigned to" } else { "unassigned from" };
        println!("{name} {}{verb} {agent}", if changed { "" } else { "was already " });
    }
    Ok(())
}

fn remove(global: &Global, editor: &ProjectEditor, name: &str) -> Result<(), SkillError> {
    let project = global.load().map_err(|e| SkillError::Source(e.to_string()))?;
    let unassigned = editor.edit(|edit| skills::remove(edit, &project, name), |_| Ok(()))?;
    println!("removed {name}");
    if !unassigned.is_empty() {
        println!("unassigned from {}", unassigned.join(", "));
    }
    Ok(())
}

fn update(editor: &ProjectEditor, name: Option<String>, all: bool) -> Result<(), SkillError> {
    let lock = skills::read_lock(editor.root())?;
    let names: Vec<String> = match (name, all) {
        (Some(name), _) => vec![name],
        (None, true) => lock.skills.keys().cloned().collect(),
        (None, false) => return Err(SkillError::invalid("update", "name a skill or pass --all")),
    };
    for name in names {
        let entry = lock.skills.get(&name).ok_or_else(|| {
            SkillError::NotFound(format!(
                "skill `{name}` in .polpo/skills.lock.json (a skill installed by hand has no source to update from)"
            ))
        })?;
        let (fresh, found) = refetch(&name, entry)?;
        let installed = skills::read_bundle(&skills::skill_dir(editor.root(), &name)?).map(|b| b.hash()).ok();
        if unchanged(entry, &fresh, installed.as_deref()) {
            println!("{name} is up to date ({})", entry.revision);
            continue;
        }
        editor.edit(|edit| skills::install(edit, &found.bundle, fresh.clone()), |_| Ok(()))?;
        println!("updated {name}: {} → {}", entry.revision, fresh.revision);
    }
    Ok(())
}

/// Nothing to do: the source has the files the lock records, and they are installed as such.
fn unchanged(locked: &LockEntry, fresh: &LockEntry, installed: Option<&str>) -> bool {
    locked.hash == fresh.hash && installed == Some(locked.hash.as_str())
}
