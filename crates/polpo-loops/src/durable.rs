//! Stored loop runs seen from outside a run: taking over what a crashed server left running
//! (once its lease lapsed), reading and listing runs, and cancelling one.

use crate::error::LoopError;
use crate::executor::LoopExecutor;
use crate::record::{LIVE, LOOP_RUNS, LoopRunRecord, LoopRunStatus, RunFailure};
use chrono::{DateTime, Utc};
use polpo_store::{Cursor, PageRequest, RecordStore, StoreError};
use serde::Serialize;
use std::sync::Arc;

/// Records a listing reads at most to fill one page of a filtered listing.
const MAX_SCANNED: usize = 10_000;
/// Records read per store page while scanning.
const SCAN_PAGE: u32 = 200;
/// Attempts of a compare-and-set write racing the run's own checkpoints.
const CAS_ATTEMPTS: usize = 5;

/// Up to `limit` records of `collection` that `keep` keeps, newest first, after `after`, and
/// the cursor of the next page (at most [`MAX_SCANNED`] records are read per call). Each store
/// page asks only for what is still missing and is consumed whole, so its cursor is exactly
/// where the next listing resumes.
pub(crate) async fn scan<T>(
    store: &dyn RecordStore,
    collection: &str,
    mut after: Option<Cursor>,
    limit: u32,
    parse: fn(polpo_store::Record) -> Result<T, LoopError>,
    keep: impl Fn(&T) -> bool,
) -> Result<(Vec<T>, Option<Cursor>), LoopError> {
    let (mut found, mut scanned) = (Vec::new(), 0);
    let next = loop {
        let want = limit.saturating_sub(found.len() as u32).max(1);
        let page = store.list_records(collection, &PageRequest { after, limit: want }).await?;
        scanned += page.items.len();
        for stored in page.items {
            let item = parse(stored)?;
            if keep(&item) {
                found.push(item);
            }
        }
        match page.next {
            Some(c) if found.len() < limit as usize && scanned < MAX_SCANNED => after = Some(c),
            next => break next,
        }
    };
    Ok((found, next))
}

