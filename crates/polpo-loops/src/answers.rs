//! A person's answer to a waiting human step, whichever server of the store receives it.
//!
//! A run that reaches a human step is stored `awaiting_human` with the step and its
//! `output.schema`, and holds no lease while it waits: nothing runs, so nothing needs renewing
//! and no recovery pass takes it over. The server that ran it keeps waiting in memory
//! ([`HumanDesk`](crate::HumanDesk)) for the chat request that is still open. An answer
//! ([`LoopExecutor::answer_human`]) may reach any server that shares the store:
//! - where the run waits in memory, it is checked against the schema and handed to the run,
//!   which stores it with the run (a compare-and-set on the record) before going on;
//! - anywhere else (or once that run went away), it is checked against the stored schema and
//!   stored with the run in one compare-and-set that also claims the run for this server
//!   (`running`, this server's lease, the next fencing generation); the run then resumes here
//!   from its checkpoint, where the human step takes the stored answer instead of waiting.
//!   A server that crashes before the resume leaves a lease that lapses, and a recovery pass
//!   resumes the run elsewhere, the answer still stored. The server still waiting in memory
//!   sees the record changed at its next look and lets the run go (`lease_lost`).
//!
//! Every write is a compare-and-set on the revision the run was stored waiting at, so of two
//! answers given at once (on one server or two) exactly one is taken and the run goes on once;
//! the other is told the run no longer waits.

use crate::durable::StoredLoopRun;
use crate::error::LoopError;
use crate::executor::LoopExecutor;
use crate::human::check;
use crate::record::{LIVE, LOOP_RUNS, LoopRunRecord, LoopRunStatus};
use polpo_store::{Lease, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;

/// Attempts of the compare-and-set storing an answer, racing other writes of the run.
const CAS_ATTEMPTS: usize = 5;

impl LoopExecutor {
    /// Answer the waiting human step of run `run_id` with `output` (valid against the step's
    /// `output.schema`, else `loop_human_output_invalid` and the step keeps waiting), on
    /// whichever server this is (see the module doc): the answer is stored with the run, and
    /// the run goes on exactly once. `caller` is the API client answering (`None`: one that
    /// sees every run); another client's run, or one that does not wait for a person (ended,
    /// or answered already), is `loop_run_not_found`.
    pub async fn answer_human(
        self: &Arc<Self>,
        run_id: &str,
        caller: Option<&str>,
        output: Value,
    ) -> Result<(), LoopError> {
        if let Some(stored) = self.humans.hand(run_id, caller, output.clone())? {
            // Stored by the run itself; otherwise it no longer waited (or went away): the record says why.
            if stored.await.unwrap_or(false) {
                return Ok(());
            }
        }
        let store = self.runs.runtime().store().records.clone();
        let mut listed = false;
        for _ in 0..CAS_ATTEMPTS {
            let run = self.stored_record(run_id, caller).await?;
            let mut record = run.record;
            let pending = match record.human.as_mut() {
                Some(pending) if record.status == LoopRunStatus::AwaitingHuman && pending.answer.is_none() => pending,
                _ => return Err(LoopError::RunNotFound(run_id.to_owned())),
            };
            check(pending.schema.as_ref(), &output)?;
            pending.answer = Some(output.clone());
            self.claim_here(&mut record);
            // Listed live (once) before it runs again, so a crash before the resume is recovered.
            if !listed {
                store.put_record_revision(LIVE, run_id, json!({}), None).await?;
                listed = true;
            }
            let value = serde_json::to_value(&record).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))?;
            match store.put_record(LOOP_RUNS, run_id, value, Some(run.revision)).await {
                Ok(written) => {
                    self.resume_claimed(StoredLoopRun { record, revision: written.revision, ..run });
                    return Ok(());
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LoopError::Store(StoreError::Conflict(format!("loop run `{run_id}` kept changing; try again"))))
    }

    /// `record` claimed for this server, to be written over the revision it was read at:
    /// `running`, under a lease of this server's with the next fencing generation.
    pub(crate) fn claim_here(&self, record: &mut LoopRunRecord) {
        let now = self.runs.runtime().clock().now();
        let ttl = chrono::Duration::from_std(self.runs.options().lease_ttl).unwrap_or(chrono::Duration::MAX);
        record.status = LoopRunStatus::Running;
        record.lease = Some(Lease {
            run_id: record.id.clone(),
            owner: self.runs.owner().to_owned(),
            expires_at: now + ttl,
            generation: record.lease.as_ref().map_or(0, |l| l.generation) + 1,
        });
    }

    /// Resume here, in the background, a run this server claimed (with its answer stored, or
    /// its unconfirmed effect settled: `reconcile.rs`).
    pub(crate) fn resume_claimed(self: &Arc<Self>, run: StoredLoopRun) {
        let config = self.runs.runtime().loaded().project.loops.get(&run.record.loop_id).map(|l| l.config.clone());
        let exec = self.clone();
        tokio::spawn(async move {
            let Some(config) = config else {
                // The loop is gone from the project: the lease lapses and a recovery pass fails the run.
                tracing::warn!(run = run.record.id, "claimed loop run's loop is gone; recovery ends it");
                return;
            };
            let finished = exec.resume(run.record, run.revision, &config, &|_| {}).await;
            if let Err(e) = finished.result {
                tracing::info!(run = finished.run_id, code = e.code(), "claimed loop run ended: {e}");
            }
        });
    }
}
