//! Durable loop runs: a [`LoopRunRecord`] in the store's `loop_runs` collection, written when
//! the run starts, after every top-level step (its checkpoint) and when it ends, each write a
//! compare-and-set on the record's revision. A server that starts finds the runs a crash left
//! `running` there and resumes them from their checkpoint (a run `awaiting_human` holds no
//! lease and waits for its answer, which resumes it: `answers.rs`).
//!
//! The trace grows with the run, so a checkpoint does not rewrite it: the record keeps only
//! its newest entries (at most [`TRACE_TAIL_MAX`]), and the older ones move, a chunk at a
//! time, to records of the run's own collection ([`trace_collection`]), written before the
//! run record that counts them. A chunk is named by its first sequence number and by its
//! writer's claim on the run (the revision its first write made, which no other writer can
//! have), so a writer that crashed or lost the run never overwrites another's entries, and
//! entries past the record's count are ignored: a resume neither duplicates nor loses one.
//!
//! A checkpoint after a tool step that leads to a replayable tool step (one whose call may run
//! again after a crash) does not rewrite the record either: it appends a numbered delta (the
//! context entries the step wrote, the next step, the step counter, the new trace entries) to a
//! record log in the collection every run's deltas share ([`DELTAS`]), named by the run and its
//! writer's claim. A delta only saves running a replayable step again, so it is appended as
//! [`RecordStore::append_log_unsynced`] (on the file store, one line written on the run's own
//! thread, no fdatasync): it outlives the process (SIGKILL) once written; a machine's crash may
//! lose the deltas since the record was last written whole, and the resume runs those
//! replayable steps again.
//! The record says whose deltas continue it and how many of them it already holds
//! ([`DeltaLog`]); a writer rewrites it whole (folding its deltas in, a compare-and-set that sees
//! a takeover or a cancel) after at most [`DELTAS_MAX`] deltas, before any other step and when
//! the run stops, and then empties its log. Reading a running record
//! applies the deltas of its own writer's claim after the ones it holds, in order: a writer
//! that lost the run (another claimed it) appends deltas under its own claim, which no one
//! applies, and it stops at its next step once its lease lapsed (or before an effect-ledger
//! intent, which checks the record).
//!
//! A run has one executor at a time, across every server on one store: the record carries a
//! lease ([`Lease`], the engine's: owner, expiry, fencing generation). Each executor's first
//! write claims it with the next generation, its checkpoints extend it, a renewal rewrites it
//! when no checkpoint did for a third of its time, and a run that stops or ends gives it up.
//! Every write is a compare-and-set on the revision, so once another server claimed the run
//! (after the lease lapsed) the former executor's next write is refused (`lease_lost`) and it
//! stops; nor does it start a step past its lease without renewing it first. The ids of the
//! runs not yet ended are kept in [`LIVE`], which the recovery passes of every server read.

use crate::context;
use crate::error::LoopError;
use crate::trace::TraceEvent;
use crate::trace::Tracer;
use polpo_core::loops::governance::Gate;
use polpo_core::loops::router::ExecutionRoute;
use polpo_core::message::Message;
use polpo_store::{Clock, JsonText, Lease, PageRequest, RecordStore, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The store collection loop runs are kept in.
pub const LOOP_RUNS: &str = "loop_runs";

/// The ids of the loop runs that have not ended (one empty record each, written before the
/// run's own first write and deleted after its last): what a recovery pass reads instead of
/// every run ever stored. A hint only: the run's record decides.
pub const LIVE: &str = "loop_runs.live";

/// Trace entries a run record keeps before they move to a chunk of their own: bounds what a
/// checkpoint writes, whatever the length of the run.
pub(crate) const TRACE_TAIL_MAX: usize = 64;

/// The collection holding run `run_id`'s older trace entries, in chunks.
pub(crate) fn trace_collection(run_id: &str) -> String {
    format!("loop_trace.{run_id}")
}

/// Deltas a writer appends before it rewrites the record whole: bounds what a resume reads
/// and how long a claim's log grows before it is emptied.
pub(crate) const DELTAS_MAX: u64 = 32;

/// The collection holding every run's checkpoint deltas, a record log per run and writer
/// (see [`delta_log`]): on the file store one folder, whose log files are removed once their
/// deltas are folded into the record, not a folder left behind by every run.
pub(crate) const DELTAS: &str = "loop_deltas";

/// The collection and record log of the deltas of run `run_id`'s writer whose claim made
/// revision `epoch`; `shared`: in [`DELTAS`], else where runs written before it kept them (a
/// collection of their own, `loop_deltas.<run id>`), for a record stopped mid-run then.
fn delta_log(run_id: &str, epoch: u64, shared: bool) -> (String, String) {
    match shared {
        true => (DELTAS.to_owned(), format!("{run_id}.{epoch:012}")),
        false => (format!("{DELTAS}.{run_id}"), format!("{epoch:012}")),
    }
}

/// Which checkpoint deltas continue a running record: those its writer, whose claim on the run
/// made revision `epoch`, numbered past `folded` (the ones the record already holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaLog {
    /// The writer's claim (the revision its first write made).
    pub epoch: u64,
    /// Its deltas held by the record.
    pub folded: u64,
    /// Whether they are in the shared [`DELTAS`] collection (every record written since it
    /// exists; `false`, the default, for one written before: see [`delta_log`]).
    #[serde(default)]
    pub shared: bool,
}

