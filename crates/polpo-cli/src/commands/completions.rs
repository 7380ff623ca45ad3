//! `polpo completions <shell>`: print a completion script for the shell.

use clap_complete::Shell;
use std::process::ExitCode;

/// Arguments of `polpo completions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to generate for.
    shell: Shell,
}

/// Write the script to stdout.
pub fn run(args: Args, command: &mut clap::Command) -> anyhow::Result<ExitCode> {
    clap_complete::generate(args.shell, command, "polpo", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
