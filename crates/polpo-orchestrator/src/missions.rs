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

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use polpo_core::tasks::{
    FailReason, GateTask, Mission, MissionEvent, MissionStatus, QualityGate, Task, TaskEvent, TaskResult, TaskStatus,
    transition_mission,
};
use polpo_engine::events::EventKind;
use polpo_store::{IdGen, MissionFilter, PageRequest, StoredMission, StoredTask, TaskFilter};
use serde::Serialize;
use serde_json::{Value, json};

use crate::context::Ctx;
use crate::error::OrchestratorError;

/// Turn a mission's plan (`data.tasks`: objects with the task fields, `dependsOn` naming
/// other tasks of the plan by title) into its tasks: ids from `ids`, `pending`, grouped under
/// the mission's name.
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
            obj.insert("group".into(), json!(mission.name));
            obj.entry("description").or_insert_with(|| json!(title));
            obj.insert("createdAt".into(), json!(now));
            obj.insert("updatedAt".into(), json!(now));
            serde_json::from_value(Value::Object(obj))
                .map_err(|e| OrchestratorError::Invalid(format!("mission `{}`: data.tasks[{i}]: {e}", mission.name)))
        })
        .collect()
}

/// Every task of mission `id`.
pub(crate) async fn tasks_of(ctx: &Ctx, id: &str) -> Result<Vec<StoredTask>, OrchestratorError> {
    let filter = TaskFilter { mission_id: Some(id.to_owned()), ..Default::default() };
    all_tasks(ctx, &filter).await
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

/// Whether task `title` of mission `id`, just claimed, may start: the mission is moved along
/// first (a checkpoint or delay reached by the task's dependencies pauses it, a gate is
/// judged), then it must still be active and no quality gate that blocks the task may be
/// unpassed.
pub(crate) async fn may_start(ctx: &Ctx, id: &str, title: &str) -> Result<bool, OrchestratorError> {
    let held = get(ctx, id).await?;
    if held.mission.status != MissionStatus::Active {
        return Ok(false);
    }
    advance_active(ctx, held, ctx.now()).await?;
    let now = get(ctx, id).await?.mission;
    let p = progress(&now);
    let gated = now
        .quality_gates
        .iter()
        .any(|g| g.blocks_tasks.iter().any(|t| t == title) && p["gates"][&g.name]["passed"] != json!(true));
    Ok(now.status == MissionStatus::Active && !gated)
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

/// Create the plan's tasks (once) and make the mission active.
pub(crate) async fn execute(ctx: &Ctx, id: &str) -> Result<StoredMission, OrchestratorError> {
    let held = get(ctx, id).await?;
    if held.mission.schedule.is_some() {
        return Err(OrchestratorError::Unavailable(
            "mission schedules need the scheduler, which is not built yet; execute the mission by hand".into(),
        ));
    }
    if tasks_of(ctx, id).await?.is_empty() {
        let tasks = plan_tasks(&held.mission, ctx.runs.runtime().ids().as_ref(), ctx.now())?;
        for t in ctx.store().tasks.create_tasks(tasks).await? {
            ctx.emit(EventKind::TaskCreated, json!({"taskId": t.task.id, "title": t.task.title, "missionId": id}));
        }
    }
    let stored = moved(ctx, &held, MissionEvent::Execute, None).await?;
    ctx.emit(EventKind::MissionExecuted, json!({"missionId": id, "name": stored.mission.name}));
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

/// One pass over the active and paused missions: checkpoints, delays, finishing.
pub(crate) async fn advance(ctx: &Ctx) -> Result<(), OrchestratorError> {
    let now = ctx.now();
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
    let tasks = tasks_of(ctx, &m.id).await?;
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
    let event = MissionEvent::Finish {
        all_passed: report.all_passed,
        avg_score: report.avg_score,
        default_threshold: ctx.default_threshold(),
    };
    let stored = moved(ctx, &held, event, None).await?;
    if report.all_passed && stored.mission.status == MissionStatus::Failed {
        ctx.emit(
            EventKind::QualityThresholdFailed,
            json!({"missionId": m.id, "avgScore": report.avg_score, "threshold": report.quality_threshold}),
        );
    }
    ctx.emit(
        EventKind::MissionCompleted,
        json!({"missionId": m.id, "status": stored.mission.status, "allPassed": report.all_passed, "avgScore": report.avg_score}),
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
    /// Its name, the `group` of its tasks.
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
        files_created: files_created.into_iter().collect(),
        files_edited: files_edited.into_iter().collect(),
        quality_threshold: m.quality_threshold.unwrap_or(default_threshold),
        quality_gates,
        mission_id: m.id.clone(),
        group: m.name.clone(),
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
    let mut tasks = tasks_of(ctx, id).await?;
    tasks.sort_by(|a, b| a.task.created_at.cmp(&b.task.created_at).then(a.task.id.cmp(&b.task.id)));
    Ok(report_of(&held.mission, &tasks, ctx.default_threshold()))
}
