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

mod effects;
mod inline;
pub mod journal;
pub mod state;

pub use effects::effect_key;
pub use journal::{TERMINAL_EVENTS, is_terminal, journal_entry, stream_event, stream_frame};
pub use state::{CheckpointState, Queued, RunSpec, SteerMessage, SteerMode};

use crate::error::EngineError;
use crate::events::{EventSink, RunEvent};
use crate::runtime::{ChatError, ChatInput, ChatOutput, PreparedChat, Runtime};
use crate::tool_exec::ToolSet;
use futures::Stream;
use journal::Journal;
use polpo_core::message::Role;
use polpo_store::{NewRun, Run, RunEvent as StoredEvent, RunStatus, StoreError};
use polpo_tools::Tool;
use serde_json::json;
use state::RunState;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Environment variable that sets the lease time-to-live in milliseconds.
pub const LEASE_TTL_ENV: &str = "POLPO_RUN_LEASE_MS";

/// How often a follower of a paused run checks whether it was reconciled (the reconciling
/// process may be another one).
const PAUSED_POLL: Duration = Duration::from_secs(1);

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
    /// The run is finished, or executes elsewhere, so it cannot take steering or aborts here.
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
    /// The effect did not happen; the model is told and may call the tool again.
    NotApplied,
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
        let owner = format!("polpo-{}-{}", std::process::id(), uuid::Uuid::now_v7().simple());
        Arc::new(Self { runtime, owner, options, active: Mutex::default(), starting: Mutex::default(), inline: Mutex::default(), closing: CancellationToken::new(), tasks: TaskTracker::new() })
    }

    /// The runtime the runs execute in.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The lease owner id of this process.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn active(&self) -> MutexGuard<'_, HashMap<String, Arc<Active>>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn inline(&self) -> MutexGuard<'_, HashMap<String, Arc<inline::InlineRun>>> {
        self.inline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run a prepared chat inline (not durable, cancelled with its request) while it can be
    /// steered and aborted by its run id, like a durable run.
    pub async fn run_inline(self: &Arc<Self>, mut prepared: PreparedChat, sink: EventSink<'_>) -> Result<ChatOutput, ChatError> {
        struct Unregister<'a>(&'a RunManager, String);
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                self.0.inline().remove(&self.1);
            }
        }
        let run = Arc::new(inline::InlineRun::new(prepared.cancel.clone()));
        self.inline().insert(prepared.run_id.clone(), run.clone());
        // Unregistered however the future ends, a client disconnect (drop) included.
        let _unregister = Unregister(self, prepared.run_id.clone());
        prepared.control = Some(run);
        prepared.run(sink).await
    }

    fn starting(&self) -> MutexGuard<'_, HashSet<String>> {
        self.starting.lock().unwrap_or_else(PoisonError::into_inner)
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
        spec.session_id = prepared.session.id.clone();
        spec.messages = prepared.new_messages.clone();
        spec.model_profile = prepared.route().and_then(|r| r.profile.clone());
        let run_id = prepared.run_id.clone();
        let store = self.runtime.store().clone();
        self.starting().insert(run_id.clone());
        let created = async {
            let new = NewRun { id: Some(run_id.clone()), agent: spec.agent.clone(), session_id: Some(spec.session_id.clone()) };
            store.runs.create_run(new).await?;
            store.runs.claim_run(&run_id, &self.owner, self.options.lease_ttl).await?;
            // The request travels in `run.accepted`, so a run that crashes before its first
            // checkpoint can still be resumed, without a checkpoint write before the response.
            let accepted = json!({"agent": spec.agent, "sessionId": spec.session_id, "spec": spec});
            let seq = store.runs.append_event(&run_id, "run.accepted", accepted).await?;
            Ok::<_, StoreError>((seq, CheckpointState { spec, ..Default::default() }))
        }
        .await;
        self.starting().remove(&run_id);
        let (seq, state) = created?;
        let session_id = prepared.session.id.clone();
        self.launch(prepared, state, seq, false);
        Ok(StartedRun { run_id, session_id })
    }

    /// Wrap the write tools, register the run as active and execute it in its own task.
    fn launch(self: &Arc<Self>, mut prepared: PreparedChat, checkpoint: CheckpointState, last_seq: u64, resumed: bool) {
        let store = self.runtime.store().clone();
        let run_id = prepared.run_id.clone();
        let cell: Arc<std::sync::OnceLock<std::sync::Weak<RunState>>> = Arc::default();
        let snapshot_cell = cell.clone();
        let snapshot: journal::Snapshot = Arc::new(move || snapshot_cell.get().and_then(std::sync::Weak::upgrade).map(|s| s.snapshot()).unwrap_or_default());
        let journal = Journal::start(store.clone(), run_id.clone(), last_seq, snapshot);
        let state = Arc::new(RunState::new(checkpoint, journal));
        let _ = cell.set(Arc::downgrade(&state));

        let tools = &prepared.invocation.tools;
        let wrapped: Vec<Arc<dyn Tool>> = tools
            .specs()
            .filter_map(|s| tools.get(&s.name).cloned())
            .map(|tool| -> Arc<dyn Tool> {
                if tool.effect().is_replayable() {
                    tool
                } else {
                    Arc::new(effects::Ledgered { inner: tool, run_id: run_id.clone(), state: state.clone(), store: store.clone(), cancel: prepared.cancel.clone() })
                }
            })
            .collect();
        prepared.invocation.tools = Arc::new(ToolSet::new(wrapped));
        prepared.invocation.max_turns = prepared.invocation.max_turns.saturating_sub(state.turns_used()).max(1);
        prepared.control = Some(state.clone());
        let active = Arc::new(Active { cancel: prepared.cancel.clone(), state: state.clone() });
        self.active().insert(run_id.clone(), active);
        // Launched during a shutdown (after it cancelled the active runs): hand it over at once.
        if self.closing.is_cancelled() {
            prepared.cancel.cancel();
        }
        let manager = self.clone();
        self.tasks.spawn(async move { manager.drive(prepared, state, resumed).await });
    }

    /// Execute a launched run to its end, renewing its lease, and record how it ended.
    async fn drive(self: Arc<Self>, prepared: PreparedChat, state: Arc<RunState>, resumed: bool) {
        let store = self.runtime.store().clone();
        let run_id = prepared.run_id.clone();
        let cancel = prepared.cancel.clone();
        let lost = CancellationToken::new();
        let renewal = tokio::spawn({
            let (store, run_id, owner, ttl, lost, cancel) = (store.clone(), run_id.clone(), self.owner.clone(), self.options.lease_ttl, lost.clone(), cancel.clone());
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
        journal.event(if resumed { "run.resumed" } else { "run.started" }, json!({"owner": self.owner}));
        let sink = |event: RunEvent| {
            match &event {
                // Once the process is stopping, what follows is the cancellation's doing
                // (aborted tool results), not the run's: the next owner redoes it.
                RunEvent::MessageAppended { message } if !self.closing.is_cancelled() => state.on_message(message),
                RunEvent::ToolCalling { id, .. } => state.on_tool_calling(id),
                _ => {}
            }
            if let Some((kind, data)) = journal_entry(&event) {
                journal.event(kind, data);
            }
        };
        let result = prepared.run(&sink).await;
        state.close();
        renewal.abort();
        if lost.is_cancelled() {
            self.active().remove(&run_id);
            return;
        }
        if self.closing.is_cancelled() && state.paused().is_none() && matches!(result, Err(ChatError::Engine(EngineError::Aborted))) {
            // Stopped by the shutdown, not finished: the run stays `running`, checkpointed,
            // and its lease is given back so the next server resumes it without waiting.
            journal.event("run.released", json!({"owner": self.owner, "reason": "shutdown"}));
            journal.checkpoint();
            journal.flush().await;
            self.active().remove(&run_id);
            if let Err(e) = store.runs.release_lease(&run_id, &self.owner).await {
                tracing::warn!(run = %run_id, code = e.code(), "run lease could not be released; it expires on its own: {e}");
            }
            return;
        }
        let (status, error) = match (&result, state.paused()) {
            (Err(ChatError::Engine(EngineError::Aborted)), Some(pause)) => {
                journal.event("run.paused", json!({"code": pause.code, "detail": pause.data}));
                (RunStatus::Paused, Some(pause.code.to_owned()))
            }
            (Ok(out), _) => {
                let o = &out.outcome;
                journal.event(
                    "run.completed",
                    json!({"content": o.content, "finishReason": o.finish_reason, "toolCalls": o.client_tool_calls, "usage": o.usage, "turns": o.turns, "sessionId": out.session.id, "suggestions": out.suggestions}),
                );
                (RunStatus::Completed, None)
            }
            (Err(ChatError::Engine(EngineError::Aborted)), None) => {
                journal.event("run.cancelled", json!({}));
                (RunStatus::Aborted, None)
            }
            (Err(e), _) => {
                journal.event("run.failed", json!({"code": e.code(), "message": e.to_string()}));
                (RunStatus::Failed, Some(e.to_string()))
            }
        };
        journal.flush().await;
        // No longer steerable here from now on; the lease keeps other workers away until the
        // status is stored.
        self.active().remove(&run_id);
        if let Err(e) = store.runs.update_run_status(&run_id, status, error, None).await {
            tracing::warn!(run = %run_id, code = e.code(), "run status could not be stored: {e}");
        }
        let _ = store.runs.release_lease(&run_id, &self.owner).await;
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
    pub fn events(self: &Arc<Self>, id: &str, after: u64) -> impl Stream<Item = Result<StoredEvent, StoreError>> + Send + 'static {
        struct Follow {
            manager: Arc<RunManager>,
            id: String,
            after: u64,
            buffer: VecDeque<StoredEvent>,
            done: bool,
        }
        let start = Follow { manager: self.clone(), id: id.to_owned(), after, buffer: VecDeque::new(), done: false };
        futures::stream::unfold(start, |mut f| async move {
            loop {
                if let Some(event) = f.buffer.pop_front() {
                    f.after = event.seq;
                    f.done = is_terminal(&event.event_type);
                    return Some((Ok(event), f));
                }
                if f.done {
                    return None;
                }
                // Subscribe before reading, so a write between the read and the wait wakes us.
                let watch: Option<watch::Receiver<u64>> = f.manager.active().get(&f.id).map(|a| a.state.journal().watch());
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
        let Some(active) = active else { return Err(self.not_active(id).await) };
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
            active.state.journal().event("run.cancelling", json!({"reason": reason}));
            active.cancel.cancel();
            return Ok(());
        }
        let store = self.runtime.store();
        match store.runs.get_run(id).await? {
            Some(run) if run.status == RunStatus::Paused => {
                store.runs.append_events(id, vec![polpo_store::NewRunEvent::new("run.cancelled", json!({"reason": reason}))]).await?;
                store.runs.update_run_status(id, RunStatus::Aborted, None, Some(run.revision)).await?;
                Ok(())
            }
            _ => Err(self.not_active(id).await),
        }
    }

    /// Settle an effect that a paused run could not confirm (`effect_unconfirmed`), then
    /// resume the run. `Applied` records the effect as done (with `result` as what the model
    /// sees); `NotApplied` records that it did not happen, so the model is told and may call
    /// the tool again. Either way the effect itself is not repeated by the runtime.
    pub async fn reconcile(self: &Arc<Self>, id: &str, key: &str, decision: Reconcile) -> Result<(), RunError> {
        let store = self.runtime.store().clone();
        let run = store.runs.get_run(id).await?.ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        if run.status != RunStatus::Paused || self.is_active(id) {
            return Err(RunError::NotActive(id.to_owned(), format!("status {}; only paused runs are reconciled", run.status.as_str())));
        }
        let prefix = format!("run/{id}/");
        let effect = store.effects.get_effect(key).await?.filter(|_| key.starts_with(&prefix));
        if !effect.is_some_and(|e| e.status == polpo_store::EffectStatus::Pending) {
            return Err(RunError::Invalid(format!("no unconfirmed effect `{key}` in run `{id}`")));
        }
        let (outcome, result) = match decision {
            Reconcile::Applied { result } => {
                let text = result.unwrap_or_else(|| "(the effect was applied; confirmed during reconciliation)".into());
                ("applied", json!({"ok": true, "text": text, "details": null}))
            }
            Reconcile::NotApplied => (
                "not_applied",
                json!({"ok": false, "code": "effect_not_applied", "message": "the call did not take effect and was not repeated; call the tool again if it is still needed"}),
            ),
        };
        store.effects.record_effect_result(key, result).await?;
        self.starting().insert(id.to_owned());
        let resumed = async {
            store.runs.claim_run(id, &self.owner, self.options.lease_ttl).await?;
            store.runs.append_event(id, "run.reconciled", json!({"key": key, "outcome": outcome})).await?;
            store.runs.update_run_status(id, RunStatus::Running, None, Some(run.revision)).await?;
            self.resume(id).await
        }
        .await;
        self.starting().remove(id);
        resumed
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
    /// resumed (no checkpoint, agent gone) is marked failed with `resume_failed`.
    pub async fn recover(self: &Arc<Self>) -> Result<Vec<String>, StoreError> {
        let store = self.runtime.store().clone();
        let mut taken = Vec::new();
        while !self.closing.is_cancelled()
            && let Some(lease) = store.runs.claim_next_run(&self.owner, self.options.lease_ttl).await?
        {
            let id = lease.run_id;
            if self.is_active(&id) || self.starting().contains(&id) {
                continue;
            }
            match self.resume(&id).await {
                Ok(()) => taken.push(id),
                Err(e) => {
                    tracing::warn!(run = %id, code = e.code(), "run could not be resumed: {e}");
                    let _ = store.runs.append_event(&id, "run.failed", json!({"code": "resume_failed", "message": e.to_string()})).await;
                    let _ = store.runs.update_run_status(&id, RunStatus::Failed, Some(format!("resume_failed: {e}")), None).await;
                    let _ = store.runs.release_lease(&id, &self.owner).await;
                }
            }
        }
        Ok(taken)
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

    /// Recover now, then again every half lease TTL, for as long as the manager lives.
    pub fn spawn_recovery(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
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

    /// Rebuild a run from its checkpoint and execute the rest of it.
    async fn resume(self: &Arc<Self>, id: &str) -> Result<(), RunError> {
        let store = self.runtime.store().clone();
        let run = store.runs.get_run(id).await?.ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        let state = match store.runs.latest_checkpoint(id).await? {
            Some(checkpoint) => serde_json::from_value(checkpoint.state).map_err(|e| RunError::Invalid(format!("unreadable checkpoint: {e}")))?,
            None => {
                let first = store.runs.events_after(id, 0, 1).await?.into_iter().next();
                let spec = first.filter(|e| e.event_type == "run.accepted").and_then(|e| e.data.get("spec").cloned());
                let spec = spec.ok_or_else(|| RunError::Invalid("the run has neither a checkpoint nor its request".into()))?;
                let spec: RunSpec = serde_json::from_value(spec).map_err(|e| RunError::Invalid(format!("unreadable run request: {e}")))?;
                CheckpointState { spec, ..Default::default() }
            }
        };
        let input = state.spec.to_input(id).map_err(RunError::Invalid)?;
        let loaded = self.runtime.loaded();
        let agent = loaded.agent(&input.agent).ok_or_else(|| ChatError::AgentNotFound(input.agent.clone()))?;
        // A routed run keeps the profile it was accepted with: no second routing, no classifier.
        let provider = match state.spec.model_profile.clone() {
            Some(profile) => self.runtime.provider_for_model(&loaded, agent, Some(&polpo_core::model::ModelSelection::Profile { profile }))?,
            None => self.runtime.provider_for(&loaded, agent)?,
        };
        let cancel = CancellationToken::new();
        let mut invocation = self.runtime.invocation(&loaded, agent, provider, &input, &cancel)?;
        let session = store.sessions.get_session(&state.spec.session_id).await?.ok_or_else(|| ChatError::SessionNotFound(state.spec.session_id.clone()))?;
        if let Some(hooks) = &mut invocation.hooks {
            hooks.info.session_id = Some(session.id.clone());
            // Budgets survive a resume: the gate's `maxDurationMs` counts from when the run
            // was accepted, not from the takeover (downtime included, the safe side).
            let before = (chrono::Utc::now() - run.created_at).to_std().unwrap_or_default();
            let resumed_at = std::time::Instant::now();
            hooks.clock = Arc::new(move || before + resumed_at.elapsed());
        }
        let history = self.runtime.history(&session.id).await?;
        let new_messages = state.spec.messages.iter().chain(&state.produced).cloned().collect();
        let prepared = PreparedChat { runtime: self.runtime.clone(), invocation, session, history, new_messages, cancel, run_id: id.to_owned(), control: None, route: None };
        self.launch(prepared, state, run.last_seq, true);
        Ok(())
    }
}