/// Record `id` of `collection`, or `None` (also for an id the store cannot hold).
pub(crate) async fn get_record(
    store: &dyn RecordStore,
    collection: &str,
    id: &str,
) -> Result<Option<polpo_store::Record>, LoopError> {
    match store.get_record(collection, id).await {
        Ok(found) => Ok(found),
        Err(StoreError::Invalid(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A stored run with the store's bookkeeping.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredLoopRun {
    /// The run.
    #[serde(flatten)]
    pub record: LoopRunRecord,
    /// Bumped by every write (each checkpoint).
    pub revision: u64,
    /// When it started.
    pub created_at: DateTime<Utc>,
    /// Its last checkpoint.
    pub updated_at: DateTime<Utc>,
}

/// One page of a loop-run listing.
#[derive(Debug, Clone)]
pub struct LoopRunPage {
    /// The runs, newest first.
    pub runs: Vec<StoredLoopRun>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

fn parse(stored: polpo_store::Record) -> Result<StoredLoopRun, LoopError> {
    let record = serde_json::from_value(stored.value)
        .map_err(|e| LoopError::RunRecordInvalid(format!("loop run `{}`: {e}", stored.id)))?;
    Ok(StoredLoopRun {
        record,
        revision: stored.revision,
        created_at: stored.created_at,
        updated_at: stored.updated_at,
    })
}

impl LoopExecutor {
    /// Start enforcing approval timeouts, and take over, now and then every half lease, the
    /// stored runs left `running` by a server that stopped renewing their
    /// lease (a crash; this one before a restart): called once when a server starts.
    pub fn spawn_recovery(self: &Arc<Self>) {
        tokio::spawn(self.clone().enforce_approval_timeouts());
        let exec = Arc::downgrade(self);
        let every = self.runs.options().lease_ttl / 2;
        tokio::spawn(async move {
            loop {
                let Some(exec) = exec.upgrade() else { return };
                if let Err(e) = exec.recover().await {
                    tracing::error!(code = e.code(), "loop runs could not be recovered: {e}");
                }
                drop(exec);
                tokio::time::sleep(every).await;
            }
        });
    }

    /// One recovery pass: every run listed live (see [`LIVE`]) that this process does not run,
    /// still `running` (a run waiting for a person is left to its answer), whose lease lapsed (or is this server's own from
    /// before a restart), is resumed in the background from its last checkpoint; its first
    /// write claims it, so of two servers passing at once one resumes it. How many were
    /// resumed. A run whose loop is gone from the project fails with `loop_not_found`; the
    /// listing of runs that ended is dropped.
    pub async fn recover(self: &Arc<Self>) -> Result<usize, LoopError> {
        let store = self.runs.runtime().store().records.clone();
        let mut page = PageRequest::first(SCAN_PAGE);
        let mut resumed = 0;
        loop {
            let found = store.list_records(LIVE, &page).await?;
            for listed in found.items {
                if self.is_active(&listed.id) {
                    continue;
                }
                let run = match get_record(store.as_ref(), LOOP_RUNS, &listed.id).await?.map(parse).transpose() {
                    Ok(Some(run)) if run.record.status.is_held() => run,
                    // Waits for a person, holding no lease: its answer resumes it (human.rs).
                    Ok(Some(run)) if run.record.status == LoopRunStatus::AwaitingHuman => continue,
                    // Not written yet (a crash before its first write), or ended.
                    Ok(_) => {
                        store.delete_record(LIVE, &listed.id, Some(listed.revision)).await?;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(run = listed.id, code = e.code(), "live loop run unreadable: {e}");
                        continue;
                    }
                };
                if !run.record.claimable_by(self.runs.owner(), self.runs.runtime().clock().now()) {
                    continue;
                }
                let config =
                    self.runs.runtime().loaded().project.loops.get(&run.record.loop_id).map(|l| l.config.clone());
                let Some(config) = config else {
                    let mut record = run.record;
                    record.apply_deltas(store.as_ref()).await?;
                    let error = LoopError::NotFound(record.loop_id.clone());
                    record.status = LoopRunStatus::Failed;
                    record.lease = None;
                    record.error = Some(RunFailure { code: error.code().to_owned(), message: error.to_string() });
                    let value =
                        serde_json::to_value(&record).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))?;
                    store.put_record(LOOP_RUNS, &record.id, value, Some(run.revision)).await?;
                    continue;
                };
                resumed += 1;
                let exec = self.clone();
                tokio::spawn(async move {
                    let finished = exec.resume(run.record, run.revision, &config, &|_| {}).await;
                    match finished.result {
                        Err(e @ LoopError::Store(StoreError::LeaseLost { .. } | StoreError::LeaseHeld { .. })) => {
                            tracing::info!(run = finished.run_id, "loop run taken over elsewhere first: {e}");
                        }
                        Err(e) => tracing::warn!(run = finished.run_id, code = e.code(), "resumed loop run ended: {e}"),
                        Ok(_) => {}
                    }
                });
            }
            match found.next {
                Some(cursor) => page = PageRequest::after(cursor, SCAN_PAGE),
                None => return Ok(resumed),
            }
        }
    }

    /// Whether run `id` is in progress in this process.
    pub fn is_active(&self, id: &str) -> bool {
        self.active.lock().unwrap_or_else(|p| p.into_inner()).contains_key(id)
    }

    /// Stop run `id` if it is in progress here (its caller went away); it is stored
    /// `cancelled`.
    pub fn stop(&self, id: &str) {
        if let Some(token) = self.active.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            token.cancel();
        }
    }

    /// Stored run `id` with its whole trace, if API client `caller` sees it (`None`: one that
    /// sees every run).
    pub async fn stored_run(&self, id: &str, caller: Option<&str>) -> Result<StoredLoopRun, LoopError> {
        let run = self.stored_record(id, caller).await?;
        self.with_whole_trace(run).await
    }

    /// Stored run `id` as stored (its trace: the entries not stored apart) with its
    /// checkpoint deltas applied, if `caller` sees it: what a compare-and-set write of the
    /// record starts from.
    pub(crate) async fn stored_record(&self, id: &str, caller: Option<&str>) -> Result<StoredLoopRun, LoopError> {
        let store = &self.runs.runtime().store().records;
        let mut run = get_record(store.as_ref(), LOOP_RUNS, id)
            .await?
            .map(parse)
            .transpose()?
            .filter(|run| run.record.visible_to(caller))
            .ok_or_else(|| LoopError::RunNotFound(id.to_owned()))?;
        run.record.apply_deltas(store.as_ref()).await?;
        Ok(run)
    }

    /// `run` as stored, with its whole trace read back in order (the API's view of it).
    pub(crate) async fn with_whole_trace(&self, mut run: StoredLoopRun) -> Result<StoredLoopRun, LoopError> {
        run.record.trace = run.record.whole_trace(self.runs.runtime().store().records.as_ref()).await?;
        run.record.trace_flushed = 0;
        run.record.deltas = None;
        Ok(run)
    }

    /// Runs `caller` sees, newest first, narrowed to `status`; `limit` per page. Each run's
    /// trace is as stored, its newest entries only (read one run for the whole); a running
    /// one's checkpoint deltas are applied.
    pub async fn stored_runs(
        &self,
        caller: Option<&str>,
        status: Option<LoopRunStatus>,
        after: Option<Cursor>,
        limit: u32,
    ) -> Result<LoopRunPage, LoopError> {
        let store = self.runs.runtime().store().records.clone();
        let keep = |run: &StoredLoopRun| run.record.visible_to(caller) && status.is_none_or(|s| s == run.record.status);
        let (mut runs, next) = scan(store.as_ref(), LOOP_RUNS, after, limit, parse, keep).await?;
        for run in &mut runs {
            run.record.apply_deltas(store.as_ref()).await?;
            // Applied: the storage detail is not part of the API's view.
            run.record.deltas = None;
        }
        Ok(LoopRunPage { runs, next })
    }

    /// Cancel run `id`: stored `cancelled` (a compare-and-set, so a checkpoint racing it loses
    /// and the run stops wherever it runs), and stopped here if it runs here.
    pub async fn cancel(&self, id: &str, caller: Option<&str>) -> Result<StoredLoopRun, LoopError> {
        let store = self.runs.runtime().store().records.clone();
        for _ in 0..CAS_ATTEMPTS {
            let run = self.stored_record(id, caller).await?;
            if run.record.status.is_terminal() {
                return Err(LoopError::RunFinished(id.to_owned()));
            }
            let mut record = run.record;
            record.status = LoopRunStatus::Cancelled;
            record.human = None;
            record.lease = None;
            let value = serde_json::to_value(&record).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))?;
            match store.put_record(LOOP_RUNS, id, value, Some(run.revision)).await {
                Ok(written) => {
                    self.stop(id);
                    self.humans.forget(id);
                    let run = StoredLoopRun {
                        record,
                        revision: written.revision,
                        created_at: written.created_at,
                        updated_at: written.updated_at,
                    };
                    return self.with_whole_trace(run).await;
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LoopError::Store(StoreError::Conflict(format!("loop run `{id}` kept changing; try again"))))
    }
}
