//! Tasks and missions in the file backend, one JSON file each (`tasks/<id>.json`,
//! `missions/<id>.json`, the stored task or mission with its revision and claim). The index
//! mutex is the lock: a check and its write happen under it, so two claimers or two
//! compare-and-set updates never interleave. Beside the tasks the index keeps what a claim
//! and a write look at instead of every task ([`TaskIndex`]).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use polpo_core::tasks::{Mission, MissionStatus, Task, TaskStatus};
use serde::Serialize;

use super::ordered::Ordered;
use super::{FileStore, Index, Inner, fsio, json_files};
use crate::error::StoreError;
use crate::model::{self, ImportOutcome};
use crate::page::{Page, PageRequest};
use crate::traits::{MissionStore, TaskStore};
use crate::work::{self, AgentBudget, AgentLimits, MissionFilter, StoredMission, StoredTask, TaskClaim, TaskFilter};

/// The folder of task files under `.polpo/`.
pub(super) const TASKS: &str = "tasks";
/// The folder of mission files under `.polpo/`.
pub(super) const MISSIONS: &str = "missions";

/// Where a pending task comes in the claim order, the one SQL's `ORDER BY` gives too: highest
/// priority first, then oldest, then by id (the priority as an integer ordered like
/// `f64::total_cmp`).
type ClaimKey = (Reverse<i64>, DateTime<Utc>, String);

fn claim_key(task: &Task) -> ClaimKey {
    let bits = task.priority.to_bits() as i64;
    (Reverse(bits ^ ((((bits >> 63) as u64) >> 1) as i64)), task.created_at, task.id.clone())
}

/// The tasks in memory, with what claims and writes read instead of walking every task:
/// the pending tasks in claim order, the tasks that may take an agent's place, the
/// unfinished tasks' titles, and each task's dependents. Every change goes through
/// [`TaskIndex::put`] and [`TaskIndex::remove`], which keep them in step.
#[derive(Debug, Default)]
pub(super) struct TaskIndex {
    all: Ordered<StoredTask>,
    /// Pending tasks, in claim order.
    pending: BTreeSet<ClaimKey>,
    /// Tasks assigned, running or in review, or pending or failed with a claim (live or not).
    in_flight: HashSet<String>,
    /// The unfinished (not done or failed) task of each title.
    titles: HashMap<String, String>,
    /// The tasks that list each task in `dependsOn`.
    dependents: HashMap<String, Vec<String>>,
}

impl TaskIndex {
    pub(super) fn get(&self, id: &str) -> Option<&StoredTask> {
        self.all.get(id)
    }

    fn contains_key(&self, id: &str) -> bool {
        self.all.contains_key(id)
    }

    /// The unfinished task titled like `task`, if another: what `check_title_free` compares.
    fn same_title(&self, task: &Task) -> impl Iterator<Item = &Task> {
        self.titles.get(&task.title).and_then(|id| self.all.get(id)).map(|t| &t.task).into_iter()
    }

    /// Store `t` (new or replacing the task with its id) and keep the derived sets in step.
    fn put(&mut self, t: StoredTask) {
        let id = t.task.id.clone();
        self.unindex(&id);
        if t.task.status == TaskStatus::Pending {
            self.pending.insert(claim_key(&t.task));
        }
        let claimed = t.claim.is_some() && matches!(t.task.status, TaskStatus::Pending | TaskStatus::Failed);
        if claimed || matches!(t.task.status, TaskStatus::Assigned | TaskStatus::InProgress | TaskStatus::Review) {
            self.in_flight.insert(id.clone());
        }
        if !t.task.status.is_terminal() {
            self.titles.insert(t.task.title.clone(), id.clone());
        }
        if !self.all.contains_key(&id) {
            for dep in &t.task.depends_on {
                self.dependents.entry(dep.clone()).or_default().push(id.clone());
            }
        }
        self.all.insert(id, t);
    }

    /// Forget task `id`.
    fn remove(&mut self, id: &str) -> Option<StoredTask> {
        self.unindex(id);
        let t = self.all.remove(id)?;
        for dep in &t.task.depends_on {
            if let Some(list) = self.dependents.get_mut(dep) {
                list.retain(|d| d != id);
            }
        }
        self.dependents.remove(id);
        Some(t)
    }

    /// Take task `id` out of the sets that depend on its status and claim.
    fn unindex(&mut self, id: &str) {
        let Some(old) = self.all.get(id) else { return };
        self.pending.remove(&claim_key(&old.task));
        self.in_flight.remove(id);
        if self.titles.get(&old.task.title).is_some_and(|t| t == id) {
            self.titles.remove(&old.task.title);
        }
    }

