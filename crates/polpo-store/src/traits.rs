//! The store interfaces the engine and server code against. Object-safe (`Arc<dyn …>`) so the
//! backend is chosen at run time from `settings.storage`.

use std::ops::RangeInclusive;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::StoreError;
use crate::json_text::JsonText;
use crate::model::{
    Checkpoint, Effect, EffectClaim, ImportOutcome, Lease, MessagesAppended, NewMessage, NewRun, NewRunEvent,
    NewSession, Record, Run, RunEvent, RunFilter, RunStatus, Session, SessionFilter, SessionPatch, StoredMessage,
};
use crate::page::{Page, PageRequest};
use crate::work::{AgentLimits, MissionFilter, StoredMission, StoredTask, TaskFilter};
use polpo_core::tasks::{Mission, Task};

/// Sessions and their messages.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Create a session (revision 1, no messages). A taken id is a `conflict`.
    async fn create_session(&self, new: NewSession) -> Result<Session, StoreError>;

    /// Create a session with its first messages in one atomic, durable write — what a create
    /// then an append would leave (revision 2, the title from the first user message), for the
    /// price of one write: a new chat's first turn stores this way. No messages: a plain
    /// create. A taken id is a `conflict`, and nothing is written.
    async fn create_session_with_messages(
        &self,
        new: NewSession,
        messages: Vec<NewMessage>,
    ) -> Result<MessagesAppended, StoreError>;

    /// The session, or `None`.
    async fn get_session(&self, id: &str) -> Result<Option<Session>, StoreError>;

    /// Sessions newest first (by creation time, then id), filtered, one page at a time.
    async fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>, StoreError>;

    /// Change title or metadata. `expected_revision` guards against a concurrent writer.
    async fn update_session(
        &self,
        id: &str,
        patch: SessionPatch,
        expected_revision: Option<u64>,
    ) -> Result<Session, StoreError>;

    /// Append messages in order, atomically (all or none). Sets the title from the first user
    /// message when the session has none. `expected_revision` guards against a concurrent writer.
    async fn append_messages(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        expected_revision: Option<u64>,
    ) -> Result<MessagesAppended, StoreError> {
        self.append_messages_fenced(session_id, messages, expected_revision, None).await
    }

    /// [`SessionStore::append_messages`] as the holder of run lease `fence` (`lease_lost`,
    /// nothing appended, once the run was granted again since; checked with the write): how a
    /// durable run stores its turn, so a server that lost the run while it was paused cannot
    /// add its late answer to the conversation the run's new holder continues.
    async fn append_messages_fenced(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        expected_revision: Option<u64>,
        fence: Option<&Lease>,
    ) -> Result<MessagesAppended, StoreError>;

    /// Messages oldest first, one page at a time.
    async fn list_messages(&self, session_id: &str, page: &PageRequest) -> Result<Page<StoredMessage>, StoreError>;

    /// The last `limit` (≤ 1000) messages, oldest first: the tail a model context is built from.
    async fn recent_messages(&self, session_id: &str, limit: u32) -> Result<Vec<StoredMessage>, StoreError>;

    /// Delete a session and its messages. `false` when it did not exist.
    async fn delete_session(&self, id: &str) -> Result<bool, StoreError>;

    /// Write a session and all its messages verbatim (ids, times, revision), atomically: the
    /// target side of `polpo db copy`. An identical session already there is `AlreadyPresent`;
    /// a different one is a `conflict`.
    async fn import_session(&self, session: &Session, messages: &[StoredMessage]) -> Result<ImportOutcome, StoreError>;
}

