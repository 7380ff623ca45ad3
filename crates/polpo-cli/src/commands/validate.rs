//! `polpo validate [--json]`: load the whole project and report every problem.

use super::{Global, print_json, sorted};
use polpo_core::config::{Layout, Project};
use std::process::ExitCode;

/// Arguments of `polpo validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print `{ok, agents, teams, loops, problems, warnings}` as JSON.
    #[arg(long)]
    json: bool,
}

/// Exit 0 with a summary when the project is valid, 1 with one line per problem otherwise.
pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let root = global.root()?;
    let mut warnings = Vec::new();
    // Skill bundles against the lock file, and assignments against the bundles: errors.
    let checked = super::loops::load_checking_tools(&root).and_then(|project| {
        let problems = polpo_project::skills::check(&root, &project);
        if problems.is_empty() { Ok(project) } else { Err(problems) }
    });
    let result = checked.inspect(|project| {
        // Warnings (hooks that can never fire for their agent, routes an agent may not take)
        // never fail validation.
        warnings = super::hooks::agent_warnings(project);
        warnings.extend(polpo_core::routing::project_routing_warnings(project));
        // Fields kept for compatibility that nothing acts on yet must not look as if they work.
        warnings.extend(polpo_core::config::unavailable_agent_fields(project));
        warnings.extend(polpo_core::loops::loop_warnings(project));
        // Mission-shaped schedule files are read as v2 for a compatibility window.
        warnings.extend(polpo_core::schedules::schedule_warnings(project));
        // A project whose agents may run `bash` on a host that cannot confine it should know.
        warnings.extend(
            polpo_tools::sandbox::sandbox_support()
                .notices()
                .into_iter()
                .map(|n| polpo_core::problem::Problem::new(n.code, n.message)),
        );
    });
    if args.json {
        let (agents, teams, loops, problems) = match &result {
            Ok(p) => (p.agents.len(), p.teams.len(), p.loops.len(), Vec::new()),
            Err(problems) => (0, 0, 0, sorted(problems.clone())),
        };
        let ok = problems.is_empty();
        print_json(
            &serde_json::json!({"ok": ok, "agents": agents, "teams": teams, "loops": loops, "problems": problems, "warnings": warnings}),
        )?;
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    super::hooks::print_warnings(&warnings);
    match result {
        Ok(project) => {
            println!("ok: {}", summary(&project));
            // Each active schedule's next occurrence, in its own time zone.
            let now = polpo_store::Clock::now(&polpo_store::SystemClock);
            for s in project.schedules.values().filter(|s| s.config.is_active()) {
                let next = s.timing.next_after(now).map(|t| t.with_timezone(&s.timing.zone()).to_rfc3339());
                println!("schedule {}: next {}", s.id, next.as_deref().unwrap_or("never"));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            for p in sorted(problems.clone()) {
                println!("{p}");
            }
            eprintln!("{} problem(s) in {}", problems.len(), root.display());
            Ok(ExitCode::FAILURE)
        }
    }
}

fn summary(project: &Project) -> String {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let layout = match project.layout {
        Layout::Directory => "directory layout",
        Layout::Legacy => "legacy layout; `polpo migrate` converts it",
    };
    // Loops are new; a project without any keeps the summary it always had.
    let loops = match project.loops.len() {
        0 => String::new(),
        n => format!(", {} (validated, not run yet)", plural(n, "loop")),
    };
    format!("{}, {}{loops} ({layout})", plural(project.agents.len(), "agent"), plural(project.teams.len(), "team"))
}
