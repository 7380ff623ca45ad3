//! Runs, their event journals, checkpoints and leases in the file backend.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{FileStore, Index, Inner, Journal, RUNS, fsio, owned};
use crate::error::StoreError;
use crate::model::{self, Checkpoint, ImportOutcome, Lease, NewRun, NewRunEvent, Run, RunEvent, RunFilter, RunStatus};
use crate::page::{Page, PageRequest};
use crate::traits::RunStore;

impl Inner {
    fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
        let now = self.now();
        let run = new.into_run(now, self.ids())?;
        let mut idx = self.index();
        if idx.runs.contains_key(&run.id) {
            return Err(StoreError::Conflict(format!("run `{}` already exists", run.id)));
        }
        let dir = self.run_dir(&run.id);
        fsio::fresh_dir_with_empty_file(&dir, &dir.join("events.jsonl"))?;
        // The header goes last: without it a half-written directory is ignored at load.
        fsio::write_json(&dir.join("run.json"), &run)?;
        fsio::sync_dir(&self.dir.join(RUNS))?;
        idx.events.insert(run.id.clone(), Journal::default());
        idx.runs.insert(run.id.clone(), run.clone());
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
        let mut run = idx.runs.get(id).cloned().ok_or_else(|| StoreError::not_found("run", id))?;
        model::check_revision("run", id, expected, run.revision)?;
        run.status.check_transition(status)?;
        run.status = status;
        run.error = error;
        run.revision += 1;
        run.updated_at = now;
        fsio::write_json(&self.run_dir(id).join("run.json"), &run)?;
        idx.runs.insert(id.to_owned(), run.clone());
        Ok(run)
    }

    fn append_events(&self, run_id: &str, new: Vec<NewRunEvent>) -> Result<RangeInclusive<u64>, StoreError> {
        model::encode_event_batch(&new)?;
        let now = self.now();
        // The run's own lock orders its appends; the index lock is held only to read and update
        // the run, never across the fsync, so different runs append in parallel.
        let lock = {
            let mut idx = self.index();
            if !idx.runs.contains_key(run_id) {
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
        runs.update(run_id, |run| {
            run.last_seq = last;
            run.updated_at = now;
        });
        Ok(first..=last)
    }

    fn events_after(&self, run_id: &str, after: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
        let size = PageRequest::first(limit).size();
        let window = {
            let idx = self.index();
            if !idx.runs.contains_key(run_id) {
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
        let idx = self.index();
        if !idx.runs.contains_key(run_id) {
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
        if let Some(existing) = idx.runs.get(&run.id) {
            model::same_import("run", &run.id, existing, run)?;
            let stored: Vec<RunEvent> = match idx.events.get(&run.id).and_then(|j| j.window(0, events.len())) {
                Some(w) => w.read(&journal_path)?,
                None => Vec::new(),
            };
            model::same_import("run", &run.id, &stored.as_slice(), &events)?;
            let stored_checkpoint = fsio::read_json::<Checkpoint>(&dir.join("checkpoint.json"))?;
            return model::same_import("run", &run.id, &stored_checkpoint.as_ref(), &checkpoint);
        }
        fsio::fresh_dir_with_empty_file(&dir, &journal_path)?;
        let mut journal = Journal::default();
        if !events.is_empty() {
            journal.append(&journal_path, events)?;
        }
        if let Some(c) = checkpoint {
            fsio::write_json(&dir.join("checkpoint.json"), c)?;
        }
        fsio::write_json(&dir.join("run.json"), run)?;
        fsio::sync_dir(&self.dir.join(RUNS))?;
        idx.events.insert(run.id.clone(), journal);
        idx.runs.insert(run.id.clone(), run.clone());
        Ok(ImportOutcome::Imported)
    }

    fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        if !idx.runs.contains_key(run_id) {
            return Err(StoreError::not_found("run", run_id));
        }
        model::lease_grantable(idx.leases.get(run_id), owner, now)?;
        let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: now + ttl };
        fsio::write_json(&self.run_dir(run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id.to_owned(), lease.clone());
        Ok(lease)
    }

    fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        let next = idx
            .runs
            .values()
            .filter(|r| r.status == RunStatus::Running)
            .filter(|r| idx.leases.get(&r.id).is_none_or(|l| l.expires_at <= now))
            .min_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
            .map(|r| r.id.clone());
        let Some(run_id) = next else { return Ok(None) };
        let lease = Lease { run_id: run_id.clone(), owner: owner.to_owned(), expires_at: now + ttl };
        fsio::write_json(&self.run_dir(&run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id, lease.clone());
        Ok(Some(lease))
    }

    fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        match idx.leases.get(run_id) {
            Some(l) if l.owner == owner => {}
            _ => return Err(StoreError::LeaseLost { run_id: run_id.to_owned(), owner: owner.to_owned() }),
        }
        let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: now + ttl };
        fsio::write_json(&self.run_dir(run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id.to_owned(), lease.clone());
        Ok(lease)
    }

    fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        let mut idx = self.index();
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
            .leases
            .values()
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
}

#[async_trait]
impl RunStore for FileStore {
    async fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
        self.blocking(move |s| s.create_run(new)).await
    }

    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        Ok(self.inner.index().runs.get(id).cloned())
    }

    async fn list_runs(&self, filter: &RunFilter, page: &PageRequest) -> Result<Page<Run>, StoreError> {
        self.inner.index().runs.page(page, |r| {
            filter.agent.as_ref().is_none_or(|a| *a == r.agent)
                && (filter.session_id.is_none() || filter.session_id == r.session_id)
                && filter.status.is_none_or(|st| st == r.status)
        })
    }

    async fn update_run_status(
        &self,
        id: &str,
        status: RunStatus,
        error: Option<String>,
        expected_revision: Option<u64>,
    ) -> Result<Run, StoreError> {
        let id = owned(id);
        self.blocking(move |s| s.update_run_status(&id, status, error, expected_revision)).await
    }

    async fn append_events(&self, run_id: &str, events: Vec<NewRunEvent>) -> Result<RangeInclusive<u64>, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.append_events(&id, events)).await
    }

    async fn events_after(&self, run_id: &str, after_seq: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.events_after(&id, after_seq, limit)).await
    }

    async fn put_checkpoint(&self, run_id: &str, seq: u64, state: Value) -> Result<Checkpoint, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.put_checkpoint(&id, seq, state)).await
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