/// Runs, their event journal, checkpoints and execution leases.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Create a run in status `running`. A taken id is a `conflict`.
    async fn create_run(&self, new: NewRun) -> Result<Run, StoreError>;

    /// Create a run in status `running` with its first lease (generation 1) held by `owner`
    /// for `ttl`, in one atomic write: a concurrent [`RunStore::claim_next_run`] (another
    /// server's takeover pass) sees the run only together with its live lease, so the starter
    /// never loses its new run to it. A taken id is a `conflict`.
    async fn create_leased_run(&self, new: NewRun, owner: &str, ttl: Duration) -> Result<(Run, Lease), StoreError>;

    /// The run, or `None`.
    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError>;

    /// Runs newest first (by creation time, then id), filtered, one page at a time.
    async fn list_runs(&self, filter: &RunFilter, page: &PageRequest) -> Result<Page<Run>, StoreError>;

    /// Change the status (terminal states are final: `invalid_transition`). `error` replaces the
    /// stored error. `expected_revision` guards against a concurrent writer.
    async fn update_run_status(
        &self,
        id: &str,
        status: RunStatus,
        error: Option<String>,
        expected_revision: Option<u64>,
    ) -> Result<Run, StoreError> {
        self.update_run_status_fenced(id, None, status, error, expected_revision).await
    }

    /// [`RunStore::update_run_status`] as the holder of `fence`: refused with `lease_lost`, in
    /// the same transaction as the write, once the run's lease was granted again since.
    async fn update_run_status_fenced(
        &self,
        id: &str,
        fence: Option<&Lease>,
        status: RunStatus,
        error: Option<String>,
        expected_revision: Option<u64>,
    ) -> Result<Run, StoreError>;

    /// Append 1–256 events to the run's journal atomically (all or none), numbered 1, 2, 3 …
    /// with no gaps even under concurrent appends; returns the sequence numbers they got.
    /// Durable when this returns. Batching amortises the fsync/commit over many events
    /// (streamed output deltas).
    async fn append_events(&self, run_id: &str, events: Vec<NewRunEvent>) -> Result<RangeInclusive<u64>, StoreError> {
        self.append_events_fenced(run_id, None, events).await
    }

    /// [`RunStore::append_events`] as the holder of `fence` (`lease_lost` once the run's lease
    /// was granted again since, checked in the statement that numbers the events): how a
    /// run's executor writes, so one that lost its lease while paused cannot add to the
    /// journal the new holder writes.
    async fn append_events_fenced(
        &self,
        run_id: &str,
        fence: Option<&Lease>,
        events: Vec<NewRunEvent>,
    ) -> Result<RangeInclusive<u64>, StoreError>;

    /// Append one event; returns its sequence number. See [`RunStore::append_events`].
    async fn append_event(&self, run_id: &str, event_type: &str, data: Value) -> Result<u64, StoreError> {
        Ok(*self.append_events(run_id, vec![NewRunEvent::new(event_type, data)]).await?.end())
    }

    /// Up to `limit` (≤ 1000) events with `seq > after_seq`, in order.
    async fn events_after(&self, run_id: &str, after_seq: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError>;

    /// Store the run's resumable state as of journal position `seq`. A checkpoint older than
    /// the stored one is a `conflict`.
    async fn put_checkpoint(&self, run_id: &str, seq: u64, state: Value) -> Result<Checkpoint, StoreError> {
        self.put_checkpoint_fenced(run_id, None, seq, state).await
    }

    /// [`RunStore::put_checkpoint`] as the holder of `fence` (see
    /// [`RunStore::append_events_fenced`]).
    async fn put_checkpoint_fenced(
        &self,
        run_id: &str,
        fence: Option<&Lease>,
        seq: u64,
        state: Value,
    ) -> Result<Checkpoint, StoreError>;

    /// The newest checkpoint, or `None`.
    async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError>;

    /// Take the run's lease for `ttl`: granted when free, expired, or already ours
    /// (`lease_held` otherwise). Every grant gets the next fencing generation.
    async fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError>;

    /// Extend our lease by `ttl` from now, keeping its generation (`lease_lost` when someone
    /// else holds it now).
    async fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError>;

    /// Give the lease up. Releasing a lease we do not hold does nothing.
    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError>;

    /// Claim the oldest `running` run that nobody holds a live lease on (never leased, or its
    /// owner stopped renewing): the work queue of several workers sharing one store. `None`
    /// when there is nothing to claim. Two callers never get the same run while a lease lives.
    async fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError>;

    /// Write a run, all its events and its checkpoint verbatim, atomically (see
    /// [`SessionStore::import_session`]). Leases are not copied: they belong to live processes.
    async fn import_run(
        &self,
        run: &Run,
        events: &[RunEvent],
        checkpoint: Option<&Checkpoint>,
    ) -> Result<ImportOutcome, StoreError>;

    /// Leases that have expired on runs still `running` or `paused`: the runs whose owner
    /// crashed, to be claimed and resumed. Oldest expiry first, at most `limit`.
    async fn expired_runs(&self, limit: u32) -> Result<Vec<Lease>, StoreError>;

    /// The leases, expired or not, on runs still `running`: which workers hold (or held, until
    /// another takes over) the runs in flight, for `GET /api/v1/workers`. Newest expiry first,
    /// at most `limit`.
    async fn running_leases(&self, limit: u32) -> Result<Vec<Lease>, StoreError>;
}

