//! Runs, their event journals, checkpoints and leases in the file backend.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::order::Key;
use super::{FileStore, Index, Inner, Journal, RUNS, fsio, owned, subdirs};
use crate::error::StoreError;
use crate::model::{self, Checkpoint, ImportOutcome, Lease, NewRun, NewRunEvent, Run, RunEvent, RunFilter, RunStatus};
use crate::page::{Cursor, Page, PageRequest};
use crate::traits::RunStore;

/// How many finished runs the file store keeps in memory (unfinished ones are always kept):
/// enough for the runs a server is looking at, few enough that memory stays flat however
/// many runs it has served.
const RUN_CACHE: usize = 4096;

/// What a run list filters on besides status (which changes), kept in the run order
/// (`.index/runs.*`) so filtering opens no run file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunFields {
    agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
}

impl RunFields {
    fn of(run: &Run) -> Self {
        RunFields { agent: run.agent.clone(), session_id: run.session_id.clone() }
    }

    fn matches(&self, filter: &RunFilter) -> bool {
        filter.agent.as_ref().is_none_or(|a| *a == self.agent)
            && (filter.session_id.is_none() || filter.session_id == self.session_id)
    }
}

fn key_of(run: &Run) -> Key {
    (run.created_at.timestamp_millis(), run.id.clone())
}

fn matches(run: &Run, filter: &RunFilter) -> bool {
    RunFields::of(run).matches(filter) && filter.status.is_none_or(|st| st == run.status)
}

/// Every stored run header: read only to build the run order and the open-run journal once,
/// for a store that predates them.
fn stored_runs(runs_dir: &Path) -> Result<Vec<Run>, StoreError> {
    let mut runs = Vec::new();
    for dir in subdirs(runs_dir)? {
        if let Some(run) = fsio::read_json::<Run>(&dir.join("run.json"))? {
            runs.push(run);
        }
    }
    Ok(runs)
}

/// Every run's key (see [`stored_runs`]).
pub(super) fn run_keys(runs_dir: &Path) -> Result<BTreeMap<Key, RunFields>, StoreError> {
    Ok(stored_runs(runs_dir)?.iter().map(|r| (key_of(r), RunFields::of(r))).collect())
}

/// The ids of every unfinished run (see [`stored_runs`]).
pub(super) fn unfinished_runs(runs_dir: &Path) -> Result<BTreeSet<String>, StoreError> {
    Ok(stored_runs(runs_dir)?.into_iter().filter(|r| !r.status.is_terminal()).map(|r| r.id).collect())
}

/// A run as it is after a possible crash, read from its directory: the header reconciled with
/// its event journal (appends write only the journal, so the header's sequence and time may
/// lag; a torn last line is cut), and its lease. `None` when there is no such run (or it is
/// still being created).
pub(super) fn read_run(dir: &Path) -> Result<Option<(Run, Journal, Option<Lease>)>, StoreError> {
    let Some(mut run) = fsio::read_json::<Run>(&dir.join("run.json"))? else { return Ok(None) };
    fsio::remove_stale_temps(dir)?;
    let (journal, last) = Journal::open::<RunEvent>(&dir.join("events.jsonl"))?;
    run.last_seq = journal.count();
    if let Some(last) = last {
        run.updated_at = run.updated_at.max(last.created_at);
    }
    let lease = fsio::read_json::<Lease>(&dir.join("lease.json"))?;
    Ok(Some((run, journal, lease)))
}

impl Inner {
    /// Make sure run `id` is in the cache, reading it on first use (see [`read_run`]);
    /// `false` when there is no such run. Reading under the index lock is safe: nobody writes
    /// a run that is not in the cache.
    pub(super) fn load_run(&self, idx: &mut Index, id: &str) -> Result<bool, StoreError> {
        if idx.runs.contains_key(id) {
            idx.run_recency.touch(id);
            return Ok(true);
        }
        if model::validate_id("run", id).is_err() {
            return Ok(false);
        }
        let Some((run, journal, lease)) = read_run(&self.run_dir(id))? else { return Ok(false) };
        idx.cache_run(run, journal, lease);
        Ok(true)
    }

