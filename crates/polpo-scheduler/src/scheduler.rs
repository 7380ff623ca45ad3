//! The scheduler: passes over the project's active schedules at the store's time, claiming
//! each due occurrence by creating its schedule-run record (a create that fails when the
//! record exists, on every backend: the claim), then firing it.
//!
//! Besides the project's schedule files, each mission waiting `scheduled` or `recurring` in
//! the store is a schedule (`mission-<id>`, from its `schedule`: see
//! `polpo_orchestrator::mission_schedule`) whose fire starts a run of the mission. Read from
//! the store each pass, it is shared by every server of that store and survives restarts; a
//! mission aborted, finished or running is not waiting, so it has no schedule to fire.

use crate::fire;
use crate::record::{
    CURSORS, Cursor, MAX_KEY_LEN, RunError, RunState, ScheduleRun, escape, occurrence_id, run_id, runs_collection,
    trigger_id,
};
use crate::targets::{self, Launched, Targets};
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use polpo_core::schedules::Schedule;
use polpo_core::schedules::config::Invocation;
use polpo_core::schedules::plan::{Due, plan_due};
use polpo_core::tasks::MissionStatus;
use polpo_engine::events::EventKind;
use polpo_engine::runs::{Progress, RunManager};
use polpo_store::{MissionFilter, Page, PageRequest, Record, RunStatus, Store, StoreError};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

/// How often `polpo serve`'s scheduler passes over every schedule at least (and looks for
/// claims to take over, whose lease is far longer). Between these full passes it sleeps until
/// the earliest next occurrence and then reads only the schedules due; a project edit wakes it
/// at once ([`Scheduler::wake`]), so this bounds only how late it sees what nothing told it
/// (another server's claim lapsing, a schedule file edited behind the server's back).
pub const PASS_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// How long the scheduler waits before retrying after a failed pass (the store unreachable).
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a claim is held before its invocation must have started: past it (its server died
/// in between), the claim stops counting towards `maxConcurrency` and another server takes
/// the occurrence over.
const CLAIM_LEASE: Duration = Duration::minutes(5);
/// Newest schedule-runs looked at when counting running invocations.
const CONCURRENCY_WINDOW: u32 = 100;

/// Why a scheduler call failed, each with a stable code.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// No schedule by that id in the loaded project.
    #[error("schedule `{0}` not found")]
    NotFound(String),
    /// A bad argument (an idempotency key too long or empty).
    #[error("{0}")]
    Invalid(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SchedulerError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "schedule_not_found",
            Self::Invalid(_) => "invalid_input",
            Self::Store(e) => e.code(),
        }
    }
}

/// What one pass did, for logs and tests, and when to pass again.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    /// Each schedule passed over with its next occurrence still to look at (none: it never
    /// fires again): the scheduler sleeps until the earliest.
    pub next: BTreeMap<String, DateTime<Utc>>,
    /// Occurrences this server claimed and started.
    pub fired: usize,
    /// Occurrences this server recorded `missed` (plus the unrecorded ones counted).
    pub missed: usize,
    /// Occurrences this server claimed but could not start, or skipped at `maxConcurrency`.
    pub failed: usize,
}

/// Fires the schedules of the runtime's loaded project (reloads included: each pass reads
/// the project in force).
pub struct Scheduler {
    runs: Arc<RunManager>,
    targets: Targets,
    followers: TaskTracker,
    /// Signalled when the project may have changed (an edit through the API): the sleeping
    /// loop passes over every schedule again at once.
    woken: Notify,
}

impl Scheduler {
    /// A scheduler firing agents through `runs`, with the time and store of its runtime, and
    /// tasks, loops and webhooks through `targets`.
    pub fn new(runs: Arc<RunManager>, targets: Targets) -> Arc<Self> {
        Arc::new(Self { runs, targets, followers: TaskTracker::new(), woken: Notify::new() })
    }

    fn store(&self) -> &Store {
        self.runs.runtime().store()
    }

    fn now(&self) -> DateTime<Utc> {
        self.runs.runtime().clock().now()
    }

    fn publish(&self, kind: EventKind, data: Value) {
        if let Some(name) = kind.bus_name() {
            self.runs.runtime().events().publish(name, data);
        }
    }

    /// Run [`Scheduler::run`] in a task of its own until the returned guard is dropped.
    pub fn spawn(self: &Arc<Self>, every: std::time::Duration) -> DropGuard {
        let stop = CancellationToken::new();
        tokio::spawn(self.clone().run(every, stop.clone()));
        stop.drop_guard()
    }

