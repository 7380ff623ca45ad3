//! The loop and the operations people call (through the REST API and the CLI): each pass
//! moves missions along, takes over tasks whose worker died, claims ready tasks up to the
//! free slots (the store counts each agent's tasks against its `maxConcurrency` in the claim
//! itself, across every server sharing it) and drives each in a task of its own, and reports
//! a deadlock when pending tasks can never become ready.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use polpo_core::config::Project;
use polpo_core::tasks::{FailReason, Mission, MissionEvent, MissionStatus, Task, TaskEvent, TaskStatus, deadlocked};
use polpo_engine::Runtime;
use polpo_engine::events::EventKind;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_store::work::MAX_CLAIM;
use polpo_store::{AgentLimits, StoredMission, StoredTask, TaskFilter};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
pub use crate::context::OrchestratorOptions;
use crate::drive::{apply, drive};
use crate::error::OrchestratorError;
use crate::missions::{self, MissionReport};

/// The orchestrator of one process. Cheap to share (`Arc`); [`Orchestrator::spawn`] runs its
/// loop, the other methods are the operations on tasks and missions.
pub struct Orchestrator {
    ctx: Arc<Ctx>,
    /// The tasks driven here now, by id.
    active: Mutex<HashMap<String, Running>>,
}

/// A task driven by this worker.
struct Running {
    /// Cancelled to kill the task.
    kill: CancellationToken,
}

impl Orchestrator {
    /// An orchestrator whose agent runs go through `runs`; its worker id is the run manager's
    /// lease owner (unique to the process).
    pub fn new(runs: Arc<RunManager>, options: OrchestratorOptions) -> Arc<Self> {
        let worker = runs.owner().to_owned();
        Arc::new(Self {
            ctx: Arc::new(Ctx { runs, worker, options, wake: tokio::sync::Notify::new() }),
            active: Mutex::default(),
        })
    }

    /// An orchestrator over `runtime` for a program that embeds Polpo rather than serving it:
    /// its own run manager (lease and options from the environment, like `polpo serve`), whose
    /// recovery of runs a crash left behind starts now when called inside a Tokio runtime.
    /// For a host that chooses the runtime's parts itself; [`Orchestrator::open`] builds the
    /// one `polpo serve` runs.
    pub fn with_runtime(runtime: Arc<Runtime>) -> Arc<Self> {
        let runs = RunManager::new(runtime, RunOptions::from_env());
        if tokio::runtime::Handle::try_current().is_ok() {
            runs.spawn_recovery();
        }
        Self::new(runs, OrchestratorOptions::from_env())
    }

    /// Open the project at `dir` (or the nearest folder above it holding `.polpo/`) for a
    /// program that runs its tasks: the project is loaded and validated now;
    /// [`OpenProject::init`] then builds the same runtime `polpo serve` builds (providers,
    /// store, custom tools, Connections, MCP, vault redaction) and the orchestrator over it.
    /// A project with problems is `invalid_input` naming each one.
    pub fn open(dir: impl AsRef<Path>) -> Result<OpenProject, OrchestratorError> {
        let dir = dir.as_ref();
        let root = polpo_project::paths::find_root(dir).unwrap_or_else(|| dir.to_path_buf());
        let project = polpo_project::load_project(&root).map_err(|problems| {
            let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
            OrchestratorError::Invalid(format!(
                "the project at {} has {} problem(s):\n{}",
                root.display(),
                problems.len(),
                lines.join("\n")
            ))
        })?;
        Ok(OpenProject { project })
    }

    fn active(&self) -> MutexGuard<'_, HashMap<String, Running>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run the loop for as long as the orchestrator lives: a pass now, then one whenever
    /// something changes (a task ends, the API creates or moves work) or the poll passes.
    pub fn spawn(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let ctx = self.ctx.clone();
        ctx.emit(EventKind::OrchestratorStarted, json!({"worker": ctx.worker}));
        tokio::spawn(async move {
            loop {
                let Some(me) = weak.upgrade() else { return };
                if let Err(e) = me.tick().await {
                    tracing::warn!(code = e.code(), "orchestrator pass failed: {e}");
                }
                drop(me);
                let _ = tokio::time::timeout(ctx.options.poll, ctx.wake.notified()).await;
            }
        })
    }