    /// Create run `new`, leased to `owner` for `ttl` when given (its [`model::first_lease`]),
    /// under the index lock, which every claim takes too; the lease file is written before
    /// the header, so the run never appears, after a crash either, without its first lease.
    fn create_run(&self, new: NewRun, lease: Option<(&str, chrono::Duration)>) -> Result<Run, StoreError> {
        let now = self.now();
        let run = new.into_run(now, self.ids())?;
        let mut idx = self.index();
        if self.load_run(&mut idx, &run.id)? {
            return Err(StoreError::Conflict(format!("run `{}` already exists", run.id)));
        }
        idx.add_run_keys(&run)?;
        let dir = self.run_dir(&run.id);
        fsio::fresh_dir_with_empty_file(&dir, &dir.join("events.jsonl"))?;
        let lease = lease.map(|(owner, ttl)| model::first_lease(&run, owner, ttl));
        if let Some(lease) = &lease {
            fsio::write_json(&dir.join("lease.json"), lease)?;
        }
        // The header goes last: without it a half-written directory is ignored at load.
        fsio::write_json(&dir.join("run.json"), &run)?;
        fsio::sync_dir(&self.dir.join(RUNS))?;
        idx.cache_run(run.clone(), Journal::default(), lease);
        Ok(run)
    }

    fn update_run_status(
        &self,
        id: &str,
        status: RunStatus,
        error: Option<String>,
        expected: Option<u64>,
    ) -> Result<Run, StoreError> {
        let now = self.now();
        let mut idx = self.index();
        if !self.load_run(&mut idx, id)? {
            return Err(StoreError::not_found("run", id));
        }
        let mut run = idx.runs.get(id).cloned().ok_or_else(|| StoreError::not_found("run", id))?;
        model::check_revision("run", id, expected, run.revision)?;
        run.status.check_transition(status)?;
        run.status = status;
        run.error = error;
        run.revision += 1;
        run.updated_at = now;
        fsio::write_json(&self.run_dir(id).join("run.json"), &run)?;
        idx.runs.insert(id.to_owned(), run.clone());
        if status.is_terminal() {
            // After the finished header: a crash between the two leaves an id dropped at open.
            idx.open_runs.remove(id)?;
        }
        Ok(run)
    }

    fn append_events(&self, run_id: &str, new: Vec<NewRunEvent>) -> Result<RangeInclusive<u64>, StoreError> {
        model::encode_event_batch(&new)?;
        let now = self.now();
        // The run's own lock orders its appends; the index lock is held only to read and update
        // the run, never across the fsync, so different runs append in parallel.
        let lock = {
            let mut idx = self.index();
            if !self.load_run(&mut idx, run_id)? {
                return Err(StoreError::not_found("run", run_id));
            }
            Arc::clone(idx.run_locks.entry(run_id.to_owned()).or_default())
        };
        let _guard = lock.blocking_lock_owned();
        let first = match self.index().runs.get(run_id) {
            Some(run) => run.last_seq + 1,
            None => return Err(StoreError::not_found("run", run_id)),
        };
        let batch: Vec<RunEvent> = new
            .into_iter()
            .zip(first..)
            .map(|(e, seq)| RunEvent {
                run_id: run_id.to_owned(),
                seq,
                event_type: e.event_type,
                data: e.data,
                created_at: now,
            })
            .collect();
        let last = first + batch.len() as u64 - 1;
        let written = Journal::write(&self.run_dir(run_id).join("events.jsonl"), &batch);
        let mut idx = self.index();
        let Index { runs, events, .. } = &mut *idx;
        events.entry(run_id.to_owned()).or_default().record(written)?;
        if let Some(run) = runs.get_mut(run_id) {
            run.last_seq = last;
            run.updated_at = now;
        }
        Ok(first..=last)
    }

    fn events_after(&self, run_id: &str, after: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
        let size = PageRequest::first(limit).size();
        let window = {
            let mut idx = self.index();
            if !self.load_run(&mut idx, run_id)? {
                return Err(StoreError::not_found("run", run_id));
            }
            idx.events.get(run_id).and_then(|j| j.window(after, size))
        };
        match window {
            Some(w) => w.read(&self.run_dir(run_id).join("events.jsonl")),
            None => Ok(Vec::new()),
        }
    }