    /// The tasks of agents that take one of their places at `now`.
    fn occupying(&self, now: DateTime<Utc>) -> Vec<String> {
        let held = self.in_flight.iter().filter_map(|id| self.all.get(id));
        held.filter(|t| work::occupies_agent(t, now)).filter_map(|t| work::runs_as(&t.task)).collect()
    }

    /// Whether pending task `t` is ready at `now`: unclaimed (or its claim lapsed), every
    /// dependency done, its mission (if any) active.
    fn ready(&self, t: &StoredTask, missions: &Ordered<StoredMission>, now: DateTime<Utc>) -> bool {
        t.claim.as_ref().is_none_or(|c| c.expires_at <= now)
            && t.task.depends_on.iter().all(|d| self.all.get(d).is_some_and(|d| d.task.status == TaskStatus::Done))
            && t.task
                .mission_id
                .as_ref()
                .is_none_or(|m| missions.get(m).is_some_and(|m| m.mission.status == MissionStatus::Active))
    }
}

/// Read every task and mission file into the index (on the first use of either, not at open).
fn load(dir: &Path, index: &mut Index) -> Result<(), StoreError> {
    for path in json_files(&dir.join(TASKS))? {
        if let Some(t) = fsio::read_json::<StoredTask>(&path)? {
            index.tasks.put(t);
        }
    }
    for path in json_files(&dir.join(MISSIONS))? {
        if let Some(m) = fsio::read_json::<StoredMission>(&path)? {
            index.missions.insert(m.mission.id.clone(), m);
        }
    }
    Ok(())
}

/// `batch` (acyclic, checked before) ordered so that each task comes after its dependencies
/// in the batch.
fn dependencies_first(batch: &[StoredTask]) -> Vec<&StoredTask> {
    let mut placed: HashSet<&str> = HashSet::new();
    let mut order = Vec::with_capacity(batch.len());
    while order.len() < batch.len() {
        let before = order.len();
        for t in batch {
            let inside = |d: &String| batch.iter().any(|o| o.task.id == *d);
            if !placed.contains(t.task.id.as_str())
                && t.task.depends_on.iter().all(|d| !inside(d) || placed.contains(d.as_str()))
            {
                placed.insert(&t.task.id);
                order.push(t);
            }
        }
        if order.len() == before {
            // Unreachable for a checked batch; never loop forever on an unchecked one.
            order.extend(batch.iter().filter(|t| !placed.contains(t.task.id.as_str())));
        }
    }
    order
}