    /// Run the loop on the caller's task for as long as the program runs, for a program whose
    /// main job is running tasks (`orchestrator.run().await?`). Unlike [`Orchestrator::spawn`],
    /// which logs a failed pass and goes on (a server outlives a store hiccup), the first pass
    /// that fails ends it with that error, for the program to see.
    pub async fn run(self: &Arc<Self>) -> Result<(), OrchestratorError> {
        self.ctx.emit(EventKind::OrchestratorStarted, json!({"worker": self.ctx.worker}));
        loop {
            self.pass().await?;
            let _ = tokio::time::timeout(self.ctx.options.poll, self.ctx.wake.notified()).await;
        }
    }

    /// Run passes until there is nothing left to do here: a whole pass, begun with no task
    /// running in this process, starts nothing (so a pass also ran after the last task ended,
    /// and its mission was advanced). For scripts and tests that add work and want it
    /// finished, without a loop that never ends. Work that waits on something outside (a
    /// person's approval, a mission checkpoint or delay, another worker's claim) is left as it
    /// is; call again later.
    pub async fn run_until_idle(self: &Arc<Self>) -> Result<(), OrchestratorError> {
        loop {
            let quiet = self.active().is_empty();
            let started = self.pass().await?;
            if quiet && started == 0 && self.active().is_empty() {
                return Ok(());
            }
            // A finished task wakes us; the poll covers work that became ready by itself.
            let _ = tokio::time::timeout(self.ctx.options.poll, self.ctx.wake.notified()).await;
        }
    }

    /// Wake the loop now (work was created or changed).
    pub fn wake(&self) {
        self.ctx.wake.notify_one();
    }

    /// Tasks run at once by this worker.
    fn slots(&self) -> usize {
        let settings = self.ctx.runs.runtime().loaded().project.settings().max_concurrency;
        settings.map_or(self.ctx.options.max_concurrency, |n| n.max(1) as usize)
    }

    /// One pass of the loop.
    pub async fn tick(self: &Arc<Self>) -> Result<(), OrchestratorError> {
        self.pass().await.map(drop)
    }

    /// Each agent's `maxConcurrency`, for the store to count in a claim.
    fn agent_limits(&self) -> AgentLimits {
        let agents = &self.ctx.runs.runtime().loaded().project.agents;
        agents.iter().filter_map(|(name, a)| Some((name.clone(), a.config.max_concurrency?))).collect()
    }

    /// One pass; the number of tasks it started (or took over).
    async fn pass(self: &Arc<Self>) -> Result<usize, OrchestratorError> {
        missions::advance(&self.ctx).await?;
        let started = self.take_over_orphans().await? + self.claim_into_free_slots().await?;
        if started == 0 && self.active().is_empty() {
            self.check_deadlock().await?;
        }
        self.ctx.emit(EventKind::OrchestratorTick, json!({"running": self.active().len(), "started": started}));
        Ok(started)
    }

    /// Claim ready tasks into the free slots (the store passes over the tasks of agents at
    /// their `maxConcurrency`) and start them; the number started. The tasks of one mission
    /// are checked against its flow (checkpoints, delays, gates) together, once per claim.
    async fn claim_into_free_slots(self: &Arc<Self>) -> Result<usize, OrchestratorError> {
        let free = self.slots().saturating_sub(self.active().len());
        if free == 0 {
            return Ok(0);
        }
        let store = self.ctx.store();
        let limit = u32::try_from(free).unwrap_or(MAX_CLAIM).min(MAX_CLAIM);
        let claimed =
            store.tasks.claim_ready(&self.ctx.worker, self.ctx.options.lease, limit, &self.agent_limits()).await?;
        let mut by_mission: HashMap<String, Vec<StoredTask>> = HashMap::new();
        let mut started = 0;
        for held in claimed {
            match held.task.mission_id.clone() {
                Some(mission) => by_mission.entry(mission).or_default().push(held),
                None => {
                    started += 1;
                    self.start(held);
                }
            }
        }
        for (mission, held) in by_mission {
            let titles: Vec<&str> = held.iter().map(|h| h.task.title.as_str()).collect();
            let may = missions::may_start(&self.ctx, &mission, &titles).await;
            let may = match may {
                Ok(may) => may,
                Err(e) => {
                    for h in &held {
                        store.tasks.release_task(&h.task.id, &self.ctx.worker).await?;
                    }
                    return Err(e);
                }
            };
            for (h, may) in held.into_iter().zip(may) {
                if may {
                    started += 1;
                    self.start(h);
                } else {
                    store.tasks.release_task(&h.task.id, &self.ctx.worker).await?;
                }
            }
        }
        Ok(started)
    }

