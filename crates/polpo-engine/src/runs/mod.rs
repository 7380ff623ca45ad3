//! Durable runs: a chat turn executed as a Run that outlives its client.
//!
//! [`RunManager::start`] checks the request like plain chat, creates the run in the store,
//! takes its lease (renewed while it works; owner = this process) and executes it in its own
//! task, so a client that disconnects never stops it — only [`RunManager::abort`] does.
//! Everything it does goes to the run journal with gap-free sequence numbers
//! (`run.accepted`, `run.started`, `output.text.delta`, `tool.started`, `tool.completed`,
//! `run.completed`, `run.failed` …), and [`RunManager::events`] replays the journal after
//! any position and then follows it live, through a pause and its reconciliation, until the
//! run completes, fails or is cancelled.
//!
//! A checkpoint is written after each model turn and tool result; `write` tools go through
//! the effect ledger. [`RunManager::recover`] takes over runs whose owner stopped renewing
//! its lease (a crash) and resumes them from their last checkpoint. [`RunManager::shutdown`]
//! hands this process's runs over on a graceful stop: checkpointed, leases released, taken
//! over by the next server at once.

mod approval;
mod commands;
mod delivery;
mod effects;
mod inline;
pub mod spec;
mod state;
mod writer;

pub use delivery::{Finished, Invoked, Progress, RUN_HANDED_OVER};
pub use effects::effect_key;
pub use spec::{CheckpointState, RunSpec, SteerMessage, SteerMode};
pub use state::Queued;

use crate::error::EngineError;
use crate::events::RunEvent;
use crate::events::journal::{Accepted, EventKind, JournalEvent, Owner, Paused, Reason, Reconciled, Released};
use crate::request::{ChatError, ChatInput, Failure};
use crate::runtime::{PreparedChat, Runtime};
use futures::Stream;
use polpo_core::message::Role;
use polpo_store::{Lease, NewRun, Run, RunEvent as StoredEvent, RunStatus, Signal, StoreError};
use polpo_tools::Tool;
use serde_json::json;
use state::RunState;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use writer::Journal;

/// Environment variable that sets the lease time-to-live in milliseconds.
pub const LEASE_TTL_ENV: &str = "POLPO_RUN_LEASE_MS";

/// How often a follower of a paused run checks whether it was reconciled (the reconciling
/// process may be another one).
const PAUSED_POLL: Duration = Duration::from_secs(1);
/// How many lapsed leases a recovery pass looks through for this process's own.
const RENEW_BATCH: u32 = 1000;

/// How runs hold their leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOptions {
    /// How long a lease lives without renewal: after a crash, the time until another
    /// process (or the restarted one) takes the run over. Renewed every third of it.
    pub lease_ttl: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self { lease_ttl: Duration::from_secs(15) }
    }
}

impl RunOptions {
    /// Defaults, with the lease TTL from [`LEASE_TTL_ENV`] when set.
    pub fn from_env() -> Self {
        let ttl = std::env::var(LEASE_TTL_ENV).ok().and_then(|v| v.parse::<u64>().ok()).filter(|ms| *ms >= 100);
        ttl.map_or_else(Self::default, |ms| Self { lease_ttl: Duration::from_millis(ms) })
    }
}

/// Why a run operation failed, each with a stable code.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No run with that id.
    #[error("run_not_found: no run `{0}`")]
    NotFound(String),
    /// The run is finished or paused (or, on a store only one server uses, executes in
    /// another process), so it cannot take steering or aborts.
    #[error("run_not_active: run `{0}` is not executing in this server ({1})")]
    NotActive(String, String),
    /// The request is malformed.
    #[error("invalid_request: {0}")]
    Invalid(String),
    /// Preparing or resuming the chat failed.
    #[error("{0}")]
    Chat(#[from] ChatError),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl RunError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "run_not_found",
            Self::NotActive(..) => "run_not_active",
            Self::Invalid(_) => "invalid_request",
            Self::Chat(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}

/// A person's (or hook's) decision about an effect a crash left unconfirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconcile {
    /// The effect happened; `result` is the tool result the model sees (a default sentence
    /// when `None`).
    Applied {
        /// Model-visible result.
        result: Option<String>,
    },
    /// The effect did not happen: the resumed run executes the call now, once, under the same
    /// effect key (policy, hooks and the argument schema are checked again, as for any call),
    /// so the run goes on as if the crash had not interrupted it.
    NotApplied,
    /// Do not run it: the model is told the call was not run and may decide otherwise.
    Skip,
}

