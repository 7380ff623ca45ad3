//! What every part of the orchestrator shares: the run manager (and through it the runtime,
//! the store and its seams), this worker's id, the options, and how events are published.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use polpo_engine::events::EventKind;
use polpo_engine::runs::RunManager;
use polpo_store::Store;
use serde_json::Value;

/// How the orchestrator works.
#[derive(Debug, Clone, PartialEq)]
pub struct OrchestratorOptions {
    /// How long a task claim lives without renewal: after a crash, the time until another
    /// worker (or the restarted one) takes the task over. Renewed every third of it.
    pub lease: Duration,
    /// The safety-net poll; the loop also wakes on every change it or the API makes.
    pub poll: Duration,
    /// Tasks run at once by this worker when `settings.maxConcurrency` does not say.
    pub max_concurrency: usize,
    /// Longest a `test`, `script` or `metrics` command may run.
    pub check_timeout: Duration,
    /// The project's default mission quality threshold (1–5).
    pub quality_threshold: f64,
}

impl Default for OrchestratorOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(15),
            poll: Duration::from_secs(5),
            max_concurrency: 32,
            check_timeout: Duration::from_secs(120),
            quality_threshold: 3.0,
        }
    }
}

/// Environment variable that sets the task claim lease in milliseconds (tests shorten it).
pub const TASK_LEASE_ENV: &str = "POLPO_TASK_LEASE_MS";

impl OrchestratorOptions {
    /// Defaults, with the lease from [`TASK_LEASE_ENV`] when set (at least 100 ms).
    pub fn from_env() -> Self {
        let lease = std::env::var(TASK_LEASE_ENV).ok().and_then(|v| v.parse::<u64>().ok()).filter(|ms| *ms >= 100);
        let mut options = Self::default();
        if let Some(ms) = lease {
            options.lease = Duration::from_millis(ms);
        }
        options
    }
}

/// The orchestrator's shared parts.
pub(crate) struct Ctx {
    pub(crate) runs: Arc<RunManager>,
    pub(crate) worker: String,
    pub(crate) options: OrchestratorOptions,
    /// Wakes the loop: a task finished, a task or mission changed.
    pub(crate) wake: tokio::sync::Notify,
}

impl Ctx {
    pub(crate) fn store(&self) -> &Store {
        self.runs.runtime().store()
    }

    /// The project's mission quality threshold: `settings.defaultQualityThreshold`, else the
    /// options'.
    pub(crate) fn default_threshold(&self) -> f64 {
        let settings = self.runs.runtime().loaded().project.settings().default_quality_threshold.clone();
        settings.and_then(|n| n.as_f64()).unwrap_or(self.options.quality_threshold)
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.runs.runtime().clock().now()
    }

    /// Publish `kind` on the runtime's bus (`GET /api/v1/events`).
    pub(crate) fn emit(&self, kind: EventKind, data: Value) {
        if let Some(name) = kind.bus_name() {
            self.runs.runtime().events().publish(name, data);
        }
    }
}

/// Run `input` through the engine's one entry to its end: the run id and the answer, or why
/// there is none. A durable run goes on in the engine if this future is dropped.
pub(crate) async fn run_to_end(
    runs: &Arc<RunManager>,
    input: polpo_engine::ChatInput,
) -> Result<(String, Result<polpo_engine::RunAnswer, polpo_engine::Failure>), polpo_engine::ChatError> {
    let invoked = runs.invoke(input, polpo_engine::meter::Meter::start()).await?;
    Ok(follow_to_end(invoked).await)
}

/// Listen to `invoked` to its end: the run id and the answer, or why there is none.
pub(crate) async fn follow_to_end(
    mut invoked: polpo_engine::runs::Invoked,
) -> (String, Result<polpo_engine::RunAnswer, polpo_engine::Failure>) {
    use polpo_engine::runs::Progress;
    let run_id = invoked.run_id().to_owned();
    // Held while the run executes: a run that does not outlive us ends with us.
    let _attached = invoked.attachment();
    loop {
        match invoked.next().await {
            Some(Progress::Event(..)) => {}
            Some(Progress::Finished(finished)) if finished.handed_over() => {
                return (run_id, Err(handed_over()));
            }
            Some(Progress::Finished(finished)) => return (run_id, finished.result),
            None => return (run_id, Err(handed_over())),
        }
    }
}

/// The failure code of a run this process handed over while stopping: the task stays where
/// it is, for the next worker.
pub(crate) const HANDED_OVER: &str = polpo_engine::runs::RUN_HANDED_OVER;

fn handed_over() -> polpo_engine::Failure {
    polpo_engine::Failure {
        code: HANDED_OVER.into(),
        message: "the server is stopping; the run goes on elsewhere".into(),
    }
}

/// Rounded to two decimals, like the reference's `globalScore`.
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
