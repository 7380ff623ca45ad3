//! `polpo agents list|show NAME [--json]`.

use super::{Global, print_json};
use anyhow::Context as _;
use polpo_core::config::Agent;
use polpo_core::model::{ModelSelection, ModelTarget};
use std::process::ExitCode;

/// `polpo agents` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// One line per agent: id, team, model, role.
    List {
        /// Print `[{id, config}]` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// An agent's config and instructions.
    Show {
        /// The agent id.
        name: String,
        /// Print `{id, config, instructions}` as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run an agents subcommand against the loaded project.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    match command {
        Command::List { json: true } => print_json(
            &project.agents.values().map(|a| serde_json::json!({"id": a.id, "config": a.config})).collect::<Vec<_>>(),
        ),
        Command::List { json: false } => {
            let rows: Vec<[String; 4]> = project.agents.values().map(row).collect();
            let header = ["ID", "TEAM", "MODEL", "ROLE"].map(String::from);
            let widths: Vec<usize> = (0..3)
                .map(|i| std::iter::once(&header).chain(&rows).map(|r| r[i].chars().count()).max().unwrap_or(0))
                .collect();
            for r in std::iter::once(&header).chain(&rows) {
                println!(
                    "{:w0$}  {:w1$}  {:w2$}  {}",
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    w0 = widths[0],
                    w1 = widths[1],
                    w2 = widths[2]
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { name, json } => {
            let agent = project.agent(&name).with_context(|| {
                let known: Vec<&str> = project.agents.keys().map(String::as_str).collect();
                format!(
                    "agent `{name}` not found (agents: {})",
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                )
            })?;
            if json {
                return print_json(
                    &serde_json::json!({"id": agent.id, "config": agent.config, "instructions": agent.instructions}),
                );
            }
            println!("# {} ({})\n", agent.id, agent.source.file);
            println!("{}\n", serde_json::to_string_pretty(&agent.config)?);
            println!("## instructions.md\n\n{}", agent.instructions.trim_end());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn row(agent: &Agent) -> [String; 4] {
    let c = &agent.config;
    let dash = || "-".to_string();
    [
        agent.id.clone(),
        c.team.clone().unwrap_or_else(dash),
        c.model.as_ref().map(model_label).unwrap_or_else(dash),
        c.role.clone().unwrap_or_else(dash),
    ]
}

fn target_label(target: &ModelTarget) -> String {
    match target {
        ModelTarget::Id(id) => id.clone(),
        ModelTarget::Profile { profile } => format!("profile:{profile}"),
    }
}

fn model_label(model: &ModelSelection) -> String {
    match model {
        ModelSelection::Id(id) => id.clone(),
        ModelSelection::Profile { profile } => format!("profile:{profile}"),
        ModelSelection::Chain { primary, fallbacks } if fallbacks.is_empty() => target_label(primary),
        ModelSelection::Chain { primary, fallbacks } => {
            format!("{} (+{} fallbacks)", target_label(primary), fallbacks.len())
        }
    }
}
