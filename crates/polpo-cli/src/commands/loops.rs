//! `polpo loops list|validate|show NAME|run AGENT LOOP|compile FILE.ts`: the project's
//! `.polpo/loops/*.json` and static `*.ts` loops.
//!
//! Loops are loaded and validated with the whole project; `list`, `validate` and `show` look
//! at them alone. `run` executes one in this process (the same executor `polpo serve` runs for
//! a chat with `loop`), printing each `loop_trace` event as a JSON line as it happens; a human
//! step reads its answer as one JSON line from stdin. `runs`, `resume` and `reconcile` ask the
//! running server (`--url`, `POLPO_API_KEY`) about its stored loop runs.

use super::remote::{Client, ServerError};
use super::{Global, print_json, sorted};
use anyhow::Context as _;
use polpo_core::config::Project;
use polpo_core::loops::Loop;
use polpo_core::message::Message;
use polpo_core::problem::Problem;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_loops::{LoopExecutor, LoopOptions, LoopRequest, TraceEvent, TraceKind};
use reqwest::Method;
use std::process::ExitCode;

mod compile;

/// `polpo loops` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// One line per loop: id, steps, start, the agents it is assigned to.
    List {
        /// Print `[{id, config, agents}]` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Report every problem in the loop files (exit 1 when there is one).
    Validate,
    /// A loop's canonical JSON.
    Show {
        /// The loop id (its file name without `.json`).
        name: String,
    },
    /// Compile a static TypeScript loop (the `@polpo-ai/core/loop-code` DSL) to its canonical
    /// JSON without running it; problems are printed with file:line:column (exit 1).
    Compile {
        /// The `.ts` file.
        file: std::path::PathBuf,
        /// Write the JSON to this file (atomically) instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
    /// Run a loop for an agent (it must be in the agent's `assignedLoops`), printing the trace
    /// live; the last output goes to stdout at the end.
    Run {
        /// The agent.
        agent: String,
        /// The loop.
        #[arg(value_name = "LOOP")]
        loop_id: String,
        /// The request: a JSON string is the user's message, other JSON is sent as its text.
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
        /// `request.metadata` (a JSON object).
        #[arg(long, value_name = "JSON")]
        metadata: Option<String>,
    },
    /// The running server's loop runs, newest first, one per line: id, status, loop, agent,
    /// last update, error code.
    Runs {
        /// Only runs in this status (`running`, `awaiting_approval`, `completed`, …).
        #[arg(long)]
        status: Option<String>,
        /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Resume an approved loop run on the running server from its last checkpoint, past the
    /// approved gate (the same as `polpo approvals resume`).
    Resume {
        /// The loop run (`looprun-…`).
        run: String,
        /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Settle the effect a loop run stopped `effect_unconfirmed` on (a crash left it maybe
    /// done) and resume the run on the running server from its last checkpoint.
    Reconcile {
        /// The loop run (`looprun-…`).
        run: String,
        /// What the effect did.
        outcome: EffectOutcome,
        /// The effect key (default: the one the run's `loop.error` event names).
        #[arg(long)]
        key: Option<String>,
        /// For `applied`: the tool's output the step saves.
        #[arg(long)]
        result: Option<String>,
        /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
}

/// What a person found a loop run's unconfirmed effect did.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum EffectOutcome {
    /// It happened (`--result` is the step's output).
    Applied,
    /// It did not happen: the step runs it now, once, and the run goes on.
    #[value(alias = "not_applied")]
    NotApplied,
}

/// Run a loops subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let command = match command {
        Command::Validate => return validate(global),
        Command::Compile { file, out } => return compile::run(&file, out.as_deref()),
        Command::Run { agent, loop_id, input, metadata } => {
            return run_loop(global, agent, loop_id, input.as_deref(), metadata.as_deref());
        }
        Command::Runs { status, url } => return remote(global, url, |c| async move { list_runs(&c, status).await }),
        Command::Resume { run, url } => {
            return remote(global, url, |c| async move { super::approvals::resume(&c, &run).await });
        }
        Command::Reconcile { run, outcome, key, result, url } => {
            return remote(global, url, |c| async move { reconcile(&c, &run, outcome, key, result).await });
        }
        other => other,
    };
    let project = global.load()?;
    match command {
        Command::List { json: true } => print_json(
            &project
                .loops
                .values()
                .map(|l| serde_json::json!({"id": l.id, "config": l.config, "agents": assigned_to(&project, l)}))
                .collect::<Vec<_>>(),
        ),
        Command::List { json: false } => {
            for l in project.loops.values() {
                let agents = assigned_to(&project, l);
                let agents = if agents.is_empty() { "-".to_owned() } else { agents.join(",") };
                println!("{}  {} step(s), start {}  agents {agents}", l.id, l.config.steps.len(), l.config.start);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { name } => match project.loops.get(&name) {
            Some(l) => print_json(&l.config),
            None => {
                let known: Vec<&str> = project.loops.keys().map(String::as_str).collect();
                anyhow::bail!("loop_not_found: no loop `{name}` (loops: {})", known.join(", "))
            }
        },
        Command::Validate
        | Command::Compile { .. }
        | Command::Run { .. }
        | Command::Runs { .. }
        | Command::Resume { .. }
        | Command::Reconcile { .. } => Ok(ExitCode::SUCCESS),
    }
}

/// Run `call` against the server at `url` (default: this project's port).
fn remote<F: std::future::Future<Output = Result<(), ServerError>>>(
    global: &Global,
    url: Option<String>,
    call: impl FnOnce(Client) -> F,
) -> anyhow::Result<ExitCode> {
    let client = Client::connect(global, url);
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(call(client))?;
    Ok(ExitCode::SUCCESS)
}

/// `polpo loops runs`: every page of `GET /api/v1/loop-runs`, one run per line.
async fn list_runs(client: &Client, status: Option<String>) -> Result<(), ServerError> {
    let mut cursor: Option<String> = None;
    loop {
        // The query escaped by `Url`, whatever the status or cursor holds.
        let mut url = reqwest::Url::parse(&format!("{}/api/v1/loop-runs", client.url))
            .map_err(|e| ServerError::unreachable(&client.url, e))?;
        url.query_pairs_mut()
            .append_pair("limit", "200")
            .extend_pairs(status.iter().map(|s| ("status", s)))
            .extend_pairs(cursor.take().iter().map(|c| ("cursor", c)));
        let path = format!("{}?{}", url.path(), url.query().unwrap_or_default());
        let page = client.call(Method::GET, &path, None).await?;
        for r in page["loopRuns"].as_array().into_iter().flatten() {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_owned();
            let (id, state, name, agent) = (text(&r["id"]), text(&r["status"]), text(&r["loop"]), text(&r["agent"]));
            println!("{id}\t{state}\t{name}\t{agent}\t{}\t{}", text(&r["updatedAt"]), text(&r["error"]["code"]));
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(()),
        }
    }
}

/// `polpo loops reconcile`: `POST /api/v1/loop-runs/{id}/reconcile`, the key (unless given)
/// from the run's last `loop.error` event.
async fn reconcile(
    client: &Client,
    id: &str,
    outcome: EffectOutcome,
    key: Option<String>,
    result: Option<String>,
) -> Result<(), ServerError> {
    let key = match key {
        Some(key) => key,
        None => {
            let run = client.call(Method::GET, &format!("/api/v1/loop-runs/{id}"), None).await?;
            let trace = run["trace"].as_array().into_iter().flatten();
            let failed = trace.rev().find(|e| e["type"] == "loop.error");
            failed.and_then(|e| e["data"]["effect"]["key"].as_str()).unwrap_or_default().to_owned()
        }
    };
    let outcome = match outcome {
        EffectOutcome::Applied => "applied",
        EffectOutcome::NotApplied => "not_applied",
    };
    let body = serde_json::json!({"key": key, "outcome": outcome, "result": result});
    client.call(Method::POST, &format!("/api/v1/loop-runs/{id}/reconcile"), Some(body)).await?;
    println!("loop run {id} resumed: effect {key} reconciled as {outcome}");
    Ok(())
}

/// Ids of the agents whose `assignedLoops` names `l`.
fn assigned_to<'a>(project: &'a Project, l: &Loop) -> Vec<&'a str> {
    project
        .agents
        .values()
        .filter(|a| a.config.assigned_loops.iter().flatten().any(|n| *n == l.id))
        .map(|a| a.id.as_str())
        .collect()
}

/// Load the project as `polpo validate` does: every problem at once, tool names in loops
/// checked against the built-in tools.
pub fn load_checking_tools(root: &std::path::Path) -> Result<Project, Vec<Problem>> {
    let names: Vec<String> = polpo_tools::tools::system_tools().iter().map(|t| t.spec().name.clone()).collect();
    polpo_project::load_project_checking_tools(root, &|name| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

/// Whether a problem is in a loop file.
fn in_loop_file(p: &Problem) -> bool {
    p.file.as_deref().is_some_and(|f| f.starts_with(".polpo/loops/"))
}

fn validate(global: &Global) -> anyhow::Result<ExitCode> {
    let root = global.root()?;
    let (count, problems, warnings) = match load_checking_tools(&root) {
        Ok(project) => (project.loops.len(), Vec::new(), polpo_core::loops::loop_warnings(&project)),
        Err(problems) => (0, problems, Vec::new()),
    };
    super::hooks::print_warnings(&warnings);
    let (mine, others): (Vec<Problem>, Vec<Problem>) = problems.into_iter().partition(in_loop_file);
    for p in sorted(mine.clone()) {
        println!("{p}");
    }
    if !others.is_empty() {
        eprintln!("{} problem(s) outside the loop files; `polpo validate` lists them", others.len());
    }
    if mine.is_empty() && others.is_empty() {
        println!("ok: {count} loop(s)");
        return Ok(ExitCode::SUCCESS);
    }
    Ok(ExitCode::FAILURE)
}

/// `polpo loops run`: the loop in this process, its trace printed as JSON lines as it happens.
fn run_loop(
    global: &Global,
    agent: String,
    loop_id: String,
    input: Option<&str>,
    metadata: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    let text = match input.map(serde_json::from_str::<serde_json::Value>).transpose().context("--input is not JSON")? {
        None => String::new(),
        Some(serde_json::Value::String(text)) => text,
        Some(other) => other.to_string(),
    };
    let metadata = match metadata {
        Some(m) => serde_json::from_str::<serde_json::Value>(m)
            .ok()
            .filter(serde_json::Value::is_object)
            .context("--metadata must be a JSON object")?,
        None => serde_json::Value::Null,
    };
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    rt.block_on(async {
        let runtime = polpo_assemble::open(project).await?;
        let loops = std::sync::Arc::new(LoopExecutor::new(
            RunManager::new(runtime, RunOptions::from_env()),
            LoopOptions::default(),
        ));
        let mut request = LoopRequest::new(agent, Some(loop_id), vec![Message::user(text)]);
        request.metadata = metadata;
        let (id, config) = match loops.select(&request) {
            Ok(selected) => selected,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        let run_id = loops.new_run_id();
        let answering = loops.clone();
        let answering_id = run_id.clone();
        let sink = move |event: &TraceEvent| {
            println!("{}", serde_json::to_string(event).unwrap_or_default());
            if event.kind == TraceKind::HumanRequest {
                eprintln!(
                    "human step `{}`: type its answer as one line of JSON",
                    event.step_key.as_deref().unwrap_or_default()
                );
                let (loops, run_id) = (answering.clone(), answering_id.clone());
                tokio::task::spawn_blocking(move || answer_from_stdin(&loops, &run_id));
            }
        };
        let finished = loops.run(&request, &run_id, &id, &config, &sink).await;
        match finished.result {
            Ok(output) => {
                if let Some(output) = output {
                    println!("{}", output.as_str().map_or_else(|| output.to_string(), str::to_owned));
                }
                eprintln!("loop run {} · {} step execution(s)", finished.run_id, finished.state.executed);
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

/// Read JSON lines from stdin until one is a valid answer of the waiting human step (called on
/// a blocking thread of the runtime, which stores each answer).
fn answer_from_stdin(loops: &std::sync::Arc<LoopExecutor>, run_id: &str) {
    let runtime = tokio::runtime::Handle::current();
    for line in std::io::stdin().lines().map_while(Result::ok) {
        let answered = serde_json::from_str(&line)
            .map_err(|e| e.to_string())
            .and_then(|output| runtime.block_on(loops.answer_human(run_id, None, output)).map_err(|e| e.to_string()));
        match answered {
            Ok(()) => return,
            Err(e) => eprintln!("error: {e}; type the answer again"),
        }
    }
}
