//! `polpo workers list`: the servers a running server sees in the shared store — each lease
//! owner of running runs (`polpo serve --worker-id`), its run count and newest lease expiry —
//! from the admin route `GET /api/v1/workers` (`--url`, key from `POLPO_API_KEY`).

use super::remote::Client;
use super::{Global, print_json};
use anyhow::Context as _;
use reqwest::Method;
use std::process::ExitCode;

/// `polpo workers` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// The workers holding running runs: id, run count, newest lease expiry.
    List {
        /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run a `polpo workers` subcommand against the server.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let Command::List { url, json } = command;
    let client = Client::connect(global, url);
    let data = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(client.call(Method::GET, "/api/v1/workers", None))?;
    if json {
        return print_json(&data);
    }
    let workers = data.as_array().map(Vec::as_slice).unwrap_or_default();
    if workers.is_empty() {
        println!("no worker holds a running run");
    }
    for w in workers {
        let text = |k: &str| w[k].as_str().unwrap_or("?").to_owned();
        println!("{}  runs={}  lease expires {}", text("id"), w["runs"], text("leaseExpiresAt"));
    }
    Ok(ExitCode::SUCCESS)
}