    fn start(self: &Arc<Self>, held: StoredTask) {
        let kill = CancellationToken::new();
        let id = held.task.id.clone();
        self.active().insert(id.clone(), Running { kill: kill.clone() });
        let me = self.clone();
        tokio::spawn(async move {
            drive(me.ctx.clone(), held, kill).await;
            me.active().remove(&id);
            me.wake();
        });
    }

    /// Take over the assigned, running and reviewed tasks whose worker's claim lapsed (it
    /// died) or that nobody holds (approved tasks): they go on here. They already count
    /// against their agent's `maxConcurrency` in the store, so taking one over changes nothing
    /// there.
    async fn take_over_orphans(self: &Arc<Self>) -> Result<usize, OrchestratorError> {
        let now = self.ctx.now();
        let mut taken = 0;
        for status in [TaskStatus::Assigned, TaskStatus::InProgress, TaskStatus::Review] {
            let filter = TaskFilter { status: Some(status), ..Default::default() };
            for t in missions::all_tasks(&self.ctx, &filter).await? {
                let lapsed = t.claim.as_ref().is_none_or(|c| c.expires_at <= now);
                if !lapsed || self.active().contains_key(&t.task.id) || self.active().len() >= self.slots() {
                    continue;
                }
                let Ok(held) =
                    self.ctx.store().tasks.hold_task(&t.task.id, &self.ctx.worker, self.ctx.options.lease).await
                else {
                    continue; // another worker was faster
                };
                self.ctx.emit(EventKind::TaskRecovered, json!({"taskId": held.task.id, "status": held.task.status}));
                taken += 1;
                self.start(held);
            }
        }
        Ok(taken)
    }

    /// Pending tasks that can never become ready (a dependency failed) are failed with the
    /// reason, after an `orchestrator:deadlock` event. Tasks of missions that are not active
    /// wait for their mission; a paused mission may still release work, so nothing is failed
    /// while one exists. (The reference's LLM deadlock resolver is not built.)
    async fn check_deadlock(&self) -> Result<(), OrchestratorError> {
        let ctx = &self.ctx;
        let active: Vec<String> =
            missions::missions_in(ctx, MissionStatus::Active).await?.into_iter().map(|m| m.mission.id).collect();
        let paused = !missions::missions_in(ctx, MissionStatus::Paused).await?.is_empty();
        let all = missions::all_tasks(ctx, &TaskFilter::default()).await?;
        let live: Vec<&StoredTask> =
            all.iter().filter(|t| t.task.mission_id.as_ref().is_none_or(|m| active.contains(m))).collect();
        let tasks: Vec<Task> = live.iter().map(|t| t.task.clone()).collect();
        if !deadlocked(&tasks, paused) {
            return Ok(());
        }
        let stuck: Vec<&&StoredTask> = live.iter().filter(|t| t.task.status == TaskStatus::Pending).collect();
        ctx.emit(
            EventKind::OrchestratorDeadlock,
            json!({"taskIds": stuck.iter().map(|t| t.task.id.clone()).collect::<Vec<_>>(), "reason": "dependencies that can never be done"}),
        );
        for t in stuck {
            let mut next = (*t).clone();
            let reason = "deadlock: a dependency failed, so this task can never become ready";
            next.task.result =
                Some(polpo_core::tasks::TaskResult { exit_code: 1, stderr: reason.into(), ..Default::default() });
            if let Err(e) = apply(ctx, &next, TaskEvent::Fail { reason: FailReason::Deadlock }).await {
                tracing::warn!(task = %t.task.id, code = e.code(), "deadlocked task could not be failed: {e}");
            }
        }
        Ok(())
    }