/// The checkpoint after one tool step, as a delta over the one before: numbered `seq` by the
/// writer whose claim made revision `epoch`.
#[derive(Debug, Serialize, Deserialize)]
struct CheckpointDelta<C, T> {
    epoch: u64,
    seq: u64,
    /// The context's top-level entries written since the checkpoint before.
    context: C,
    /// The next step (the frontier).
    next: String,
    /// Step executions so far.
    executed: u32,
    /// The trace entries since the checkpoint before, a JSON array: written from the texts the
    /// tracer made of them (see [`JsonText::of_with`]), not as a tree of entries per step. Deltas
    /// written before it was one hold the array's text as a string, read as well.
    #[serde(skip_serializing)]
    trace: T,
}

/// A run's state as plain data: what a checkpoint after a step keeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopState {
    /// The shared context bag (`request` and every step output).
    pub context: Value,
    /// Where a resume starts: the next top-level step at a checkpoint; the steps that were
    /// running when a run stopped; empty when it completed.
    pub frontier: Vec<String>,
    /// Completed iterations of each `while` step's latest entry.
    pub while_iterations: BTreeMap<String, u32>,
    /// Step executions so far (skips included), counted against the budget.
    pub executed: u32,
}

/// Where a loop run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopRunStatus {
    /// Steps are running (or a crash left it so: the next server start resumes it).
    Running,
    /// A human step waits for `POST …/loop-runs/{id}/human`.
    AwaitingHuman,
    /// An approval gate waits for a reviewer.
    AwaitingApproval,
    /// It reached `end`.
    Completed,
    /// A step failed; `error` says why.
    Failed,
    /// Cancelled by its caller or over REST.
    Cancelled,
    /// A reviewer approved the gate; `POST …/resume` continues it.
    ApprovalApproved,
    /// A reviewer rejected the gate: the run is over.
    ApprovalRejected,
}

impl LoopRunStatus {
    /// Whether the run is over (nothing resumes it).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled | Self::ApprovalRejected)
    }

    /// The wire name (`awaiting_human` …), for query filters.
    pub fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(Value::String(name.to_owned())).ok()
    }
}

/// What the run was asked, kept so a resumed run sees the same request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRequest {
    /// The conversation agent steps see.
    pub messages: Vec<Message>,
    /// `request.metadata`.
    pub metadata: Value,
    /// The request layer of the tool policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// How the execution router chose the loop (the reference's `executionRoute`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<ExecutionRoute>,
}

/// A human step the run waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingHuman {
    /// The step.
    pub step: String,
    /// Its `output.schema`, which the answer must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// The person's answer, stored with the run until the step takes it (given on a server
    /// where the run did not wait, or just before a crash; see `human.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
}

/// An agent step's engine invocation, so its session and run can be looked up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRun {
    /// The step.
    pub step: String,
    /// The engine run id it was invoked with.
    pub run_id: String,
    /// The session the step's conversation is stored in.
    pub session_id: String,
}

/// Why a run failed: the stable code and the sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFailure {
    /// Stable snake_case code.
    pub code: String,
    /// Human sentence.
    pub message: String,
}

/// A loop run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopRunRecord {
    /// `looprun-<id>`.
    pub id: String,
    /// The loop.
    #[serde(rename = "loop")]
    pub loop_id: String,
    /// The agent whose loop it is.
    pub agent: String,
    /// Where it is.
    pub status: LoopRunStatus,
    /// The API client it belongs to (`None`: local mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The end user (`request.user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// What it was asked.
    pub request: StoredRequest,
    /// The last checkpoint: context, the frontier a resume starts from, counters.
    pub state: LoopState,
    /// How many of the trace's first entries are stored apart, in the chunks of
    /// [`trace_collection`] (0 when the record holds the whole trace).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub trace_flushed: u64,
    /// The human step it waits on (`awaiting_human`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human: Option<PendingHuman>,
    /// The last agent or human output (a completed run's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunFailure>,
    /// The agent steps' invocations, in order.
    #[serde(default)]
    pub agent_runs: Vec<AgentRun>,
    /// The approval request the run waits on (or last waited on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_request_id: Option<String>,
    /// Gates reviewers approved: a resume passes them instead of asking again.
    #[serde(default)]
    pub approved_gates: Vec<ApprovedGate>,
    /// The server executing the run, until when, under which fencing generation: present
    /// while it runs (not while it waits for a person); another server takes the run over only once it
    /// lapsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// The checkpoint deltas that continue this record while it runs (as stored; none once
    /// read through the API, which shows them applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deltas: Option<DeltaLog>,
    /// The trace so far, whole when read through the API; as stored, only the entries after
    /// the first `trace_flushed`. The last member: a checkpoint writes the record with it
    /// empty, then puts the entries' text in its place (`record_text`).
    pub trace: Vec<TraceEvent>,
}