impl Inner {
    /// The index lock, with tasks and missions read on their first use.
    fn work_index(&self) -> Result<std::sync::MutexGuard<'_, Index>, StoreError> {
        let mut idx = self.index();
        if !idx.work_loaded {
            load(&self.dir, &mut idx)?;
            idx.work_loaded = true;
        }
        Ok(idx)
    }

    fn work_path(&self, folder: &str, id: &str) -> PathBuf {
        self.dir.join(folder).join(format!("{id}.json"))
    }

    /// Write a task or mission file (atomic replace); a new file's entry is made durable too.
    fn write_work<T: Serialize>(&self, folder: &str, id: &str, value: &T, new: bool) -> Result<(), StoreError> {
        fsio::write_json(&self.work_path(folder, id), value)?;
        if new {
            fsio::sync_dir(&self.dir.join(folder))?;
        }
        Ok(())
    }

    fn create_tasks(&self, batch: Vec<Task>) -> Result<Vec<StoredTask>, StoreError> {
        let now = self.now();
        let mut idx = self.work_index()?;
        let deps: Vec<StoredTask> =
            work::outside_deps(&batch).iter().filter_map(|d| idx.tasks.get(d).cloned()).collect();
        let stored = work::new_tasks(batch, &deps, |m| idx.missions.contains_key(m), now, self.ids())?;
        for t in &stored {
            if idx.tasks.contains_key(&t.task.id) {
                return Err(StoreError::Conflict(format!("task `{}` already exists", t.task.id)));
            }
            work::check_title_free(&t.task, idx.tasks.same_title(&t.task))?;
        }
        // Dependencies first: a crash part-way leaves only tasks whose dependencies exist.
        for t in dependencies_first(&stored) {
            self.write_work(TASKS, &t.task.id, t, false)?;
        }
        fsio::sync_dir(&self.dir.join(TASKS))?;
        for t in &stored {
            idx.tasks.put(t.clone());
        }
        Ok(stored)
    }

    fn update_task(&self, task: Task, expected: u64) -> Result<StoredTask, StoreError> {
        let now = self.now();
        let mut idx = self.work_index()?;
        let current = idx.tasks.get(&task.id).ok_or_else(|| StoreError::not_found("task", &task.id))?;
        let next = work::updated_task(current, task, expected, now)?;
        work::check_title_free(&next.task, idx.tasks.same_title(&next.task))?;
        self.write_work(TASKS, &next.task.id, &next, false)?;
        idx.tasks.put(next.clone());
        Ok(next)
    }

    fn claim_ready(
        &self,
        worker: &str,
        lease: Duration,
        limit: u32,
        agents: &AgentLimits,
    ) -> Result<Vec<StoredTask>, StoreError> {
        let ttl = model::lease_ttl(lease)?;
        let limit = work::claim_limit(limit, agents)?;
        let now = self.now();
        let mut idx = self.work_index()?;
        let occupying = idx.tasks.occupying(now);
        let mut budget = AgentBudget::new(agents, occupying.iter().map(String::as_str));
        let mut chosen = Vec::new();
        for (_, _, id) in &idx.tasks.pending {
            if chosen.len() == limit {
                break;
            }
            let Some(t) = idx.tasks.get(id) else { continue };
            if idx.tasks.ready(t, &idx.missions, now) && budget.take(work::runs_as(&t.task).as_deref()) {
                chosen.push(t.clone());
            }
        }
        for t in &mut chosen {
            t.claim = Some(TaskClaim { worker: worker.to_owned(), expires_at: now + ttl });
            t.revision += 1;
            self.write_work(TASKS, &t.task.id, t, false)?;
            idx.tasks.put(t.clone());
        }
        Ok(chosen)
    }

    fn hold_task(&self, id: &str, worker: &str, lease: Duration) -> Result<StoredTask, StoreError> {
        let ttl = model::lease_ttl(lease)?;
        let now = self.now();
        let mut idx = self.work_index()?;
        let current = idx.tasks.get(id).ok_or_else(|| StoreError::not_found("task", id))?;
        let next = work::held_task(current, worker, now + ttl, now)?;
        self.write_work(TASKS, id, &next, false)?;
        idx.tasks.put(next.clone());
        Ok(next)
    }

    fn release_task(&self, id: &str, worker: &str) -> Result<(), StoreError> {
        let mut idx = self.work_index()?;
        let Some(current) = idx.tasks.get(id).filter(|t| t.claim.as_ref().is_some_and(|c| c.worker == worker)) else {
            return Ok(());
        };
        let next = StoredTask { claim: None, ..current.clone() };
        self.write_work(TASKS, id, &next, false)?;
        idx.tasks.put(next);
        Ok(())
    }

    fn delete_task(&self, id: &str) -> Result<StoredTask, StoreError> {
        let now = self.now();
        let mut idx = self.work_index()?;
        let current = idx.tasks.get(id).ok_or_else(|| StoreError::not_found("task", id))?;
        let dependents = idx.tasks.dependents.get(id).cloned().unwrap_or_default();
        work::check_deletable(current, &dependents, now)?;
        let path = self.work_path(TASKS, id);
        std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        fsio::sync_dir(&self.dir.join(TASKS))?;
        idx.tasks.remove(id).ok_or_else(|| StoreError::not_found("task", id))
    }

    fn import_task(&self, t: &StoredTask) -> Result<ImportOutcome, StoreError> {
        work::check_task_import(t)?;
        let mut idx = self.work_index()?;
        if let Some(existing) = idx.tasks.get(&t.task.id) {
            return model::same_import("task", &t.task.id, existing, t);
        }
        let deps_there = t.task.depends_on.iter().all(|d| idx.tasks.contains_key(d));
        let mission_there = t.task.mission_id.as_ref().is_none_or(|m| idx.missions.contains_key(m));
        if !deps_there || !mission_there {
            return Err(StoreError::Invalid(format!(
                "task `{}`: import its dependencies and mission first",
                t.task.id
            )));
        }
        work::check_title_free(&t.task, idx.tasks.same_title(&t.task))?;
        self.write_work(TASKS, &t.task.id, t, true)?;
        idx.tasks.put(t.clone());
        Ok(ImportOutcome::Imported)
    }

    fn import_mission(&self, m: &StoredMission) -> Result<ImportOutcome, StoreError> {
        work::check_mission_import(m)?;
        let mut idx = self.work_index()?;
        if let Some(existing) = idx.missions.get(&m.mission.id) {
            return model::same_import("mission", &m.mission.id, existing, m);
        }
        work::check_name_free(&m.mission, idx.missions.values().map(|o| &o.mission))?;
        self.write_work(MISSIONS, &m.mission.id, m, true)?;
        idx.missions.insert(m.mission.id.clone(), m.clone());
        Ok(ImportOutcome::Imported)
    }

    fn create_mission(&self, mission: Mission) -> Result<StoredMission, StoreError> {
        let stored = work::new_mission(mission, self.now(), self.ids())?;
        let mut idx = self.work_index()?;
        let id = stored.mission.id.clone();
        if idx.missions.contains_key(&id) {
            return Err(StoreError::Conflict(format!("mission `{id}` already exists")));
        }
        work::check_name_free(&stored.mission, idx.missions.values().map(|m| &m.mission))?;
        self.write_work(MISSIONS, &id, &stored, true)?;
        idx.missions.insert(id, stored.clone());
        Ok(stored)
    }

    fn update_mission(&self, mission: Mission, expected: u64) -> Result<StoredMission, StoreError> {
        let now = self.now();
        let mut idx = self.work_index()?;
        let current = idx.missions.get(&mission.id).ok_or_else(|| StoreError::not_found("mission", &mission.id))?;
        let next = work::updated_mission(current, mission, expected, now)?;
        work::check_name_free(&next.mission, idx.missions.values().map(|m| &m.mission))?;
        self.write_work(MISSIONS, &next.mission.id, &next, false)?;
        idx.missions.insert(next.mission.id.clone(), next.clone());
        Ok(next)
    }
}