    /// Create a task (a draft, or pending and run as soon as it is ready).
    pub async fn create_task(&self, task: Task) -> Result<StoredTask, OrchestratorError> {
        if let Some(agent) = &task.assign_to
            && !self.ctx.runs.runtime().loaded().project.agents.contains_key(agent)
        {
            return Err(OrchestratorError::Invalid(format!("assignTo names no agent of the project: `{agent}`")));
        }
        let stored = self.ctx.store().tasks.create_task(task).await?;
        self.ctx.emit(EventKind::TaskCreated, json!({"taskId": stored.task.id, "title": stored.task.title}));
        self.wake();
        Ok(stored)
    }

    /// The task, or `not_found`.
    pub async fn task(&self, id: &str) -> Result<StoredTask, OrchestratorError> {
        self.ctx.store().tasks.get_task(id).await?.ok_or_else(|| OrchestratorError::NotFound(format!("no task `{id}`")))
    }

    /// Delete task `id` for good and announce it (`task:removed`). Refused (`conflict`) while
    /// it is being worked on (kill it first, then delete it) or while other tasks depend on it.
    pub async fn delete_task(&self, id: &str) -> Result<StoredTask, OrchestratorError> {
        let removed = self.ctx.store().tasks.delete_task(id).await?;
        self.ctx.emit(
            EventKind::TaskRemoved,
            json!({"taskId": id, "title": removed.task.title, "missionId": removed.task.mission_id}),
        );
        self.wake();
        Ok(removed)
    }

    /// Apply a person's `event` to task `id`: the task is held for the write (a task another
    /// worker is driving is a `conflict`), then released and the loop woken.
    async fn by_hand(&self, id: &str, event: TaskEvent) -> Result<StoredTask, OrchestratorError> {
        let store = self.ctx.store();
        let held = store.tasks.hold_task(id, &self.ctx.worker, self.ctx.options.lease).await?;
        let moved = apply(&self.ctx, &held, event).await;
        store.tasks.release_task(id, &self.ctx.worker).await?;
        self.wake();
        moved
    }

    /// `draft → pending`.
    pub async fn queue(&self, id: &str) -> Result<StoredTask, OrchestratorError> {
        self.by_hand(id, TaskEvent::Queue).await
    }

    /// `failed → pending`, whatever its retries (a person asked).
    pub async fn retry(&self, id: &str) -> Result<StoredTask, OrchestratorError> {
        self.by_hand(id, TaskEvent::Retry { manual: true }).await
    }

    /// Assess a done or failed task again (`trigger: reassess`); the earlier assessment moves
    /// to its history and the new verdict decides `done` or `failed`. A task another worker
    /// holds is a `conflict`.
    pub async fn reassess(&self, id: &str) -> Result<StoredTask, OrchestratorError> {
        let store = self.ctx.store();
        let held = store.tasks.hold_task(id, &self.ctx.worker, self.ctx.options.lease).await?;
        let moved = crate::drive::reassess(&self.ctx, &held).await;
        store.tasks.release_task(id, &self.ctx.worker).await?;
        self.wake();
        moved
    }

    /// Approve a task that waits for approval: it runs again.
    pub async fn approve(&self, id: &str) -> Result<StoredTask, OrchestratorError> {
        self.by_hand(id, TaskEvent::Approve).await
    }

    /// Reject a task that waits for approval: it fails.
    pub async fn reject(&self, id: &str) -> Result<StoredTask, OrchestratorError> {
        self.by_hand(id, TaskEvent::Reject).await
    }

    /// Stop a task: its run is aborted and it fails (`forced`). A task driven here is stopped
    /// by its driver; otherwise it is failed directly (a task driven by another live worker
    /// is a `conflict`).
    pub async fn kill(&self, id: &str) -> Result<(), OrchestratorError> {
        let token = self.active().get(id).map(|r| r.kill.clone());
        match token {
            Some(token) => {
                token.cancel();
                Ok(())
            }
            None => self.by_hand(id, TaskEvent::Fail { reason: FailReason::Forced }).await.map(drop),
        }
    }