// Approval requests are one record for loop gates and hooks' tool calls, kept by the engine,
// which writes the tool-call ones itself.
pub use polpo_engine::approvals::{APPROVALS, ApprovalRecord, ApprovalStatus, ApprovalSubject, LoopGateRequest};

/// A gate a reviewer approved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovedGate {
    /// The gate.
    #[serde(flatten)]
    pub gate: Gate,
    /// The approval request that approved it.
    pub approval_request_id: String,
    /// The reviewer.
    pub resolved_by: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LoopRunStatus {
    /// Whether a run in this status has an executor, which holds its lease: it runs. A run
    /// waiting for a person holds none: nothing runs, and whichever server receives the
    /// answer claims it (`human.rs`).
    pub(crate) fn is_held(self) -> bool {
        matches!(self, Self::Running)
    }
}

impl LoopRunRecord {
    /// Whether server `owner` may take this run over at `now`: nobody holds it, its lease
    /// lapsed, or it is `owner`'s own from before a restart.
    pub(crate) fn claimable_by(&self, owner: &str, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.lease.as_ref().is_none_or(|l| l.expires_at <= now || l.owner == owner)
    }

    /// Whether API client `caller` sees this run (`None`: one that sees every run).
    pub fn visible_to(&self, caller: Option<&str>) -> bool {
        caller.is_none_or(|c| self.owner.as_deref() == Some(c))
    }

    /// This stored record's whole trace: its chunks' entries up to `trace_flushed` (of two
    /// writers' entries under one sequence number, the later claim's), then its own.
    pub(crate) async fn whole_trace(&self, store: &dyn RecordStore) -> Result<Vec<TraceEvent>, LoopError> {
        if self.trace_flushed == 0 {
            return Ok(self.trace.clone());
        }
        let flushed = self.trace_flushed;
        let mut entries: BTreeMap<u64, (u64, TraceEvent)> = BTreeMap::new();
        let mut page = PageRequest::first(200);
        loop {
            let found = store.list_records(&trace_collection(&self.id), &page).await?;
            for stored in found.items {
                let chunk: TraceChunk<Vec<TraceEvent>> = serde_json::from_value(stored.value).map_err(|e| {
                    LoopError::RunRecordInvalid(format!("loop run `{}` trace chunk `{}`: {e}", self.id, stored.id))
                })?;
                for (seq, event) in (chunk.from..).zip(chunk.events).take_while(|(seq, _)| *seq <= flushed) {
                    if entries.get(&seq).is_none_or(|(epoch, _)| *epoch < chunk.epoch) {
                        entries.insert(seq, (chunk.epoch, event));
                    }
                }
            }
            match found.next {
                Some(cursor) => page = PageRequest::after(cursor, 200),
                None => break,
            }
        }
        // Every key lies in 1..=flushed, so as many keys as that is all of them.
        if entries.len() as u64 != flushed {
            return Err(LoopError::RunRecordInvalid(format!(
                "loop run `{}` counts {flushed} trace entries stored apart, {} found",
                self.id,
                entries.len()
            )));
        }
        Ok(entries.into_values().map(|(_, event)| event).chain(self.trace.iter().cloned()).collect())
    }
}

impl LoopRunRecord {
    /// This stored record with the checkpoint deltas that continue it applied (see
    /// [`DeltaLog`]): its writer's, numbered on from the ones it holds, up to the first missing.
    /// Only a running record has any: every other status is written whole.
    pub(crate) async fn apply_deltas(&mut self, store: &dyn RecordStore) -> Result<(), LoopError> {
        let Some(log) = self.deltas.filter(|_| self.status == LoopRunStatus::Running) else {
            return Ok(());
        };
        // Entries the record holds already may be there still (a log is emptied after the record
        // is written, and an emptying is not durable by itself): the numbers tell.
        let mut found = BTreeMap::new();
        let (collection, name) = delta_log(&self.id, log.epoch, log.shared);
        for entry in store.read_log(&collection, &name).await? {
            let delta: CheckpointDelta<Map<String, Value>, Value> = serde_json::from_value(entry)
                .map_err(|e| LoopError::RunRecordInvalid(format!("loop run `{}` delta: {e}", self.id)))?;
            if delta.epoch == log.epoch && delta.seq > log.folded {
                found.insert(delta.seq, delta);
            }
        }
        let mut folded = log.folded;
        for (seq, delta) in found {
            if seq != folded + 1 {
                break;
            }
            folded = seq;
            let events: Result<Vec<TraceEvent>, _> = match delta.trace {
                Value::String(text) => serde_json::from_str(&text),
                array => serde_json::from_value(array),
            };
            let events = events
                .map_err(|e| LoopError::RunRecordInvalid(format!("loop run `{}` delta {seq}'s trace: {e}", self.id)))?;
            context::merge(&mut self.state.context, delta.context);
            self.state.frontier = vec![delta.next];
            self.state.executed = delta.executed;
            self.trace.extend(events);
        }
        self.deltas = Some(DeltaLog { folded, ..log });
        Ok(())
    }
}

