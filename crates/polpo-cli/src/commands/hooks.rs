//! `polpo hooks validate|capabilities`: runtime hook packs from the terminal.

use super::{Global, print_json, sorted};
use polpo_core::hooks::capabilities::{HostHooks, capabilities};
use std::process::ExitCode;

/// `polpo hooks …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check every `.polpo/hooks/*.json` pack and every agent's `hooks` assignment.
    Validate,
    /// Print what this host supports (portable terminationGate, command timeout default, limits).
    Capabilities {
        /// Accepted for compatibility with the reference CLI: the output is always the JSON
        /// payload of `GET /v1/hooks/capabilities`.
        #[arg(long)]
        json: bool,
    },
}

/// Run a `hooks` subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Validate => {
            let project = global.load()?;
            let (packs, problems) = polpo_project::hooks::check_project_hooks(&project);
            if problems.is_empty() {
                println!("ok: {} hook pack{}", packs.len(), if packs.len() == 1 { "" } else { "s" });
                return Ok(ExitCode::SUCCESS);
            }
            for p in sorted(problems.clone()) {
                println!("{p}");
            }
            eprintln!("{} problem(s)", problems.len());
            Ok(ExitCode::FAILURE)
        }
        Command::Capabilities { json: _ } => {
            let enabled = std::env::var("POLPO_RUNTIME_HOOKS").map(|v| v != "off").unwrap_or(true);
            let caps = capabilities(HostHooks { hooks_enabled: enabled, managed: false });
            print_json(&caps)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
