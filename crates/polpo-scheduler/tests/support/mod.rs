//! A scheduler over a run manager, with the orchestrator and loop executor a server would give
//! it; webhooks under the SSRF guard with no exemption unless a test adds one.

use polpo_engine::runs::RunManager;
use polpo_loops::{LoopExecutor, LoopOptions};
use polpo_orchestrator::{Orchestrator, OrchestratorOptions};
use polpo_scheduler::{Scheduler, Targets};
use std::sync::Arc;

/// The targets of a server built on `runs`.
pub fn targets(runs: &Arc<RunManager>) -> Targets {
    Targets::new(
        Orchestrator::new(runs.clone(), OrchestratorOptions::default()),
        Arc::new(LoopExecutor::new(runs.clone(), LoopOptions::default())),
    )
}

/// A scheduler firing through `runs` and its default targets.
pub fn scheduler(runs: Arc<RunManager>) -> Arc<Scheduler> {
    let targets = targets(&runs);
    Scheduler::new(runs, targets)
}
