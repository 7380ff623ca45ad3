//! The task orchestrator (inventory §5.2–5.5): a loop inside `polpo serve` that claims ready
//! tasks from the store, runs each as an agent run through the engine's one entry
//! (`RunManager::invoke`, surface `task`, durable when the project runs durable runs),
//! assesses the result (`test`/`script` commands, `file_exists`, `metrics`, an LLM review by
//! three reviewers), and then moves the task along the core state machine: `done`, a fix
//! round, a retry (escalating to the `fallbackAgent`), or `failed`. It also moves missions:
//! starting them (their plan becomes tasks), pausing them at checkpoints and delays, resuming
//! delays by themselves, and finishing them with a report.
//!
//! Several processes may share one store: a task is held by one worker at a time (a claim
//! with a lease, renewed while it runs); a worker that dies leaves a claim that lapses, and
//! another worker takes the task over and follows the run it had started instead of
//! starting it again.
//!
//! # Programmatic use
//!
//! A program runs a project's tasks like `polpo serve` does, without a server:
//! [`Orchestrator::open`] loads and validates the project folder, [`OpenProject::init`] builds
//! the runtime `polpo serve` builds (crate `polpo-assemble`: the project's model providers, its
//! store, custom tools, Connections, MCP servers and vault redaction) and the orchestrator over
//! it, and [`Orchestrator::run`] keeps the loop going for as long as the program runs:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use polpo_orchestrator::Orchestrator;
//!
//! Orchestrator::open("./my-project")?.init().await?.run().await?;
//! # Ok(())
//! # }
//! ```
//!
//! To add work and wait for it, [`Orchestrator::create_task`] then
//! [`Orchestrator::run_until_idle`], which returns once nothing is left to start or running
//! (work waiting on a person or a mission delay is left for a later call). This example runs
//! as a doc test against a project whose provider is the scripted fake model:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let llm = polpo_testkit::FakeLlm::start([polpo_testkit::Turn::text("PLAN: ship it")]).await?;
//! # let settings = serde_json::json!({"storage": "sqlite", "providers": {"fake": {"baseUrl": llm.base_url()}}});
//! # polpo_testkit::ProjectFixture::new(dir.path(), settings)?
//! #     .agent("writer", serde_json::json!({"model": "fake/fake-model"}), "You write plans.")?;
//! # let my_project = dir.path();
//! use polpo_core::tasks::{Task, TaskStatus};
//! use polpo_orchestrator::Orchestrator;
//!
//! let orchestrator = Orchestrator::open(my_project)?.init().await?;
//! let mut task = Task::new("t1", "Write the plan", "Write PLAN.md", chrono::Utc::now());
//! task.assign_to = Some("writer".into());
//! orchestrator.create_task(task).await?;
//! orchestrator.run_until_idle().await?;
//! assert_eq!(orchestrator.task("t1").await?.task.status, TaskStatus::Done);
//! # Ok(())
//! # }
//! ```
//!
//! A host that chooses the runtime's parts itself builds a [`Runtime`](polpo_engine::Runtime)
//! and hands it to [`Orchestrator::with_runtime`]; `tests/programmatic.rs` does both.

mod assess;
mod clarify;
mod context;
mod dimensions;
mod drive;
mod error;
mod files;
mod judge;
mod missions;
mod orchestrator;
mod review;

pub use assess::{AssessmentResult, CheckResult, MetricResult};
pub use dimensions::DimensionSource;
pub use drive::task_run_id;
pub use error::OrchestratorError;
pub use missions::{
    GateReport, MissionReport, ReportTask, check_schedule, mission_schedule, mission_schedule_id, plan_tasks,
    schedule_event,
};
pub use orchestrator::{OpenProject, Orchestrator, OrchestratorOptions};
pub use review::ReviewMode;