/// Revisioned JSON records by collection, for state whose typed shape lives in the engine
/// (tasks, missions, approvals, schedules, loop runs, memory items …).
#[async_trait]
pub trait RecordStore: Send + Sync {
    /// Write a record. `expected_revision`: `None` writes unconditionally, `Some(0)` only
    /// creates (a `conflict` if it exists), `Some(n)` only replaces revision `n`.
    async fn put_record(
        &self,
        collection: &str,
        id: &str,
        value: Value,
        expected_revision: Option<u64>,
    ) -> Result<Record, StoreError>;

    /// [`RecordStore::put_record`] for a writer that needs only the new revision back (a loop
    /// run's last write, whose trace and context are large): a store that keeps its records in
    /// memory keeps this one as it is, without a copy to hand back.
    async fn put_record_revision(
        &self,
        collection: &str,
        id: &str,
        value: Value,
        expected_revision: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.put_record(collection, id, value, expected_revision).await.map(|record| record.revision)
    }

    /// [`RecordStore::put_record_revision`] for a writer that holds the value as JSON text
    /// already (a loop run's checkpoint, whose trace events were written as JSON when they
    /// happened): the SQL stores bind the text as it is, the file store writes it as it is and
    /// keeps it, reading it into a tree only when the record is read. The default reads the
    /// text into a [`Value`] and writes that.
    async fn put_record_text(
        &self,
        collection: &str,
        id: &str,
        text: JsonText,
        expected_revision: Option<u64>,
    ) -> Result<u64, StoreError> {
        let value = serde_json::from_str(text.as_str()).map_err(|e| StoreError::Invalid(e.to_string()))?;
        self.put_record_revision(collection, id, value, expected_revision).await
    }

    /// The record, or `None`.
    async fn get_record(&self, collection: &str, id: &str) -> Result<Option<Record>, StoreError>;

    /// A collection's records newest first (by creation time, then id), one page at a time.
    async fn list_records(&self, collection: &str, page: &PageRequest) -> Result<Page<Record>, StoreError>;

    /// Delete a record (only at `expected_revision` when given). `false` when it did not exist.
    async fn delete_record(
        &self,
        collection: &str,
        id: &str,
        expected_revision: Option<u64>,
    ) -> Result<bool, StoreError>;

    /// The collections that hold at least one record, sorted.
    async fn collections(&self) -> Result<Vec<String>, StoreError>;

    /// Write a record verbatim (see [`SessionStore::import_session`]).
    async fn import_record(&self, record: &Record) -> Result<ImportOutcome, StoreError>;

    /// Append entry number `seq` to log `log` of `collection`, durable once it returns. A log
    /// is for state written at a high rate (a loop run's checkpoint after every step), where
    /// rewriting a whole record each time costs far more than an append. Its one writer
    /// numbers the entries 1, 2, … in order; a crash loses at most an append that had not
    /// returned (a torn last entry is ignored when read).
    async fn append_log(&self, collection: &str, log: &str, seq: u64, entry: &JsonText) -> Result<(), StoreError>;