    /// Create a mission (draft); its quality gates' conditions must parse. With a `schedule`
    /// it waits `scheduled` (an ISO instant) or `recurring` (a cron expression) for the
    /// scheduler to fire it ([`Orchestrator::fire_mission`]).
    pub async fn create_mission(&self, mission: Mission) -> Result<StoredMission, OrchestratorError> {
        mission.validate_gates().map_err(|e| OrchestratorError::Invalid(format!("{}: {e}", e.code())))?;
        missions::check_schedule(&mission, self.ctx.now())
            .map_err(|p| OrchestratorError::Invalid(format!("{}: {}", p.code, p.message)))?;
        missions::plan_tasks(&mission, self.ctx.runs.runtime().ids().as_ref(), self.ctx.now())?;
        let stored = missions::arm(&self.ctx, self.ctx.store().missions.create_mission(mission).await?).await?;
        self.ctx.emit(EventKind::MissionSaved, json!({"missionId": stored.mission.id, "name": stored.mission.name}));
        Ok(stored)
    }

    /// The mission, or `not_found`.
    pub async fn mission(&self, id: &str) -> Result<StoredMission, OrchestratorError> {
        missions::get(&self.ctx, id).await
    }

    /// Start a mission: its plan becomes tasks, it becomes active.
    pub async fn execute_mission(&self, id: &str) -> Result<StoredMission, OrchestratorError> {
        let stored = missions::execute(&self.ctx, id).await?;
        self.wake();
        Ok(stored)
    }

    /// Start the run of a scheduled or recurring mission that its schedule's `occurrence`
    /// fires (the scheduler calls this once per occurrence; a repeat finds the run started).
    pub async fn fire_mission(&self, id: &str, occurrence: &str) -> Result<StoredMission, OrchestratorError> {
        let stored = missions::fire(&self.ctx, id, occurrence).await?;
        self.wake();
        Ok(stored)
    }

    /// Set the `schedule` and `endDate` of a draft, scheduled or recurring mission (a draft
    /// given one waits for it; a waiting one keeps its kind, one-shot or recurring).
    pub async fn reschedule_mission(
        &self,
        id: &str,
        schedule: Option<String>,
        end_date: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<StoredMission, OrchestratorError> {
        missions::reschedule(&self.ctx, id, schedule, end_date).await
    }

    /// Pause an active mission (its running tasks finish; no new one starts).
    pub async fn pause_mission(&self, id: &str) -> Result<StoredMission, OrchestratorError> {
        missions::control(&self.ctx, id, MissionEvent::Pause).await
    }

    /// Resume a paused mission; `retry_failed` also queues its failed tasks again.
    pub async fn resume_mission(&self, id: &str, retry_failed: bool) -> Result<StoredMission, OrchestratorError> {
        let stored = missions::control(&self.ctx, id, MissionEvent::Resume).await?;
        if retry_failed {
            for t in missions::tasks_of(&self.ctx, id).await? {
                if t.task.status == TaskStatus::Failed {
                    self.retry(&t.task.id).await?;
                }
            }
        }
        self.wake();
        Ok(stored)
    }

    /// Cancel a mission; its running tasks are killed.
    pub async fn abort_mission(&self, id: &str) -> Result<StoredMission, OrchestratorError> {
        let stored = missions::control(&self.ctx, id, MissionEvent::Cancel).await?;
        for t in missions::tasks_of(&self.ctx, id).await? {
            if matches!(t.task.status, TaskStatus::InProgress | TaskStatus::Review) {
                let _ = self.kill(&t.task.id).await;
            }
        }
        Ok(stored)
    }

    /// The mission's report.
    pub async fn mission_report(&self, id: &str) -> Result<MissionReport, OrchestratorError> {
        missions::report(&self.ctx, id).await
    }
}

/// A project loaded by [`Orchestrator::open`], whose runtime is not built yet.
pub struct OpenProject {
    project: Project,
}

impl OpenProject {
    /// Build the project's runtime as `polpo serve` does (`polpo_assemble::open`: its store
    /// opened, recovery of runs a crash left behind started) and the orchestrator over it. A
    /// part that cannot be built (a provider entry polpo cannot speak, a store that cannot be
    /// opened) is `invalid_input` with its own code in the message.
    pub async fn init(self) -> Result<Arc<Orchestrator>, OrchestratorError> {
        let runtime =
            polpo_assemble::open(self.project).await.map_err(|e| OrchestratorError::Invalid(format!("{e:#}")))?;
        Ok(Orchestrator::with_runtime(runtime))
    }
}