/// Trace entries `from`, `from + 1`, … of a run, stored apart by the writer whose claim on
/// the run made revision `epoch`.
#[derive(Debug, Serialize, Deserialize)]
struct TraceChunk<E> {
    epoch: u64,
    from: u64,
    /// The entries, a JSON array: written from the texts the tracer made of them (see
    /// [`JsonText::of_with`]).
    #[serde(skip_serializing)]
    events: E,
}

/// `record`'s JSON text with `trace`, the JSON array of its trace entries as the tracer wrote
/// them, as its `trace`: the record is serialised with its own trace empty, which is its last
/// member (see [`LoopRunRecord`]), that member cut off and the text put in its place.
fn record_text(record: &LoopRunRecord, trace: &str) -> Result<JsonText, LoopError> {
    const EMPTY_TRACE: &str = ",\"trace\":[]}";
    let mut text = serde_json::to_string(record).map_err(invalid)?;
    if !record.trace.is_empty() || !text.ends_with(EMPTY_TRACE) {
        return Err(LoopError::RunRecordInvalid("a loop run's record must end with its empty trace".into()));
    }
    text.truncate(text.len() - EMPTY_TRACE.len());
    text.push('}');
    Ok(JsonText::object_with(text, "trace", trace)?)
}

/// A checkpoint that could not be converted to JSON.
fn invalid(e: serde_json::Error) -> LoopError {
    LoopError::RunRecordInvalid(e.to_string())
}

/// A run's record writer, the holder of its lease: every write expects the revision the
/// previous one made, so a change from elsewhere (a cancel, another server's claim) stops this
/// writer — `aborted` after a cancel, `lease_lost` after a claim.
#[derive(Clone)]
pub(crate) struct Checkpoints {
    store: Arc<dyn RecordStore>,
    clock: Arc<dyn Clock>,
    id: String,
    /// How long the lease lives past each write.
    ttl: Duration,
    /// Shared with the renewal in flight, which finishes even once its caller stopped waiting.
    written: Arc<tokio::sync::Mutex<Written>>,
}

/// What a writer's last write left.
struct Written {
    /// The record's revision.
    revision: u64,
    /// The revision this writer's first write made: its claim, naming its trace chunks.
    claim: Option<u64>,
    /// Trace entries stored apart.
    flushed: u64,
    /// This writer's lease (its expiry as last written).
    lease: Lease,
    /// Trace entries the record holds after the first `flushed`.
    tail: usize,
    /// Trace entries after those stored in the deltas since the record was last written.
    in_deltas: usize,
    /// Deltas this writer appended (the last one's number).
    logged: u64,
    /// Of them, those its last write of the record holds.
    folded: u64,
}

impl Checkpoints {
    /// The writer of run `id` for server `owner`, whose record is at `revision` (0: not
    /// written yet) with its first `flushed` trace entries stored apart and lease `previous`;
    /// its first write claims the run with the next fencing generation, for `ttl`.
    pub(crate) fn new(
        store: Arc<dyn RecordStore>,
        clock: Arc<dyn Clock>,
        id: &str,
        (revision, flushed): (u64, u64),
        (owner, previous, ttl): (&str, Option<&Lease>, Duration),
    ) -> Self {
        let lease = Lease {
            run_id: id.to_owned(),
            owner: owner.to_owned(),
            expires_at: clock.now(),
            generation: previous.map_or(0, |l| l.generation) + 1,
        };
        let written = Written { revision, claim: None, flushed, lease, tail: 0, in_deltas: 0, logged: 0, folded: 0 };
        Self { store, clock, id: id.to_owned(), ttl, written: Arc::new(tokio::sync::Mutex::new(written)) }
    }

