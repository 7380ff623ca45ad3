//! Tasks and missions as stored: the revision and claim kept beside each, and the rules every
//! backend applies the same way when one is created, updated or claimed (one place, so the
//! file and SQL backends cannot drift apart). The task and mission shapes and their state
//! machines live in `polpo_core::tasks`.

use chrono::{DateTime, Utc};
use polpo_core::tasks::{self as core, Mission, MissionStatus, Task, TaskStatus};
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::clock::IdGen;
use crate::error::StoreError;
use crate::model::{self, MAX_RECORD_BYTES, check_revision};

/// A task with what the store keeps beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredTask {
    /// The task.
    pub task: Task,
    /// 1 at creation, bumped on every update and claim; pass it back to `update_task`.
    pub revision: u64,
    /// The worker that claimed it last, while that claim matters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<TaskClaim>,
}

/// A worker's hold on a ready task, so that several workers sharing one store never start
/// the same task: nobody else is offered it until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskClaim {
    /// The worker (process or orchestrator id).
    pub worker: String,
    /// When the claim lapses.
    pub expires_at: DateTime<Utc>,
}

/// A mission with its revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredMission {
    /// The mission.
    pub mission: Mission,
    /// 1 at creation, bumped on every update; pass it back to `update_mission`.
    pub revision: u64,
}

/// Which tasks to list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFilter {
    /// Only tasks in this status.
    pub status: Option<TaskStatus>,
    /// Only the tasks of this mission.
    pub mission_id: Option<String>,
}

/// Which missions to list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MissionFilter {
    /// Only missions in this status.
    pub status: Option<MissionStatus>,
}

/// Most tasks of each agent (by name) claimed or running at once across every worker that
/// shares the store: each agent's `maxConcurrency`. An agent not named is not limited.
/// `claim_ready` counts the tasks already taken in the claim itself, so the limit holds
/// however many servers claim at once.
pub type AgentLimits = BTreeMap<String, u32>;

/// The agent a pending task's next assignment goes to: its `fallbackAgent` once
/// `escalateAfter` retries were used, else none (it keeps its own).
pub fn escalated_agent(task: &Task) -> Option<String> {
    let policy = task.retry_policy.as_ref()?;
    let after = policy.escalate_after?;
    (task.retries >= after).then(|| policy.fallback_agent.clone()).flatten()
}

/// The agent whose `maxConcurrency` a task counts against: a pending task's next assignment
/// (see [`escalated_agent`]), else the agent it is assigned to. Stored beside the task so a
/// claim can count an agent's tasks without reading them.
pub fn runs_as(task: &Task) -> Option<String> {
    match task.status {
        TaskStatus::Pending => escalated_agent(task).or_else(|| task.assign_to.clone()),
        _ => task.assign_to.clone(),
    }
}

/// Whether `t` takes one of its agent's places at `now`: assigned, running or in review, or
/// pending or failed under a live claim (claimed to start, or about to be retried).
pub(crate) fn occupies_agent(t: &StoredTask, now: DateTime<Utc>) -> bool {
    match t.task.status {
        TaskStatus::Assigned | TaskStatus::InProgress | TaskStatus::Review => true,
        TaskStatus::Pending | TaskStatus::Failed => t.claim.as_ref().is_some_and(|c| c.expires_at > now),
        _ => false,
    }
}

/// The places each limited agent has left during one claim.
pub(crate) struct AgentBudget(HashMap<String, u32>);

impl AgentBudget {
    /// `limits` less the places the tasks of `occupied` (one agent name per task taking a
    /// place) already take.
    pub(crate) fn new<'a>(limits: &AgentLimits, occupied: impl IntoIterator<Item = &'a str>) -> Self {
        let mut left: HashMap<String, u32> = limits.iter().map(|(a, n)| (a.clone(), *n)).collect();
        for agent in occupied {
            if let Some(n) = left.get_mut(agent) {
                *n = n.saturating_sub(1);
            }
        }
        Self(left)
    }

    /// Take a place for a task of `agent`: false when the agent is full.
    pub(crate) fn take(&mut self, agent: Option<&str>) -> bool {
        match agent.and_then(|a| self.0.get_mut(a)) {
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
            None => true,
        }
    }

    /// The limited agents with no place left.
    pub(crate) fn full(&self) -> Vec<&str> {
        self.0.iter().filter(|(_, n)| **n == 0).map(|(a, _)| a.as_str()).collect()
    }
}