impl Reconcile {
    /// The outcome's stable name (`applied`, `not_applied`, `skip`), as journalled.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::Applied { .. } => "applied",
            Self::NotApplied => "not_applied",
            Self::Skip => "skip",
        }
    }
}

/// A run that was accepted and is executing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedRun {
    /// The run id (`x-polpo-run-id`).
    pub run_id: String,
    /// The session the turn is stored in.
    pub session_id: String,
}

struct Active {
    cancel: CancellationToken,
    state: Arc<RunState>,
}

/// Starts, follows, steers, aborts and recovers durable runs. One per server process.
pub struct RunManager {
    runtime: Arc<Runtime>,
    owner: String,
    options: RunOptions,
    active: Mutex<HashMap<String, Arc<Active>>>,
    /// Runs created here whose lease is not taken yet: recovery must not resume them.
    starting: Mutex<HashSet<String>>,
    /// Run id → the effect key a person reconciled `not_applied`, until the run is launched.
    reruns: Mutex<HashMap<String, String>>,
    /// Runs ending here whose last events are journaled (and seen by followers) but whose
    /// status is not stored yet; the sender turns `true` once it is.
    settling: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Inline (not durable) chats running now, steerable and abortable by run id.
    inline: Mutex<HashMap<String, Arc<inline::InlineRun>>>,
    /// Cancelled by [`RunManager::shutdown`]: runs stop here and are left to the next owner.
    closing: CancellationToken,
    /// The tasks executing runs, so a shutdown can wait until every lease is released.
    tasks: TaskTracker,
}

impl RunManager {
    /// A manager for `runtime`'s runs; its lease owner id is unique to this process.
    pub fn new(runtime: Arc<Runtime>, options: RunOptions) -> Arc<Self> {
        let owner = format!("polpo-{}-{}", std::process::id(), runtime.ids().next_id());
        Self::with_owner(runtime, options, owner)
    }

    /// A manager whose leases carry `owner` (`polpo serve --worker-id`), so an operator
    /// running several servers can tell which one holds a run. Two live processes must not
    /// share an owner: each would take the other's runs for its own.
    pub fn with_owner(runtime: Arc<Runtime>, options: RunOptions, owner: String) -> Arc<Self> {
        Arc::new(Self {
            runtime,
            owner,
            options,
            active: Mutex::default(),
            starting: Mutex::default(),
            reruns: Mutex::default(),
            settling: Mutex::default(),
            inline: Mutex::default(),
            closing: CancellationToken::new(),
            tasks: TaskTracker::new(),
        })
    }

    /// The runtime the runs execute in.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The lease owner id of this process.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How this manager's runs hold their leases; loop runs hold theirs the same way.
    pub fn options(&self) -> RunOptions {
        self.options
    }

