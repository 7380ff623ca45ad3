//! `polpo keys hash`: the `sha256:<hex>` form of an API key, to write into `apiKeys` in
//! `project.json` instead of the key itself (the server warns about plain-text keys there).
//!
//! The key is read from stdin, never from the command line, so it stays out of the shell
//! history and the process list: `printf %s "$KEY" | polpo keys hash`.

use anyhow::Context as _;
use std::io::Read as _;
use std::process::ExitCode;

/// `polpo keys …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Read an API key from stdin and print its `sha256:<hex>` digest for `apiKeys`.
    Hash,
}

/// Run a `keys` subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Hash => {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input).context("cannot read the key from stdin")?;
            // Presented keys are trimmed too, so `echo`'s line break does not change the digest.
            let key = input.trim();
            anyhow::ensure!(!key.is_empty(), "no key on stdin: `printf %s \"$KEY\" | polpo keys hash`");
            println!("{}", polpo_server::auth::hashed_form(key));
            Ok(ExitCode::SUCCESS)
        }
    }
}