/// Why `t` may not be deleted now, if it may not: a task being worked on (assigned, running,
/// in review, or under a live claim) is a `conflict` (kill it first), and so is a task other
/// tasks depend on (`dependents` names them; delete them first).
pub(crate) fn check_deletable(t: &StoredTask, dependents: &[String], now: DateTime<Utc>) -> Result<(), StoreError> {
    let id = &t.task.id;
    let held = t.claim.as_ref().is_some_and(|c| c.expires_at > now);
    if held || matches!(t.task.status, TaskStatus::Assigned | TaskStatus::InProgress | TaskStatus::Review) {
        return Err(StoreError::Conflict(format!("task `{id}` is being worked on ({}): kill it first", t.task.status)));
    }
    if !dependents.is_empty() {
        return Err(StoreError::Conflict(format!(
            "task `{id}` is a dependency of {}: delete those first",
            dependents.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

/// Most tasks one `claim_ready` call hands out.
pub const MAX_CLAIM: u32 = 100;

/// Most tasks one `create_tasks` call takes.
pub const MAX_TASK_BATCH: usize = 256;

/// The dependencies of `batch` outside it: the stored tasks a backend must look up.
pub(crate) fn outside_deps(batch: &[Task]) -> Vec<String> {
    let inside: HashSet<&str> = batch.iter().map(|t| t.id.as_str()).collect();
    let outside: HashSet<&String> =
        batch.iter().flat_map(|t| &t.depends_on).filter(|d| !inside.contains(d.as_str())).collect();
    outside.into_iter().cloned().collect()
}

/// The missions `batch` names: the ones a backend must look up.
pub(crate) fn missions_of(batch: &[Task]) -> Vec<String> {
    let named: HashSet<&String> = batch.iter().filter_map(|t| t.mission_id.as_ref()).collect();
    named.into_iter().cloned().collect()
}

/// Tasks as first stored, all or none: each gets its id (the caller's, or a fresh one when
/// empty; callers that link tasks of one batch give ids), times `now`, revision 1, no claim.
/// Each starts `draft` or `pending`, lists a dependency once, depends only on tasks of the
/// batch or the already-stored `deps`, without a cycle (`dependency_cycle`), names a mission
/// that is there (`mission_there`), and no two unfinished tasks of the batch share a title.
pub(crate) fn new_tasks(
    mut batch: Vec<Task>,
    deps: &[StoredTask],
    mission_there: impl Fn(&str) -> bool,
    now: DateTime<Utc>,
    ids: &dyn IdGen,
) -> Result<Vec<StoredTask>, StoreError> {
    if batch.is_empty() || batch.len() > MAX_TASK_BATCH {
        return Err(StoreError::Invalid(format!("create 1-{MAX_TASK_BATCH} tasks at a time")));
    }
    let mut seen = HashSet::new();
    for task in &mut batch {
        if task.id.is_empty() {
            task.id = ids.next_id();
        }
        model::validate_id("task", &task.id)?;
        if !seen.insert(task.id.clone()) {
            return Err(StoreError::Invalid(format!("task `{}` is listed twice", task.id)));
        }
        if !matches!(task.status, TaskStatus::Draft | TaskStatus::Pending) || task.phase.is_some() {
            return Err(StoreError::Invalid(format!("a new task starts draft or pending, not {}", task.status)));
        }
        let distinct: HashSet<&String> = task.depends_on.iter().collect();
        if distinct.len() != task.depends_on.len() {
            return Err(StoreError::Invalid(format!("task `{}` lists a dependency twice", task.id)));
        }
        if task.mission_id.as_deref().is_some_and(|m| !mission_there(m)) {
            return Err(StoreError::Invalid(format!("task `{}` names a mission that does not exist", task.id)));
        }
        task.created_at = now;
        task.updated_at = now;
        model::check_size("task", task, MAX_RECORD_BYTES)?;
    }
    let existing: Vec<Task> = deps.iter().map(|d| d.task.clone()).collect();
    core::check_new_tasks(&existing, &batch).map_err(|e| StoreError::Invalid(format!("{}: {e}", e.code())))?;
    for (i, task) in batch.iter().enumerate() {
        check_title_free(task, &batch[..i])?;
    }
    Ok(batch.into_iter().map(|task| StoredTask { task, revision: 1, claim: None }).collect())
}

/// The task after an update over `current`: only at `expected_revision`, only a status
/// change the task table allows (`invalid_transition`), never a new id, creation time or
/// dependency list; `updatedAt` is `now`. The claim stays.
pub(crate) fn updated_task(
    current: &StoredTask,
    mut next: Task,
    expected_revision: u64,
    now: DateTime<Utc>,
) -> Result<StoredTask, StoreError> {
    let id = &current.task.id;
    check_revision("task", id, Some(expected_revision), current.revision)?;
    if next.id != *id || next.depends_on != current.task.depends_on || next.mission_id != current.task.mission_id {
        return Err(StoreError::Invalid(format!("task `{id}`: id, dependsOn and missionId are fixed at creation")));
    }
    if !core::machine::allowed(current.task.status, next.status) {
        return Err(StoreError::InvalidTransition {
            from: current.task.status.as_str().into(),
            to: next.status.as_str().into(),
        });
    }
    next.created_at = current.task.created_at;
    next.updated_at = now;
    model::check_size("task", &next, MAX_RECORD_BYTES)?;
    Ok(StoredTask { task: next, revision: current.revision + 1, claim: current.claim.clone() })
}

/// The task after `worker` holds it until `until`: its own claim renewed (same revision), or
/// a lapsed or absent claim taken (the revision moves); another worker's live claim is a
/// `conflict`.
pub(crate) fn held_task(
    current: &StoredTask,
    worker: &str,
    until: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<StoredTask, StoreError> {
    let mut next = current.clone();
    match &current.claim {
        Some(c) if c.worker == worker => {}
        Some(c) if c.expires_at > now => {
            return Err(StoreError::Conflict(format!(
                "task `{}` is claimed by `{}` until {}",
                current.task.id, c.worker, c.expires_at
            )));
        }
        _ => next.revision += 1,
    }
    next.claim = Some(TaskClaim { worker: worker.to_owned(), expires_at: until });
    Ok(next)
}

/// Titles are unique among the tasks that are not `done` or `failed` (missions refer to
/// tasks by title): a `conflict` when `task` would share its title with another such task.
pub(crate) fn check_title_free<'a>(task: &Task, others: impl IntoIterator<Item = &'a Task>) -> Result<(), StoreError> {
    if task.status.is_terminal() {
        return Ok(());
    }
    let taken = others.into_iter().any(|o| o.id != task.id && o.title == task.title && !o.status.is_terminal());
    if taken {
        return Err(StoreError::Conflict(format!("an unfinished task is already titled `{}`", task.title)));
    }
    Ok(())
}

/// A mission as first stored: id (the caller's, or a fresh one when empty), times `now`,
/// revision 1; it starts `draft` (or straight `active`), and its delays must parse.
pub(crate) fn new_mission(
    mut mission: Mission,
    now: DateTime<Utc>,
    ids: &dyn IdGen,
) -> Result<StoredMission, StoreError> {
    if mission.id.is_empty() {
        mission.id = ids.next_id();
    }
    model::validate_id("mission", &mission.id)?;
    if mission.name.is_empty() {
        return Err(StoreError::Invalid("a mission needs a name".into()));
    }
    if !matches!(mission.status, MissionStatus::Draft | MissionStatus::Active) {
        return Err(StoreError::Invalid(format!("a new mission starts draft or active, not {}", mission.status)));
    }
    mission.validate().map_err(|e| StoreError::Invalid(format!("{}: {e}", e.code())))?;
    mission.created_at = now;
    mission.updated_at = now;
    model::check_size("mission", &mission, MAX_RECORD_BYTES)?;
    Ok(StoredMission { mission, revision: 1 })
}

/// The mission after an update over `current`: only at `expected_revision`, only a status
/// change the mission table allows, never a new id or creation time; `updatedAt` is `now`.
pub(crate) fn updated_mission(
    current: &StoredMission,
    mut next: Mission,
    expected_revision: u64,
    now: DateTime<Utc>,
) -> Result<StoredMission, StoreError> {
    let (from, to) = (current.mission.status, next.status);
    check_revision("mission", &current.mission.id, Some(expected_revision), current.revision)?;
    if next.id != current.mission.id || next.name.is_empty() {
        return Err(StoreError::Invalid(format!(
            "mission `{}`: the id is fixed and the name required",
            current.mission.id
        )));
    }
    if from != to && !core::MISSION_TRANSITIONS.contains(&(from, to)) {
        return Err(StoreError::InvalidTransition { from: from.as_str().into(), to: to.as_str().into() });
    }
    next.validate().map_err(|e| StoreError::Invalid(format!("{}: {e}", e.code())))?;
    next.created_at = current.mission.created_at;
    next.updated_at = now;
    model::check_size("mission", &next, MAX_RECORD_BYTES)?;
    Ok(StoredMission { mission: next, revision: current.revision + 1 })
}

/// Mission names are unique (they are the `group` of the mission's tasks).
pub(crate) fn check_name_free<'a>(
    mission: &Mission,
    others: impl IntoIterator<Item = &'a Mission>,
) -> Result<(), StoreError> {
    if others.into_iter().any(|o| o.id != mission.id && o.name == mission.name) {
        return Err(StoreError::Conflict(format!("a mission is already named `{}`", mission.name)));
    }
    Ok(())
}

/// The size of a claim batch, refusing 0 and more than [`MAX_CLAIM`], and an agent limit of 0.
pub(crate) fn claim_limit(limit: u32, agents: &AgentLimits) -> Result<usize, StoreError> {
    if limit == 0 || limit > MAX_CLAIM {
        return Err(StoreError::Invalid(format!("claim 1-{MAX_CLAIM} tasks at a time")));
    }
    if let Some((agent, _)) = agents.iter().find(|(_, n)| **n == 0) {
        return Err(StoreError::Invalid(format!("agent `{agent}`: a limit of tasks at once is at least 1")));
    }
    Ok(limit as usize)
}

/// An imported task must name itself validly and fit, like a created one.
pub(crate) fn check_task_import(t: &StoredTask) -> Result<(), StoreError> {
    model::validate_id("task", &t.task.id)?;
    model::check_size("task", &t.task, MAX_RECORD_BYTES)
}

/// An imported mission must name itself validly and fit, like a created one.
pub(crate) fn check_mission_import(m: &StoredMission) -> Result<(), StoreError> {
    model::validate_id("mission", &m.mission.id)?;
    model::check_size("mission", &m.mission, MAX_RECORD_BYTES)
}
