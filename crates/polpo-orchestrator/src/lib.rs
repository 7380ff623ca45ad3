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
//! ```no_run
//! # async fn demo(runs: std::sync::Arc<polpo_engine::runs::RunManager>) {
//! use polpo_orchestrator::{Orchestrator, OrchestratorOptions};
//! let orchestrator = Orchestrator::new(runs, OrchestratorOptions::default());
//! let _loop = orchestrator.spawn(); // claims and runs tasks until the process stops
//! # }
//! ```

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
