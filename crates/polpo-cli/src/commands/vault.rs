//! `polpo vault set|list|remove`: the project's encrypted credentials (`.polpo/vault.enc`).
//!
//! Values are read from stdin (a bare value for a one-key entry, or a JSON object of
//! `{key: value}`), or asked for one per key on the terminal — never taken from the command
//! line, where they would stay in the shell history and the process list. `list` prints
//! metadata only.

use super::Global;
use anyhow::Context as _;
use polpo_core::redact::Redactor;
use polpo_vault::{Entry, KeySources, PROJECT_SCOPE, Vault};
use std::collections::BTreeMap;
use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};
use std::process::ExitCode;

/// `polpo vault …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Store an entry; values come from stdin or a prompt, never from arguments.
    Set(SetArgs),
    /// List entries: agent, service, type, label and credential keys (never values).
    List {
        /// Only this agent's entries (`*` for the project-wide ones).
        #[arg(long)]
        agent: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an entry.
    Remove {
        /// The service.
        service: String,
        /// The agent owning it (default `*`, project-wide).
        #[arg(long, default_value = PROJECT_SCOPE)]
        agent: String,
    },
}

/// `polpo vault set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The service name (`site-api`, `github`, …).
    service: String,
    /// The entry type: api_key, login, oauth, smtp, imap or custom.
    #[arg(long = "type", default_value = "api_key")]
    kind: String,
    /// The agent allowed to use it (default `*`, every agent of the project).
    #[arg(long, default_value = PROJECT_SCOPE)]
    agent: String,
    /// A human label.
    #[arg(long)]
    label: Option<String>,
    /// Credential keys to ask for (default: `key` for api_key, `username`+`password` for login).
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
}

/// Run a `vault` subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let polpo_dir = global.root()?.join(".polpo");
    anyhow::ensure!(polpo_dir.is_dir(), "no .polpo/ folder at {}", polpo_dir.display());
    let sources = KeySources::from_env();
    match command {
        Command::Set(args) => {
            let vault = Vault::open(&polpo_dir, sources.load_or_create()?, Redactor::new());
            let credentials = read_credentials(&args)?;
            let entry =
                Entry { agent: args.agent, service: args.service, kind: args.kind, label: args.label, credentials };
            let meta = vault.set(entry)?;
            println!("stored {} for agent {} (keys: {})", meta.service, meta.agent, meta.keys.join(", "));
        }
        Command::List { agent, json } => {
            let vault = Vault::open(&polpo_dir, sources.load()?, Redactor::new());
            let entries = vault.list(agent.as_deref())?;
            if json {
                return super::print_json(&entries);
            }
            if entries.is_empty() {
                println!("no vault entries");
            }
            for e in entries {
                let label = e.label.map(|l| format!(" \"{l}\"")).unwrap_or_default();
                println!("{}/{} {}{label} keys: {}", e.agent, e.service, e.kind, e.keys.join(", "));
            }
        }
        Command::Remove { service, agent } => {
            let vault = Vault::open(&polpo_dir, sources.load()?, Redactor::new());
            anyhow::ensure!(vault.remove(&agent, &service)?, "no vault entry {agent}/{service}");
            println!("removed {agent}/{service}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The keys asked for when none are named.
fn default_keys(kind: &str) -> Vec<String> {
    let keys: &[&str] = match kind {
        "login" => &["username", "password"],
        "oauth" => &["access_token"],
        _ => &["key"],
    };
    keys.iter().map(|k| k.to_string()).collect()
}

/// Credentials from stdin (a JSON object, or the bare value of a single key) or, on a
/// terminal, one prompt per key.
fn read_credentials(args: &SetArgs) -> anyhow::Result<BTreeMap<String, String>> {
    let keys = if args.keys.is_empty() { default_keys(&args.kind) } else { args.keys.clone() };
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        let mut credentials = BTreeMap::new();
        for key in keys {
            eprint!("{key}: ");
            std::io::stderr().flush()?;
            let mut line = String::new();
            stdin.lock().read_line(&mut line).context("cannot read the value")?;
            credentials.insert(key, line.trim_end_matches(['\r', '\n']).to_string());
        }
        return Ok(credentials);
    }
    let mut input = String::new();
    stdin.lock().take(1024 * 1024).read_to_string(&mut input).context("cannot read the value from stdin")?;
    if input.trim_start().starts_with('{') {
        return serde_json::from_str(&input).context("stdin must be a JSON object of string values");
    }
    anyhow::ensure!(
        keys.len() == 1,
        "type {} has several keys ({}): send a JSON object on stdin",
        args.kind,
        keys.join(", ")
    );
    let value = input.trim_end_matches(['\r', '\n']).to_string();
    anyhow::ensure!(!value.is_empty(), "no value on stdin: `printf %s \"$SECRET\" | polpo vault set {}`", args.service);
    Ok(BTreeMap::from([(keys[0].clone(), value)]))
}