    /// [`RecordStore::append_log`] for an entry whose loss a machine's crash may cost but a
    /// process's must not: one that only saves doing again what may be done again (a loop
    /// run's checkpoint before a replayable step). Once it returns, the entry outlives this
    /// process (a SIGKILL, a panic); a crash of the machine may lose the entries appended
    /// since the log's last durable write, and a reader then gets the entries before them.
    /// The file store writes the line on the caller's thread, without an fdatasync (no
    /// hand-over to a blocking thread, which costs more than the write on a fast disk); the
    /// others append as [`RecordStore::append_log`] does. A log is meant to be appended one
    /// way: an `append_log` after unsynced ones makes their lines durable with its own, but
    /// on the file store not the log file's name, which only a synced append creating the
    /// file makes durable.
    async fn append_log_unsynced(
        &self,
        collection: &str,
        log: &str,
        seq: u64,
        entry: &JsonText,
    ) -> Result<(), StoreError> {
        self.append_log(collection, log, seq, entry).await
    }

    /// Log `log`'s entries in the order appended (none when it does not exist), up to the
    /// first a crash left unreadable (a torn line, or one appended unsynced that the disk
    /// never got).
    async fn read_log(&self, collection: &str, log: &str) -> Result<Vec<Value>, StoreError>;

    /// Empty log `log` (nothing to do when it does not exist), so it stops growing once its
    /// entries are held elsewhere. Not durable by itself: after a crash, entries cleared since
    /// the last append may be read again, so readers tell entries apart by their content.
    async fn clear_log(&self, collection: &str, log: &str) -> Result<(), StoreError>;
}

/// The effect ledger: a write tool's effect is performed at most once per idempotency key.
#[async_trait]
pub trait EffectLedger: Send + Sync {
    /// Record the intent to perform the effect `key`, before performing it. Only `Fresh` means
    /// "go ahead".
    async fn record_effect_intent(&self, key: &str) -> Result<EffectClaim, StoreError> {
        self.record_effect_intent_fenced(key, None).await
    }

    /// [`EffectLedger::record_effect_intent`] as the holder of the run lease `fence`
    /// (`lease_lost`, nothing recorded, once the run's lease was granted again since; checked
    /// in the transaction that records the intent): an executor that lost its run cannot
    /// start an effect.
    async fn record_effect_intent_fenced(&self, key: &str, fence: Option<&Lease>) -> Result<EffectClaim, StoreError>;

    /// Record the effect's outcome. Recording the same outcome again is fine; a different one
    /// is a `conflict`; a key without intent is `not_found`.
    async fn record_effect_result(&self, key: &str, result: Value) -> Result<Effect, StoreError> {
        self.record_effect_result_fenced(key, None, result).await
    }

    /// [`EffectLedger::record_effect_result`] as the holder of the run lease `fence`
    /// (`lease_lost` once it was granted again since: the effect stays unconfirmed for the
    /// new holder to reconcile).
    async fn record_effect_result_fenced(
        &self,
        key: &str,
        fence: Option<&Lease>,
        result: Value,
    ) -> Result<Effect, StoreError>;

    /// The recorded effect, or `None`.
    async fn get_effect(&self, key: &str) -> Result<Option<Effect>, StoreError>;

    /// All effects by key, one page at a time.
    async fn list_effects(&self, page: &PageRequest) -> Result<Page<Effect>, StoreError>;

    /// Write an effect verbatim (see [`SessionStore::import_session`]).
    async fn import_effect(&self, effect: &Effect) -> Result<ImportOutcome, StoreError>;
}

