//! `polpo migrate [--dry-run]`: legacy aggregate files → directory layout.

use super::{Global, print_problems_to_stderr};
use polpo_project::ProjectError;
use std::process::ExitCode;

/// Arguments of `polpo migrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Validate and show what would be written; change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Print the plan (dry run) or what was done.
pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let root = global.root()?;
    let plan = match polpo_project::migrate(&root, args.dry_run) {
        Ok(plan) => plan,
        Err(ProjectError::Invalid(problems)) => {
            print_problems_to_stderr(&problems);
            anyhow::bail!("the project has {} problem(s); fix them before migrating", problems.len());
        }
        Err(e) => anyhow::bail!("{} ({})", e, e.code()),
    };
    let (write, rename) = if args.dry_run { ("would write", "would rename") } else { ("wrote", "renamed") };
    for w in &plan.writes {
        println!("{write} {}", w.path);
    }
    for (from, to) in &plan.backups {
        println!("{rename} {from} → {to}");
    }
    if args.dry_run {
        println!("dry run: nothing was changed; run `polpo migrate` to apply");
    }
    Ok(ExitCode::SUCCESS)
}
