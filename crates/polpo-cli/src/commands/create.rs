//! `polpo create <dir>`: scaffold a valid project with one agent.
//!
//! On a terminal without `--yes`, it asks for whatever the flags did not give (plain line
//! prompts, Enter keeps the default). Otherwise it uses the flags and the template defaults,
//! so scripts and CI never block on a prompt.

use super::Global;
use anyhow::Context as _;
use polpo_core::config::agent::{ChatConfig, Identity, Suggestions};
use polpo_core::config::{AgentConfig, ProjectFile, SCHEMA_VERSION, Settings, StorageKind, TeamConfig, check_id};
use polpo_core::model::ModelSelection;
use polpo_project::NewAgent;
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Model a new agent uses unless `--model` says otherwise.
pub const DEFAULT_MODEL: &str = "openai/gpt-4o-mini";
/// The team every new agent joins.
const DEFAULT_TEAM: &str = "default";

/// A starting point for the first agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Template {
    /// A general assistant that works with files: read, write, edit, glob, grep, ls (no shell,
    /// no network: a scaffolded agent should not start with every tool).
    Basic,
    /// A software engineer limited to file and shell tools.
    Coder,
    /// A customer support agent with chat suggestions and a persona.
    Support,
}

/// Arguments of `polpo create`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder to create the project in (created if missing).
    dir: PathBuf,
    /// The first agent's template.
    #[arg(long, value_enum)]
    template: Option<Template>,
    /// The first agent's id (default: the template's name for it).
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// The first agent's model id.
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// Never prompt; use flags and defaults.
    #[arg(long)]
    yes: bool,
}

/// Write the project, check that it loads, and say what to do next.
pub fn run(_global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let interactive = !args.yes && std::io::stdin().is_terminal();
    let ask = |question: &str, default: &str, given: Option<String>| -> anyhow::Result<String> {
        match given {
            Some(value) => Ok(value),
            None if interactive => prompt(question, default),
            None => Ok(default.to_string()),
        }
    };
    let template = match args.template {
        Some(t) => t,
        None => parse_template(&ask("Template (basic, coder, support)", "basic", None)?)?,
    };
    let agent_id = ask("Agent name", template.agent_id(), args.agent)?;
    check_id(&agent_id).map_err(|reason| anyhow::anyhow!("invalid agent name `{agent_id}`: {reason}"))?;
    let model = ask("Model", DEFAULT_MODEL, args.model)?;

    let name = project_name(&args.dir);
    let agent =
        NewAgent { id: agent_id.clone(), config: template.config(&model), instructions: template.instructions() };
    let teams = BTreeMap::from([(
        DEFAULT_TEAM.to_string(),
        TeamConfig { description: Some("Every agent of the project.".into()) },
    )]);
    polpo_project::create_project(&args.dir, &manifest(name), &[agent], &teams)
        .with_context(|| format!("cannot create a project in {}", args.dir.display()))?;
    polpo_project::load_project(&args.dir).map_err(|problems| {
        super::print_problems_to_stderr(&problems);
        anyhow::anyhow!("the new project does not validate; this is a bug in `polpo create`")
    })?;
    println!("Created {} with agent `{agent_id}` ({model}).", args.dir.join(".polpo").display());
    println!("Next: polpo validate --project {}", args.dir.display());
    Ok(ExitCode::SUCCESS)
}

fn prompt(question: &str, default: &str) -> anyhow::Result<String> {
    print!("{question} [{default}]: ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).context("cannot read the answer")?;
    let answer = line.trim();
    Ok(if answer.is_empty() { default.to_string() } else { answer.to_string() })
}

fn parse_template(text: &str) -> anyhow::Result<Template> {
    <Template as clap::ValueEnum>::from_str(text, true).map_err(|_| anyhow::anyhow!("unknown template `{text}`"))
}

fn project_name(dir: &Path) -> String {
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    absolute.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "polpo-project".into())
}

fn manifest(name: String) -> ProjectFile {
    ProjectFile {
        schema_version: Some(SCHEMA_VERSION),
        project: Some(name),
        settings: Settings { storage: Some(StorageKind::File), ..Settings::default() },
        ..ProjectFile::default()
    }
}

fn tools(names: &[&str]) -> Option<Vec<String>> {
    Some(names.iter().map(|s| s.to_string()).collect())
}

impl Template {
    fn agent_id(self) -> &'static str {
        match self {
            Template::Basic => "assistant",
            Template::Coder => "coder",
            Template::Support => "support",
        }
    }

    fn config(self, model: &str) -> AgentConfig {
        let base = AgentConfig {
            model: Some(ModelSelection::Id(model.to_string())),
            team: Some(DEFAULT_TEAM.to_string()),
            ..AgentConfig::default()
        };
        match self {
            Template::Basic => AgentConfig {
                role: Some("General-purpose assistant".into()),
                allowed_tools: tools(&["read", "write", "edit", "glob", "grep", "ls"]),
                ..base
            },
            Template::Coder => AgentConfig {
                role: Some("Software engineer".into()),
                allowed_tools: tools(&["read", "write", "edit", "bash", "glob", "grep", "ls"]),
                ..base
            },
            Template::Support => AgentConfig {
                role: Some("Customer support".into()),
                allowed_tools: tools(&["read", "glob", "grep", "http_fetch"]),
                chat: Some(ChatConfig {
                    allow_user_questions: Some(true),
                    suggestions: Some(Suggestions { enabled: Some(true), max_items: Some(3), guidance: None }),
                    ..ChatConfig::default()
                }),
                identity: Some(Identity {
                    display_name: Some("Support".into()),
                    tone: Some("Friendly, clear and concise".into()),
                    ..Identity::default()
                }),
                ..base
            },
        }
    }

    fn instructions(self) -> String {
        match self {
            Template::Basic => "You are a helpful assistant. Answer clearly and briefly, and say so when you are not sure. When a question is about files, look at them with your tools instead of guessing.\n\nWorkspace: your files are in the current folder; give file tools paths relative to it (`.` is the folder itself).\n",
            Template::Coder => {
                "You are a careful software engineer. Read the code before changing it, make small focused \
                 changes, and run the tests after each change.\n"
            }
            Template::Support => {
                "You are a customer support agent. Be friendly and precise, ask a question when the request \
                 is ambiguous, and never promise what you cannot check.\n"
            }
        }
        .to_string()
    }
}
