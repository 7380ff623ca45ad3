//! `polpo tools list|validate|run`: the project's custom tools (`.polpo/tools/<name>/`).
//! `run` calls one the way an agent would — arguments checked against its `parameters`,
//! bindings read from the given user and metadata, Connections resolved — and prints its
//! result with vault values redacted.

use super::Global;
use anyhow::Context as _;
use polpo_core::redact::Redactor;
use polpo_custom_tools::{CustomTool, JsRuntime, ToolDir};
use polpo_tools::{Tool, ToolContext};
use serde_json::{Value, json};
use std::process::ExitCode;

/// `polpo tools …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List custom tools: name, effect, Connection slots, description.
    List,
    /// Check every custom tool (or one): manifest, source, imports, JS runtime.
    Validate {
        /// Only this tool.
        name: Option<String>,
    },
    /// Call a custom tool once.
    Run {
        /// The tool.
        name: String,
        /// The arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The end user (`invocation.user`).
        #[arg(long)]
        user: Option<String>,
        /// The request metadata (`invocation.metadata`), a JSON object.
        #[arg(long, default_value = "{}")]
        metadata: String,
        /// The agent the call runs for (its Connections and vault entries).
        #[arg(long, default_value = "cli")]
        agent: String,
    },
}

/// Run a `tools` subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let root = global.root()?;
    let redactor = Redactor::new();
    if let Ok(key) = polpo_vault::KeySources::from_env().load() {
        polpo_vault::Vault::open(&root.join(".polpo"), key, redactor.clone()).refresh()?;
    }
    match command {
        Command::List => {
            let dirs = polpo_custom_tools::load_all(&root.join(".polpo"))?;
            if dirs.is_empty() {
                println!("no custom tools");
            }
            for d in dirs {
                print_tool(&d);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate { name } => {
            let mut failed = false;
            for tool in project_tools(&root, &redactor)? {
                if name.as_ref().is_some_and(|n| *n != tool.spec().name) {
                    continue;
                }
                match tool.check() {
                    Ok(()) => println!("{}: ok", tool.spec().name),
                    Err(e) => {
                        failed = true;
                        println!("{}: {e}", tool.spec().name);
                    }
                }
            }
            Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
        Command::Run { name, args, user, metadata, agent } => {
            let tool = project_tools(&root, &redactor)?
                .into_iter()
                .find(|t| t.spec().name == name)
                .with_context(|| format!("no custom tool `{name}` in .polpo/tools/"))?;
            let args: Value = serde_json::from_str(&args).context("--args must be a JSON object")?;
            let metadata: Value = serde_json::from_str(&metadata).context("--metadata must be a JSON object")?;
            anyhow::ensure!(args.is_object() && metadata.is_object(), "--args and --metadata must be JSON objects");
            let validator = jsonschema::validator_for(&tool.spec().parameters)?;
            if let Some(error) = validator.iter_errors(&args).next() {
                anyhow::bail!("invalid_arguments: {error}");
            }
            let mut ctx = ToolContext::new(&root);
            ctx.protected_paths = vec![root.join(".polpo")];
            ctx.agent = agent;
            ctx.invocation =
                json!({"requestId": "cli", "runId": "cli", "user": user, "metadata": metadata, "surface": "cli"});
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            match runtime.block_on(tool.call(&ctx, args)) {
                Ok(out) => {
                    println!("{}", redactor.redact_text(&out.text));
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => anyhow::bail!("{}", redactor.redact_text(&e.to_string())),
            }
        }
    }
}

/// The project's custom tools for `polpo tools`, without building a runtime: its Connections,
/// and the JS runtime `.polpo/project.json` names (read on its own, not the whole project).
fn project_tools(root: &std::path::Path, redactor: &Redactor) -> anyhow::Result<Vec<std::sync::Arc<CustomTool>>> {
    let connections = std::sync::Arc::new(polpo_assemble::project_connections(root, redactor));
    polpo_assemble::project_tools(root, &connections, || JsRuntime::for_project(root))
}

fn print_tool(d: &ToolDir) {
    let m = &d.manifest;
    let slots: Vec<String> =
        m.connections.iter().map(|(slot, s)| format!("{slot}={}[{}]", s.provider, s.scopes.join(","))).collect();
    let effect = m.effect.as_deref().unwrap_or("write");
    println!("{} effect={effect} connections=[{}] — {}", m.name, slots.join(" "), m.description);
}
