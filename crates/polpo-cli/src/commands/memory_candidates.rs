//! `polpo memory candidates list|show|audit|approve|reject|apply`: reviewing what memory
//! learning proposed, on the running server (`/api/v1/agents/{agent}/memory/candidates`,
//! `--url`, key from `POLPO_API_KEY`). The server decides, so the reviewer recorded is the key
//! the command sends (`local` on a server without keys), never a flag; each prints the route's
//! `data` as JSON, and a server error its code (`conflict` once a candidate was decided).

use super::Global;
use super::remote::Client;
use reqwest::Method;
use serde_json::json;
use std::process::ExitCode;

/// `polpo memory candidates` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// An agent's candidates, newest first (`{candidates, nextCursor}`).
    List {
        /// The agent that learned them.
        agent: String,
        /// Only these statuses (repeatable): pending, approved, rejected, applied.
        #[arg(long = "status", value_name = "STATUS")]
        statuses: Vec<String>,
        /// Page size (1-100).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// The previous page's `nextCursor`.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        server: Server,
    },
    /// One candidate.
    Show {
        #[command(flatten)]
        target: Target,
    },
    /// Who proposed, decided and applied it, oldest first.
    Audit {
        #[command(flatten)]
        target: Target,
    },
    /// Approve it: its memory item is created at once.
    Approve {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        decision: DecisionArgs,
    },
    /// Reject it: nothing is remembered.
    Reject {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        decision: DecisionArgs,
    },
    /// Make an approved candidate's memory item (again answers the same item).
    Apply {
        #[command(flatten)]
        target: Target,
        /// The revision you read; `conflict` when it moved on.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
    },
}

/// The server a subcommand talks to.
#[derive(Debug, clap::Args)]
pub struct Server {
    /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

/// One candidate of one agent, on a server.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The agent that learned it.
    agent: String,
    /// The candidate id.
    id: String,
    #[command(flatten)]
    server: Server,
}

/// A reviewer's decision's details.
#[derive(Debug, clap::Args)]
pub struct DecisionArgs {
    /// Why (kept in the candidate's audit trail).
    #[arg(long)]
    reason: Option<String>,
    /// The revision you read; `conflict` when it moved on.
    #[arg(long, value_name = "N")]
    revision: Option<u64>,
}

impl Target {
    /// The candidate's route, `suffix` appended, on its server.
    fn at(&self, global: &Global, suffix: &str) -> (Client, String) {
        let path = format!("/api/v1/agents/{}/memory/candidates/{}{suffix}", self.agent, self.id);
        (Client::connect(global, self.server.url.clone()), path)
    }
}

/// Run one `polpo memory candidates` subcommand against the server.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let decide = |target: &Target, decision: &str, args: DecisionArgs| {
        let (client, path) = target.at(global, "/decision");
        let body = json!({"decision": decision, "reason": args.reason, "expectedRevision": args.revision});
        client.print_call(Method::POST, &path, Some(body))
    };
    match command {
        Command::List { agent, statuses, limit, cursor, server } => {
            let mut query = format!("?limit={limit}");
            if !statuses.is_empty() {
                query.push_str(&format!("&statuses={}", statuses.join(",")));
            }
            if let Some(cursor) = cursor {
                query.push_str(&format!("&cursor={cursor}"));
            }
            let client = Client::connect(global, server.url);
            client.print_call(Method::GET, &format!("/api/v1/agents/{agent}/memory/candidates{query}"), None)
        }
        Command::Show { target } => {
            let (client, path) = target.at(global, "");
            client.print_call(Method::GET, &path, None)
        }
        Command::Audit { target } => {
            let (client, path) = target.at(global, "/audit");
            client.print_call(Method::GET, &path, None)
        }
        Command::Approve { target, decision } => decide(&target, "approve", decision),
        Command::Reject { target, decision } => decide(&target, "reject", decision),
        Command::Apply { target, revision } => {
            let (client, path) = target.at(global, "/apply");
            client.print_call(Method::POST, &path, Some(json!({"expectedRevision": revision})))
        }
    }
}
