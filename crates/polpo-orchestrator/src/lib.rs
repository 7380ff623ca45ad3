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
//! A program embeds the orchestrator like `polpo serve` does: it builds the project's
//! [`Runtime`](polpo_engine::Runtime) (project, model providers, store), hands it to
//! [`Orchestrator::with_runtime`], adds work, and runs it. The runtime is the host's to build
//! because its parts are the host's choice: `polpo serve` adds the project's custom tools, MCP
//! servers, vault redaction and typed memory to the same three parts shown here.
//! [`Orchestrator::run_until_idle`] returns once nothing is left to start or running;
//! [`Orchestrator::run`] (or [`Orchestrator::spawn`]) keeps the loop going like a server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use polpo_engine::{Loaded, Runtime};
//! use polpo_orchestrator::Orchestrator;
//! use polpo_store::{StoreKind, SystemClock, open_store};
//! use std::sync::Arc;
//!
//! let root = std::path::Path::new("./my-project");
//! let project = polpo_project::load_project(root).map_err(|problems| format!("{problems:?}"))?;
//! let kind = StoreKind::parse(project.settings().storage().as_str())?;
//! let store = open_store(kind, root, None, Arc::new(SystemClock)).await?;
//! // Built-in providers with their keys from the environment (OPENAI_API_KEY, …).
//! let providers = polpo_llm::Providers::from_process_env(Default::default());
//! let loaded = Loaded::new(project).map_err(|problems| format!("{problems:?}"))?;
//! let orchestrator = Orchestrator::with_runtime(Arc::new(Runtime::new(loaded, providers, store)));
//!
//! let mut task = polpo_core::tasks::Task::new("t1", "Write the plan", "Write PLAN.md", chrono::Utc::now());
//! task.assign_to = Some("writer".into());
//! orchestrator.create_task(task).await?;
//! orchestrator.run_until_idle().await?; // or `orchestrator.run().await` to keep serving
//! println!("{:?}", orchestrator.task("t1").await?.task.status);
//! # Ok(())
//! # }
//! ```
//!
//! `tests/programmatic.rs` runs this against a temporary project with the scripted fake model.

mod assess;
mod context;
mod drive;
mod error;
mod missions;
mod orchestrator;
mod review;

pub use assess::{AssessmentResult, CheckResult, MetricResult};
pub use error::OrchestratorError;
pub use missions::{GateReport, MissionReport, ReportTask, plan_tasks};
pub use orchestrator::{Orchestrator, OrchestratorOptions};