    fn put_checkpoint(&self, run_id: &str, seq: u64, state: Value) -> Result<Checkpoint, StoreError> {
        model::check_size("checkpoint", &state, model::MAX_CHECKPOINT_BYTES)?;
        let now = self.now();
        let mut idx = self.index();
        if !self.load_run(&mut idx, run_id)? {
            return Err(StoreError::not_found("run", run_id));
        }
        let path = self.run_dir(run_id).join("checkpoint.json");
        if let Some(old) = fsio::read_json::<Checkpoint>(&path)?
            && old.seq > seq
        {
            return Err(StoreError::Conflict(format!("run `{run_id}` has a newer checkpoint (seq {})", old.seq)));
        }
        let checkpoint = Checkpoint { run_id: run_id.to_owned(), seq, state, created_at: now };
        fsio::write_json(&path, &checkpoint)?;
        Ok(checkpoint)
    }

    fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        model::validate_id("run", run_id)?;
        fsio::read_json(&self.run_dir(run_id).join("checkpoint.json"))
    }

    fn import_run(
        &self,
        run: &Run,
        events: &[RunEvent],
        checkpoint: Option<&Checkpoint>,
    ) -> Result<ImportOutcome, StoreError> {
        model::check_run_import(run, events, checkpoint)?;
        let mut idx = self.index();
        let dir = self.run_dir(&run.id);
        let journal_path = dir.join("events.jsonl");
        let exists = self.load_run(&mut idx, &run.id)?;
        if let Some(existing) = idx.runs.get(&run.id).filter(|_| exists) {
            model::same_import("run", &run.id, existing, run)?;
            let stored: Vec<RunEvent> = match idx.events.get(&run.id).and_then(|j| j.window(0, events.len())) {
                Some(w) => w.read(&journal_path)?,
                None => Vec::new(),
            };
            model::same_import("run", &run.id, &stored.as_slice(), &events)?;
            let stored_checkpoint = fsio::read_json::<Checkpoint>(&dir.join("checkpoint.json"))?;
            return model::same_import("run", &run.id, &stored_checkpoint.as_ref(), &checkpoint);
        }
        idx.add_run_keys(run)?;
        fsio::fresh_dir(&dir)?;
        let journal = Journal::create(&journal_path, events)?;
        if let Some(c) = checkpoint {
            fsio::write_json(&dir.join("checkpoint.json"), c)?;
        }
        fsio::write_json(&dir.join("run.json"), run)?;
        fsio::sync_dir(&self.dir.join(RUNS))?;
        idx.cache_run(run.clone(), journal, None);
        Ok(ImportOutcome::Imported)
    }

    fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        if !self.load_run(&mut idx, run_id)? {
            return Err(StoreError::not_found("run", run_id));
        }
        model::lease_grantable(idx.leases.get(run_id), owner, now)?;
        let generation = idx.leases.get(run_id).map_or(0, |l| l.generation) + 1;
        let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: now + ttl, generation };
        fsio::write_json(&self.run_dir(run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id.to_owned(), lease.clone());
        Ok(lease)
    }

    fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        // Unfinished runs are always cached: the claim looks at them only.
        let next = idx
            .open_runs
            .ids()
            .filter_map(|id| idx.runs.get(id))
            .filter(|r| r.status == RunStatus::Running)
            .filter(|r| idx.leases.get(&r.id).is_none_or(|l| l.expires_at <= now))
            .min_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
            .map(|r| r.id.clone());
        let Some(run_id) = next else { return Ok(None) };
        let generation = idx.leases.get(&run_id).map_or(0, |l| l.generation) + 1;
        let lease = Lease { run_id: run_id.clone(), owner: owner.to_owned(), expires_at: now + ttl, generation };
        fsio::write_json(&self.run_dir(&run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id, lease.clone());
        Ok(Some(lease))
    }

    fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        self.load_run(&mut idx, run_id)?;
        let generation = match idx.leases.get(run_id) {
            Some(l) if l.owner == owner => l.generation,
            _ => return Err(StoreError::LeaseLost { run_id: run_id.to_owned(), owner: owner.to_owned() }),
        };
        let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: now + ttl, generation };
        fsio::write_json(&self.run_dir(run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id.to_owned(), lease.clone());
        Ok(lease)
    }

    fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        let mut idx = self.index();
        self.load_run(&mut idx, run_id)?;
        if idx.leases.get(run_id).is_some_and(|l| l.owner == owner) {
            let path = self.run_dir(run_id).join("lease.json");
            std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
            fsio::sync_dir(&self.run_dir(run_id))?;
            idx.leases.remove(run_id);
        }
        Ok(())
    }

    fn expired_runs(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
        let now = self.now();
        let idx = self.index();
        let mut expired: Vec<Lease> = idx
            .open_runs
            .ids()
            .filter_map(|id| idx.leases.get(id))
            .filter(|l| l.expires_at <= now)
            .filter(|l| {
                idx.runs.get(&l.run_id).is_some_and(|r| matches!(r.status, RunStatus::Running | RunStatus::Paused))
            })
            .cloned()
            .collect();
        expired.sort_by(|a, b| (a.expires_at, &a.run_id).cmp(&(b.expires_at, &b.run_id)));
        expired.truncate(PageRequest::first(limit).size());
        Ok(expired)
    }

    fn running_leases(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
        let idx = self.index();
        let mut leases: Vec<Lease> = idx
            .open_runs
            .ids()
            .filter_map(|id| idx.leases.get(id))
            .filter(|l| idx.runs.get(&l.run_id).is_some_and(|r| r.status == RunStatus::Running))
            .cloned()
            .collect();
        leases.sort_by(|a, b| (b.expires_at, &a.run_id).cmp(&(a.expires_at, &b.run_id)));
        leases.truncate(PageRequest::first(limit).size());
        Ok(leases)
    }

    /// A page of runs newest first. Unfinished runs (always cached) answer a filter on an
    /// unfinished status from memory; otherwise keys come from the run order and only those
    /// runs are read (a key whose run is missing, or was created at another time, is a
    /// crash's leftover and skipped; a finished status is checked on the runs read).
    fn list_runs(&self, filter: &RunFilter, page: &PageRequest) -> Result<Page<Run>, StoreError> {
        let mut before = page.after.as_ref().map(Cursor::time_key).transpose()?;
        let size = page.size();
        let mut idx = self.index();
        let mut items: Vec<Run> = Vec::with_capacity(size + 1);
        if filter.status.is_some_and(|st| !st.is_terminal()) {
            items = idx
                .open_runs
                .ids()
                .filter_map(|id| idx.runs.get(id))
                .filter(|r| matches(r, filter) && before.as_ref().is_none_or(|b| key_of(r) < *b))
                .cloned()
                .collect();
            items.sort_by_key(|r| std::cmp::Reverse(key_of(r)));
            items.truncate(size + 1);
        } else {
            while items.len() <= size {
                let keys = idx.run_order.before(before.as_ref(), |f| f.matches(filter), size + 1 - items.len())?;
                let Some(last) = keys.last().cloned() else { break };
                for (ms, id) in keys {
                    if self.load_run(&mut idx, &id)?
                        && let Some(run) = idx.runs.get(&id).filter(|r| r.created_at.timestamp_millis() == ms)
                        && matches(run, filter)
                    {
                        items.push(run.clone());
                    }
                }
                before = Some(last);
            }
        }
        Ok(Page::from_overfetch(items, size, |r| Cursor::at_time(r.created_at.timestamp_millis(), &r.id)))
    }
}

