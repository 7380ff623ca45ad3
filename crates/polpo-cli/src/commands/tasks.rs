//! `polpo tasks add|list|show|retry|reassess|watch|kill|rm` and `polpo missions
//! create|list|show|execute|pause|resume|abort|report`: the tasks and missions of a running
//! server, over its REST API (`/api/v1/tasks…`, `/api/v1/missions…`; see `remote.rs` for the
//! address and key). `--json` prints what the server answered.

use super::Global;
use super::remote::Client;
use anyhow::Context as _;
use reqwest::Method;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `polpo tasks`.
#[derive(Debug, clap::Args)]
pub struct TasksArgs {
    /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    #[command(subcommand)]
    command: TaskCommand,
}

/// `polpo tasks` subcommands.
#[derive(Debug, clap::Subcommand)]
enum TaskCommand {
    /// Create a task; it runs as soon as its dependencies are done (unless `--draft`).
    Add {
        /// Short unique title.
        title: String,
        /// What the agent is asked to do.
        #[arg(long, short)]
        description: String,
        /// The agent that runs it.
        #[arg(long, short)]
        agent: String,
        /// A task id that must be done first (repeatable).
        #[arg(long = "depends-on", value_name = "ID")]
        depends_on: Vec<String>,
        /// A `test` check: a shell command in the project root that must exit 0 (repeatable).
        #[arg(long = "test", value_name = "COMMAND")]
        tests: Vec<String>,
        /// Automatic retries after a failure.
        #[arg(long)]
        max_retries: Option<u32>,
        /// Create it as a draft (`polpo tasks` cannot queue it yet: use the REST `queue` action).
        #[arg(long)]
        draft: bool,
        /// Print the server's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Tasks, newest first.
    List {
        /// Only this status (pending, in_progress, done, failed …).
        #[arg(long)]
        status: Option<String>,
        /// Only this mission's tasks.
        #[arg(long)]
        mission: Option<String>,
        /// Print the server's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One task with its result and assessment.
    Show {
        /// The task id.
        id: String,
        /// Print the server's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Queue a failed task again.
    Retry {
        /// The task id.
        id: String,
    },
    /// Assess a done or failed task again on the answer it kept; the verdict decides its status.
    Reassess {
        /// The task id.
        id: String,
        /// Print the server's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Live progress, one line with a progress bar per mission, printed again whenever the
    /// server's events (`/api/v1/events`) say its tasks moved. With `--mission`, only that one,
    /// and the command ends when it finishes (exit 0 when completed, 1 otherwise).
    Watch {
        /// Only this mission.
        #[arg(long)]
        mission: Option<String>,
    },
    /// Abort a task's run and fail it.
    Kill {
        /// The task id.
        id: String,
    },
    /// Delete a task for good (refused while it runs, or while other tasks depend on it).
    #[command(visible_alias = "delete")]
    Rm {
        /// The task id.
        id: String,
    },
}

/// Options of `polpo missions`.
#[derive(Debug, clap::Args)]
pub struct MissionsArgs {
    /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    #[command(subcommand)]
    command: MissionCommand,
}

/// `polpo missions` subcommands.
#[derive(Debug, clap::Subcommand)]
enum MissionCommand {
    /// Create a draft mission from a plan file (`{tasks: [{title, description, assignTo,
    /// dependsOn: [titles]}], checkpoints?, delays?}`).
    Create {
        /// The mission's name (also its tasks' group).
        name: String,
        /// The plan, a JSON file.
        #[arg(long, value_name = "FILE")]
        plan: PathBuf,
        /// Run it by itself: once at an ISO-8601 instant (`scheduled`), or at each occurrence
        /// of a cron expression in UTC (`recurring`).
        #[arg(long, value_name = "WHEN")]
        schedule: Option<String>,
        /// When a recurring mission stops recurring (ISO-8601).
        #[arg(long, value_name = "INSTANT", requires = "schedule")]
        end_date: Option<String>,
    },
    /// Missions, newest first.
    List {
        /// Print the server's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One mission with its progress.
    Show {
        /// The mission id.
        id: String,
    },
    /// Start a mission: its plan becomes tasks.
    Execute {
        /// The mission id.
        id: String,
    },
    /// Pause an active mission.
    Pause {
        /// The mission id.
        id: String,
    },
    /// Resume a paused mission (after a checkpoint).
    Resume {
        /// The mission id.
        id: String,
        /// Queue its failed tasks again.
        #[arg(long)]
        retry_failed: bool,
    },
    /// Cancel a mission; its running tasks are killed.
    Abort {
        /// The mission id.
        id: String,
    },
    /// Each task's status, duration and score.
    Report {
        /// The mission id.
        id: String,
        /// Print the server's answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn block_on(work: impl Future<Output = anyhow::Result<ExitCode>>) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(work)
}

/// One line per task: id, status, title, agent.
fn task_line(t: &Value) -> String {
    let s = |k: &str| t[k].as_str().unwrap_or("-").to_owned();
    format!("{}  {:<17} {}  ({})", s("id"), s("status"), s("title"), s("assignTo"))
}

/// Run a `polpo tasks` subcommand against the server.
pub fn run_tasks(global: &Global, args: TasksArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(global, args.url);
    block_on(async move {
        let (data, json) = match args.command {
            TaskCommand::Add { title, description, agent, depends_on, tests, max_retries, draft, json } => {
                let expectations: Vec<Value> = tests.iter().map(|c| json!({"type": "test", "command": c})).collect();
                let mut body = json!({"title": title, "description": description, "assignTo": agent,
                    "dependsOn": depends_on, "expectations": expectations, "draft": draft});
                if let Some(n) = max_retries {
                    body["maxRetries"] = json!(n);
                }
                (client.call(Method::POST, "/api/v1/tasks", Some(body)).await?, json)
            }
            TaskCommand::List { status, mission, json } => {
                let mut query = vec![("limit", "1000".to_owned())];
                query.extend(status.map(|s| ("status", s)));
                query.extend(mission.map(|m| ("missionId", m)));
                let q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let data = client.call(Method::GET, &format!("/api/v1/tasks?{}", q.join("&")), None).await?;
                if !json {
                    for t in data["tasks"].as_array().into_iter().flatten() {
                        println!("{}", task_line(t));
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                (data, true)
            }
            TaskCommand::Show { id, json } => {
                (client.call(Method::GET, &format!("/api/v1/tasks/{id}"), None).await?, json)
            }
            TaskCommand::Retry { id } => {
                (client.call(Method::POST, &format!("/api/v1/tasks/{id}/retry"), None).await?, false)
            }
            TaskCommand::Reassess { id, json } => {
                (client.call(Method::POST, &format!("/api/v1/tasks/{id}/reassess"), None).await?, json)
            }
            TaskCommand::Watch { mission } => return watch(&client, mission).await,
            TaskCommand::Kill { id } => {
                client.call(Method::POST, &format!("/api/v1/tasks/{id}/kill"), None).await?;
                println!("task {id} killed");
                return Ok(ExitCode::SUCCESS);
            }
            TaskCommand::Rm { id } => {
                client.call(Method::DELETE, &format!("/api/v1/tasks/{id}"), None).await?;
                println!("task {id} deleted");
                return Ok(ExitCode::SUCCESS);
            }
        };
        if json {
            return super::print_json(&data);
        }
        let task = if data["task"].is_object() { &data["task"] } else { &data };
        println!("{}", task_line(task));
        if let Some(a) = task["result"]["assessment"].as_object() {
            let verdict = if a["passed"] == true { "passed" } else { "failed" };
            match a.get("globalScore").and_then(Value::as_f64) {
                Some(score) => {
                    println!("assessment: {verdict} (score {score}, trigger {})", a["trigger"].as_str().unwrap_or("-"))
                }
                None => println!("assessment: {verdict} (trigger {})", a["trigger"].as_str().unwrap_or("-")),
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Bus events after which a mission's progress may have changed (`orchestrator:tick`, sent on
/// every pass, is left out).
const PROGRESS_EVENTS: [&str; 6] = ["task:", "mission:", "checkpoint:", "delay:", "quality:", "assessment:complete"];

/// Most bytes of an unfinished event-stream line kept (a longer one is dropped).
const MAX_EVENT_LINE: usize = 1 << 20;

/// `polpo tasks watch`: subscribe to the events first (so nothing is missed), then print each
/// mission's progress and print it again after every event that may have moved it.
async fn watch(client: &Client, mission: Option<String>) -> anyhow::Result<ExitCode> {
    let mut events = client.send(client.request(Method::GET, "/api/v1/events")).await?;
    let mut shown: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut pending = String::new();
    loop {
        let missions = match &mission {
            Some(id) => vec![client.call(Method::GET, &format!("/api/v1/missions/{id}"), None).await?],
            None => {
                let data = client.call(Method::GET, "/api/v1/missions?limit=1000", None).await?;
                data["missions"].as_array().cloned().unwrap_or_default()
            }
        };
        for m in &missions {
            let id = m["id"].as_str().unwrap_or("-");
            let tasks = client.call(Method::GET, &format!("/api/v1/tasks?missionId={id}&limit=1000"), None).await?;
            let line = progress_line(m, tasks["tasks"].as_array().map_or(&[][..], Vec::as_slice));
            if shown.get(id) != Some(&line) {
                println!("{line}");
                shown.insert(id.to_owned(), line);
            }
            if mission.is_some() && matches!(m["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                return Ok(if m["status"] == "completed" { ExitCode::SUCCESS } else { ExitCode::from(1) });
            }
        }
        // Wait for an event that may have moved a mission.
        loop {
            let chunk = events.chunk().await.context("the event stream broke")?;
            let Some(chunk) = chunk else { anyhow::bail!("the server closed the event stream") };
            pending.push_str(&String::from_utf8_lossy(&chunk));
            let complete = pending.rfind('\n').map_or(0, |i| i + 1);
            let moved = pending[..complete].lines().filter_map(|l| l.strip_prefix("event:")).any(|name| {
                let name = name.trim();
                PROGRESS_EVENTS.iter().any(|p| name.starts_with(p))
            });
            pending.drain(..complete);
            if pending.len() > MAX_EVENT_LINE {
                pending.clear();
            }
            if moved {
                break;
            }
        }
    }
}

/// `name [#####x....] 5/10 done, 1 failed, 2 running  active`: `#` a done task, `x` a failed
/// one, `.` the rest, 20 columns.
fn progress_line(mission: &Value, tasks: &[Value]) -> String {
    const WIDTH: usize = 20;
    let count = |s: &[&str]| tasks.iter().filter(|t| t["status"].as_str().is_some_and(|x| s.contains(&x))).count();
    let (done, failed) = (count(&["done"]), count(&["failed"]));
    let running = count(&["assigned", "in_progress", "review"]);
    let total = tasks.len();
    let cols = |n: usize| (n * WIDTH).checked_div(total).unwrap_or(0);
    let (hashes, xs) = (cols(done), cols(failed));
    let bar = format!("{}{}{}", "#".repeat(hashes), "x".repeat(xs), ".".repeat(WIDTH.saturating_sub(hashes + xs)));
    format!(
        "{} [{bar}] {done}/{total} done, {failed} failed, {running} running  {}",
        mission["name"].as_str().unwrap_or("-"),
        mission["status"].as_str().unwrap_or("-")
    )
}

/// Run a `polpo missions` subcommand against the server.
pub fn run_missions(global: &Global, args: MissionsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(global, args.url);
    block_on(async move {
        let path = |id: &str, action: &str| format!("/api/v1/missions/{id}/{action}");
        let data = match args.command {
            MissionCommand::Create { name, plan, schedule, end_date } => {
                let text = std::fs::read_to_string(&plan).with_context(|| format!("cannot read {}", plan.display()))?;
                let data: Value =
                    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", plan.display()))?;
                let body = json!({"name": name, "data": data, "schedule": schedule, "endDate": end_date});
                client.call(Method::POST, "/api/v1/missions", Some(body)).await?
            }
            MissionCommand::List { json } => {
                let data = client.call(Method::GET, "/api/v1/missions?limit=1000", None).await?;
                if json {
                    return super::print_json(&data);
                }
                for m in data["missions"].as_array().into_iter().flatten() {
                    println!(
                        "{}  {:<10} {}",
                        m["id"].as_str().unwrap_or("-"),
                        m["status"].as_str().unwrap_or("-"),
                        m["name"].as_str().unwrap_or("-")
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            MissionCommand::Show { id } => client.call(Method::GET, &format!("/api/v1/missions/{id}"), None).await?,
            MissionCommand::Execute { id } => client.call(Method::POST, &path(&id, "execute"), None).await?,
            MissionCommand::Pause { id } => client.call(Method::POST, &path(&id, "pause"), None).await?,
            MissionCommand::Resume { id, retry_failed } => {
                client.call(Method::POST, &path(&id, "resume"), Some(json!({"retryFailed": retry_failed}))).await?
            }
            MissionCommand::Abort { id } => client.call(Method::POST, &path(&id, "abort"), None).await?,
            MissionCommand::Report { id, json } => {
                let report = client.call(Method::GET, &path(&id, "report"), None).await?;
                if json {
                    return super::print_json(&report);
                }
                for t in report["tasks"].as_array().into_iter().flatten() {
                    let score = t["score"].as_f64().map_or("-".to_owned(), |s| format!("{s:.2}"));
                    println!(
                        "{:<10} {:>8} ms  score {score:>5}  {}",
                        t["status"].as_str().unwrap_or("-"),
                        t["duration"],
                        t["title"].as_str().unwrap_or("-")
                    );
                }
                println!("allPassed {}  avgScore {}", report["allPassed"], report["avgScore"]);
                // Files written by file tools (`write`, `edit`, `http_download`); not `bash`'s.
                for (kind, key) in [("created", "filesCreated"), ("edited", "filesEdited")] {
                    for file in report[key].as_array().into_iter().flatten().filter_map(Value::as_str) {
                        println!("{kind:<8} {file}");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
        };
        println!(
            "{}  {}  {}",
            data["id"].as_str().unwrap_or("-"),
            data["status"].as_str().unwrap_or("-"),
            data["name"].as_str().unwrap_or("-")
        );
        Ok(ExitCode::SUCCESS)
    })
}
