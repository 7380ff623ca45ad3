//! `polpo approvals list|approve|reject|resume`: the approval requests on a running server —
//! Project Loop gates and tool calls a runtime hook asked about — over its HTTP API
//! (`/api/v1/approvals…`, `/api/v1/loop-runs/{id}/resume`).
//! The reviewer is the server's view of `POLPO_API_KEY` (`local` without keys); a rejection
//! needs `--feedback`. A server error prints its stable code and exits 1.

use super::Global;
use super::remote::Client;
use anyhow::Context as _;
use reqwest::Method;
use serde_json::{Value, json};
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
    /// Approval requests, newest first, one per line: id, status, run (loop run or chat run),
    /// what asked (the loop rule, or `tool <name> (hook <pack/id>)`), message.
    List {
        /// Only `pending`, `approved` or `rejected` ones.
        #[arg(long)]
        status: Option<String>,
    },
    /// Approve a request: its loop run becomes `approval_approved` (then `resume` it); a
    /// tool call's paused run resumes and the call runs.
    Approve {
        /// The approval request (`approval-…`).
        id: String,
        /// A note kept with the decision.
        #[arg(long)]
        note: Option<String>,
    },
    /// Reject a request: its loop run ends `approval_rejected`; a tool call's run goes on with
    /// the call refused.
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

/// The string field `key` of a request, `-` when absent.
fn field(approval: &Value, key: &str) -> String {
    approval[key].as_str().unwrap_or("-").to_owned()
}

/// What a request holds up, for a reviewer's line: (type, run, what asked). A loop gate's
/// run is its loop run and the rule that asked; a tool call's is its chat run and the tool
/// with the hook that asked.
fn subject(approval: &Value) -> (String, String, String) {
    match approval["type"].as_str() {
        Some("tool_call") => {
            let asked = format!("tool {} (hook {})", field(approval, "tool"), field(approval, "hook"));
            ("tool_call".into(), field(approval, "runId"), asked)
        }
        _ => {
            let rule = approval["gate"]["id"].as_str().unwrap_or("-").to_owned();
            ("loop".into(), field(approval, "loopRunId"), rule)
        }
    }
}

/// What the decision on request `id` does, in a sentence.
fn decided(id: &str, done: &Value) -> String {
    let (kind, run, _) = subject(done);
    let approved = done["status"].as_str() == Some("approved");
    let tool = field(done, "tool");
    match (kind.as_str(), approved, done["durable"].as_bool() == Some(true)) {
        ("tool_call", true, true) => format!("{id} approved; run {run} resumes and `{tool}` runs"),
        ("tool_call", true, false) => {
            format!("{id} approved; retry the chat request with the same Idempotency-Key to run `{tool}`")
        }
        ("tool_call", false, _) => format!("{id} rejected; run {run} goes on with `{tool}` refused"),
        (_, true, _) => format!("{id} approved; resume loop run {run} with `polpo approvals resume`"),
        (_, false, _) => format!("{id} rejected; loop run {run} ended approval_rejected"),
    }
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
                    let (_, run, asked) = subject(a);
                    let (id, status, message) = (field(a, "id"), field(a, "status"), field(a, "message"));
                    println!("{id}\t{status}\t{run}\t{asked}\t{message}");
                }
            }
            Command::Approve { id, note } => {
                let path = format!("/api/v1/approvals/{id}/approve");
                let done = client.call(Method::POST, &path, Some(json!({"note": note}))).await?;
                println!("{}", decided(&id, &done));
            }
            Command::Reject { id, feedback } => {
                let path = format!("/api/v1/approvals/{id}/reject");
                let done = client.call(Method::POST, &path, Some(json!({"feedback": feedback}))).await?;
                println!("{}", decided(&id, &done));
            }
            Command::Resume { run } => resume(&client, &run).await?,
        }
        Ok(ExitCode::SUCCESS)
    })
}