    /// The lease's expiry if written now.
    fn expiry(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now() + chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::MAX)
    }

    /// Why a write expecting this writer's revision was refused: the run was cancelled
    /// (`aborted`), or another server claimed it (`lease_lost`).
    async fn refused(&self, lease: &Lease) -> LoopError {
        match self.store.get_record(LOOP_RUNS, &self.id).await {
            Ok(Some(stored)) if stored.value.get("status") == Some(&Value::from("cancelled")) => LoopError::Aborted,
            Ok(_) => LoopError::Store(StoreError::LeaseLost { run_id: self.id.clone(), owner: lease.owner.clone() }),
            Err(e) => LoopError::Store(e),
        }
    }

    /// Write `record`, with `tracer`'s entries and this writer's lease (given up when its
    /// status has no executor), over the revision this writer last wrote. Once the entries
    /// not yet stored apart reach [`TRACE_TAIL_MAX`], they go first to a chunk of their own
    /// (never on the first write: the writer has no claim yet to name it by). Written as text
    /// ([`RecordStore::put_record_text`]): the trace entries as the tracer wrote them when they
    /// happened, the rest of the record serialised once.
    pub(crate) async fn save(&self, mut record: LoopRunRecord, tracer: &Tracer<'_>) -> Result<(), LoopError> {
        let mut written = self.written.lock().await;
        let mut flushed = written.flushed;
        let (mut trace, mut tail) = tracer.json_text_since(flushed as usize);
        if let Some(epoch) = written.claim
            && tail >= TRACE_TAIL_MAX
        {
            let from = flushed + 1;
            let chunk = JsonText::of_with(&TraceChunk { epoch, from, events: () }, "events", &trace)?;
            self.store
                .put_record_text(&trace_collection(&self.id), &format!("{from:012}-{epoch:012}"), chunk, None)
                .await?;
            flushed += tail as u64;
            (trace, tail) = ("[]".to_owned(), 0);
        }
        record.trace = Vec::new();
        record.trace_flushed = flushed;
        let lease = Lease { expires_at: self.expiry(), ..written.lease.clone() };
        record.lease = record.status.is_held().then(|| lease.clone());
        // A compare-and-set makes the next revision: the first write's is the writer's claim.
        let epoch = written.claim.unwrap_or(written.revision + 1);
        record.deltas = Some(DeltaLog { epoch, folded: written.logged, shared: true });
        let text = record_text(&record, &trace)?;
        match self.store.put_record_text(LOOP_RUNS, &self.id, text, Some(written.revision)).await {
            Ok(revision) => {
                debug_assert_eq!(written.claim.is_none(), revision == epoch, "a claim is its first revision");
                written.revision = revision;
                written.claim.get_or_insert(revision);
                written.flushed = flushed;
                written.tail = tail;
                written.lease = lease;
                let emptied = written.folded < written.logged;
                written.folded = written.logged;
                written.in_deltas = 0;
                // The record holds the deltas now: the log need not keep them.
                if emptied {
                    let (collection, log) = delta_log(&self.id, epoch, true);
                    self.store.clear_log(&collection, &log).await?;
                }
                Ok(())
            }
            Err(StoreError::Conflict(_)) => Err(self.refused(&written.lease).await),
            Err(e) => Err(LoopError::Store(e)),
        }
    }

    /// Whether the next checkpoint may be a delta ([`Checkpoints::append`]): the run is claimed
    /// and fewer than [`DELTAS_MAX`] deltas were appended since the record was last written.
    pub(crate) async fn appendable(&self) -> bool {
        let written = self.written.lock().await;
        written.claim.is_some() && written.logged - written.folded < DELTAS_MAX
    }

    /// Store the checkpoint after a tool step as a delta (see [`DeltaLog`]): the context's
    /// top-level entries `changed` since the checkpoint before, the `next` step, the step count
    /// `executed` and `tracer`'s entries not stored yet. Only when [`Checkpoints::appendable`].
    pub(crate) async fn append(
        &self,
        changed: &Map<String, Value>,
        next: &str,
        executed: u32,
        tracer: &Tracer<'_>,
    ) -> Result<(), LoopError> {
        let mut written = self.written.lock().await;
        let Some(epoch) = written.claim else {
            return Err(LoopError::RunRecordInvalid(format!("loop run `{}`: a delta before its claim", self.id)));
        };
        let stored = written.flushed as usize + written.tail + written.in_deltas;
        let (trace, entries) = tracer.json_text_since(stored);
        let seq = written.logged + 1;
        let delta = CheckpointDelta { epoch, seq, context: changed, next: next.to_owned(), executed, trace: () };
        let entry = JsonText::of_with(&delta, "trace", &trace)?;
        let (collection, log) = delta_log(&self.id, epoch, true);
        self.store.append_log_unsynced(&collection, &log, seq, &entry).await?;
        written.logged = seq;
        written.in_deltas += entries;
        Ok(())
    }

    /// Make sure the run is still this writer's before an effect that must not happen twice
    /// (a tool call's effect-ledger intent): [`Checkpoints::hold_lease`], and once deltas were
    /// appended since the record was last written (a delta is compared with nothing), the stored
    /// record must still be at this writer's revision; refused as [`Checkpoints::save`] is
    /// otherwise (cancelled, or claimed by another server).
    pub(crate) async fn hold(&self) -> Result<(), LoopError> {
        self.hold_lease().await?;
        let written = self.written.lock().await;
        if written.logged == written.folded {
            return Ok(());
        }
        match self.store.get_record(LOOP_RUNS, &self.id).await? {
            Some(stored) if stored.revision == written.revision => Ok(()),
            _ => Err(self.refused(&written.lease).await),
        }
    }

    /// Make sure this writer still holds the run before a step: a lease that lapsed (the
    /// process was paused past it) is renewed first, refused once another server claimed it.
    pub(crate) async fn hold_lease(&self) -> Result<(), LoopError> {
        self.renew(self.ttl).await
    }

    /// Extend the lease (the record as stored, its expiry moved) unless the last write did
    /// so less than `within` ago; refused as [`Checkpoints::save`] is when the run was
    /// cancelled or claimed elsewhere since this writer's last write.
    pub(crate) async fn renew(&self, within: Duration) -> Result<(), LoopError> {
        if !self.renewal_due(&*self.written.lock().await, within) {
            return Ok(());
        }
        // Its own task: a renewal whose run ended meanwhile (the wait for it dropped) still
        // records the revision it wrote, which the run's last write expects.
        let this = self.clone();
        match tokio::spawn(async move { this.renew_now(within).await }).await {
            Ok(renewed) => renewed,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime shuts down.
            Err(_) => Err(LoopError::Aborted),
        }
    }

    /// Whether a lease last written as `written` is to be renewed `within` its time.
    fn renewal_due(&self, written: &Written, within: Duration) -> bool {
        let since = self.clock.now() + chrono::Duration::from_std(self.ttl.saturating_sub(within)).unwrap_or_default();
        written.claim.is_some() && written.lease.expires_at <= since
    }

    /// [`Checkpoints::renew`] itself.
    async fn renew_now(&self, within: Duration) -> Result<(), LoopError> {
        let mut written = self.written.lock().await;
        if !self.renewal_due(&written, within) {
            return Ok(());
        }
        let mut stored = match self.store.get_record(LOOP_RUNS, &self.id).await? {
            Some(stored) if stored.revision == written.revision => stored,
            _ => return Err(self.refused(&written.lease).await),
        };
        if stored.value.get("lease").is_none_or(Value::is_null) {
            return Ok(());
        }
        let lease = Lease { expires_at: self.expiry(), ..written.lease.clone() };
        stored.value["lease"] = serde_json::to_value(&lease).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))?;
        match self.store.put_record_revision(LOOP_RUNS, &self.id, stored.value, Some(written.revision)).await {
            Ok(revision) => {
                written.revision = revision;
                written.lease = lease;
                Ok(())
            }
            Err(StoreError::Conflict(_)) => Err(self.refused(&written.lease).await),
            Err(e) => Err(LoopError::Store(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceKind;
    use polpo_store::{FileStore, SqliteStore, SystemClock};
    use serde_json::json;

    const TTL: Duration = Duration::from_secs(60);

    /// A real file store and a real SQLite store under `dir`.
    async fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn RecordStore>)> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let file = FileStore::open(&dir.join("file"), clock.clone()).await.unwrap();
        let sqlite = SqliteStore::open(&dir.join("polpo.db"), clock).await.unwrap();
        vec![("file", Arc::new(file)), ("sqlite", Arc::new(sqlite))]
    }

    fn record(id: &str) -> LoopRunRecord {
        LoopRunRecord {
            id: id.to_owned(),
            loop_id: "flow".into(),
            agent: "bot".into(),
            status: LoopRunStatus::Running,
            owner: None,
            user: None,
            request: StoredRequest { messages: Vec::new(), metadata: Value::Null, allowed_tools: None, route: None },
            state: LoopState { context: json!({"request": {}}), frontier: vec!["s0".into()], ..LoopState::default() },
            trace: Vec::new(),
            trace_flushed: 0,
            human: None,
            output: None,
            error: None,
            agent_runs: Vec::new(),
            approval_request_id: None,
            approved_gates: Vec::new(),
            lease: None,
            deltas: None,
        }
    }

    /// A checkpoint's text is the record serialised with its trace: the same members, in the
    /// same order, the trace entries as the tracer wrote them.
    #[test]
    fn a_record_written_as_text_is_the_record_serialised_with_its_trace() {
        let clock = || 7;
        let tracer = Tracer::new("flow", &clock, &|_| {});
        tracer.emit(TraceEvent::new(TraceKind::StepEnd, Some("s0")).data(json!({"text": "é \"q\""})));
        tracer.emit(TraceEvent::new(TraceKind::LoopEnd, None));
        let mut full = record("looprun-1");
        full.lease = Some(Lease {
            run_id: "looprun-1".into(),
            owner: "a".into(),
            expires_at: chrono::Utc::now(),
            generation: 2,
        });
        full.deltas = Some(DeltaLog { epoch: 2, folded: 1, shared: true });
        let (trace, n) = tracer.json_text_since(0);
        let text = record_text(&full, &trace).unwrap();
        full.trace = tracer.into_events();
        assert_eq!(n, full.trace.len());
        assert_eq!(text.as_str(), serde_json::to_string(&full).unwrap());
        // A record whose trace is not empty (the writer forgot to take it) is refused.
        assert_eq!(record_text(&full, &trace).unwrap_err().code(), "loop_run_record_invalid");
    }

    fn writer(store: &Arc<dyn RecordStore>, id: &str, (revision, flushed): (u64, u64), owner: &str) -> Checkpoints {
        Checkpoints::new(store.clone(), Arc::new(SystemClock), id, (revision, flushed), (owner, None, TTL))
    }

    /// Steps `from..to` of a tool loop (each writes `r<i>`, traces one entry), checkpointed as a
    /// run does: a delta while the writer may, else the record whole.
    async fn steps(writer: &Checkpoints, tracer: &Tracer<'_>, record: &mut LoopRunRecord, from: u32, to: u32) {
        for i in from..to {
            tracer.emit(TraceEvent::new(TraceKind::StepEnd, Some(&format!("s{i}"))));
            let mut changed = Map::new();
            changed.insert(format!("r{i}"), json!(i));
            context::merge(&mut record.state.context, changed.clone());
            record.state.frontier = vec![format!("s{}", i + 1)];
            record.state.executed = i + 1;
            if writer.appendable().await {
                writer.append(&changed, &format!("s{}", i + 1), i + 1, tracer).await.unwrap();
            } else {
                writer.save(record.clone(), tracer).await.unwrap();
            }
        }
    }

    /// Stored run `id` as a resume reads it: deltas applied, whole trace.
    async fn read(store: &dyn RecordStore, id: &str) -> (LoopRunRecord, u64, Vec<TraceEvent>) {
        let stored = store.get_record(LOOP_RUNS, id).await.unwrap().unwrap();
        let mut record: LoopRunRecord = serde_json::from_value(stored.value).unwrap();
        record.apply_deltas(store).await.unwrap();
        let trace = record.whole_trace(store).await.unwrap();
        (record, stored.revision, trace)
    }

    /// Run `id` claimed by a writer, then three tool steps checkpointed as deltas: the record as
    /// its writer last wrote it, and the stored record read back (deltas applied) with its whole
    /// trace.
    async fn three_delta_steps(
        store: &Arc<dyn RecordStore>,
        id: &str,
    ) -> (LoopRunRecord, LoopRunRecord, Vec<TraceEvent>) {
        let (clock, sink) = (|| 0, |_: &TraceEvent| {});
        let tracer = Tracer::new("flow", &clock, &sink);
        let writer = writer(store, id, (0, 0), "a");
        let mut written = record(id);
        writer.save(written.clone(), &tracer).await.unwrap();
        steps(&writer, &tracer, &mut written, 0, 3).await;
        let (current, _, trace) = read(store.as_ref(), id).await;
        (written, current, trace)
    }

    #[tokio::test]
    async fn a_record_with_its_deltas_applied_is_the_record_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        for (name, store) in stores(dir.path()).await {
            let (clock, sink) = (|| 0, |_: &TraceEvent| {});
            let tracer = Tracer::new("flow", &clock, &sink);
            let writer = writer(&store, "looprun-1", (0, 0), "a");
            let mut written = record("looprun-1");
            writer.save(written.clone(), &tracer).await.unwrap();
            // Past a log of deltas emptied twice and the trace entries a record keeps.
            steps(&writer, &tracer, &mut written, 0, 2 * DELTAS_MAX as u32 + 7).await;
            let stored = store.get_record(LOOP_RUNS, "looprun-1").await.unwrap().unwrap();
            assert_eq!(
                stored.value["state"]["executed"],
                json!(2 * DELTAS_MAX + 2),
                "{name}: the last steps are deltas"
            );
            let (folded, _, trace) = read(store.as_ref(), "looprun-1").await;
            let (collection, log) = delta_log("looprun-1", 1, true);
            let unfolded = store.read_log(&collection, &log).await.unwrap();
            assert_eq!(unfolded.len(), 5, "{name}: the log holds the deltas since the record was written");
            writer.save(written.clone(), &tracer).await.unwrap();
            assert!(store.read_log(&collection, &log).await.unwrap().is_empty(), "{name}: emptied once folded");
            // An emptying lost in a crash: the entries come back, and the record holds them already.
            for (seq, entry) in (2 * DELTAS_MAX + 3..).zip(&unfolded) {
                store.append_log(&collection, &log, seq, &JsonText::of(entry).unwrap()).await.unwrap();
            }
            let (whole, _, whole_trace) = read(store.as_ref(), "looprun-1").await;
            assert_eq!(folded.state, whole.state, "{name}");
            assert_eq!(folded.state, written.state, "{name}");
            assert_eq!(trace, whole_trace, "{name}");
            assert_eq!(trace.len(), 2 * DELTAS_MAX as usize + 7, "{name}");
            assert_eq!(trace.last().unwrap().id, format!("trace-{}", trace.len()), "{name}");
        }
    }

    /// Deltas are appended without an fdatasync: a machine's crash may leave the file with a
    /// stretch the disk never got. The run reads as of the deltas before it (the steps after
    /// them are replayable, and run again), not as an error.
    #[tokio::test]
    async fn deltas_a_machine_crash_never_wrote_end_the_run_at_the_ones_before() {
        let dir = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store: Arc<dyn RecordStore> = Arc::new(FileStore::open(&dir.path().join("file"), clock).await.unwrap());
        let (_, after_three, _) = three_delta_steps(&store, "looprun-5").await;
        let path = dir.path().join("file/records/loop_deltas/looprun-5.000000000001.jsonl");
        let lines = std::fs::read(&path).unwrap();
        let second_end = lines.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0;
        let mut crashed = lines[..=second_end].to_vec();
        crashed.extend(std::iter::repeat_n(0u8, lines.len() - second_end - 2));
        crashed.push(b'\n');
        std::fs::write(&path, crashed).unwrap();

        let (read_back, _, trace) = read(store.as_ref(), "looprun-5").await;
        assert_eq!(read_back.state.executed, 2, "as of the second step");
        assert_eq!(read_back.state.frontier, ["s2"], "the third runs again");
        assert!(read_back.state.context.get("r2").is_none() && read_back.state.context["r1"] == json!(1));
        assert_eq!(trace.len(), 2);
        assert_eq!(after_three.state.executed, 3, "all three were read before the crash");
    }

    /// Deltas written before their trace was stored as an array held its text as a string:
    /// a run stopped then still resumes with every step's trace.
    #[tokio::test]
    async fn deltas_holding_their_trace_as_text_are_read() {
        let dir = tempfile::tempdir().unwrap();
        for (name, store) in stores(dir.path()).await {
            let (_, current, trace) = three_delta_steps(&store, "looprun-3").await;
            let (collection, log) = delta_log("looprun-3", 1, true);
            let entries = store.read_log(&collection, &log).await.unwrap();
            assert!(entries.iter().all(|e| e["trace"].is_array()), "{name}: written as an array");
            store.clear_log(&collection, &log).await.unwrap();
            for (seq, mut entry) in (1..).zip(entries) {
                entry["trace"] = Value::String(entry["trace"].to_string());
                store.append_log(&collection, &log, seq, &JsonText::of(&entry).unwrap()).await.unwrap();
            }
            let (old, _, old_trace) = read(store.as_ref(), "looprun-3").await;
            assert_eq!(old.state, current.state, "{name}");
            assert_eq!((old_trace.len(), &old_trace), (3, &trace), "{name}");
        }
    }

    /// A run stopped by a version that kept its deltas in a collection of its own (its record
    /// without `shared`) resumes from them.
    #[tokio::test]
    async fn deltas_kept_where_runs_written_before_kept_them_are_read() {
        let dir = tempfile::tempdir().unwrap();
        for (name, store) in stores(dir.path()).await {
            let (written, current, trace) = three_delta_steps(&store, "looprun-4").await;
            assert_eq!(current.state, written.state, "{name}");
            let ((shared, log), (former, former_log)) =
                (delta_log("looprun-4", 1, true), delta_log("looprun-4", 1, false));
            assert_eq!((former.as_str(), former_log.as_str()), ("loop_deltas.looprun-4", "000000000001"));
            for (seq, entry) in (1..).zip(store.read_log(&shared, &log).await.unwrap()) {
                store.append_log(&former, &former_log, seq, &JsonText::of(&entry).unwrap()).await.unwrap();
            }
            store.clear_log(&shared, &log).await.unwrap();
            let mut stored = store.get_record(LOOP_RUNS, "looprun-4").await.unwrap().unwrap();
            stored.value["deltas"].as_object_mut().unwrap().remove("shared");
            store.put_record(LOOP_RUNS, "looprun-4", stored.value, Some(stored.revision)).await.unwrap();
            let (old, _, old_trace) = read(store.as_ref(), "looprun-4").await;
            assert_eq!(old.state, written.state, "{name}: the deltas were applied");
            assert_eq!(old_trace, trace, "{name}");
        }
    }

    #[tokio::test]
    async fn a_writer_that_lost_the_run_has_its_deltas_ignored_and_is_fenced() {
        let dir = tempfile::tempdir().unwrap();
        for (name, store) in stores(dir.path()).await {
            let (clock, sink) = (|| 0, |_: &TraceEvent| {});
            let tracer = Tracer::new("flow", &clock, &sink);
            let stale = writer(&store, "looprun-2", (0, 0), "a");
            let mut written = record("looprun-2");
            stale.save(written.clone(), &tracer).await.unwrap();
            steps(&stale, &tracer, &mut written, 0, 3).await;

            // Another server takes the run over from what is stored, deltas applied.
            let (mut taken, revision, trace) = read(store.as_ref(), "looprun-2").await;
            assert_eq!(taken.state, written.state, "{name}: the takeover starts after step 3");
            let other = writer(&store, "looprun-2", (revision, taken.trace_flushed), "b");
            let other_tracer = Tracer::new("flow", &clock, &sink);
            other_tracer.continue_after(trace);
            taken.trace = Vec::new();
            other.save(taken.clone(), &other_tracer).await.unwrap();

            // The former writer, unaware, appends the checkpoint of a step it ran: stored, not applied.
            steps(&stale, &tracer, &mut written, 3, 4).await;
            let (after, _, _) = read(store.as_ref(), "looprun-2").await;
            assert_eq!(after.state, taken.state, "{name}: the stale writer's delta is ignored");
            for refused in [stale.hold().await, stale.save(written.clone(), &tracer).await] {
                assert_eq!(refused.unwrap_err().code(), "lease_lost", "{name}");
            }

            // The new writer's own deltas continue the record.
            steps(&other, &other_tracer, &mut taken, 3, 5).await;
            let (after, _, trace) = read(store.as_ref(), "looprun-2").await;
            assert_eq!(after.state, taken.state, "{name}");
            assert_eq!(after.state.context["r4"], json!(4), "{name}");
            assert_eq!(trace.len(), 5, "{name}");
            assert!(other.hold().await.is_ok(), "{name}: the new writer holds the run");
        }
    }
}
