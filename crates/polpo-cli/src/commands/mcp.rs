//! `polpo mcp list|serve`: the agents' MCP servers from the terminal, and Polpo's agents as an
//! MCP server over stdio for desktop clients (Claude Desktop, Cursor).

use super::{Global, print_json};
use anyhow::Context as _;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_mcp::{PolpoMcpServer, ServerStatus};
use rmcp::ServiceExt;
use serde_json::json;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// `polpo mcp …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Connect each agent's MCP servers and show their status and tools.
    List {
        /// Only this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the project's agents as MCP tools (`ask_<agent>`).
    Serve {
        /// Speak MCP over stdin/stdout (the only transport here; `polpo serve` has `/mcp`).
        #[arg(long, required = true)]
        stdio: bool,
    },
}

/// Run `polpo mcp …`.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    rt.block_on(async {
        let runtime = polpo_assemble::open(project).await?;
        let code = match command {
            Command::List { agent, json } => list(&runtime, agent.as_deref(), json).await,
            Command::Serve { .. } => {
                let runs = RunManager::new(runtime.clone(), RunOptions::from_env());
                let server = PolpoMcpServer::new(runs.clone()).serve(rmcp::transport::stdio()).await?;
                server.waiting().await?;
                runs.shutdown().await;
                Ok(ExitCode::SUCCESS)
            }
        };
        polpo_assemble::MCP.shutdown().await;
        code
    })
}

async fn list(runtime: &polpo_engine::Runtime, only: Option<&str>, as_json: bool) -> anyhow::Result<ExitCode> {
    let loaded = runtime.loaded();
    let project = &loaded.project;
    if let Some(id) = only
        && !project.agents.contains_key(id)
    {
        anyhow::bail!("agent_not_found: no agent named `{id}` in this project");
    }
    let mut rows = Vec::new();
    for agent in project.agents.values().filter(|a| only.is_none_or(|id| a.id == id)) {
        let ctx = polpo_engine::loaded::tool_context(project, agent, &CancellationToken::new());
        for server in polpo_assemble::MCP.status(agent, &ctx, true).await {
            rows.push((agent.id.clone(), server));
        }
    }
    // A server that cannot be used fails the command, so a script can check a project.
    let failed = if rows.iter().any(|(_, s)| s.status == "error") { ExitCode::FAILURE } else { ExitCode::SUCCESS };
    if as_json {
        let out: Vec<_> = rows.iter().map(|(agent, s)| row_json(agent, s)).collect();
        print_json(&out)?;
        return Ok(failed);
    }
    if rows.is_empty() {
        println!("no MCP servers (add `mcpServers` to an agent's agent.json)");
    }
    for (agent, s) in &rows {
        println!("{agent}  {}  {}  {}  {}", s.name, s.transport, s.status, s.target);
        if let Some(error) = &s.error {
            println!("    error: {error}");
        }
        if !s.tools.is_empty() {
            println!("    tools: {}", s.tools.join(", "));
        }
        for skipped in &s.skipped {
            println!("    skipped: {skipped}");
        }
    }
    Ok(failed)
}

fn row_json(agent: &str, s: &ServerStatus) -> serde_json::Value {
    json!({
        "agent": agent, "server": s.name, "transport": s.transport, "target": s.target,
        "status": s.status, "error": s.error, "tools": s.tools, "skipped": s.skipped,
    })
}
