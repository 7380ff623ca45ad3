//! Human steps and their answers, whichever server receives them.
//!
//! A run that reaches a human step is stored `awaiting_human` with the step and its
//! `output.schema`, and holds no lease while it waits: nothing runs, so nothing needs renewing
//! and no recovery pass takes it over. The server that ran it keeps waiting in memory
//! ([`HumanDesk`]) for the chat request that is still open. An answer
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
use crate::record::{LIVE, LOOP_RUNS, LoopRunStatus};
use polpo_store::{Lease, StoreError};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Attempts of the compare-and-set storing an answer, racing other writes of the run.
const CAS_ATTEMPTS: usize = 5;

/// A person's answer handed to the run waiting for it in this process.
pub(crate) struct Handed {
    /// The answer, valid against the step's schema.
    pub(crate) output: Value,
    /// Told whether the run stored the answer (`false`: it no longer waited, e.g. an answer
    /// stored elsewhere first).
    pub(crate) stored: oneshot::Sender<bool>,
}

/// What a human step gets from the desk.
pub(crate) enum Awaited {
    /// The answer stored with the run before it resumed here (given on another server).
    Stored(Value),
    /// The answer, once a person gives it here.
    Waiting(oneshot::Receiver<Handed>),
}

/// A suspended human step.
struct Waiting {
    owner: Option<String>,
    schema: Option<Value>,
    answer: oneshot::Sender<Handed>,
}

/// The human steps waiting now in this process, by loop run id (oldest first within a run),
/// and the answers stored with runs resumed here, by run id and step.
#[derive(Default)]
pub struct HumanDesk {
    waiting: Mutex<HashMap<String, Vec<Waiting>>>,
    stored: Mutex<HashMap<String, (String, Value)>>,
}

impl HumanDesk {
    /// Run `run_id` resumes with `output` stored as the answer of its human step `step`: that
    /// step takes it instead of waiting.
    pub(crate) fn answered(&self, run_id: &str, step: &str, output: Value) {
        lock(&self.stored).insert(run_id.to_owned(), (step.to_owned(), output));
    }

    /// The answer of run `run_id`'s step `step`: the one stored with the run, or the one a
    /// person gives here later (checked against `schema`); the run belongs to API client
    /// `owner`.
    pub(crate) fn wait(&self, run_id: &str, step: &str, owner: Option<String>, schema: Option<Value>) -> Awaited {
        {
            let mut stored = lock(&self.stored);
            if stored.get(run_id).is_some_and(|(s, _)| s == step) {
                let (_, output) = stored.remove(run_id).unwrap_or_default();
                return Awaited::Stored(output);
            }
        }
        let (answer, rx) = oneshot::channel();
        let mut waiting = lock(&self.waiting);
        // Steps of runs that went away (a client that disconnected) wait for nobody.
        waiting.retain(|_, queue| {
            queue.retain(|w| !w.answer.is_closed());
            !queue.is_empty()
        });
        waiting.entry(run_id.to_owned()).or_default().push(Waiting { owner, schema, answer });
        Awaited::Waiting(rx)
    }

    /// Forget a run's suspended steps and stored answer (it ended).
    pub(crate) fn forget(&self, run_id: &str) {
        lock(&self.waiting).remove(run_id);
        lock(&self.stored).remove(run_id);
    }

    /// Whether run `run_id` waits for a person in this process.
    pub fn is_waiting(&self, run_id: &str) -> bool {
        lock(&self.waiting).get(run_id).is_some_and(|q| q.iter().any(|w| !w.answer.is_closed()))
    }

    /// Hand `output` to the oldest human step of run `run_id` waiting in this process, checked
    /// against its schema first (an invalid answer leaves it waiting). `caller` is the API
    /// client answering (`None`: one that sees every run). `Ok(None)`: no step of that run
    /// waits here for that caller; else whether the run stored the answer.
    fn hand(
        &self,
        run_id: &str,
        caller: Option<&str>,
        output: Value,
    ) -> Result<Option<oneshot::Receiver<bool>>, LoopError> {
        let mut waiting = lock(&self.waiting);
        if let Some(queue) = waiting.get_mut(run_id) {
            queue.retain(|w| !w.answer.is_closed());
        }
        let visible = |q: &Vec<Waiting>| {
            q.first().is_some_and(|w| caller.is_none_or(|c| w.owner.as_deref().unwrap_or_default() == c))
        };
        let Some(queue) = waiting.get_mut(run_id).filter(|q| visible(q)) else { return Ok(None) };
        check(queue[0].schema.as_ref(), &output)?;
        let step = queue.remove(0);
        let (stored, rx) = oneshot::channel();
        // A run that went away meanwhile drops the answer: the caller stores it instead.
        let _ = step.answer.send(Handed { output, stored });
        Ok(Some(rx))
    }
}

/// `output` checked against a human step's `output.schema` (`None`: anything goes).
fn check(schema: Option<&Value>, output: &Value) -> Result<(), LoopError> {
    let Some(schema) = schema else { return Ok(()) };
    let validator = jsonschema::draft202012::new(schema)
        .map_err(|e| LoopError::HumanOutputInvalid(format!("the step's output.schema is invalid: {e}")))?;
    let problems: Vec<String> =
        validator.iter_errors(output).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
    if problems.is_empty() { Ok(()) } else { Err(LoopError::HumanOutputInvalid(problems.join("; "))) }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

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
        for _ in 0..CAS_ATTEMPTS {
            let run = self.stored_record(run_id, caller).await?;
            let mut record = run.record;
            let pending = match record.human.as_mut() {
                Some(pending) if record.status == LoopRunStatus::AwaitingHuman && pending.answer.is_none() => pending,
                _ => return Err(LoopError::RunNotFound(run_id.to_owned())),
            };
            check(pending.schema.as_ref(), &output)?;
            pending.answer = Some(output.clone());
            let now = self.runs.runtime().clock().now();
            let ttl = chrono::Duration::from_std(self.runs.options().lease_ttl).unwrap_or(chrono::Duration::MAX);
            record.status = LoopRunStatus::Running;
            record.lease = Some(Lease {
                run_id: run_id.to_owned(),
                owner: self.runs.owner().to_owned(),
                expires_at: now + ttl,
                generation: record.lease.as_ref().map_or(0, |l| l.generation) + 1,
            });
            // Listed live before it runs again, so a crash before the resume is recovered.
            store.put_record(LIVE, run_id, json!({}), None).await?;
            let value = serde_json::to_value(&record).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))?;
            match store.put_record(LOOP_RUNS, run_id, value, Some(run.revision)).await {
                Ok(written) => {
                    self.resume_answered(StoredLoopRun { record, revision: written.revision, ..run });
                    return Ok(());
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LoopError::Store(StoreError::Conflict(format!("loop run `{run_id}` kept changing; try again"))))
    }

    /// Resume here, in the background, a run this server claimed with its answer stored.
    fn resume_answered(self: &Arc<Self>, run: StoredLoopRun) {
        let config = self.runs.runtime().loaded().project.loops.get(&run.record.loop_id).map(|l| l.config.clone());
        let exec = self.clone();
        tokio::spawn(async move {
            let Some(config) = config else {
                // The loop is gone from the project: the lease lapses and a recovery pass fails the run.
                tracing::warn!(run = run.record.id, "answered loop run's loop is gone; recovery ends it");
                return;
            };
            let finished = exec.resume(run.record, run.revision, &config, &|_| {}).await;
            if let Err(e) = finished.result {
                tracing::info!(run = finished.run_id, code = e.code(), "answered loop run ended: {e}");
            }
        });
    }
}