impl Index {
    /// Durably add a new run's listing key, and its id to the open runs when it is unfinished,
    /// before its files are written.
    fn add_run_keys(&mut self, run: &Run) -> Result<(), StoreError> {
        self.run_order.add(key_of(run), RunFields::of(run))?.sync()?;
        if !run.status.is_terminal() {
            self.open_runs.add(&run.id)?;
        }
        Ok(())
    }

    /// Put a run read or written into the cache, and drop the least recently used finished
    /// runs nobody is appending to beyond [`RUN_CACHE`] (their files hold everything cached).
    pub(super) fn cache_run(&mut self, run: Run, journal: Journal, lease: Option<Lease>) {
        let id = run.id.clone();
        self.events.insert(id.clone(), journal);
        match lease {
            Some(lease) => self.leases.insert(id.clone(), lease),
            None => self.leases.remove(&id),
        };
        self.runs.insert(id.clone(), run);
        self.run_recency.touch(&id);
        let excess = self.runs.len().saturating_sub(RUN_CACHE);
        if excess == 0 {
            return;
        }
        let idle =
            |id: &str| !self.open_runs.contains(id) && self.run_locks.get(id).is_none_or(|l| Arc::strong_count(l) == 1);
        let victims: Vec<String> =
            self.run_recency.oldest_first().filter(|v| idle(v)).take(excess).map(owned).collect();
        for victim in victims {
            self.run_recency.forget(&victim);
            self.runs.remove(&victim);
            self.events.remove(&victim);
            self.leases.remove(&victim);
            self.run_locks.remove(&victim);
        }
    }
}

