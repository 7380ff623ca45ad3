//! Missions (inventory §5.3) on the orchestrator's side: a mission's plan (`data.tasks`)
//! becomes its tasks when it is executed; each pass of the loop moves active missions along —
//! a checkpoint whose `afterTasks` are all settled pauses the mission until someone resumes
//! it, a delay pauses it and resumes it by itself once its ISO-8601 duration has passed (the
//! timer is stored, so it survives restarts), and a mission whose tasks are all settled
//! finishes, completed or failed by the core's rule. A quality gate is judged once every task
//! it names in `afterTasks` is settled (the core's `QualityGate::judge`): passed, the tasks it
//! blocks may start; failed, they fail (`quality_gate`) and so does the mission. What a mission
//! has reached is kept in its `data.progress` (`checkpoints` reached, `delays` with `startedAt`
//! and `expired`, `gates` with each verdict), written with the status change in one
//! compare-and-set.
//!
//! A mission with a `schedule` (inventory §5.3) is `scheduled` (an ISO-8601 instant: it runs
//! once) or `recurring` (a cron expression, UTC: it runs at each occurrence until its
//! `endDate`). The scheduler (polpo-scheduler) fires it through [`fire`], once per occurrence
//! across servers. As in the reference, every run of a recurring mission is a fresh set of its
//! plan's tasks, grouped `<name> #<run>` from the second run on, with fresh progress; when
//! the run's tasks are settled the mission goes back to `recurring` (the run's outcome is in
//! its report and `mission:completed`), and once its `endDate` has passed it is `completed`.
//! A one-shot mission finishes `completed` or `failed` like one executed by hand (the
//! reference sends a failed one back to `scheduled`, where its past instant never fires again).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use polpo_core::config::Location;
use polpo_core::problem::Problem;
use polpo_core::schedules::Schedule;
use polpo_core::schedules::codes::SCHEDULE_NEVER_FIRES;
use polpo_core::schedules::config::{Invocation, ScheduleConfig};
use polpo_core::schedules::timing::{Timing, TimingConfig};
use polpo_core::tasks::{
    FailReason, GateTask, Mission, MissionEvent, MissionStatus, MissionTransitionError, QualityGate, Task, TaskEvent,
    TaskOutcome, TaskResult, TaskStatus, transition_mission,
};
use polpo_engine::events::EventKind;
use polpo_store::{IdGen, MissionFilter, PageRequest, StoredMission, StoredTask, TaskFilter};
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::context::Ctx;
use crate::error::OrchestratorError;