/// Tasks (inventory §5.1–5.2): created once with their dependencies, moved only along the
/// task table by compare-and-set on the revision, and handed to workers by `claim_ready`.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Store new tasks, all or none, in one step (a mission's plan): an empty id gets a fresh
    /// one (give ids to link tasks of one batch), times are now, revision 1. Each starts
    /// `draft` or `pending`; each `dependsOn` id must be in the batch or stored, without a
    /// cycle, and each `missionId` must exist (`invalid_input`); a title shared with an
    /// unfinished task or a taken id is a `conflict`. At most 256 at a time.
    async fn create_tasks(&self, tasks: Vec<Task>) -> Result<Vec<StoredTask>, StoreError>;

    /// Store one new task (see [`TaskStore::create_tasks`]).
    async fn create_task(&self, task: Task) -> Result<StoredTask, StoreError> {
        let mut created = self.create_tasks(vec![task]).await?;
        created.pop().ok_or_else(|| StoreError::Invalid("no task was created".into()))
    }

    /// The task, or `None`.
    async fn get_task(&self, id: &str) -> Result<Option<StoredTask>, StoreError>;

    /// Tasks newest first (by creation time, then id), filtered, one page at a time.
    async fn list_tasks(&self, filter: &TaskFilter, page: &PageRequest) -> Result<Page<StoredTask>, StoreError>;

    /// Replace the task with `task` (usually `polpo_core::tasks::transition`'s output) only if
    /// it is still at `expected_revision` (`conflict` otherwise: two workers cannot both move
    /// it). A status change outside the task table is `invalid_transition`; id, `dependsOn`
    /// and `missionId` cannot change; `updatedAt` becomes now.
    async fn update_task(&self, task: Task, expected_revision: u64) -> Result<StoredTask, StoreError>;

    /// Claim for `worker`, for `lease`, up to `limit` (1–100) ready tasks: `pending`, every
    /// dependency `done`, its mission (if any) `active`, and no live claim by anyone. Each
    /// claimed task's revision moves, so a worker that read it before cannot move it. Two
    /// workers never get the same task while a claim lives. Highest priority first, then
    /// oldest. A task of an agent named in `agents` is passed over while that agent's tasks
    /// already claimed or running (by any worker: counted in the claim itself) fill its limit.
    /// Costs the tasks it looks at in claim order, not every stored task.
    async fn claim_ready(
        &self,
        worker: &str,
        lease: Duration,
        limit: u32,
        agents: &AgentLimits,
    ) -> Result<Vec<StoredTask>, StoreError>;

    /// Delete task `id` for good and return it: `not_found` when there is none; a `conflict`
    /// when it is being worked on (assigned, running, in review or under a live claim: kill
    /// it first) or other tasks depend on it (delete them first).
    async fn delete_task(&self, id: &str) -> Result<StoredTask, StoreError>;

    /// Hold task `id` for `worker` until `lease` from now, whatever its status: renews the
    /// worker's own claim (the revision stays, so the holder's next update still applies), or
    /// takes a lapsed or absent one (the revision moves, so a previous holder that comes back
    /// cannot write). A live claim of another worker is a `conflict`. How a worker keeps a
    /// running task, and how another takes over a task whose worker died.
    async fn hold_task(&self, id: &str, worker: &str, lease: Duration) -> Result<StoredTask, StoreError>;

    /// Give up `worker`'s claim on task `id`, so another worker may take it at once. Nothing
    /// happens when `worker` does not hold it.
    async fn release_task(&self, id: &str, worker: &str) -> Result<(), StoreError>;

    /// Write a task verbatim (revision, claim, times), the target side of `polpo db copy`:
    /// its dependencies and mission must already be there. An identical task already there
    /// is `AlreadyPresent`; a different one is a `conflict`.
    async fn import_task(&self, task: &StoredTask) -> Result<ImportOutcome, StoreError>;
}

/// Missions (inventory §5.3), moved only along the mission table by compare-and-set.
#[async_trait]
pub trait MissionStore: Send + Sync {
    /// Store a new mission: an empty id gets a fresh one, times are now, revision 1. It
    /// starts `draft` or `active`; its delays must parse (`invalid_input`); a taken id or
    /// name is a `conflict`.
    async fn create_mission(&self, mission: Mission) -> Result<StoredMission, StoreError>;

    /// The mission, or `None`.
    async fn get_mission(&self, id: &str) -> Result<Option<StoredMission>, StoreError>;

    /// Missions newest first (by creation time, then id), filtered, one page at a time.
    async fn list_missions(
        &self,
        filter: &MissionFilter,
        page: &PageRequest,
    ) -> Result<Page<StoredMission>, StoreError>;

    /// Replace the mission only if it is still at `expected_revision` (`conflict`); a status
    /// change outside the mission table is `invalid_transition`; `updatedAt` becomes now.
    async fn update_mission(&self, mission: Mission, expected_revision: u64) -> Result<StoredMission, StoreError>;

    /// Write a mission verbatim (see [`TaskStore::import_task`]).
    async fn import_mission(&self, mission: &StoredMission) -> Result<ImportOutcome, StoreError>;
}