impl Inner {
    /// Refuse a write carrying `fence` unless that lease still holds the run. The file store
    /// serves one process, so this guards against that process's own stale executor; the
    /// check and the write take the index lock one after the other.
    pub(super) fn check_fence(&self, run_id: &str, fence: Option<&Lease>) -> Result<(), StoreError> {
        let Some(fence) = fence else { return Ok(()) };
        let mut idx = self.index();
        if !self.load_run(&mut idx, run_id)? {
            return Err(StoreError::not_found("run", run_id));
        }
        let held = idx.leases.get(run_id).filter(|l| l.owner == fence.owner).map_or(0, |l| l.generation);
        model::check_fence(run_id, Some(fence), held)
    }
}

#[async_trait]
impl RunStore for FileStore {
    async fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
        self.blocking(move |s| s.create_run(new, None)).await
    }

    async fn create_leased_run(&self, new: NewRun, owner: &str, ttl: Duration) -> Result<(Run, Lease), StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let holder = owned(owner);
        let run = self.blocking(move |s| s.create_run(new, Some((&holder, ttl)))).await?;
        let lease = model::first_lease(&run, owner, ttl);
        Ok((run, lease))
    }

    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        let id = owned(id);
        self.blocking(move |s| {
            let mut idx = s.index();
            Ok(if s.load_run(&mut idx, &id)? { idx.runs.get(&id).cloned() } else { None })
        })
        .await
    }

    async fn list_runs(&self, filter: &RunFilter, page: &PageRequest) -> Result<Page<Run>, StoreError> {
        let (filter, page) = (filter.clone(), page.clone());
        self.blocking(move |s| s.list_runs(&filter, &page)).await
    }

    async fn update_run_status_fenced(
        &self,
        id: &str,
        fence: Option<&Lease>,
        status: RunStatus,
        error: Option<String>,
        expected_revision: Option<u64>,
    ) -> Result<Run, StoreError> {
        let (id, fence) = (owned(id), fence.cloned());
        self.blocking(move |s| {
            s.check_fence(&id, fence.as_ref())?;
            s.update_run_status(&id, status, error, expected_revision)
        })
        .await
    }

    async fn append_events_fenced(
        &self,
        run_id: &str,
        fence: Option<&Lease>,
        events: Vec<NewRunEvent>,
    ) -> Result<RangeInclusive<u64>, StoreError> {
        let (id, fence) = (owned(run_id), fence.cloned());
        self.blocking(move |s| {
            s.check_fence(&id, fence.as_ref())?;
            s.append_events(&id, events)
        })
        .await
    }

    async fn events_after(&self, run_id: &str, after_seq: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.events_after(&id, after_seq, limit)).await
    }

    async fn put_checkpoint_fenced(
        &self,
        run_id: &str,
        fence: Option<&Lease>,
        seq: u64,
        state: Value,
    ) -> Result<Checkpoint, StoreError> {
        let (id, fence) = (owned(run_id), fence.cloned());
        self.blocking(move |s| {
            s.check_fence(&id, fence.as_ref())?;
            s.put_checkpoint(&id, seq, state)
        })
        .await
    }

    async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.latest_checkpoint(&id)).await
    }

    async fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let (id, owner) = (owned(run_id), owned(owner));
        self.blocking(move |s| s.claim_run(&id, &owner, ttl)).await
    }

    async fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let owner = owned(owner);
        self.blocking(move |s| s.claim_next_run(&owner, ttl)).await
    }

    async fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let (id, owner) = (owned(run_id), owned(owner));
        self.blocking(move |s| s.renew_lease(&id, &owner, ttl)).await
    }

    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        let (id, owner) = (owned(run_id), owned(owner));
        self.blocking(move |s| s.release_lease(&id, &owner)).await
    }

    async fn expired_runs(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
        self.inner.expired_runs(limit)
    }

    async fn running_leases(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
        self.inner.running_leases(limit)
    }

    async fn import_run(
        &self,
        run: &Run,
        events: &[RunEvent],
        checkpoint: Option<&Checkpoint>,
    ) -> Result<ImportOutcome, StoreError> {
        let (run, events, checkpoint) = (run.clone(), events.to_vec(), checkpoint.cloned());
        self.blocking(move |s| s.import_run(&run, &events, checkpoint.as_ref())).await
    }
}