/// A mission `schedule` that is an ISO-8601 instant (`2026-07-28T09:00:00Z`) runs once; anything
/// else is read as a cron expression (no cron field is a four-digit number followed by `-`).
fn is_instant(schedule: &str) -> bool {
    let b = schedule.trim().as_bytes();
    b.len() > 4 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// The id of mission `id`'s schedule in the scheduler (its runs are kept under it).
pub fn mission_schedule_id(id: &str) -> String {
    format!("mission-{id}")
}

/// Mission `m`'s `schedule` as a schedule the scheduler fires (`None` without one): an
/// instant runs once, a cron expression (UTC) at each occurrence until its `endDate`; the
/// invocation starts a run of the mission (`legacy_mission`, the reference's translation of a
/// mission schedule). A problem points at `/schedule` or `/endDate` with the parsers' codes
/// (`invalid_time`, `invalid_cron`, `schedule_never_fires`).
pub fn mission_schedule(m: &Mission) -> Result<Option<Schedule>, Box<Problem>> {
    let Some(schedule) = m.schedule.as_deref() else { return Ok(None) };
    let timing = if is_instant(schedule) {
        TimingConfig::Once { at: schedule.trim().to_owned(), timezone: None }
    } else {
        TimingConfig::Cron {
            expression: schedule.to_owned(),
            timezone: None,
            end_at: m.end_date.map(|d| d.to_rfc3339()),
        }
    };
    let checked = Timing::from_config(&timing).map_err(|p| {
        let field = if p.pointer.as_deref().is_some_and(|at| at.ends_with("endAt")) { "/endDate" } else { "/schedule" };
        Box::new((*p).at(field))
    })?;
    let config = ScheduleConfig {
        id: None,
        name: Some(m.name.clone()),
        description: None,
        timing,
        invocation: Invocation::LegacyMission { mission_id: m.id.clone() },
        status: None,
        policy: None,
        metadata: None,
        revision: None,
    };
    let id = mission_schedule_id(&m.id);
    Ok(Some(Schedule {
        source: Location::file(format!("missions/{}", m.id)),
        id,
        config,
        timing: checked,
        legacy: false,
    }))
}

/// Check mission `m`'s `schedule` (if any) as written at `now`: it parses
/// ([`mission_schedule`]) and fires after `now` (else `schedule_in_past` for an instant,
/// `schedule_never_fires` for a cron expression that has no occurrence before its `endDate`).
pub fn check_schedule(m: &Mission, now: DateTime<Utc>) -> Result<(), Box<Problem>> {
    let Some(schedule) = mission_schedule(m)? else { return Ok(()) };
    if schedule.timing.next_after(now).is_none() {
        let written = m.schedule.as_deref().unwrap_or_default();
        let (code, message) = match schedule.timing {
            Timing::Once { .. } => {
                ("schedule_in_past", format!("`{written}` is in the past: the mission would never run"))
            }
            _ => (SCHEDULE_NEVER_FIRES, format!("`{written}` has no occurrence before the mission's endDate")),
        };
        return Err(Box::new(Problem::new(code, message).at("/schedule")));
    }
    Ok(())
}

/// The status a mission with `schedule` waits in: `scheduled` for an instant, `recurring` for
/// a cron expression (the event that puts it there, from `draft`).
pub fn schedule_event(schedule: &str) -> MissionEvent {
    if is_instant(schedule) { MissionEvent::Schedule } else { MissionEvent::Recur }
}

/// A mission just created (the store creates them `draft`) with a `schedule` is set waiting
/// for it, `scheduled` or `recurring`; one without is returned as it is.
pub(crate) async fn arm(ctx: &Ctx, created: StoredMission) -> Result<StoredMission, OrchestratorError> {
    let Some(schedule) = created.mission.schedule.as_deref() else { return Ok(created) };
    moved(ctx, &created, schedule_event(schedule), None).await
}

/// Set the `schedule` and `endDate` of mission `id`: a draft given a schedule waits for it
/// (`scheduled` or `recurring`); a waiting mission may change its schedule but not its kind
/// (one-shot or recurring) nor lose it (abort it instead), else `invalid_transition`.
pub(crate) async fn reschedule(
    ctx: &Ctx,
    id: &str,
    schedule: Option<String>,
    end_date: Option<DateTime<Utc>>,
) -> Result<StoredMission, OrchestratorError> {
    let held = get(ctx, id).await?;
    let mut next = held.mission.clone();
    (next.schedule, next.end_date, next.updated_at) = (schedule, end_date, ctx.now());
    check_schedule(&next, ctx.now()).map_err(|p| OrchestratorError::Invalid(format!("{}: {}", p.code, p.message)))?;
    let was = held.mission.schedule.as_deref().map(schedule_event);
    let event = match (held.mission.status, next.schedule.as_deref().map(schedule_event)) {
        (MissionStatus::Draft, event) => event,
        (MissionStatus::Scheduled | MissionStatus::Recurring, Some(event)) if Some(&event) == was.as_ref() => None,
        (from, _) => return Err(MissionTransitionError { from, event: "reschedule" }.into()),
    };
    if let Some(event) = event {
        next = transition_mission(&next, &event, ctx.now())?;
    }
    Ok(ctx.store().missions.update_mission(next, held.revision).await?)
}

/// Whether `m` runs again at each occurrence of its schedule.
fn recurs(m: &Mission) -> bool {
    m.schedule.as_deref().is_some_and(|s| !is_instant(s))
}

/// The `group` of the tasks of `m`'s current run: its name, then `<name> #<run>` from the
/// second run of a recurring mission on (the reference's naming).
fn group_of(m: &Mission) -> String {
    match m.execution_count {
        0 | 1 => m.name.clone(),
        n => format!("{} #{n}", m.name),
    }
}

/// Task ids named by a schedule occurrence (`<occurrence>-<n>`), so a server taking over the
/// occurrence of a claimer that died finds the tasks it made instead of making them twice.
#[derive(Debug)]
struct OccurrenceIds {
    occurrence: String,
    next: AtomicUsize,
}

impl polpo_store::IdGen for OccurrenceIds {
    fn next_id(&self) -> String {
        format!("{}-{}", self.occurrence, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// Turn a mission's plan (`data.tasks`: objects with the task fields, `dependsOn` naming
/// other tasks of the plan by title) into its tasks: ids from `ids`, `pending`, grouped under
/// the mission's current run (its name, `<name> #<run>` for later runs of a recurring one).
pub fn plan_tasks(mission: &Mission, ids: &dyn IdGen, now: DateTime<Utc>) -> Result<Vec<Task>, OrchestratorError> {
    let plan = mission.data.get("tasks").and_then(Value::as_array).filter(|t| !t.is_empty()).ok_or_else(|| {
        OrchestratorError::Invalid(format!("mission `{}` has no tasks in its plan (`data.tasks`)", mission.name))
    })?;
    let mut by_title = HashMap::new();
    for (i, item) in plan.iter().enumerate() {
        let title = item.get("title").and_then(Value::as_str).ok_or_else(|| {
            OrchestratorError::Invalid(format!("mission `{}`: data.tasks[{i}] has no title", mission.name))
        })?;
        if by_title.insert(title.to_owned(), ids.next_id()).is_some() {
            return Err(OrchestratorError::Invalid(format!(
                "mission `{}`: two tasks are titled `{title}`",
                mission.name
            )));
        }
    }
    plan.iter()
        .enumerate()
        .map(|(i, item)| {
            let mut obj = item.as_object().cloned().unwrap_or_default();
            let title = obj.get("title").and_then(Value::as_str).unwrap_or_default().to_owned();
            let deps = obj.remove("dependsOn").unwrap_or(json!([]));
            let deps: Vec<String> = serde_json::from_value::<Vec<String>>(deps)
                .map_err(|e| OrchestratorError::Invalid(format!("data.tasks[{i}].dependsOn: {e}")))?
                .iter()
                .map(|d| {
                    by_title.get(d).cloned().ok_or_else(|| {
                        OrchestratorError::Invalid(format!("data.tasks[{i}] depends on `{d}`, not a task of the plan"))
                    })
                })
                .collect::<Result<_, _>>()?;
            obj.insert("id".into(), json!(by_title[&title]));
            obj.insert("dependsOn".into(), json!(deps));
            obj.insert("status".into(), json!("pending"));
            obj.insert("missionId".into(), json!(mission.id));
            obj.insert("group".into(), json!(group_of(mission)));
            obj.entry("description").or_insert_with(|| json!(title));
            obj.insert("createdAt".into(), json!(now));
            obj.insert("updatedAt".into(), json!(now));
            serde_json::from_value(Value::Object(obj))
                .map_err(|e| OrchestratorError::Invalid(format!("mission `{}`: data.tasks[{i}]: {e}", mission.name)))
        })
        .collect()
}

/// Every task of mission `id`'s current run.
pub(crate) async fn tasks_of(ctx: &Ctx, id: &str) -> Result<Vec<StoredTask>, OrchestratorError> {
    run_tasks(ctx, &get(ctx, id).await?.mission).await
}

/// Every task of `m`'s current run (earlier runs of a recurring mission are other groups).
async fn run_tasks(ctx: &Ctx, m: &Mission) -> Result<Vec<StoredTask>, OrchestratorError> {
    let filter = TaskFilter { mission_id: Some(m.id.clone()), ..Default::default() };
    let group = group_of(m);
    let mut tasks = all_tasks(ctx, &filter).await?;
    tasks.retain(|t| t.task.group.as_deref().is_none_or(|g| g == group));
    Ok(tasks)
}

/// Every task the filter selects, page by page.
pub(crate) async fn all_tasks(ctx: &Ctx, filter: &TaskFilter) -> Result<Vec<StoredTask>, OrchestratorError> {
    let mut out = Vec::new();
    let mut page = PageRequest::first(1000);
    loop {
        let got = ctx.store().tasks.list_tasks(filter, &page).await?;
        out.extend(got.items);
        match got.next {
            Some(cursor) => page = PageRequest::after(cursor, 1000),
            None => return Ok(out),
        }
    }
}

/// Every mission in `status`.
pub(crate) async fn missions_in(ctx: &Ctx, status: MissionStatus) -> Result<Vec<StoredMission>, OrchestratorError> {
    let filter = MissionFilter { status: Some(status) };
    let mut out = Vec::new();
    let mut page = PageRequest::first(1000);
    loop {
        let got = ctx.store().missions.list_missions(&filter, &page).await?;
        out.extend(got.items);
        match got.next {
            Some(cursor) => page = PageRequest::after(cursor, 1000),
            None => return Ok(out),
        }
    }
}

/// A task that will not change by itself any more: `done`, or `failed` and no longer held (a
/// `failed` task still held by a worker may be about to be retried).
fn settled(t: &StoredTask, now: DateTime<Utc>) -> bool {
    t.task.status == TaskStatus::Done
        || (t.task.status == TaskStatus::Failed && t.claim.as_ref().is_none_or(|c| c.expires_at <= now))
}

/// Which of the tasks `titles` of mission `id`, just claimed together, may start: a mission
/// with checkpoints, delays or quality gates is moved along first, once for all of them (a
/// checkpoint or delay reached by their dependencies pauses it, a gate is judged; one read of
/// its tasks per claim, not per task); then it must still be active, and no quality gate that
/// blocks a task may be unpassed. A mission without them only has to be active: a claim then
/// reads none of its tasks.
pub(crate) async fn may_start(ctx: &Ctx, id: &str, titles: &[&str]) -> Result<Vec<bool>, OrchestratorError> {
    let mut held = get(ctx, id).await?;
    let m = &held.mission;
    if m.status == MissionStatus::Active
        && !(m.checkpoints.is_empty() && m.delays.is_empty() && m.quality_gates.is_empty())
    {
        advance_active(ctx, held, ctx.now()).await?;
        held = get(ctx, id).await?;
    }
    let now = held.mission;
    let p = progress(&now);
    let gated = |title: &str| {
        now.quality_gates
            .iter()
            .any(|g| g.blocks_tasks.iter().any(|t| t == title) && p["gates"][&g.name]["passed"] != json!(true))
    };
    Ok(titles.iter().map(|t| now.status == MissionStatus::Active && !gated(t)).collect())
}

/// Whether every task titled in `titles` is settled.
fn all_settled(tasks: &[StoredTask], titles: &[String], now: DateTime<Utc>) -> bool {
    titles.iter().all(|title| tasks.iter().filter(|t| &t.task.title == title).all(|t| settled(t, now)))
}

fn progress(m: &Mission) -> Value {
    let mut p = m.data.get("progress").cloned().unwrap_or_else(|| json!({"checkpoints": [], "delays": {}}));
    if p.get("gates").is_none() {
        p["gates"] = json!({});
    }
    p
}

fn set_progress(m: &mut Mission, p: Value) {
    if !m.data.is_object() {
        m.data = json!({});
    }
    if let Some(obj) = m.data.as_object_mut() {
        obj.insert("progress".into(), p);
    }
}

/// Store `mission` after `event`, with `progress`.
async fn moved(
    ctx: &Ctx,
    held: &StoredMission,
    event: MissionEvent,
    progress: Option<Value>,
) -> Result<StoredMission, OrchestratorError> {
    let mut next = transition_mission(&held.mission, &event, ctx.now())?;
    if let Some(p) = progress {
        set_progress(&mut next, p);
    }
    Ok(ctx.store().missions.update_mission(next, held.revision).await?)
}

/// Start a run of mission `id` by hand: its plan's tasks are created (once) and it is active.
pub(crate) async fn execute(ctx: &Ctx, id: &str) -> Result<StoredMission, OrchestratorError> {
    start_run(ctx, get(ctx, id).await?, None).await
}

/// Start the run of scheduled or recurring mission `id` that its schedule's `occurrence` (the
/// scheduler's name for it) fires; a run this occurrence already started (by a server that
/// died before recording it) is answered as it is.
pub(crate) async fn fire(ctx: &Ctx, id: &str, occurrence: &str) -> Result<StoredMission, OrchestratorError> {
    let held = get(ctx, id).await?;
    if held.mission.data.get("occurrence").and_then(Value::as_str) == Some(occurrence) {
        return Ok(held);
    }
    if !matches!(held.mission.status, MissionStatus::Scheduled | MissionStatus::Recurring) {
        return Err(OrchestratorError::Invalid(format!(
            "mission `{id}` is {}: only a scheduled or recurring mission waits for its schedule (a run still going \
             is not started again)",
            held.mission.status
        )));
    }
    start_run(ctx, held, Some(occurrence)).await
}

/// Create the tasks of `held`'s next run (unless a start that died half-way made them) and
/// make it active, with fresh progress and the `occurrence` that fired it.
async fn start_run(
    ctx: &Ctx,
    held: StoredMission,
    occurrence: Option<&str>,
) -> Result<StoredMission, OrchestratorError> {
    let mut next = transition_mission(&held.mission, &MissionEvent::Execute, ctx.now())?;
    let id = next.id.clone();
    if run_tasks(ctx, &next).await?.is_empty() {
        let tasks = match occurrence {
            Some(o) => {
                plan_tasks(&next, &OccurrenceIds { occurrence: o.to_owned(), next: AtomicUsize::new(0) }, ctx.now())
            }
            None => plan_tasks(&next, ctx.runs.runtime().ids().as_ref(), ctx.now()),
        }?;
        for t in ctx.store().tasks.create_tasks(tasks).await? {
            ctx.emit(EventKind::TaskCreated, json!({"taskId": t.task.id, "title": t.task.title, "missionId": id}));
        }
    }
    if let Some(data) = next.data.as_object_mut() {
        data.remove("progress");
        match occurrence {
            Some(o) => data.insert("occurrence".into(), json!(o)),
            None => data.remove("occurrence"),
        };
    }
    let stored = ctx.store().missions.update_mission(next, held.revision).await?;
    let m = &stored.mission;
    ctx.emit(
        EventKind::MissionExecuted,
        json!({"missionId": id, "name": m.name, "group": group_of(m), "executionCount": m.execution_count}),
    );
    Ok(stored)
}

/// The mission, or `not_found`.
pub(crate) async fn get(ctx: &Ctx, id: &str) -> Result<StoredMission, OrchestratorError> {
    ctx.store().missions.get_mission(id).await?.ok_or_else(|| OrchestratorError::NotFound(format!("no mission `{id}`")))
}

/// Pause, resume (optionally re-queueing failed tasks) or cancel mission `id`.
pub(crate) async fn control(ctx: &Ctx, id: &str, event: MissionEvent) -> Result<StoredMission, OrchestratorError> {
    let held = get(ctx, id).await?;
    let stored = moved(ctx, &held, event.clone(), None).await?;
    if event == MissionEvent::Resume {
        ctx.emit(EventKind::MissionResumed, json!({"missionId": id}));
    }
    Ok(stored)
}

/// One pass over the active and paused missions: checkpoints, delays, finishing; and the
/// recurring missions whose `endDate` has passed are completed.
pub(crate) async fn advance(ctx: &Ctx) -> Result<(), OrchestratorError> {
    let now = ctx.now();
    for held in missions_in(ctx, MissionStatus::Recurring).await? {
        if held.mission.end_date.is_some_and(|end| end <= now) {
            let stored = moved(ctx, &held, MissionEvent::Expire, None).await?;
            ctx.emit(
                EventKind::MissionCompleted,
                json!({"missionId": stored.mission.id, "status": stored.mission.status, "expired": true}),
            );
        }
    }
    for held in missions_in(ctx, MissionStatus::Paused).await? {
        let mut p = progress(&held.mission);
        let mut expired = Vec::new();
        for delay in &held.mission.delays {
            let state = &p["delays"][&delay.name];
            let started = state.get("startedAt").and_then(|s| serde_json::from_value::<DateTime<Utc>>(s.clone()).ok());
            if let (Some(started), false) = (started, state["expired"].as_bool().unwrap_or(false))
                && delay.expires_at(started).is_ok_and(|at| at <= now)
            {
                expired.push(delay.name.clone());
            }
        }
        if expired.is_empty() {
            continue;
        }
        for name in &expired {
            p["delays"][name]["expired"] = json!(true);
        }
        moved(ctx, &held, MissionEvent::Resume, Some(p)).await?;
        for name in expired {
            ctx.emit(EventKind::DelayExpired, json!({"missionId": held.mission.id, "delay": name}));
        }
    }
    for held in missions_in(ctx, MissionStatus::Active).await? {
        advance_active(ctx, held, now).await?;
    }
    Ok(())
}

async fn advance_active(ctx: &Ctx, held: StoredMission, now: DateTime<Utc>) -> Result<(), OrchestratorError> {
    let m = &held.mission;
    let tasks = run_tasks(ctx, m).await?;
    let mut p = progress(m);
    let reached: Vec<String> = serde_json::from_value(p["checkpoints"].clone()).unwrap_or_default();
    if let Some(cp) =
        m.checkpoints.iter().find(|c| !reached.contains(&c.name) && all_settled(&tasks, &c.after_tasks, now))
    {
        let mut names = reached.clone();
        names.push(cp.name.clone());
        p["checkpoints"] = json!(names);
        moved(ctx, &held, MissionEvent::Pause, Some(p)).await?;
        ctx.emit(
            EventKind::CheckpointReached,
            json!({"missionId": m.id, "checkpoint": cp.name, "message": cp.message, "blocksTasks": cp.blocks_tasks}),
        );
        return Ok(());
    }
    if let Some(delay) =
        m.delays.iter().find(|d| p["delays"].get(&d.name).is_none() && all_settled(&tasks, &d.after_tasks, now))
    {
        p["delays"][&delay.name] = json!({"startedAt": now, "expired": false});
        moved(ctx, &held, MissionEvent::Pause, Some(p)).await?;
        ctx.emit(
            EventKind::DelayStarted,
            json!({"missionId": m.id, "delay": delay.name, "duration": delay.duration, "blocksTasks": delay.blocks_tasks}),
        );
        return Ok(());
    }
    if let Some(gate) =
        m.quality_gates.iter().find(|g| p["gates"].get(&g.name).is_none() && all_settled(&tasks, &g.after_tasks, now))
    {
        return judge_gate(ctx, &held, gate, &tasks, p).await;
    }
    if tasks.is_empty() || !tasks.iter().all(|t| settled(t, now)) {
        return Ok(());
    }
    let report = report_of(m, &tasks, ctx.default_threshold());
    let finish = MissionEvent::Finish {
        all_passed: report.all_passed,
        avg_score: report.avg_score,
        default_threshold: ctx.default_threshold(),
    };
    // The run's outcome; a recurring mission itself goes back to waiting for its next fire.
    let outcome = transition_mission(m, &finish, now)?.status;
    let stored = moved(ctx, &held, if recurs(m) { MissionEvent::Rearm } else { finish }, None).await?;
    if report.all_passed && outcome == MissionStatus::Failed {
        ctx.emit(
            EventKind::QualityThresholdFailed,
            json!({"missionId": m.id, "avgScore": report.avg_score, "threshold": report.quality_threshold}),
        );
    }
    ctx.emit(
        EventKind::MissionCompleted,
        json!({"missionId": m.id, "status": outcome, "missionStatus": stored.mission.status, "group": report.group,
               "allPassed": report.all_passed, "avgScore": report.avg_score}),
    );
    Ok(())
}

/// Judge `gate` of `held` (its judged tasks are settled), store the verdict in the mission's
/// progress, and when it failed, fail the pending tasks it blocks.
async fn judge_gate(
    ctx: &Ctx,
    held: &StoredMission,
    gate: &QualityGate,
    tasks: &[StoredTask],
    mut p: Value,
) -> Result<(), OrchestratorError> {
    let judged: Vec<GateTask> = tasks
        .iter()
        .filter(|t| gate.after_tasks.contains(&t.task.title))
        .map(|t| GateTask {
            title: t.task.title.clone(),
            score: score_of(&t.task),
            passed: t.task.status == TaskStatus::Done,
        })
        .collect();
    let verdict = gate.judge(&judged);
    p["gates"][&gate.name] = json!(verdict);
    let mut next = held.mission.clone();
    next.updated_at = ctx.now();
    set_progress(&mut next, p);
    ctx.store().missions.update_mission(next, held.revision).await?;
    let (kind, data) = (
        if verdict.passed { EventKind::QualityGatePassed } else { EventKind::QualityGateFailed },
        json!({"missionId": held.mission.id, "gate": gate.name, "verdict": verdict, "blocksTasks": gate.blocks_tasks}),
    );
    ctx.emit(kind, data);
    if let Some(reason) = &verdict.reason {
        let message = format!("quality gate `{}` failed: {reason}", gate.name);
        for t in
            tasks.iter().filter(|t| t.task.status == TaskStatus::Pending && gate.blocks_tasks.contains(&t.task.title))
        {
            fail_waiting(ctx, &t.task.id, &message).await;
        }
    }
    Ok(())
}

/// Fail pending task `id` that can never run (its gate failed), saying why in its result.
async fn fail_waiting(ctx: &Ctx, id: &str, message: &str) {
    let store = ctx.store();
    let moved = async {
        let mut held = store.tasks.hold_task(id, &ctx.worker, ctx.options.lease).await?;
        held.task.result = Some(TaskResult { exit_code: 1, stderr: message.to_owned(), ..TaskResult::default() });
        crate::drive::apply(ctx, &held, TaskEvent::Fail { reason: FailReason::QualityGate }).await
    };
    if let Err(e) = moved.await {
        tracing::warn!(task = %id, code = e.code(), "a task behind a failed quality gate could not be failed: {e}");
    }
    if let Err(e) = store.tasks.release_task(id, &ctx.worker).await {
        tracing::warn!(task = %id, code = e.code(), "task claim could not be released: {e}");
    }
}

/// A task's last assessment score.
fn score_of(t: &Task) -> Option<f64> {
    t.result.as_ref().and_then(|r| r.assessment.as_ref()).and_then(|a| a["globalScore"].as_f64())
}

/// A mission's outcome (`MissionReport`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MissionReport {
    /// The mission.
    pub mission_id: String,
    /// The `group` of its current run's tasks: its name (`<name> #<run>` from a recurring
    /// mission's second run on).
    pub group: String,
    /// Its status now.
    pub status: MissionStatus,
    /// Every task is `done`.
    pub all_passed: bool,
    /// Sum of the tasks' run times, in milliseconds.
    pub total_duration: u64,
    /// Each task.
    pub tasks: Vec<ReportTask>,
    /// Mean of the tasks' assessment scores, when any was scored.
    pub avg_score: Option<f64>,
    /// The average score the mission must reach to complete (its own, else the project's).
    pub quality_threshold: f64,
    /// Each quality gate: `pending` until its judged tasks are settled, then its verdict.
    pub quality_gates: Vec<GateReport>,
    /// Every file the tasks created, once each, sorted (see [`ReportTask::files_created`]).
    pub files_created: Vec<String>,
    /// Every file the tasks edited and none created, once each, sorted.
    pub files_edited: Vec<String>,
    /// Every outcome the tasks produced, task by task in the report's order.
    pub outcomes: Vec<TaskOutcome>,
}

/// One quality gate in a [`MissionReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateReport {
    /// The gate's name.
    pub name: String,
    /// `pending`, `passed` or `failed`.
    pub status: &'static str,
    /// The verdict (facts and reason) once judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Value>,
}

/// One task in a [`MissionReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportTask {
    /// Its title.
    pub title: String,
    /// Its status.
    pub status: TaskStatus,
    /// Its last run's time, in milliseconds.
    pub duration: u64,
    /// Its last assessment's score.
    pub score: Option<f64>,
    /// Retries used.
    pub retries: u32,
    /// Files its runs created with file-writing tools (`bash` writes are not known).
    pub files_created: Vec<String>,
    /// Files its runs edited.
    pub files_edited: Vec<String>,
    /// What it produced (`TaskOutcome`s: files, texts, links, documents).
    pub outcomes: Vec<TaskOutcome>,
}

fn report_of(m: &Mission, tasks: &[StoredTask], default_threshold: f64) -> MissionReport {
    let rows: Vec<ReportTask> = tasks
        .iter()
        .map(|t| {
            let result = t.task.result.as_ref();
            ReportTask {
                title: t.task.title.clone(),
                status: t.task.status,
                duration: result.map_or(0, |r| r.duration),
                score: score_of(&t.task),
                retries: t.task.retries,
                files_created: result.map(|r| r.files_created.clone()).unwrap_or_default(),
                files_edited: result.map(|r| r.files_edited.clone()).unwrap_or_default(),
                outcomes: t.task.outcomes.clone(),
            }
        })
        .collect();
    let scores: Vec<f64> = rows.iter().filter_map(|r| r.score).collect();
    let p = progress(m);
    let quality_gates = m
        .quality_gates
        .iter()
        .map(|g| {
            let verdict = p["gates"].get(&g.name).cloned();
            let status = match verdict.as_ref().map(|v| v["passed"] == json!(true)) {
                None => "pending",
                Some(true) => "passed",
                Some(false) => "failed",
            };
            GateReport { name: g.name.clone(), status, verdict }
        })
        .collect();
    let files_created: BTreeSet<String> = rows.iter().flat_map(|r| r.files_created.iter().cloned()).collect();
    let files_edited: BTreeSet<String> =
        rows.iter().flat_map(|r| r.files_edited.iter().cloned()).filter(|f| !files_created.contains(f)).collect();
    MissionReport {
        outcomes: rows.iter().flat_map(|r| r.outcomes.iter().cloned()).collect(),
        files_created: files_created.into_iter().collect(),
        files_edited: files_edited.into_iter().collect(),
        quality_threshold: m.quality_threshold.unwrap_or(default_threshold),
        quality_gates,
        mission_id: m.id.clone(),
        group: group_of(m),
        status: m.status,
        all_passed: rows.iter().all(|r| r.status == TaskStatus::Done),
        total_duration: rows.iter().map(|r| r.duration).sum(),
        avg_score: (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64),
        tasks: rows,
    }
}

/// The report of mission `id`.
pub(crate) async fn report(ctx: &Ctx, id: &str) -> Result<MissionReport, OrchestratorError> {
    let held = get(ctx, id).await?;
    let mut tasks = run_tasks(ctx, &held.mission).await?;
    tasks.sort_by(|a, b| a.task.created_at.cmp(&b.task.created_at).then(a.task.id.cmp(&b.task.id)));
    Ok(report_of(&held.mission, &tasks, ctx.default_threshold()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mission(schedule: Option<&str>, execution_count: u32) -> Mission {
        serde_json::from_value(json!({
            "id": "m1", "name": "weekly", "status": "draft", "schedule": schedule, "executionCount": execution_count,
            "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"
        }))
        .unwrap()
    }

    fn task(title: &str, outcomes: Value) -> StoredTask {
        let task = serde_json::from_value(json!({
            "id": title, "title": title, "description": title, "status": "done", "outcomes": outcomes,
            "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        StoredTask { task, revision: 1, claim: None }
    }

    /// The report carries each task's outcomes as the task holds them, and all of them in task
    /// order at the top (the reference's `MissionReport.tasks[].outcomes` and `outcomes`).
    #[test]
    fn the_report_lists_each_tasks_outcomes_and_all_of_them() {
        let doc =
            json!({"id": "o1", "type": "file", "label": "Report", "path": "out/report.md", "size": 12, "tags": []});
        let text = json!({"id": "o2", "type": "text", "label": "Summary", "text": "All good.", "tags": ["final"]});
        let tasks = [task("A", json!([doc])), task("B", json!([])), task("C", json!([text]))];
        let report = serde_json::to_value(report_of(&mission(None, 1), &tasks, 3.0)).unwrap();
        assert_eq!(report["tasks"][0]["outcomes"], json!([doc]));
        assert_eq!(report["tasks"][1]["outcomes"], json!([]));
        assert_eq!(report["tasks"][2]["outcomes"], json!([text]));
        assert_eq!(report["outcomes"], json!([doc, text]));
    }

    /// An instant waits `scheduled` and must be ahead; a cron expression waits `recurring`;
    /// what cannot fire is refused at `/schedule` with the parsers' codes; each run of a
    /// recurring mission after the first has a group of its own.
    #[test]
    fn a_schedule_is_an_instant_ahead_or_a_cron_expression() {
        let now = DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z").unwrap().to_utc();
        assert_eq!(schedule_event("2026-07-28T09:00:00Z"), MissionEvent::Schedule);
        assert_eq!(schedule_event("0 9 * * 1"), MissionEvent::Recur);
        check_schedule(&mission(Some("2026-07-28T09:00:00Z"), 0), now).unwrap();
        check_schedule(&mission(Some("0 9 * * 1"), 0), now).unwrap();
        let schedule = mission_schedule(&mission(Some("0 9 * * 1"), 0)).unwrap().unwrap();
        assert_eq!(schedule.id, "mission-m1");
        assert_eq!(schedule.config.invocation, Invocation::LegacyMission { mission_id: "m1".into() });
        for (written, code) in [
            ("2026-05-01T00:00:00Z", "schedule_in_past"),
            ("2026-13-01T00:00:00Z", "invalid_time"),
            ("61 * * * *", "invalid_cron"),
            ("0 0 31 2 *", "schedule_never_fires"),
        ] {
            let problem = check_schedule(&mission(Some(written), 0), now).unwrap_err();
            assert_eq!((problem.code.as_str(), problem.pointer.as_deref()), (code, Some("/schedule")), "{written}");
        }
        assert_eq!(group_of(&mission(None, 1)), "weekly");
        assert_eq!(group_of(&mission(None, 3)), "weekly #3");
    }
}
