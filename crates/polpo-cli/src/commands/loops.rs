//! `polpo loops list|validate|show NAME`: the project's `.polpo/loops/*.json`.
//!
//! Loops are loaded and validated with the whole project; these commands look at them alone.
//! The executor has not landed yet, so nothing here runs a loop.

use super::{Global, print_json, sorted};
use polpo_core::config::Project;
use polpo_core::loops::Loop;
use polpo_core::problem::Problem;
use std::process::ExitCode;

/// `polpo loops` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// One line per loop: id, steps, start, the agents it is assigned to.
    List {
        /// Print `[{id, config, agents}]` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Report every problem in the loop files (exit 1 when there is one).
    Validate,
    /// A loop's canonical JSON.
    Show {
        /// The loop id (its file name without `.json`).
        name: String,
    },
}

/// Run a loops subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    if let Command::Validate = command {
        return validate(global);
    }
    let project = global.load()?;
    match command {
        Command::List { json: true } => print_json(
            &project
                .loops
                .values()
                .map(|l| serde_json::json!({"id": l.id, "config": l.config, "agents": assigned_to(&project, l)}))
                .collect::<Vec<_>>(),
        ),
        Command::List { json: false } => {
            for l in project.loops.values() {
                let agents = assigned_to(&project, l);
                let agents = if agents.is_empty() { "-".to_owned() } else { agents.join(",") };
                println!("{}  {} step(s), start {}  agents {agents}", l.id, l.config.steps.len(), l.config.start);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { name } => match project.loops.get(&name) {
            Some(l) => print_json(&l.config),
            None => {
                let known: Vec<&str> = project.loops.keys().map(String::as_str).collect();
                anyhow::bail!("loop_not_found: no loop `{name}` (loops: {})", known.join(", "))
            }
        },
        Command::Validate => Ok(ExitCode::SUCCESS),
    }
}

/// Ids of the agents whose `assignedLoops` names `l`.
fn assigned_to<'a>(project: &'a Project, l: &Loop) -> Vec<&'a str> {
    project
        .agents
        .values()
        .filter(|a| a.config.assigned_loops.iter().flatten().any(|n| *n == l.id))
        .map(|a| a.id.as_str())
        .collect()
}

/// Load the project as `polpo validate` does: every problem at once, tool names in loops
/// checked against the built-in tools.
pub fn load_checking_tools(root: &std::path::Path) -> Result<Project, Vec<Problem>> {
    let names: Vec<String> = polpo_tools::tools::system_tools().iter().map(|t| t.spec().name.clone()).collect();
    polpo_project::load_project_checking_tools(root, &|name| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

/// Whether a problem is in a loop file.
fn in_loop_file(p: &Problem) -> bool {
    p.file.as_deref().is_some_and(|f| f.starts_with(".polpo/loops/"))
}

fn validate(global: &Global) -> anyhow::Result<ExitCode> {
    let root = global.root()?;
    let (count, problems, warnings) = match load_checking_tools(&root) {
        Ok(project) => (project.loops.len(), Vec::new(), polpo_core::loops::loop_warnings(&project)),
        Err(problems) => (0, problems, Vec::new()),
    };
    super::hooks::print_warnings(&warnings);
    let (mine, others): (Vec<Problem>, Vec<Problem>) = problems.into_iter().partition(in_loop_file);
    for p in sorted(mine.clone()) {
        println!("{p}");
    }
    if !others.is_empty() {
        eprintln!("{} problem(s) outside the loop files; `polpo validate` lists them", others.len());
    }
    if mine.is_empty() && others.is_empty() {
        println!("ok: {count} loop(s) (validated; the loop executor has not landed, so they do not run yet)");
        return Ok(ExitCode::SUCCESS);
    }
    Ok(ExitCode::FAILURE)
}