#[async_trait]
impl TaskStore for FileStore {
    async fn create_tasks(&self, tasks: Vec<Task>) -> Result<Vec<StoredTask>, StoreError> {
        self.blocking(move |s| s.create_tasks(tasks)).await
    }

    async fn get_task(&self, id: &str) -> Result<Option<StoredTask>, StoreError> {
        let id = id.to_owned();
        self.blocking(move |s| Ok(s.work_index()?.tasks.get(&id).cloned())).await
    }

    async fn list_tasks(&self, filter: &TaskFilter, page: &PageRequest) -> Result<Page<StoredTask>, StoreError> {
        let (filter, page) = (filter.clone(), page.clone());
        self.blocking(move |s| {
            s.work_index()?.tasks.all.page(&page, |t| {
                filter.status.is_none_or(|s| s == t.task.status)
                    && (filter.mission_id.is_none() || filter.mission_id == t.task.mission_id)
            })
        })
        .await
    }

    async fn update_task(&self, task: Task, expected_revision: u64) -> Result<StoredTask, StoreError> {
        self.blocking(move |s| s.update_task(task, expected_revision)).await
    }

    async fn claim_ready(
        &self,
        worker: &str,
        lease: Duration,
        limit: u32,
        agents: &AgentLimits,
    ) -> Result<Vec<StoredTask>, StoreError> {
        let (worker, agents) = (worker.to_owned(), agents.clone());
        self.blocking(move |s| s.claim_ready(&worker, lease, limit, &agents)).await
    }

    async fn delete_task(&self, id: &str) -> Result<StoredTask, StoreError> {
        let id = id.to_owned();
        self.blocking(move |s| s.delete_task(&id)).await
    }

    async fn hold_task(&self, id: &str, worker: &str, lease: Duration) -> Result<StoredTask, StoreError> {
        let (id, worker) = (id.to_owned(), worker.to_owned());
        self.blocking(move |s| s.hold_task(&id, &worker, lease)).await
    }

    async fn release_task(&self, id: &str, worker: &str) -> Result<(), StoreError> {
        let (id, worker) = (id.to_owned(), worker.to_owned());
        self.blocking(move |s| s.release_task(&id, &worker)).await
    }

    async fn import_task(&self, task: &StoredTask) -> Result<ImportOutcome, StoreError> {
        let task = task.clone();
        self.blocking(move |s| s.import_task(&task)).await
    }
}

#[async_trait]
impl MissionStore for FileStore {
    async fn create_mission(&self, mission: Mission) -> Result<StoredMission, StoreError> {
        self.blocking(move |s| s.create_mission(mission)).await
    }

    async fn get_mission(&self, id: &str) -> Result<Option<StoredMission>, StoreError> {
        let id = id.to_owned();
        self.blocking(move |s| Ok(s.work_index()?.missions.get(&id).cloned())).await
    }

    async fn list_missions(
        &self,
        filter: &MissionFilter,
        page: &PageRequest,
    ) -> Result<Page<StoredMission>, StoreError> {
        let (filter, page) = (filter.clone(), page.clone());
        self.blocking(move |s| {
            s.work_index()?.missions.page(&page, |m| filter.status.is_none_or(|s| s == m.mission.status))
        })
        .await
    }

    async fn update_mission(&self, mission: Mission, expected_revision: u64) -> Result<StoredMission, StoreError> {
        self.blocking(move |s| s.update_mission(mission, expected_revision)).await
    }

    async fn import_mission(&self, mission: &StoredMission) -> Result<ImportOutcome, StoreError> {
        let mission = mission.clone();
        self.blocking(move |s| s.import_mission(&mission)).await
    }
}
