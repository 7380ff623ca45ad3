//! One module per command. Each exposes `Args` (clap derive) and
//! `run(&Global, Args) -> anyhow::Result<ExitCode>`; shared helpers live here.

pub mod agents;
pub mod approvals;
pub mod bench;
pub mod completions;
pub mod connections;
pub mod create;
pub mod db;
pub mod hooks;
pub mod keys;
pub mod loops;
pub mod mcp;
pub mod memory;
pub mod memory_candidates;
pub mod migrate;
pub mod models;
pub mod remote;
pub mod run;
pub mod runs;
pub mod schedules;
pub mod serve;
pub mod skills;
pub mod tasks;
pub mod tools;
pub mod validate;
pub mod vault;
pub mod workers;

use anyhow::Context as _;
use polpo_core::config::Project;
use polpo_core::problem::Problem;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options every command sees.
#[derive(Debug)]
pub struct Global {
    /// `--project DIR`, if given.
    pub project: Option<PathBuf>,
}

impl Global {
    /// Where to look for the project: `--project` or the current directory.
    fn start(&self) -> anyhow::Result<PathBuf> {
        match &self.project {
            Some(dir) => Ok(dir.clone()),
            None => std::env::current_dir().context("cannot read the current directory"),
        }
    }

    /// The project root: the nearest folder at or above the start that contains `.polpo/`,
    /// or the start itself when there is none (loading then says what is missing).
    pub fn root(&self) -> anyhow::Result<PathBuf> {
        let start = self.start()?;
        Ok(polpo_project::paths::find_root(&start).unwrap_or(start))
    }

    /// Load the project, or print its problems to stderr and fail.
    pub fn load(&self) -> anyhow::Result<Project> {
        let root = self.root()?;
        polpo_project::load_project(&root).map_err(|problems| {
            print_problems_to_stderr(&problems);
            anyhow::anyhow!("the project at {} has {} problem(s); run `polpo validate`", root.display(), problems.len())
        })
    }
}

/// Problems in a stable order: by file, then position.
pub fn sorted(mut problems: Vec<Problem>) -> Vec<Problem> {
    problems.sort_by(|a, b| (&a.file, a.line, &a.pointer, &a.code).cmp(&(&b.file, b.line, &b.pointer, &b.code)));
    problems
}

/// Print problems one per line (`path:pointer: code: sentence`) to stderr.
pub fn print_problems_to_stderr(problems: &[Problem]) {
    for p in sorted(problems.to_vec()) {
        eprintln!("{p}");
    }
}

/// Print a value as 2-space JSON to stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(ExitCode::SUCCESS)
}