    /// Tell the running loop the project may have changed (a schedule created, edited,
    /// paused or deleted): it passes over every schedule again now instead of sleeping on
    /// until the occurrence it last computed.
    pub fn wake(&self) {
        self.woken.notify_one();
    }

    /// Until `stop`: a full pass ([`Scheduler::tick`]) at least every `every` and whenever
    /// woken, and in between a pass over only the schedules whose next occurrence has come,
    /// sleeping until the earliest one — idle, the store is not read at all. A failing pass is
    /// logged and retried shortly.
    pub async fn run(self: Arc<Self>, every: std::time::Duration, stop: CancellationToken) {
        let mut next: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
        let mut full_at = self.now();
        loop {
            let now = self.now();
            let full = now >= full_at;
            // The schedules due now leave `next`; the pass puts back those that fire again.
            let due: Vec<String> = next.iter().filter(|(_, at)| **at <= now).map(|(id, _)| id.clone()).collect();
            let pass = match full {
                true => self.tick().await,
                false => self.pass(now, |id| due.iter().any(|d| d == id), false).await,
            };
            let nap = match pass {
                Ok(pass) => {
                    if full {
                        next.clear();
                        full_at = now + Duration::from_std(every).unwrap_or(CLAIM_LEASE);
                    }
                    for id in &due {
                        next.remove(id);
                    }
                    next.extend(pass.next);
                    let wake_at = next.values().copied().min().map_or(full_at, |at| at.min(full_at));
                    (wake_at - self.now()).to_std().unwrap_or_default()
                }
                Err(e) => {
                    eprintln!("warning: scheduler pass failed: {} ({e})", e.code());
                    RETRY_AFTER
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(nap) => {}
                () = self.woken.notified() => full_at = self.now(),
            }
        }
    }

    /// One full pass at the store's time now: each active schedule's occurrences since its
    /// cursor are fired or recorded `missed`, by whichever server claims them first, and
    /// claims whose claimer died are taken over.
    pub async fn tick(self: &Arc<Self>) -> Result<Pass, SchedulerError> {
        self.pass(self.now(), |_| true, true).await
    }

    /// A pass at `now` over the active schedules `due` selects, taking over lapsed claims too
    /// when `take_over`.
    async fn pass(
        self: &Arc<Self>,
        now: DateTime<Utc>,
        due: impl Fn(&str) -> bool,
        take_over: bool,
    ) -> Result<Pass, SchedulerError> {
        let loaded = self.runs.runtime().loaded();
        let missions = self.mission_schedules().await?;
        let files = loaded.project.schedules.values().filter(|s| s.config.is_active()).map(|s| (s, now));
        let mut pass = Pass::default();
        for (schedule, since) in files.chain(missions.iter().map(|(s, since)| (s, *since))).filter(|(s, _)| due(&s.id))
        {
            if take_over {
                self.take_over(schedule, now, &mut pass).await?;
            }
            let next = self.pass_over(schedule, since, now, &mut pass).await?;
            if let Some(at) = next {
                pass.next.insert(schedule.id.clone(), at);
            }
        }
        Ok(pass)
    }

    /// The schedules of the missions waiting `scheduled` or `recurring`, each with the time
    /// its schedule was set (where a first pass starts looking, so an occurrence that came
    /// while no server ran is fired within its grace instead of never). A mission whose
    /// schedule no longer parses is logged and left alone.
    pub async fn mission_schedules(&self) -> Result<Vec<(Schedule, DateTime<Utc>)>, SchedulerError> {
        let mut out = Vec::new();
        for status in [MissionStatus::Scheduled, MissionStatus::Recurring] {
            let filter = MissionFilter { status: Some(status) };
            let mut page = PageRequest::first(1000);
            loop {
                let got = self.store().missions.list_missions(&filter, &page).await?;
                for m in &got.items {
                    match polpo_orchestrator::mission_schedule(&m.mission) {
                        Ok(Some(schedule)) => out.push((schedule, m.mission.updated_at)),
                        Ok(None) => {}
                        Err(p) => eprintln!("warning: mission `{}` has a schedule that cannot fire: {p}", m.mission.id),
                    }
                }
                match got.next {
                    Some(cursor) => page = PageRequest::after(cursor, 1000),
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// Schedule `id`: a project file's, else a mission's (`mission-<mission id>`) — only while
    /// the mission waits `scheduled` or `recurring` when `waiting` (what fires), else also once
    /// it has run (what its runs are kept under). The one lookup of the trigger and the routes,
    /// so a mission's schedule is as reachable as a file's.
    pub async fn schedule(&self, id: &str, waiting: bool) -> Result<Option<Schedule>, SchedulerError> {
        if let Some(schedule) = self.runs.runtime().loaded().project.schedules.get(id) {
            return Ok(Some(schedule.clone()));
        }
        let Some(mission) = id.strip_prefix("mission-") else { return Ok(None) };
        let Some(stored) = self.store().missions.get_mission(mission).await? else { return Ok(None) };
        let waits = matches!(stored.mission.status, MissionStatus::Scheduled | MissionStatus::Recurring);
        if waiting && !waits {
            return Ok(None);
        }
        // A schedule that no longer parses has nothing to fire or show (a pass logs it).
        Ok(polpo_orchestrator::mission_schedule(&stored.mission).ok().flatten())
    }

    /// Fire or record `missed` the occurrences of `schedule` since its cursor (the first time,
    /// since `since`); its next occurrence after them, if it has one.
    async fn pass_over(
        self: &Arc<Self>,
        schedule: &Schedule,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
        pass: &mut Pass,
    ) -> Result<Option<DateTime<Utc>>, SchedulerError> {
        let records = &self.store().records;
        let cursor_id = escape(&schedule.id);
        let Some(record) = records.get_record(CURSORS, &cursor_id).await? else {
            // First sight: occurrences from `since` on; none before the schedule was known.
            // Those already due are planned in the next pass, over the cursor just written.
            let first = serde_json::to_value(Cursor { after: since }).unwrap_or_default();
            return match records.put_record(CURSORS, &cursor_id, first, Some(0)).await {
                Ok(_) | Err(StoreError::Conflict(_)) => Ok(schedule.timing.next_after(since)),
                Err(e) => Err(e.into()),
            };
        };
        let cursor: Cursor = serde_json::from_value(record.value.clone())
            .map_err(|e| StoreError::Invalid(format!("schedule cursor `{cursor_id}`: {e}")))?;
        let plan = plan_due(&schedule.timing, &schedule.config.policy(), cursor.after, now);
        let mut running = None;
        for due in plan.due {
            match due {
                Due::Missed(at) => {
                    if self
                        .claim(schedule, &occurrence_id(at), missed(schedule, at, self.runs.owner()))
                        .await?
                        .is_some()
                    {
                        self.publish(EventKind::ScheduleMissed, event(schedule, at, json!({"count": 1})));
                        pass.missed += 1;
                    }
                }
                Due::Fire(at) => {
                    // Counted once per pass (a store lookup per recent run), then kept up to date
                    // with this pass's own fires.
                    let count = match running {
                        Some(n) => n,
                        None => self.running(schedule).await?,
                    };
                    running = Some(count);
                    match self.fire(schedule, at, occurrence_id(at), None, count).await? {
                        // A fire done on the spot (a task created, a mission started) is over at once.
                        Some(run) if matches!(run.status, RunState::Running | RunState::Succeeded) => {
                            pass.fired += 1;
                            running = Some(count + 1);
                        }
                        Some(_) => pass.failed += 1,
                        None => {}
                    }
                }
            }
        }
        if plan.unrecorded > 0 {
            self.publish(EventKind::ScheduleMissed, event(schedule, plan.cursor, json!({"count": plan.unrecorded})));
            pass.missed += plan.unrecorded;
        }
        if plan.cursor > cursor.after {
            let value = serde_json::to_value(Cursor { after: plan.cursor }).unwrap_or_default();
            // Another server moving the cursor first is fine: the claims decide who fires.
            match records.put_record(CURSORS, &cursor_id, value, Some(record.revision)).await {
                Ok(_) | Err(StoreError::Conflict(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(schedule.timing.next_after(plan.cursor))
    }

    /// Create the schedule-run record `id` if nobody has: `None` when another server (or an
    /// earlier trigger with the same key) already did.
    async fn claim(&self, schedule: &Schedule, id: &str, run: ScheduleRun) -> Result<Option<Record>, SchedulerError> {
        let value = serde_json::to_value(&run).unwrap_or_default();
        match self.store().records.put_record(&runs_collection(&schedule.id), id, value, Some(0)).await {
            Ok(record) => Ok(Some(record)),
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn update(&self, schedule: &Schedule, record: &Record, run: &ScheduleRun) -> Result<Record, StoreError> {
        let value = serde_json::to_value(run).unwrap_or_default();
        self.store().records.put_record(&runs_collection(&schedule.id), &record.id, value, Some(record.revision)).await
    }

    /// Claim and fire one occurrence; `None` when it was claimed elsewhere.
    async fn fire(
        self: &Arc<Self>,
        schedule: &Schedule,
        at: DateTime<Utc>,
        id: String,
        key: Option<String>,
        running: usize,
    ) -> Result<Option<ScheduleRun>, SchedulerError> {
        let busy = running >= schedule.config.policy().max_concurrency() as usize;
        let run = ScheduleRun {
            schedule_id: schedule.id.clone(),
            scheduled_for: at,
            fired_at: None,
            status: if busy { RunState::Skipped } else { RunState::Claimed },
            run_id: None,
            task_id: None,
            loop_run_id: None,
            result: None,
            error: busy.then(|| RunError {
                code: "max_concurrency".into(),
                message: format!(
                    "{} invocations of this schedule were running",
                    schedule.config.policy().max_concurrency()
                ),
            }),
            claimed_by: self.runs.owner().to_owned(),
            lease_until: (!busy).then(|| self.now() + CLAIM_LEASE),
            idempotency_key: key,
        };
        let Some(record) = self.claim(schedule, &id, run.clone()).await? else { return Ok(None) };
        if busy {
            self.publish(EventKind::ScheduleFailed, event(schedule, at, json!({"error": run.error})));
            return Ok(Some(run));
        }
        Ok(Some(self.start(schedule, &record, run).await?))
    }

    /// Take over the claims of `schedule` whose lease lapsed (their claimer died before
    /// starting them), each by a compare-and-set on its revision so one server wins, and fire
    /// them. Looks at the newest claims only: an older one is long past its grace.
    async fn take_over(
        self: &Arc<Self>,
        schedule: &Schedule,
        now: DateTime<Utc>,
        pass: &mut Pass,
    ) -> Result<(), SchedulerError> {
        let page = self
            .store()
            .records
            .list_records(&runs_collection(&schedule.id), &PageRequest::first(CONCURRENCY_WINDOW))
            .await?;
        for record in &page.items {
            let Ok(mut run) = serde_json::from_value::<ScheduleRun>(record.value.clone()) else { continue };
            if run.status != RunState::Claimed || claim_held(&run, now) {
                continue;
            }
            run.claimed_by = self.runs.owner().to_owned();
            run.lease_until = Some(now + CLAIM_LEASE);
            let record = match self.update(schedule, record, &run).await {
                Ok(record) => record,
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            match self.start(schedule, &record, run).await?.status {
                RunState::Running | RunState::Succeeded => pass.fired += 1,
                _ => pass.failed += 1,
            }
        }
        Ok(())
    }

    /// Start (or follow, when its claimer already started it) the invocation of the claimed
    /// schedule-run `record`, and keep the record up to date with it.
    async fn start(
        self: &Arc<Self>,
        schedule: &Schedule,
        record: &Record,
        mut run: ScheduleRun,
    ) -> Result<ScheduleRun, SchedulerError> {
        if !matches!(schedule.config.invocation, Invocation::Agent { .. }) {
            return self.launch(schedule, record, run).await;
        }
        let (at, id) = (run.scheduled_for, record.id.clone());
        run.fired_at = Some(self.now());
        let request_id = format!("{}/{id}", runs_collection(&schedule.id));
        match fire::start(&self.runs, schedule, at, request_id, &run_id(&schedule.id, &id)).await {
            Err(error) => {
                run.status = RunState::Failed;
                run.error = Some(error);
                self.update(schedule, record, &run).await?;
                self.publish(EventKind::ScheduleFailed, event(schedule, at, json!({"error": run.error})));
            }
            Ok(mut fired) => {
                run.status = RunState::Running;
                run.run_id = Some(fired.run_id().to_owned());
                let record = self.update(schedule, record, &run).await?;
                self.publish(EventKind::ScheduleFired, event(schedule, at, json!({"runId": run.run_id})));
                let (this, schedule, mut done) = (self.clone(), schedule.clone(), run.clone());
                self.followers.spawn(async move {
                    let mut result = None;
                    while let Some(progress) = fired.next().await {
                        if let Progress::Finished(finished) = progress {
                            result = Some(finished.result);
                        }
                    }
                    let failure = match result {
                        Some(Ok(_)) => None,
                        Some(Err(f)) => Some(RunError { code: f.code, message: f.message }),
                        None => Some(RunError {
                            code: "internal".into(),
                            message: "the run ended without a verdict".into(),
                        }),
                    };
                    done.status = RunState::Succeeded;
                    if let Some(error) = failure {
                        done.status = RunState::Failed;
                        done.error = Some(error);
                        this.publish(
                            EventKind::ScheduleFailed,
                            event(&schedule, at, json!({"runId": done.run_id, "error": done.error})),
                        );
                    }
                    if let Err(e) = this.update(&schedule, &record, &done).await {
                        eprintln!("warning: schedule `{}` run record not updated: {e}", schedule.id);
                    }
                });
            }
        }
        Ok(run)
    }

    /// Start a task, loop or webhook fire (see [`targets`]) and record how it went: a task
    /// created or a webhook delivered is `succeeded` at once; a loop run is `running` until its
    /// walk here ends (one already started by a dead claimer keeps its own state).
    async fn launch(
        self: &Arc<Self>,
        schedule: &Schedule,
        record: &Record,
        mut run: ScheduleRun,
    ) -> Result<ScheduleRun, SchedulerError> {
        let at = run.scheduled_for;
        run.fired_at = Some(self.now());
        let derived = run_id(&schedule.id, &record.id);
        let mut walking = None;
        let loaded = self.runs.runtime().loaded();
        let hosts = polpo_core::schedules::webhook_allowlist(loaded.project.settings());
        let verdict = match targets::launch(&self.targets, schedule, &mut run, &derived, self.now(), hosts).await {
            Err(error) => Some(Err(error)),
            Ok(Launched::Done) => Some(Ok(())),
            Ok(Launched::Existing(verdict)) => verdict,
            Ok(Launched::Walking(walk)) => {
                walking = Some(walk);
                None
            }
        };
        run.status = RunState::Running;
        if let Some(verdict) = verdict {
            settle(&mut run, verdict);
        }
        let record = self.update(schedule, record, &run).await?;
        match run.status {
            RunState::Failed => {
                self.publish(EventKind::ScheduleFailed, event(schedule, at, json!({"error": run.error})));
            }
            _ => self.publish(EventKind::ScheduleFired, event(schedule, at, references(&run))),
        }
        if let Some(walk) = walking {
            let (this, schedule, mut done) = (self.clone(), schedule.clone(), run.clone());
            self.followers.spawn(async move {
                let verdict = walk.await.unwrap_or_else(|e| {
                    Err(RunError { code: "internal".into(), message: format!("the loop run task failed: {e}") })
                });
                settle(&mut done, verdict);
                if done.status == RunState::Failed {
                    this.publish(EventKind::ScheduleFailed, event(&schedule, at, json!({"error": done.error})));
                }
                if let Err(e) = this.update(&schedule, &record, &done).await {
                    eprintln!("warning: schedule `{}` run record not updated: {e}", schedule.id);
                }
            });
        }
        Ok(run)
    }

    /// Whether the task, loop run or agent run a started schedule-run points at is still going.
    async fn target_live(&self, run: &ScheduleRun) -> Result<bool, SchedulerError> {
        if let Some(id) = &run.task_id {
            let task = self.store().tasks.get_task(id).await?;
            return Ok(task.is_some_and(|t| !t.task.status.is_terminal()));
        }
        if let Some(id) = &run.loop_run_id {
            return Ok(targets::loop_live(&self.targets.loops, id).await?);
        }
        match (&run.run_id, run.status) {
            (Some(id), RunState::Running) => Ok(self
                .store()
                .runs
                .get_run(id)
                .await?
                .is_some_and(|r| matches!(r.status, RunStatus::Running | RunStatus::Paused))),
            _ => Ok(false),
        }
    }

    /// Invocations of `schedule` still running, on any server: its newest claims whose run,
    /// loop run or task has not ended (a claim that never started counts until its lease
    /// lapses).
    async fn running(&self, schedule: &Schedule) -> Result<usize, SchedulerError> {
        let page = self
            .store()
            .records
            .list_records(&runs_collection(&schedule.id), &PageRequest::first(CONCURRENCY_WINDOW))
            .await?;
        let now = self.now();
        let mut count = 0;
        for run in page.items.iter().filter_map(|r| serde_json::from_value::<ScheduleRun>(r.value.clone()).ok()) {
            let live = match run.status {
                RunState::Claimed => claim_held(&run, now),
                RunState::Running | RunState::Succeeded => self.target_live(&run).await?,
                _ => false,
            };
            count += usize::from(live);
        }
        Ok(count)
    }

    /// Fire `schedule_id` now, once per `key`: a second trigger with the same key fires
    /// nothing and answers the first one's record — even once what it fired no longer waits
    /// (a mission it started is running).
    pub async fn trigger(self: &Arc<Self>, schedule_id: &str, key: &str) -> Result<ScheduleRun, SchedulerError> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(SchedulerError::Invalid(format!("an idempotency key must be 1-{MAX_KEY_LEN} bytes")));
        }
        let id = trigger_id(key);
        let earlier = || async { self.store().records.get_record(&runs_collection(schedule_id), &id).await };
        if let Some(record) = earlier().await? {
            return Ok(parse_run(&record)?);
        }
        let schedule =
            self.schedule(schedule_id, true).await?.ok_or_else(|| SchedulerError::NotFound(schedule_id.to_owned()))?;
        let running = self.running(&schedule).await?;
        if let Some(run) = self.fire(&schedule, self.now(), id.clone(), Some(key.to_owned()), running).await? {
            return Ok(run);
        }
        // Another trigger with this key claimed it meanwhile: its record.
        let record = earlier().await?.ok_or_else(|| StoreError::NotFound { kind: "schedule run", id: id.clone() })?;
        Ok(parse_run(&record)?)
    }

    /// A schedule's runs, newest first, one page at a time.
    pub async fn runs(&self, schedule_id: &str, page: &PageRequest) -> Result<Page<ScheduleRun>, SchedulerError> {
        let records = self.store().records.list_records(&runs_collection(schedule_id), page).await?;
        let items = records.items.iter().map(parse_run).collect::<Result<Vec<_>, _>>()?;
        Ok(Page { items, next: records.next })
    }

    /// Wait until every invocation this scheduler started has finished and its record is
    /// updated (tests, and a clean stop).
    pub async fn settled(&self) {
        self.followers.close();
        self.followers.wait().await;
        self.followers.reopen();
    }
}

fn parse_run(record: &Record) -> Result<ScheduleRun, StoreError> {
    serde_json::from_value(record.value.clone())
        .map_err(|e| StoreError::Invalid(format!("schedule run `{}`: {e}", record.id)))
}

/// Whether a `claimed` record's claimer still holds it at `now` (records written before leases
/// existed hold for one lease from their occurrence).
fn claim_held(run: &ScheduleRun, now: DateTime<Utc>) -> bool {
    now < run.lease_until.unwrap_or(run.scheduled_for + CLAIM_LEASE)
}

fn missed(schedule: &Schedule, at: DateTime<Utc>, owner: &str) -> ScheduleRun {
    ScheduleRun {
        schedule_id: schedule.id.clone(),
        scheduled_for: at,
        fired_at: None,
        status: RunState::Missed,
        run_id: None,
        task_id: None,
        loop_run_id: None,
        result: None,
        error: None,
        claimed_by: owner.to_owned(),
        lease_until: None,
        idempotency_key: None,
    }
}

/// A finished fire's record: `succeeded`, or `failed` with why.
fn settle(run: &mut ScheduleRun, verdict: Result<(), RunError>) {
    match verdict {
        Ok(()) => run.status = RunState::Succeeded,
        Err(error) => {
            run.status = RunState::Failed;
            run.error = Some(error);
        }
    }
}

/// What a fired event names: the run, task or loop run started, a webhook's answer.
fn references(run: &ScheduleRun) -> Value {
    let mut out = serde_json::Map::new();
    for (key, value) in [
        ("runId", run.run_id.clone().map(Value::String)),
        ("taskId", run.task_id.clone().map(Value::String)),
        ("loopRunId", run.loop_run_id.clone().map(Value::String)),
        ("result", run.result.clone()),
    ] {
        if let Some(value) = value {
            out.insert(key.into(), value);
        }
    }
    Value::Object(out)
}

fn event(schedule: &Schedule, at: DateTime<Utc>, extra: Value) -> Value {
    let mut data = json!({"scheduleId": schedule.id, "scheduledFor": at.to_rfc3339_opts(SecondsFormat::Millis, true)});
    if let (Value::Object(d), Value::Object(e)) = (&mut data, extra) {
        d.extend(e);
    }
    data
}
