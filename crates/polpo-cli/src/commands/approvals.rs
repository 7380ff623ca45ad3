//! `polpo approvals list|approve|reject|resume`: the approval gates of Project Loop runs on a
//! running server, over its HTTP API (`/api/v1/approvals…`, `/api/v1/loop-runs/{id}/resume`).
//! The reviewer is the server's view of `POLPO_API_KEY` (`local` without keys); a rejection
//! needs `--feedback`. A server error prints its stable code and exits 1.

use super::Global;
use super::remote::Client;
use anyhow::Context as _;
use reqwest::Method;
use serde_json::json;
use std::process::ExitCode;

/// Options of `polpo approvals`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server (default: `http://127.0.0.1:<settings.port or 3890>`); the API key comes
    /// from `POLPO_API_KEY`.
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// `polpo approvals` subcommands.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Approval requests, newest first, one per line: id, status, loop run, rule, message.
    List {
        /// Only `pending`, `approved` or `rejected` ones.
        #[arg(long)]
        status: Option<String>,
    },
    /// Approve a request: its loop run becomes `approval_approved` (then `resume` it).
    Approve {
        /// The approval request (`approval-…`).
        id: String,
        /// A note kept with the decision.
        #[arg(long)]
        note: Option<String>,
    },
    /// Reject a request: its loop run ends `approval_rejected`.
    Reject {
        /// The approval request.
        id: String,
        /// Why (required).
        #[arg(long)]
        feedback: String,
    },
    /// Resume an approved loop run from its last checkpoint, past the approved gate.
    Resume {
        /// The loop run (`looprun-…`).
        run: String,
    },
}

/// Ask the server to resume approved loop run `run` from its last checkpoint (`polpo approvals
/// resume` and `polpo loops resume`).
pub async fn resume(client: &Client, run: &str) -> Result<(), super::remote::ServerError> {
    client.call(Method::POST, &format!("/api/v1/loop-runs/{run}/resume"), None).await?;
    println!("loop run {run} is resuming");
    Ok(())
}

/// Run a `polpo approvals` subcommand against the server.
pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let client = Client::connect(global, args.url);
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        match args.command {
            Command::List { status } => {
                let query = status.map(|s| format!("?status={s}")).unwrap_or_default();
                let page = client.call(Method::GET, &format!("/api/v1/approvals{query}"), None).await?;
                for a in page["approvals"].as_array().into_iter().flatten() {
                    let text = |k: &str| a[k].as_str().unwrap_or("-").to_owned();
                    let rule = a["gate"]["id"].as_str().unwrap_or("-");
                    println!("{}\t{}\t{}\t{rule}\t{}", text("id"), text("status"), text("loopRunId"), text("message"));
                }
            }
            Command::Approve { id, note } => {
                let path = format!("/api/v1/approvals/{id}/approve");
                let done = client.call(Method::POST, &path, Some(json!({"note": note}))).await?;
                println!("{id} approved; resume loop run {} with `polpo approvals resume`", done["loopRunId"]);
            }
            Command::Reject { id, feedback } => {
                let path = format!("/api/v1/approvals/{id}/reject");
                let done = client.call(Method::POST, &path, Some(json!({"feedback": feedback}))).await?;
                println!("{id} rejected; loop run {} ended approval_rejected", done["loopRunId"]);
            }
            Command::Resume { run } => resume(&client, &run).await?,
        }
        Ok(ExitCode::SUCCESS)
    })
}