    fn active(&self) -> MutexGuard<'_, HashMap<String, Arc<Active>>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn inline(&self) -> MutexGuard<'_, HashMap<String, Arc<inline::InlineRun>>> {
        self.inline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The owner of the session of inline run `id` while it executes here (`Some(None)`: a
    /// session without an owner); `None` when no inline run has that id.
    pub fn inline_owner(&self, id: &str) -> Option<Option<String>> {
        self.inline().get(id).map(|run| run.owner.clone())
    }

    fn settling_runs(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<bool>>> {
        self.settling.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait while run `id` is ending in this process: its last event (`run.paused` …) is
    /// already journaled and streamed, its status not stored yet. Bounded by the lease TTL.
    async fn until_settled(&self, id: &str) {
        let Some(mut settled) = self.settling_runs().get(id).map(watch::Sender::subscribe) else { return };
        let _ = tokio::time::timeout(self.options.lease_ttl, settled.wait_for(|done| *done)).await;
    }

    fn starting(&self) -> MutexGuard<'_, HashSet<String>> {
        self.starting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many durable runs execute here now, each holding its lease (health reports it).
    pub fn leases_held(&self) -> usize {
        self.active().len()
    }

    /// True while run `id` executes in this process.
    pub fn is_active(&self, id: &str) -> bool {
        self.active().contains_key(id)
    }

    /// Check `input` like plain chat, create its run, and execute it in its own task.
    /// Returns once the run, its lease and `run.accepted` (which carries the request) are
    /// durable.
    pub async fn start(self: &Arc<Self>, input: ChatInput) -> Result<StartedRun, ChatError> {
        let cancel = CancellationToken::new();
        let mut spec = RunSpec::from_input(&input);
        let prepared = self.runtime.prepare(input, &cancel).await?;
        spec.session_id = prepared.session().id.clone();
        spec.messages = prepared.new_messages().to_vec();
        spec.model_profile = prepared.route().and_then(|r| r.profile.clone());
        let run_id = prepared.run_id().to_owned();
        let store = self.runtime.store().clone();
        self.starting().insert(run_id.clone());
        let created = async {
            let new = NewRun {
                id: Some(run_id.clone()),
                agent: spec.agent.clone(),
                session_id: Some(spec.session_id.clone()),
            };
            // Created with its lease in one write: another server's takeover pass never sees
            // the new run unleased (it would take it, and this start fail `lease_held`).
            let (_, lease) = store.runs.create_leased_run(new, &self.owner, self.options.lease_ttl).await?;
            // The request travels in `run.accepted`, so a run that crashes before its first
            // checkpoint can still be resumed, without a checkpoint write before the response.
            let accepted = JournalEvent::Accepted(Box::new(Accepted {
                agent: spec.agent.clone(),
                session_id: spec.session_id.clone(),
                spec: spec.clone(),
            }));
            let seq = *store.runs.append_events_fenced(&run_id, Some(&lease), vec![accepted.to_stored()]).await?.end();
            Ok::<_, StoreError>((seq, CheckpointState { spec, ..Default::default() }, lease))
        }
        .await;
        self.starting().remove(&run_id);
        let (seq, state, lease) = created?;
        let session_id = prepared.session().id.clone();
        self.launch(prepared, state, seq, false, lease);
        Ok(StartedRun { run_id, session_id })
    }

    /// Wrap the write tools, register the run as active and execute it in its own task, every
    /// write fenced by `lease`: once another process was granted the run, this one stops.
    fn launch(
        self: &Arc<Self>,
        prepared: PreparedChat,
        checkpoint: CheckpointState,
        last_seq: u64,
        resumed: bool,
        lease: Lease,
    ) {
        let store = self.runtime.store().clone();
        let run_id = prepared.run_id().to_owned();
        let lost = CancellationToken::new();
        let cell: Arc<std::sync::OnceLock<std::sync::Weak<RunState>>> = Arc::default();
        let snapshot_cell = cell.clone();
        let snapshot: writer::Snapshot = Arc::new(move || {
            snapshot_cell.get().and_then(std::sync::Weak::upgrade).map(|s| s.snapshot()).unwrap_or_default()
        });
        let journal = Journal::start(store.clone(), run_id.clone(), last_seq, snapshot, lease.clone(), lost.clone());
        let state = Arc::new(RunState::new(checkpoint, journal));
        let _ = cell.set(Arc::downgrade(&state));
        if let Some(key) = self.reruns.lock().unwrap_or_else(PoisonError::into_inner).remove(&run_id) {
            state.allow_rerun(key);
        }

        let tools = prepared.tools();
        let cancel = prepared.cancel().clone();
        let wrapped: Vec<Arc<dyn Tool>> = tools
            .specs()
            .filter_map(|s| tools.get(&s.name).cloned())
            .map(|tool| -> Arc<dyn Tool> {
                if tool.effect().is_replayable() {
                    tool
                } else {
                    Arc::new(effects::Ledgered {
                        inner: tool,
                        run_id: run_id.clone(),
                        state: state.clone(),
                        store: store.clone(),
                        cancel: cancel.clone(),
                        fence: lease.clone(),
                        lost: lost.clone(),
                    })
                }
            })
            .collect();
        let pausable = Arc::new(approval::PauseHere { state: state.clone(), cancel: cancel.clone() });
        let prepared =
            prepared.durable(wrapped, state.turns_used(), pausable, lease.clone()).controlled_by(state.clone());
        let active = Arc::new(Active { cancel: cancel.clone(), state: state.clone() });
        self.active().insert(run_id.clone(), active);
        // Launched during a shutdown (after it cancelled the active runs): hand it over at once.
        if self.closing.is_cancelled() {
            cancel.cancel();
        }
        // Commands sent from other servers before this one took the run.
        self.deliver_commands_later(&run_id);
        let manager = self.clone();
        // Boxed before it is spawned: a durable run's future is kilobytes (see `invoke`).
        self.tasks.spawn(Box::pin(async move { manager.drive(prepared, state, resumed, lease, lost).await }));
    }

    /// Execute a launched run to its end, renewing its lease, and record how it ended. `lost`
    /// is cancelled when the lease was lost (renewal refused, or a fenced write refused).
    async fn drive(
        self: Arc<Self>,
        prepared: PreparedChat,
        state: Arc<RunState>,
        resumed: bool,
        lease: Lease,
        lost: CancellationToken,
    ) {
        let store = self.runtime.store().clone();
        let run_id = prepared.run_id().to_owned();
        let cancel = prepared.cancel().clone();
        let renewal = tokio::spawn({
            let (store, run_id, owner, ttl, lost, cancel) = (
                store.clone(),
                run_id.clone(),
                self.owner.clone(),
                self.options.lease_ttl,
                lost.clone(),
                cancel.clone(),
            );
            async move {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    if let Err(e) = store.runs.renew_lease(&run_id, &owner, ttl).await
                        && e.code() == "lease_lost"
                    {
                        tracing::warn!(run = %run_id, "lost the run's lease to another worker; stopping here");
                        lost.cancel();
                        cancel.cancel();
                        return;
                    }
                }
            }
        });
        let journal = state.journal().clone();
        let owner = Owner { owner: self.owner.clone() };
        journal.event(if resumed { JournalEvent::Resumed(owner) } else { JournalEvent::Started(owner) });
        let sink = |event: RunEvent| {
            match &event {
                // Once the process is stopping, what follows is the cancellation's doing
                // (aborted tool results), not the run's: the next owner redoes it.
                RunEvent::MessageAppended { message } if !self.closing.is_cancelled() => state.on_message(message),
                RunEvent::ToolCalling { id, .. } => state.on_tool_calling(id),
                _ => {}
            }
            if let Some(entry) = JournalEvent::from_run_event(&event) {
                journal.event(entry);
            }
        };
        // A fenced write refused (another process was granted the run) stops it at once,
        // without waiting for the next renewal to find out.
        let run = prepared.run(&sink);
        tokio::pin!(run);
        let result = tokio::select! {
            result = &mut run => result,
            () = lost.cancelled() => {
                cancel.cancel();
                run.await
            }
        };
        state.close();
        renewal.abort();
        // The turn's messages refused by the fence: another process holds the run.
        if matches!(&result, Err(ChatError::Store(StoreError::LeaseLost { .. }))) {
            lost.cancel();
        }
        if lost.is_cancelled() {
            self.active().remove(&run_id);
            return;
        }
        if self.closing.is_cancelled()
            && state.paused().is_none()
            && matches!(result, Err(ChatError::Engine(EngineError::Aborted)))
        {
            // Stopped by the shutdown, not finished: the run stays `running`, checkpointed,
            // and its lease is given back so the next server resumes it without waiting.
            journal.event(JournalEvent::Released(Released { owner: self.owner.clone(), reason: "shutdown".into() }));
            journal.checkpoint();
            journal.flush().await;
            self.active().remove(&run_id);
            if let Err(e) = store.runs.release_lease(&run_id, &self.owner).await {
                tracing::warn!(run = %run_id, code = e.code(), "run lease could not be released; it expires on its own: {e}");
            }
            return;
        }
        // From here until the status is stored, followers may already see how the run ended:
        // a client that reconciles the pause it saw at once waits for the status here.
        let (settled, _) = watch::channel(false);
        self.settling_runs().insert(run_id.clone(), settled.clone());
        let (status, error) = match (&result, state.paused()) {
            (Err(ChatError::Engine(EngineError::Aborted)), Some(pause)) => {
                journal.event(JournalEvent::Paused(Paused { code: pause.code.to_owned(), detail: pause.data }));
                (RunStatus::Paused, Some(pause.code.to_owned()))
            }
            (Ok(out), _) => {
                journal.event(JournalEvent::Completed(out.answer()));
                (RunStatus::Completed, None)
            }
            (Err(ChatError::Engine(EngineError::Aborted)), None) => {
                journal.event(JournalEvent::Cancelled(Reason::default()));
                (RunStatus::Aborted, None)
            }
            (Err(e), _) => {
                journal.event(JournalEvent::Failed(Failure::from(e)));
                (RunStatus::Failed, Some(e.to_string()))
            }
        };
        journal.flush().await;
        // No longer steerable here from now on; the lease keeps other workers away until the
        // status is stored.
        self.active().remove(&run_id);
        if let Err(e) = store.runs.update_run_status_fenced(&run_id, Some(&lease), status, error, None).await {
            tracing::warn!(run = %run_id, code = e.code(), "run status could not be stored: {e}");
        }
        let _ = store.runs.release_lease(&run_id, &self.owner).await;
        settled.send_replace(true);
        self.settling_runs().remove(&run_id);
        // A reviewer may have decided while the run was pausing: it goes on at once.
        if let Some(pause) = state.paused() {
            self.resume_if_decided(&run_id, &pause).await;
        }
    }

    /// The run, or `None`.
    pub async fn get(&self, id: &str) -> Result<Option<Run>, StoreError> {
        self.runtime.store().runs.get_run(id).await
    }

    /// The journal of run `id` after sequence `after`, then live until the run's terminal
    /// event (completed, failed, cancelled): every event exactly once, in order. A paused run
    /// keeps its followers: after `run.paused` the stream waits (the caller sends keep-alives)
    /// and goes on with the run's reconciliation and the rest of it, so whoever watched the
    /// pause sees the run end. It ends early when this process stops
    /// ([`RunManager::shutdown`]): the client follows on with the next server. Followers of a
    /// run executing in this process wake on each journal write; others poll the store.
    pub fn events(
        self: &Arc<Self>,
        id: &str,
        after: u64,
    ) -> impl Stream<Item = Result<StoredEvent, StoreError>> + Send + 'static {
        struct Follow {
            manager: Arc<RunManager>,
            id: String,
            after: u64,
            buffer: VecDeque<StoredEvent>,
            done: bool,
            /// Wake-ups from every server (a store several servers share), subscribed before
            /// the first read so no write between a read and the wait goes unnoticed.
            signals: Option<tokio::sync::broadcast::Receiver<Signal>>,
        }
        let signals = self.runtime.store().shared.as_ref().map(|s| s.signals.subscribe());
        let start =
            Follow { manager: self.clone(), id: id.to_owned(), after, buffer: VecDeque::new(), done: false, signals };
        futures::stream::unfold(start, |mut f| async move {
            loop {
                if let Some(event) = f.buffer.pop_front() {
                    f.after = event.seq;
                    f.done = EventKind::from_journal_name(&event.event_type).is_some_and(EventKind::is_terminal);
                    return Some((Ok(event), f));
                }
                if f.done {
                    return None;
                }
                // Subscribe before reading, so a write between the read and the wait wakes us.
                let watch: Option<watch::Receiver<u64>> =
                    f.manager.active().get(&f.id).map(|a| a.state.journal().watch());
                let store = f.manager.runtime.store().clone();
                match store.runs.events_after(&f.id, f.after, 1000).await {
                    Ok(events) if !events.is_empty() => {
                        f.buffer.extend(events);
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        f.done = true;
                        return Some((Err(e), f));
                    }
                }
                match watch {
                    Some(mut rx) => {
                        let after = f.after;
                        let _ = tokio::time::timeout(Duration::from_secs(1), rx.wait_for(|seq| *seq > after)).await;
                    }
                    // Handed over by a shutdown: the client follows it on the next server.
                    None if f.manager.closing.is_cancelled() => return None,
                    None => {
                        // Not executing here: finished (its terminal event is already read, or
                        // it ended without one), or executing in another process.
                        match store.runs.get_run(&f.id).await {
                            Ok(Some(run)) if run.status.is_terminal() && run.last_seq <= f.after => return None,
                            Ok(None) => return None,
                            // Executing on another server (or paused): woken by its writes.
                            _ if f.signals.is_some() => {
                                if let Some(rx) = f.signals.as_mut() {
                                    commands::wait_for_run(rx, &f.id).await;
                                }
                            }
                            // Waiting for a person (minutes, hours): a slower poll.
                            Ok(Some(run)) if run.status == RunStatus::Paused => tokio::time::sleep(PAUSED_POLL).await,
                            _ => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    }
                }
            }
        })
    }

    /// Queue a steering message for run `id`. A repeated message id is ignored
    /// ([`Queued::Duplicate`]). Returns once the message is durable in the checkpoint.
    pub async fn steer(&self, id: &str, mut steer: SteerMessage) -> Result<Queued, RunError> {
        if steer.id.is_empty() || steer.id.len() > 200 {
            return Err(RunError::Invalid("steering `id` must be 1-200 characters".into()));
        }
        steer.message.role = Role::User;
        let inline = self.inline().get(id).cloned();
        if let Some(inline) = inline {
            return inline.queue(steer).ok_or_else(|| RunError::NotActive(id.to_owned(), "finishing".into()));
        }
        let active = self.active().get(id).cloned();
        let Some(active) = active else { return self.steer_elsewhere(id, steer).await };
        let queued = active.state.queue(steer).ok_or_else(|| RunError::NotActive(id.to_owned(), "finishing".into()))?;
        active.state.journal().flush().await;
        Ok(queued)
    }

    /// Abort run `id`: its model call and tools are cancelled at once. A paused run (nobody
    /// executes it) is marked cancelled directly.
    pub async fn abort(&self, id: &str, reason: Option<String>) -> Result<(), RunError> {
        let inline = self.inline().get(id).cloned();
        if let Some(inline) = inline {
            inline.cancel.cancel();
            return Ok(());
        }
        let active = self.active().get(id).cloned();
        if let Some(active) = active {
            active.state.journal().event(JournalEvent::Cancelling(Reason { reason }));
            active.cancel.cancel();
            return Ok(());
        }
        let store = self.runtime.store();
        match store.runs.get_run(id).await? {
            Some(run) if run.status == RunStatus::Paused => {
                store.runs.append_events(id, vec![JournalEvent::Cancelled(Reason { reason }).to_stored()]).await?;
                store.runs.update_run_status(id, RunStatus::Aborted, None, Some(run.revision)).await?;
                Ok(())
            }
            Some(run) if run.status == RunStatus::Running && store.shared.is_some() => {
                self.abort_elsewhere(id, reason).await
            }
            _ => Err(self.not_active(id).await),
        }
    }

    /// Settle an effect that a paused run could not confirm (`effect_unconfirmed`), then
    /// resume the run. `Applied` records the effect as done (with `result` as what the model
    /// sees); `NotApplied` lets the resumed run execute the call once under the same key;
    /// `Skip` records that it was not run, so the model is told.
    pub async fn reconcile(self: &Arc<Self>, id: &str, key: &str, decision: Reconcile) -> Result<(), RunError> {
        self.until_settled(id).await;
        let store = self.runtime.store().clone();
        let run = store.runs.get_run(id).await?.ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        let not_paused = |status: &str| {
            RunError::NotActive(id.to_owned(), format!("status {status}; only paused runs are reconciled"))
        };
        if run.status != RunStatus::Paused || self.is_active(id) {
            return Err(not_paused(run.status.as_str()));
        }
        let prefix = format!("run/{id}/");
        let effect = store.effects.get_effect(key).await?.filter(|_| key.starts_with(&prefix));
        if !effect.is_some_and(|e| e.status == polpo_store::EffectStatus::Pending) {
            return Err(RunError::Invalid(format!("no unconfirmed effect `{key}` in run `{id}`")));
        }
        if !self.starting().insert(id.to_owned()) {
            return Err(not_paused("resuming"));
        }
        let reconciled =
            JournalEvent::Reconciled(Reconciled { key: key.to_owned(), outcome: decision.outcome().into() });
        let resumed = async {
            match decision {
                Reconcile::Applied { result } => {
                    let text =
                        result.unwrap_or_else(|| "(the effect was applied; confirmed during reconciliation)".into());
                    store.effects.record_effect_result(key, json!({"ok": true, "text": text, "details": null})).await?;
                }
                Reconcile::Skip => {
                    let skipped = json!({"ok": false, "code": "effect_skipped", "message": "the call was not run: after a crash an operator chose to skip it; call the tool again if it is still needed"});
                    store.effects.record_effect_result(key, skipped).await?;
                }
                Reconcile::NotApplied => {
                    self.reruns.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), key.to_owned());
                }
            }
            self.resume_paused(id, run.revision, reconciled).await
        }
        .await;
        self.starting().remove(id);
        // Not launched (another server resumed the run first, or the store failed): the key
        // must not let a later launch of this run repeat the call.
        self.reruns.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        match resumed? {
            true => Ok(()),
            false => Err(not_paused("changed by another server")),
        }
    }

    /// Take paused run `id` (still at `revision`) over, journal `decision` (how its pause was
    /// settled), mark it running and resume it from its checkpoint: the call it paused on is
    /// executed again through every gate, and the decision says what that call does. `false`
    /// when another server changed the run meanwhile (it resumed it first). The caller holds
    /// the run in `starting`.
    async fn resume_paused(
        self: &Arc<Self>,
        id: &str,
        revision: u64,
        decision: JournalEvent,
    ) -> Result<bool, RunError> {
        let store = self.runtime.store().clone();
        let lease = store.runs.claim_run(id, &self.owner, self.options.lease_ttl).await?;
        // Another server may have resumed it (and even finished it) before the claim.
        let unchanged = store.runs.get_run(id).await?.is_some_and(|now| now.revision == revision);
        if !unchanged {
            store.runs.release_lease(id, &self.owner).await?;
            return Ok(false);
        }
        store.runs.append_events_fenced(id, Some(&lease), vec![decision.to_stored()]).await?;
        store.runs.update_run_status_fenced(id, Some(&lease), RunStatus::Running, None, Some(revision)).await?;
        self.resume(id, lease).await.map(|()| true)
    }

    /// Why paused run `id` waits: its latest `run.paused` (among its last events, since a
    /// decision may follow it), or `None` when it has none there.
    pub async fn latest_pause(&self, id: &str, last_seq: u64) -> Result<Option<Paused>, StoreError> {
        let tail = self.runtime.store().runs.events_after(id, last_seq.saturating_sub(32), 32).await?;
        Ok(tail.iter().rev().find_map(|event| match JournalEvent::from_stored(event) {
            Some(JournalEvent::Paused(paused)) => Some(paused),
            _ => None,
        }))
    }

    async fn not_active(&self, id: &str) -> RunError {
        match self.runtime.store().runs.get_run(id).await {
            Ok(Some(run)) => RunError::NotActive(id.to_owned(), format!("status {}", run.status.as_str())),
            Ok(None) => RunError::NotFound(id.to_owned()),
            Err(e) => RunError::Store(e),
        }
    }

    /// Take over every `running` run nobody holds a live lease on (its owner crashed) and
    /// resume it from its last checkpoint. Returns the ids taken over. A run that cannot be
    /// resumed (no checkpoint, agent gone) is marked failed with `resume_failed`. Paused runs
    /// whose approval was decided but could not be resumed then are resumed too.
    pub async fn recover(self: &Arc<Self>) -> Result<Vec<String>, StoreError> {
        let store = self.runtime.store().clone();
        self.renew_lapsed().await?;
        let mut taken = Vec::new();
        while !self.closing.is_cancelled()
            && let Some(lease) = store.runs.claim_next_run(&self.owner, self.options.lease_ttl).await?
        {
            let id = lease.run_id.clone();
            if self.is_active(&id) || self.starting().contains(&id) {
                continue;
            }
            match self.resume(&id, lease).await {
                Ok(()) => taken.push(id),
                Err(e) => {
                    tracing::warn!(run = %id, code = e.code(), "run could not be resumed: {e}");
                    let failed = JournalEvent::Failed(Failure { code: "resume_failed".into(), message: e.to_string() });
                    let _ = store.runs.append_events(&id, vec![failed.to_stored()]).await;
                    let _ = store
                        .runs
                        .update_run_status(&id, RunStatus::Failed, Some(format!("resume_failed: {e}")), None)
                        .await;
                    let _ = store.runs.release_lease(&id, &self.owner).await;
                }
            }
        }
        self.resume_decided_pauses().await?;
        Ok(taken)
    }

    /// Renew the lapsed leases of runs still executing here (their renewal came late: a
    /// loaded machine, a long pause of the process) before claiming: a claim of one of them
    /// would fence off its own executor, which would stop at its next write and be resumed
    /// from its checkpoint, its work since then done twice. A lease another server claimed
    /// meanwhile is not ours to renew (`lease_lost`): that executor stops on its own.
    async fn renew_lapsed(&self) -> Result<(), StoreError> {
        if self.active().is_empty() {
            return Ok(());
        }
        let store = self.runtime.store();
        for lease in store.runs.expired_runs(RENEW_BATCH).await? {
            if lease.owner == self.owner && self.is_active(&lease.run_id) {
                match store.runs.renew_lease(&lease.run_id, &self.owner, self.options.lease_ttl).await {
                    Ok(_) => {}
                    Err(e) if e.code() == "lease_lost" => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Hand this process's runs over because it is stopping (SIGTERM, Ctrl-C): every executing
    /// run is cancelled, checkpointed, journals `run.released` and gives its lease back, so
    /// another server takes it over at once instead of after the lease expires. Event
    /// followers end after the hand-over (clients reconnect elsewhere with `Last-Event-ID`),
    /// also those of paused runs;
    /// no run is recovered or executed here afterwards. Returns once every lease is released.
    pub async fn shutdown(&self) {
        self.closing.cancel();
        let active: Vec<Arc<Active>> = self.active().values().cloned().collect();
        for run in active {
            run.cancel.cancel();
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Recover now, then again every half lease TTL, for as long as the manager lives. On a
    /// store several servers share, also deliver the commands other servers send to the runs
    /// executing here ([`RunManager::steer`], [`RunManager::abort`] from any server).
    pub fn spawn_recovery(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        self.spawn_shared();
        let weak = Arc::downgrade(self);
        let every = self.options.lease_ttl / 2;
        tokio::spawn(async move {
            loop {
                let Some(manager) = weak.upgrade() else { return };
                if let Err(e) = manager.recover().await {
                    tracing::warn!(code = e.code(), "run recovery failed: {e}");
                }
                drop(manager);
                tokio::time::sleep(every).await;
            }
        })
    }

    /// Rebuild a run from its checkpoint and execute the rest of it under `lease`.
    async fn resume(self: &Arc<Self>, id: &str, lease: Lease) -> Result<(), RunError> {
        let store = self.runtime.store().clone();
        let run = store.runs.get_run(id).await?.ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        let state = match store.runs.latest_checkpoint(id).await? {
            Some(checkpoint) => serde_json::from_value(checkpoint.state)
                .map_err(|e| RunError::Invalid(format!("unreadable checkpoint: {e}")))?,
            None => {
                let first = store.runs.events_after(id, 0, 1).await?.into_iter().next();
                let Some(JournalEvent::Accepted(accepted)) = first.as_ref().and_then(JournalEvent::from_stored) else {
                    return Err(RunError::Invalid("the run has neither a checkpoint nor its request".into()));
                };
                CheckpointState { spec: accepted.spec, ..Default::default() }
            }
        };
        let input = state.spec.to_input(id).map_err(RunError::Invalid)?;
        let new_messages = state.spec.messages.iter().chain(&state.produced).cloned().collect();
        let prepared =
            self.runtime.prepare_resumed(input, state.spec.model_profile.clone(), new_messages, run.created_at).await?;
        self.launch(prepared, state, run.last_seq, true, lease);
        Ok(())
    }
}
