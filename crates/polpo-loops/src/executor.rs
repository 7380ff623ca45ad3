//! The interpreter: selects the loop, walks its graph from `start`, runs each step type and
//! records the trace.

use crate::context::{self, REQUEST};
use crate::error::LoopError;
use crate::human::{Awaited, HumanDesk};
use crate::record::{
    APPROVALS, AgentRun, ApprovalRecord, ApprovalStatus, ApprovalSubject, ApprovedGate, Checkpoints, LIVE,
    LoopGateRequest, LoopRunRecord, LoopRunStatus, LoopState, PendingHuman, RunFailure, StoredRequest,
};
use crate::trace::{Announce, TraceEvent, TraceKind, TraceSink, TraceStatus, Tracer};
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use polpo_core::loops::config::{
    AgentStep, HumanStep, Join, JoinMode, LoopConfig, Next, ParallelStep, ToolChoice as StepToolChoice, ToolChoiceMode,
    Transition, WhileStep,
};
use polpo_core::loops::config::{LifecycleHook, OnError};
use polpo_core::loops::expr::holds;
use polpo_core::loops::governance::{self, Gate, Point, RuleKind, Verdict};
use polpo_core::loops::router::ExecutionRoute;
use polpo_core::loops::{Step, StepBody};
use polpo_core::message::Message;
use polpo_core::tool::ToolSpec;
use polpo_engine::events::EventKind;
use polpo_engine::interaction::Capabilities;
use polpo_engine::meter::Meter;
use polpo_engine::runs::{Progress, RunManager};
use polpo_engine::structured::ResponseFormat;
use polpo_engine::tools::exec::DirectCallError;
use polpo_engine::{ChatInput, LoopContext, RunEvent, Surface};
use polpo_llm::ToolChoice;
use polpo_store::{EffectClaim, StoreError};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio_util::sync::CancellationToken;

/// Step executions a run may make unless configured otherwise.
pub const DEFAULT_STEP_BUDGET: u32 = 100;
/// Largest projected agent-step `input`, in UTF-8 bytes of its JSON.
pub const MAX_PROJECTION_BYTES: usize = 256 * 1024;
/// The target that ends a run.
const END: &str = "end";

/// How the executor runs loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopOptions {
    /// Step executions one run may make (skips included) before it fails with
    /// `loop_step_budget_exceeded`, unless the project's `settings.loopStepBudget` says.
    pub step_budget: u32,
}

impl Default for LoopOptions {
    fn default() -> Self {
        Self { step_budget: DEFAULT_STEP_BUDGET }
    }
}

/// A request to run a loop for an agent.
#[derive(Debug, Clone)]
pub struct LoopRequest {
    /// The agent whose loop runs.
    pub agent: String,
    /// The loop; `None` takes the agent's `defaultLoop`.
    pub loop_id: Option<String>,
    /// The conversation agent steps see (unless a step projects its own `input`).
    pub messages: Vec<Message>,
    /// The caller's metadata (`request.metadata` in the context).
    pub metadata: Value,
    /// The end user (`request.user`).
    pub user: Option<String>,
    /// The API client the sessions belong to.
    pub owner: Option<String>,
    /// `polpo.execution.allowedTools`: the request layer of the policy.
    pub allowed_tools: Option<Vec<String>>,
    /// Must be text: a loop's answer is its steps'.
    pub response_format: ResponseFormat,
    /// Must be empty: loops run server tools only.
    pub client_tools: Vec<ToolSpec>,
    /// `ask_user_question` must be off: loops ask people through human steps.
    pub capabilities: Capabilities,
    /// How the execution router chose this loop, when it did; kept with the run.
    pub route: Option<ExecutionRoute>,
}

impl LoopRequest {
    /// `messages` to `agent`'s loop (`None`: its default loop), defaults elsewhere.
    pub fn new(agent: impl Into<String>, loop_id: Option<String>, messages: Vec<Message>) -> Self {
        Self {
            agent: agent.into(),
            loop_id,
            messages,
            metadata: Value::Null,
            user: None,
            owner: None,
            allowed_tools: None,
            response_format: ResponseFormat::Text,
            client_tools: Vec::new(),
            capabilities: Capabilities::default(),
            route: None,
        }
    }

    /// The request stored run `record` was started with, which its resume continues.
    pub fn from_record(record: &LoopRunRecord) -> Self {
        let mut request =
            Self::new(record.agent.clone(), Some(record.loop_id.clone()), record.request.messages.clone());
        request.metadata = record.request.metadata.clone();
        request.user.clone_from(&record.user);
        request.owner.clone_from(&record.owner);
        request.allowed_tools.clone_from(&record.request.allowed_tools);
        request.route.clone_from(&record.request.route);
        request
    }

    /// What a stored run keeps of this request, for its resume.
    fn stored(&self) -> StoredRequest {
        StoredRequest {
            messages: self.messages.clone(),
            metadata: self.metadata.clone(),
            allowed_tools: self.allowed_tools.clone(),
            route: self.route.clone(),
        }
    }

    /// Refuse what a loop cannot honour, before any step runs.
    fn check(&self) -> Result<(), LoopError> {
        if self.response_format.is_structured() {
            return Err(LoopError::Unsupported(
                "`response_format` does not apply to a loop: steps declare `output.schema`".into(),
            ));
        }
        if !self.client_tools.is_empty() {
            return Err(LoopError::Unsupported(
                "client `tools` do not apply to a loop: steps run the agent's server tools".into(),
            ));
        }
        if self.capabilities.ask_user_question {
            return Err(LoopError::Unsupported(
                "`ask_user_question` does not apply to a loop: loops ask people through human steps".into(),
            ));
        }
        Ok(())
    }
}

/// How a run that started ended.
#[derive(Debug)]
pub struct LoopFinished {
    /// `looprun-<id>`.
    pub run_id: String,
    /// The loop that ran.
    pub loop_id: String,
    /// The last agent or human step's output (text as a string), or why the run failed.
    pub result: Result<Option<Value>, LoopError>,
    /// Every trace event, in order.
    pub trace: Vec<TraceEvent>,
    /// The state the run ended in.
    pub state: LoopState,
}

/// Runs Project Loops over a [`RunManager`].
pub struct LoopExecutor {
    pub(crate) runs: Arc<RunManager>,
    options: LoopOptions,
    pub(crate) humans: HumanDesk,
    /// This process's runs in progress: cancelling one stops its walk.
    pub(crate) active: Mutex<HashMap<String, CancellationToken>>,
    /// Run id → the effect key an operator reconciled `not_applied`: its resume here runs
    /// that call once more instead of failing `effect_unconfirmed` (`reconcile.rs`).
    pub(crate) reruns: Mutex<HashMap<String, String>>,
}

impl LoopExecutor {
    /// An executor invoking agents through `runs`.
    pub fn new(runs: Arc<RunManager>, options: LoopOptions) -> Self {
        Self { runs, options, humans: HumanDesk::default(), active: Mutex::default(), reruns: Mutex::default() }
    }

    /// The human steps waiting for a person.
    pub fn humans(&self) -> &HumanDesk {
        &self.humans
    }

    /// The loop `request` selects: its `loop` (which must be assigned to the agent), else the
    /// agent's `defaultLoop`; and the request checked against what loops support.
    pub fn select(&self, request: &LoopRequest) -> Result<(String, Arc<LoopConfig>), LoopError> {
        request.check()?;
        let loaded = self.runs.runtime().loaded();
        let agent = loaded
            .agent(&request.agent)
            .ok_or_else(|| LoopError::Chat(polpo_engine::ChatError::AgentNotFound(request.agent.clone())))?;
        let assigned = agent.config.assigned_loops.as_deref().unwrap_or_default();
        let id = match &request.loop_id {
            Some(id) if assigned.contains(id) => id.clone(),
            Some(id) => {
                return Err(LoopError::NotAssigned(format!(
                    "loop `{id}` is not in agent `{}`'s assignedLoops",
                    agent.id
                )));
            }
            None => agent.config.default_loop.clone().ok_or_else(|| {
                LoopError::NotAssigned(format!("agent `{}` has no defaultLoop; name a loop with `loop`", agent.id))
            })?,
        };
        let found = loaded.project.loops.get(&id).ok_or_else(|| LoopError::NotFound(id.clone()))?;
        Ok((id, found.config.clone()))
    }

    /// A new loop run id (`looprun-<id>`), from the store's id seam.
    pub fn new_run_id(&self) -> String {
        format!("looprun-{}", self.runs.runtime().ids().next_id())
    }

    /// Run loop `loop_id` (`config`, from [`LoopExecutor::select`]) as run `run_id`,
    /// reporting each trace event to `sink` as it happens. The run is stored (collection
    /// `loop_runs`) when it starts, after each top-level step and when it ends.
    pub async fn run(
        &self,
        request: &LoopRequest,
        run_id: &str,
        loop_id: &str,
        config: &LoopConfig,
        sink: TraceSink<'_>,
    ) -> LoopFinished {
        let context = json!({ REQUEST: {"metadata": request.metadata, "user": request.user} });
        let state = LoopState { context, frontier: vec![config.start.clone()], ..LoopState::default() };
        let record = run_record(run_id, loop_id, request, state);
        self.drive(request, record, 0, Vec::new(), config, sink).await
    }

    /// Continue stored run `record` (at `revision`) from its checkpoint: the steps before
    /// its frontier are not run again.
    pub async fn resume(
        &self,
        mut record: LoopRunRecord,
        revision: u64,
        config: &LoopConfig,
        sink: TraceSink<'_>,
    ) -> LoopFinished {
        let request = LoopRequest::from_record(&record);
        let store = self.runs.runtime().store().records.clone();
        let trace = match record.apply_deltas(store.as_ref()).await {
            Ok(()) => record.whole_trace(store.as_ref()).await,
            Err(e) => Err(e),
        };
        let trace = match trace {
            Ok(trace) => trace,
            Err(e) => {
                let run_id = record.id.clone();
                return LoopFinished {
                    run_id,
                    loop_id: record.loop_id,
                    result: Err(e),
                    trace: Vec::new(),
                    state: record.state,
                };
            }
        };
        self.drive(&request, record, revision, trace, config, sink).await
    }

    /// Walk `record`'s run from its frontier (`revision` 0: a new run, not stored yet), after
    /// the `trace` it has so far.
    async fn drive(
        &self,
        request: &LoopRequest,
        record: LoopRunRecord,
        revision: u64,
        trace: Vec<TraceEvent>,
        config: &LoopConfig,
        sink: TraceSink<'_>,
    ) -> LoopFinished {
        let runtime = self.runs.runtime().clone();
        let budget = runtime.loaded().project.settings().loop_step_budget.unwrap_or(self.options.step_budget);
        let records = runtime.store().records.clone();
        let ttl = self.runs.options().lease_ttl;
        let checkpoints = Checkpoints::new(
            records.clone(),
            runtime.clock().clone(),
            &record.id,
            (revision, record.trace_flushed),
            (self.runs.owner(), record.lease.as_ref(), ttl),
        );
        let clock = move || runtime.clock().now().timestamp_millis();
        let run_id = record.id.as_str();
        let loop_id = record.loop_id.as_str();
        let cancel = CancellationToken::new();
        {
            let mut active = lock(&self.active);
            if active.contains_key(run_id) {
                let held = StoreError::LeaseHeld {
                    run_id: run_id.to_owned(),
                    owner: self.runs.owner().to_owned(),
                    expires_at: self.runs.runtime().clock().now(),
                };
                return LoopFinished {
                    run_id: run_id.to_owned(),
                    loop_id: loop_id.to_owned(),
                    result: Err(LoopError::Store(held)),
                    trace,
                    state: record.state,
                };
            }
            active.insert(run_id.to_owned(), cancel.clone());
        }
        let run = Run {
            exec: self,
            budget,
            config,
            request,
            run_id,
            loop_id,
            tracer: Tracer::new(loop_id, &clock, sink).announced(Announce::new(
                self.runs.runtime().events().clone(),
                run_id.to_owned(),
                request.agent.clone(),
            )),
            executed: AtomicU32::new(record.state.executed),
            frontier: Mutex::default(),
            while_iterations: Mutex::new(record.state.while_iterations.clone()),
            last: Mutex::new(record.output.clone()),
            checkpoints,
            saved: Mutex::new(record.state.clone()),
            agent_runs: Mutex::new(record.agent_runs.clone()),
            approved: record.approved_gates.clone(),
            approval_request: Mutex::new(record.approval_request_id.clone()),
            replayable: Mutex::default(),
        };
        if revision == 0 {
            run.tracer.emit(
                TraceEvent::new(TraceKind::LoopStart, None)
                    .status(TraceStatus::Started)
                    .data(json!({"runId": run_id, "agent": request.agent})),
            );
        } else {
            run.tracer.continue_after(trace);
            run.tracer.emit(
                TraceEvent::new(TraceKind::LoopResume, None)
                    .status(TraceStatus::Started)
                    .data(json!({"runId": run_id, "frontier": record.state.frontier})),
            );
        }
        let mut context = record.state.context.clone();
        // An answer stored with the run (given on another server) stays stored until its human
        // step takes it.
        let answered = record.human.clone().filter(|h| h.answer.is_some());
        if let Some(PendingHuman { step, answer: Some(output), .. }) = &answered {
            self.humans.answered(run_id, step, output.clone());
        }
        let walked = async {
            // Listed as live before the run's first write, so a crash after it is recovered.
            records.put_record_revision(LIVE, run_id, json!({}), None).await?;
            // The first write creates the record, or claims a stored one for this process.
            run.save(LoopRunStatus::Running, answered, None).await?;
            let nowhere = At { step: None, tool: None, payload: json!({}) };
            if revision == 0 {
                run.govern(LifecycleHook::LoopStart, &nowhere, &mut context).await?;
            }
            if let Some(at) = record.state.frontier.first() {
                run.walk(at, "", &mut context, false, true).await?;
            }
            run.govern(LifecycleHook::LoopEnd, &nowhere, &mut context).await
        };
        // The lease is extended while a step runs longer than a third of it; a refusal
        // (cancelled, or claimed by another server) stops the walk.
        let renewing = async {
            loop {
                tokio::time::sleep(ttl / 3).await;
                match run.checkpoints.renew(ttl / 3).await {
                    Err(e @ (LoopError::Aborted | LoopError::Store(StoreError::LeaseLost { .. }))) => return e,
                    Err(e) => tracing::warn!(run = run_id, code = e.code(), "loop run lease not renewed: {e}"),
                    Ok(()) => {}
                }
            }
        };
        let result = tokio::select! {
            walked = walked => walked,
            () = cancel.cancelled() => Err(LoopError::Aborted),
            refused = renewing => Err(refused),
        };
        let lost = matches!(result, Err(LoopError::Store(StoreError::LeaseLost { .. })));
        self.humans.forget(run_id);
        let last = lock(&run.last).clone();
        let result = match result {
            Ok(()) => {
                run.tracer.emit(TraceEvent::new(TraceKind::LoopEnd, None).status(TraceStatus::Completed));
                Ok(last)
            }
            // Taken over by another server, the run goes on there: its end is not traced here.
            Err(e) if lost => Err(e),
            Err(e) => {
                let mut event = TraceEvent::new(TraceKind::LoopError, None).status(TraceStatus::Failed);
                event.error = Some(e.to_string());
                let mut data = json!({"code": e.code()});
                // What a person needs to settle it (`reconcile.rs`).
                if let LoopError::EffectUnconfirmed { step, tool, key, started_at } = &e {
                    data["effect"] = json!({"key": key, "step": step, "tool": tool, "startedAt": started_at});
                }
                run.tracer.emit(event.data(data));
                Err(e)
            }
        };
        let state = LoopState {
            context,
            frontier: lock(&run.frontier).iter().cloned().collect(),
            while_iterations: lock(&run.while_iterations).clone(),
            executed: run.executed.load(Ordering::Relaxed),
        };
        let (status, failure) = match &result {
            Ok(_) => (LoopRunStatus::Completed, None),
            Err(LoopError::Aborted) => (LoopRunStatus::Cancelled, None),
            // The run stops at its last checkpoint: the approved resume starts there.
            Err(LoopError::ApprovalRequired { .. }) => (LoopRunStatus::AwaitingApproval, None),
            Err(e) => (LoopRunStatus::Failed, Some(RunFailure { code: e.code().to_owned(), message: e.to_string() })),
        };
        let result = match result {
            Err(LoopError::ApprovalRequired { gate, message }) => {
                match run.request_approval_record(&gate, &message).await {
                    Ok(approval) => {
                        *lock(&run.approval_request) = Some(approval.clone());
                        Err(LoopError::AwaitingApproval { approval, message })
                    }
                    Err(e) => Err(e),
                }
            }
            // Stored at its last checkpoint too: a reconciled resume starts there and reaches
            // the unconfirmed call again under the same key.
            Err(e @ LoopError::EffectUnconfirmed { .. }) => Err(e),
            other => {
                *lock(&run.saved) = state.clone();
                other
            }
        };
        // A run another server took over is not written here any more.
        let saved = if lost { None } else { Some(run.save(status, None, failure).await) };
        let ended_here = matches!(saved, Some(Ok(()) | Err(LoopError::Aborted)));
        let result = match (saved, result) {
            // A record changed elsewhere (cancelled over REST) keeps what was written there.
            (None | Some(Ok(()) | Err(LoopError::Aborted)), result) => result,
            (Some(Err(e)), Ok(_)) => Err(e),
            (Some(Err(_)), failed) => failed,
        };
        if ended_here && let Err(e) = records.delete_record(LIVE, run_id, None).await {
            tracing::warn!(run = run_id, code = e.code(), "ended loop run still listed live (recovery drops it): {e}");
        }
        // Active until stored: a recovery scan never takes over a run this process still writes.
        lock(&self.active).remove(run_id);
        LoopFinished {
            run_id: run_id.to_owned(),
            loop_id: loop_id.to_owned(),
            result,
            trace: run.tracer.into_events(),
            state,
        }
    }
}

/// A mutex's data, whether or not a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// One run in progress.
struct Run<'a> {
    exec: &'a LoopExecutor,
    /// Step executions allowed.
    budget: u32,
    config: &'a LoopConfig,
    request: &'a LoopRequest,
    run_id: &'a str,
    loop_id: &'a str,
    tracer: Tracer<'a>,
    executed: AtomicU32,
    /// Steps about to run or running (parallel branches and containers included).
    frontier: Mutex<BTreeSet<String>>,
    while_iterations: Mutex<BTreeMap<String, u32>>,
    last: Mutex<Option<Value>>,
    /// The run's record writer.
    checkpoints: Checkpoints,
    /// The state of the last checkpoint (what a resume would start from).
    saved: Mutex<LoopState>,
    /// The agent steps' invocations so far.
    agent_runs: Mutex<Vec<AgentRun>>,
    /// Approval gates a reviewer approved (a resumed run passes them).
    approved: Vec<ApprovedGate>,
    /// The approval request the run last waited on.
    approval_request: Mutex<Option<String>>,
    /// [`Run::replayable`]'s answers so far: a step's tool and configured input do not change
    /// during the run, so each step is asked about once, not before each of its executions.
    replayable: Mutex<HashMap<String, bool>>,
}

/// Where a lifecycle point is: the step (id and definition), the tool and its resolved
/// input, and the rest of the payload (`output`, `transition`).
struct At<'a> {
    step: Option<(&'a str, &'a Step)>,
    tool: Option<(&'a str, &'a Value)>,
    payload: Value,
}

impl Run<'_> {
    /// The approval request of a gate this run stopped at, stored pending (collection
    /// `approvals`) with what a reviewer needs: the rule, the point, the message, the context
    /// of the last checkpoint. Its id.
    async fn request_approval_record(&self, gate: &Gate, message: &str) -> Result<String, LoopError> {
        let runtime = self.exec.runs.runtime();
        let limit = governance::gate_timeout(self.config, gate);
        let deadline = limit.and_then(|(timeout, _)| {
            chrono::Duration::from_std(timeout).ok().map(|timeout| runtime.clock().now() + timeout)
        });
        let approval = ApprovalRecord {
            id: format!("approval-{}", runtime.ids().next_id()),
            owner: self.request.owner.clone(),
            status: ApprovalStatus::Pending,
            message: message.to_owned(),
            subject: ApprovalSubject::Loop(LoopGateRequest {
                loop_run_id: self.run_id.to_owned(),
                loop_id: self.loop_id.to_owned(),
                agent: self.request.agent.clone(),
                gate: gate.clone(),
                context: lock(&self.saved).context.clone(),
            }),
            resolved_by: None,
            note: None,
            timeout: limit.map(|(timeout, _)| polpo_core::tasks::format_duration(timeout)),
            deadline,
            timeout_action: limit.map(|(_, action)| action),
        };
        let value = serde_json::to_value(&approval).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))?;
        runtime.store().records.put_record(APPROVALS, &approval.id, value, Some(0)).await?;
        approval.announce(runtime.events(), EventKind::ApprovalRequested);
        if deadline.is_some() {
            runtime.approval_deadlines().notify_one();
        }
        Ok(approval.id)
    }

    /// Store the run as it is: `status`, the last checkpoint's state, the trace so far.
    async fn save(
        &self,
        status: LoopRunStatus,
        human: Option<PendingHuman>,
        error: Option<RunFailure>,
    ) -> Result<(), LoopError> {
        // The trace, the lease and the deltas are the writer's: it knows which trace entries
        // are stored apart, holds the lease and appends the deltas.
        let record = LoopRunRecord {
            status,
            human,
            output: lock(&self.last).clone(),
            error,
            agent_runs: lock(&self.agent_runs).clone(),
            approval_request_id: lock(&self.approval_request).clone(),
            approved_gates: self.approved.clone(),
            ..run_record(self.run_id, self.loop_id, self.request, lock(&self.saved).clone())
        };
        let saved = self.checkpoints.save(record, &self.tracer).await;
        saved.inspect_err(|e| self.tracer.persist_failed(e))
    }

    /// The checkpoint after a top-level step: `context` as it is, `to` next. Between a tool
    /// step and a replayable one (`small`), while the writer may, only what changed is appended
    /// (a delta: see `record.rs`); otherwise the record is written whole, which also makes sure
    /// the run is still this writer's before the next step.
    async fn checkpoint(&self, context: &Value, to: &str, small: bool) -> Result<(), LoopError> {
        let executed = self.executed.load(Ordering::Relaxed);
        let changed = context::changes(&lock(&self.saved).context, context);
        let saved = |changed: Option<Map<String, Value>>| {
            let mut saved = lock(&self.saved);
            match changed {
                Some(changed) => context::merge(&mut saved.context, changed),
                None => saved.context = context.clone(),
            }
            saved.frontier = if to == END { Vec::new() } else { vec![to.to_owned()] };
            saved.while_iterations = lock(&self.while_iterations).clone();
            saved.executed = executed;
        };
        let delta = small && self.checkpoints.appendable().await;
        match changed {
            Some(changed) if delta => {
                let appended = self.checkpoints.append(&changed, to, executed, &self.tracer).await;
                appended.inspect_err(|e| self.tracer.persist_failed(e))?;
                saved(Some(changed));
                Ok(())
            }
            changed => {
                saved(changed);
                self.save(LoopRunStatus::Running, None, None).await
            }
        }
    }

    /// Whether step `id` is a tool step whose call may run again after a crash (its tool, on
    /// its input as configured, has no effect that must not happen twice): a checkpoint before
    /// it may be a delta. One before any other step is written whole, a compare-and-set, so a
    /// takeover or a cancel is seen before the step.
    async fn replayable(&self, id: &str) -> bool {
        if let Some(known) = lock(&self.replayable).get(id) {
            return *known;
        }
        let Some(StepBody::Tool(step)) = self.config.steps.get(id).map(|s| &s.body) else { return false };
        let input = self.chat_input(LoopContext::default(), id, Vec::new());
        let template = step.input.clone().unwrap_or_else(|| json!({}));
        let effect = self.exec.runs.runtime().tool_effect(&input, &step.tool, &template).await;
        let replayable = effect.is_some_and(|e| e.is_replayable());
        lock(&self.replayable).insert(id.to_owned(), replayable);
        replayable
    }

    /// Run from `start` along `next` until `end`, on `context`; `branch`: inside a parallel
    /// branch (agents there have no durable checkpoint of their own); `top`: the run's own
    /// path (not a branch or a `while` body), checkpointed after every step. `trail` names the
    /// path (see [`place`]).
    fn walk<'s>(
        &'s self,
        start: &'s str,
        trail: &'s str,
        context: &'s mut Value,
        branch: bool,
        top: bool,
    ) -> BoxFuture<'s, Result<(), LoopError>> {
        async move {
            let mut at = start.to_owned();
            let mut walked = 0;
            while at != END {
                // A server paused past its lease renews it before starting a step, and stops
                // when another one claimed the run meanwhile.
                self.checkpoints.hold_lease().await?;
                lock(&self.frontier).insert(at.clone());
                let executed = self.executed.fetch_add(1, Ordering::Relaxed);
                if executed >= self.budget {
                    return Err(LoopError::StepBudgetExceeded(self.budget));
                }
                let place = place(trail, if top { executed } else { walked });
                walked += 1;
                let step = self
                    .config
                    .steps
                    .get(&at)
                    .ok_or_else(|| LoopError::NotFound(format!("{}: step `{at}`", self.loop_id)))?;
                match step.when.as_deref() {
                    Some(guard) if !holds(guard, context) => {
                        let mut event = TraceEvent::new(TraceKind::StepSkip, Some(&at)).status(TraceStatus::Skipped);
                        event.when = Some(guard.to_owned());
                        self.tracer.emit(event);
                    }
                    _ => self.step(&at, &place, step, context, branch).await?,
                }
                lock(&self.frontier).remove(&at);
                let (to, transition) = next(step, context);
                let mut event = TraceEvent::new(TraceKind::Transition, None);
                event.from_step_key = Some(at.clone());
                event.from = Some(at.clone());
                event.to_step_key = Some(to.clone());
                event.to = Some(to.clone());
                if let Some(transition) = transition {
                    event.when.clone_from(&transition.when);
                    event.data = transition.label.as_ref().map(|label| json!({"label": label}));
                }
                self.tracer.emit(event);
                if self.governed(LifecycleHook::LoopTransition) {
                    let payload = json!({"transition": {"from": at, "to": to}});
                    let moving = At { step: Some((&at, step)), tool: None, payload };
                    self.govern(LifecycleHook::LoopTransition, &moving, context).await?;
                }
                if top && to != END {
                    let small = matches!(step.body, StepBody::Tool(_)) && self.replayable(&to).await;
                    self.checkpoint(context, &to, small).await?;
                }
                at = to;
            }
            Ok(())
        }
        .boxed()
    }

    /// Run one step (its guard held), at `place` in the run.
    async fn step(
        &self,
        id: &str,
        place: &str,
        step: &Step,
        context: &mut Value,
        branch: bool,
    ) -> Result<(), LoopError> {
        let alias = match &step.body {
            StepBody::Tool(t) => t.save_as.clone().unwrap_or_else(|| t.tool.clone()),
            _ => id.to_owned(),
        };
        let mut start = TraceEvent::new(TraceKind::StepStart, Some(id))
            .status(TraceStatus::Started)
            .data(json!({"type": step.body.type_name()}));
        start.step = Some(alias.clone());
        // An agent step's projection is resolved first, so its trace (paths, size, hash,
        // validity — never values) is on `step.start`.
        let projection = match &step.body {
            StepBody::Agent(agent) => {
                agent.input.as_ref().map(|template| project(template, agent.input_schema.as_ref(), context, &mut start))
            }
            _ => None,
        };
        self.tracer.emit(start);
        let at = At { step: Some((id, step)), tool: None, payload: json!({}) };
        let done = match self.govern(LifecycleHook::StepBefore, &at, context).await {
            Err(e) => Err(e),
            Ok(()) => match &step.body {
                StepBody::Agent(agent) => match projection.transpose() {
                    // Boxed: an agent step's future (a whole durable run) is kilobytes, and
                    // every tool step would otherwise carry and copy its room.
                    Ok(projection) => Box::pin(self.agent(id, step, agent, projection, context, branch)).await,
                    Err(e) => Err(e),
                },
                StepBody::Tool(tool) => {
                    let empty;
                    let template = match &tool.input {
                        Some(input) => input,
                        None => {
                            empty = json!({});
                            &empty
                        }
                    };
                    self.call(id, Some((step, place)), &alias, &tool.tool, template, context, None).await
                }
                StepBody::Human(human) => self.human(id, human, context).await,
                StepBody::Parallel(parallel) => self.parallel(place, parallel, context).await,
                StepBody::While(w) => self.repeat(id, place, w, context, branch).await,
            },
        };
        let done = match done {
            Ok(()) if !self.governed(LifecycleHook::StepAfter) => Ok(()),
            Ok(()) => {
                let output = context::get(context, &alias).cloned().unwrap_or(Value::Null);
                let at = At { step: Some((id, step)), tool: None, payload: json!({"output": output}) };
                self.govern(LifecycleHook::StepAfter, &at, context).await
            }
            failed => failed,
        };
        let mut end = TraceEvent::new(TraceKind::StepEnd, Some(id));
        end.step = Some(alias);
        match &done {
            Ok(()) => self.tracer.emit(end.status(TraceStatus::Completed)),
            Err(e) => {
                end.error = Some(e.to_string());
                self.tracer.emit(end.status(TraceStatus::Failed).data(json!({"code": e.code()})));
            }
        }
        done
    }

    /// The engine request of an agent or tool step: surface `loop`, the loop's and the
    /// step's policy layers (not chat's), the request's own narrowing, and the step's own
    /// settings in `context` (loop id, step and the loop's tools are filled in here).
    fn chat_input(&self, context: LoopContext, step: &str, messages: Vec<Message>) -> ChatInput {
        let mut input = ChatInput::new(self.request.agent.clone(), messages);
        input.surface = Surface::Loop;
        input.loop_context = Some(LoopContext {
            loop_id: self.loop_id.to_owned(),
            step: step.to_owned(),
            allowed_tools: self.config.allowed_tools.clone(),
            ..context
        });
        input.allowed_tools.clone_from(&self.request.allowed_tools);
        input.user.clone_from(&self.request.user);
        input.metadata.clone_from(&self.request.metadata);
        input.owner.clone_from(&self.request.owner);
        // `{run}-{step}-{executed}`, made for every step (without `format!`'s machinery).
        let executed = self.executed.load(Ordering::Relaxed);
        let mut run_id = String::with_capacity(self.run_id.len() + step.len() + 12);
        for part in [self.run_id, "-", step, "-", itoa::Buffer::new().format(executed)] {
            run_id.push_str(part);
        }
        input.run_id = Some(run_id);
        input
    }

    async fn agent(
        &self,
        id: &str,
        node: &Step,
        step: &AgentStep,
        projection: Option<Value>,
        context: &mut Value,
        branch: bool,
    ) -> Result<(), LoopError> {
        let mut system = step.system_prompt.clone().unwrap_or_default();
        let messages = match projection {
            // The projection replaces the shared context and the conversation for this step.
            Some(input) => vec![Message::system(system), Message::user(input.to_string())],
            None => {
                let shared: Map<String, Value> = context
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| k.as_str() != REQUEST)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !shared.is_empty() {
                    system.push_str(&format!(
                        "\n\nLoop context (JSON, outputs of earlier steps):\n{}",
                        Value::Object(shared)
                    ));
                }
                std::iter::once(Message::system(system)).chain(self.request.messages.iter().cloned()).collect()
            }
        };
        let overrides = LoopContext {
            step_allowed_tools: step.allowed_tools().map(<[String]>::to_vec),
            step_skills: step.skills.clone(),
            model: step.model.clone(),
            reasoning: step.reasoning,
            max_turns: step.max_turns,
            temperature: step.temperature.clone(),
            ..LoopContext::default()
        };
        let mut input = self.chat_input(overrides, id, messages);
        input.tool_choice = match &step.tool_choice {
            None | Some(StepToolChoice::Mode(ToolChoiceMode::Auto)) => ToolChoice::Auto,
            Some(StepToolChoice::Mode(ToolChoiceMode::NoTools)) => ToolChoice::None,
            Some(StepToolChoice::Mode(ToolChoiceMode::Required)) => ToolChoice::Required,
            Some(StepToolChoice::Forced(forced)) => match (&forced.tool, forced.mode) {
                (Some(tool), ToolChoiceMode::Required) => ToolChoice::Tool(tool.clone()),
                (_, ToolChoiceMode::NoTools) => ToolChoice::None,
                (_, ToolChoiceMode::Auto) => ToolChoice::Auto,
                (None, ToolChoiceMode::Required) => ToolChoice::Required,
            },
        };
        if let Some(output) = &step.output {
            let wire =
                json!({"type": "json_schema", "json_schema": {"name": schema_name(id), "schema": output.schema}});
            input.response_format = ResponseFormat::from_wire(&wire).map_err(|e| LoopError::StepFailed {
                step: id.to_owned(),
                code: "invalid_output_schema".into(),
                message: e,
            })?;
        }
        input.parallel_branch = branch;
        let structured = input.response_format.is_structured();
        // `stopWhen`: the step's turn loop goes on in the same session until the guard holds
        // over the context (its output merged), within the step's turn budget.
        let budget = step
            .max_turns
            .or_else(|| self.exec.runs.runtime().loaded().agent(&self.request.agent).map(|a| a.config.max_turns()))
            .unwrap_or(1);
        let mut used = 0;
        loop {
            let at = At { step: Some((id, node)), tool: None, payload: json!({}) };
            self.govern(LifecycleHook::ModelBefore, &at, context).await?;
            let answer = self.invoke(id, input.clone()).await?;
            used += answer.turns;
            let content = answer.content.unwrap_or_default();
            let output = if structured {
                serde_json::from_str(&content).map_err(|e| LoopError::StepFailed {
                    step: id.to_owned(),
                    code: "invalid_structured_output".into(),
                    message: e.to_string(),
                })?
            } else {
                Value::String(content)
            };
            context::set(context, id, output.clone())?;
            *lock(&self.last) = Some(output);
            let Some(stop) = step.stop_when.as_ref().filter(|stop| !holds(&stop.expression, context)) else {
                return Ok(());
            };
            if used >= budget {
                return Err(LoopError::StopConditionUnmet {
                    step: id.to_owned(),
                    expression: stop.expression.clone(),
                    turns: used,
                });
            }
            input.session_id = Some(answer.session_id);
            input.messages = vec![Message::user(format!(
                "The step is not done: `{}` does not hold yet over the loop context. Continue, then answer again.",
                stop.expression
            ))];
            if let Some(overrides) = input.loop_context.as_mut() {
                overrides.max_turns = Some(budget - used);
            }
        }
    }

    /// One invocation of an agent step through the engine entry, its tool calls traced.
    async fn invoke(&self, id: &str, input: ChatInput) -> Result<polpo_engine::RunAnswer, LoopError> {
        let run_id = input.run_id.clone().unwrap_or_default();
        let mut invoked = self.exec.runs.invoke(input, Meter::start()).await?;
        // Held while the step runs: dropping the run (its caller went away) cancels the agent.
        let _attached = invoked.attachment();
        let answer = loop {
            match invoked.next().await {
                Some(Progress::Event(event, _)) => self.trace_agent_tool(id, &event),
                Some(Progress::Finished(finished)) => break finished.result,
                None => return Err(LoopError::Aborted),
            }
        };
        let answer =
            answer.map_err(|f| LoopError::StepFailed { step: id.to_owned(), code: f.code, message: f.message })?;
        lock(&self.agent_runs).push(AgentRun { step: id.to_owned(), run_id, session_id: answer.session_id.clone() });
        Ok(answer)
    }

    /// An agent step's tool calls as `tool.call`/`tool.result` (name, call id and status; never
    /// arguments or results).
    fn trace_agent_tool(&self, step: &str, event: &RunEvent) {
        let (kind, name, call, status, error) = match event {
            RunEvent::ToolCalling { id, name, .. } => (TraceKind::ToolCall, name, id, TraceStatus::Started, None),
            RunEvent::ToolCompleted { id, name, is_error, .. } => {
                let failed = is_error.then(|| "the tool call failed or was refused".to_owned());
                (
                    TraceKind::ToolResult,
                    name,
                    id,
                    if *is_error { TraceStatus::Failed } else { TraceStatus::Completed },
                    failed,
                )
            }
            _ => return,
        };
        let mut traced = TraceEvent::new(kind, Some(step)).status(status).data(json!({"callId": call}));
        traced.tool = Some(name.clone());
        traced.error = error;
        self.tracer.emit(traced);
    }

    /// Call `tool` with `template`'s bindings resolved, its output saved at `alias`, traced:
    /// a tool step's (`step`: its definition and place; `hook: None`; `tool:before`/`tool:after`
    /// govern it) or a hook action's at point `hook` (`data.kind: "hook"`).
    #[allow(clippy::too_many_arguments)] // the one call path of tool steps and hook actions
    async fn call(
        &self,
        id: &str,
        step: Option<(&Step, &str)>,
        alias: &str,
        tool: &str,
        template: &Value,
        context: &mut Value,
        hook: Option<LifecycleHook>,
    ) -> Result<(), LoopError> {
        let mut paths = Vec::new();
        let arguments = context::resolve(template, context, &mut paths)?;
        context::writable(alias)?;
        let facts = |mut data: Value| {
            if let Some(hook) = hook {
                data["kind"] = json!("hook");
                data["hook"] = json!(hook.as_str());
            }
            data
        };
        if hook.is_none() {
            let at = At { step: step.map(|(s, _)| (id, s)), tool: Some((tool, &arguments)), payload: json!({}) };
            self.govern(LifecycleHook::ToolBefore, &at, context).await?;
        }
        let mut call = TraceEvent::new(TraceKind::ToolCall, Some(id))
            .status(TraceStatus::Started)
            .data(facts(json!({"bindings": paths})));
        call.step = Some(alias.to_owned());
        call.tool = Some(tool.to_owned());
        self.tracer.emit(call);
        let input = self.chat_input(LoopContext::default(), id, Vec::new());
        let runtime = self.exec.runs.runtime();
        // A tool step whose call is not replayable goes through the effect ledger (a hook
        // action is not a step of the run: it runs where it is reached).
        let ledgered = match (step, hook) {
            (Some((_, place)), None) => {
                runtime.tool_effect(&input, tool, &arguments).await.is_some_and(|e| !e.is_replayable()).then_some(place)
            }
            _ => None,
        };
        let (called, recorded) = if let Some(place) = ledgered {
            self.call_once(id, place, &input, tool, &arguments).await?
        } else {
            (self.call_tool(&input, tool, &arguments).await?, false)
        };
        let mut result = TraceEvent::new(TraceKind::ToolResult, Some(id)).data(facts(if recorded {
            json!({"effect": "recorded"})
        } else {
            json!({})
        }));
        result.step = Some(alias.to_owned());
        result.tool = Some(tool.to_owned());
        let outcome = match called {
            Ok(text) => Ok(serde_json::from_str(&text).unwrap_or(Value::String(text))),
            Err(DirectCallError::InvalidInput(e)) => Err(LoopError::ToolInputInvalid(e)),
            Err(DirectCallError::Refused(e) | DirectCallError::Failed(e)) => Err(LoopError::ToolFailed(e)),
        };
        match outcome {
            Ok(output) => {
                self.tracer.emit(result.status(TraceStatus::Completed));
                if hook.is_some() || !self.governed(LifecycleHook::ToolAfter) {
                    return context::set(context, alias, output);
                }
                context::set(context, alias, output.clone())?;
                let at = At {
                    step: step.map(|(s, _)| (id, s)),
                    tool: Some((tool, &arguments)),
                    payload: json!({"output": output}),
                };
                self.govern(LifecycleHook::ToolAfter, &at, context).await
            }
            Err(e) => {
                result.error = Some(e.to_string());
                self.tracer.emit(result.status(TraceStatus::Failed));
                Err(e)
            }
        }
    }

    /// `tool` called with `arguments` through the engine's gates, as `input`'s agent.
    async fn call_tool(
        &self,
        input: &ChatInput,
        tool: &str,
        arguments: &Value,
    ) -> Result<Result<String, DirectCallError>, LoopError> {
        let cancel = CancellationToken::new();
        let _cancel_on_drop = cancel.clone().drop_guard();
        Ok(self.exec.runs.runtime().call_tool(input, tool, arguments.clone(), &cancel, &|_| {}).await?)
    }

    /// [`Run::call_tool`] for a side-effecting tool step, through the effect ledger as the
    /// engine's durable runs do: its intent is recorded before it runs and its outcome after,
    /// under the key [`effect_key`] gives the step at `place`, which a resumed run reaches
    /// again whatever order parallel branches ran in. The run is held first (a server whose
    /// lease another one claimed never starts the effect). A call whose outcome is recorded is
    /// not run again (its outcome is reused: `true`); one with an intent but no outcome may or
    /// may not have happened (its server stopped in between), so the run fails
    /// `effect_unconfirmed` instead of running it blindly — unless an operator reconciled it
    /// `not_applied` for this resume, when it runs now under the same key.
    async fn call_once(
        &self,
        id: &str,
        place: &str,
        input: &ChatInput,
        tool: &str,
        arguments: &Value,
    ) -> Result<(Result<String, DirectCallError>, bool), LoopError> {
        let key = effect_key(self.run_id, place, id, arguments);
        let effects = &self.exec.runs.runtime().store().effects;
        self.checkpoints.hold().await?;
        let rerun = |key: &str| {
            let mut reruns = lock(&self.exec.reruns);
            let granted = reruns.get(self.run_id).is_some_and(|k| k == key);
            granted && reruns.remove(self.run_id).is_some()
        };
        match effects.record_effect_intent(&key).await? {
            EffectClaim::Fresh => Ok((self.perform(&key, input, tool, arguments).await?, false)),
            EffectClaim::Pending(_) if rerun(&key) => Ok((self.perform(&key, input, tool, arguments).await?, false)),
            EffectClaim::Done(effect) => {
                let outcome = effect.result.unwrap_or_default();
                let text = outcome.get("text").or_else(|| outcome.get("message")).and_then(Value::as_str);
                let text = text.unwrap_or_default().to_owned();
                let called = match (outcome["ok"].as_bool(), outcome["invalid"].as_bool()) {
                    (Some(true), _) => Ok(text),
                    (_, Some(true)) => Err(DirectCallError::InvalidInput(text)),
                    _ => Err(DirectCallError::Failed(text)),
                };
                Ok((called, true))
            }
            EffectClaim::Pending(effect) => Err(LoopError::EffectUnconfirmed {
                step: id.to_owned(),
                tool: tool.to_owned(),
                key,
                started_at: effect.created_at.to_rfc3339(),
            }),
        }
    }

    /// Run the tool of effect `key` (its intent recorded) and record its outcome.
    async fn perform(
        &self,
        key: &str,
        input: &ChatInput,
        tool: &str,
        arguments: &Value,
    ) -> Result<Result<String, DirectCallError>, LoopError> {
        let called = self.call_tool(input, tool, arguments).await;
        let outcome = match &called {
            Ok(Ok(text)) => json!({"ok": true, "text": text}),
            Ok(Err(DirectCallError::InvalidInput(e))) => json!({"ok": false, "invalid": true, "message": e}),
            Ok(Err(DirectCallError::Refused(e) | DirectCallError::Failed(e))) => json!({"ok": false, "message": e}),
            Err(e) => json!({"ok": false, "message": e.to_string()}),
        };
        self.exec.runs.runtime().store().effects.record_effect_result(key, outcome).await?;
        called
    }

    /// Whether lifecycle point `hook` has anything to evaluate (permissions, policies or hook
    /// actions there): a point without is passed without building its payload (a step's
    /// output copied, per step).
    fn governed(&self, hook: LifecycleHook) -> bool {
        let actions = self.config.hooks.as_ref().is_some_and(|h| h.contains_key(hook.as_str()));
        self.config.permissions.is_some() || self.config.policies.is_some() || actions
    }

    /// Permissions, then policies, then hook actions at lifecycle point `hook` (inventory
    /// §6.4), each rule reported as `permission.result`/`policy.result`. A matching deny (or an
    /// allow-list nothing matched) fails the run; a matching approval not yet approved stops it
    /// `awaiting_approval`; a failing hook action fails it unless its `onError` is `continue`.
    fn govern<'s>(
        &'s self,
        hook: LifecycleHook,
        at: &'s At<'s>,
        context: &'s mut Value,
    ) -> BoxFuture<'s, Result<(), LoopError>> {
        async move {
            if !self.governed(hook) {
                return Ok(());
            }
            let actions = self.config.hooks.as_ref().and_then(|h| h.get(hook.as_str())).map(Vec::as_slice);
            let mut scope = context.clone();
            scope["loop"] = json!({"name": self.loop_id});
            if let Some((id, step)) = at.step {
                scope["step"] = json!({"name": id, "type": step.body.type_name()});
            }
            if let Some((name, input)) = at.tool {
                scope["tool"] = json!({"name": name, "input": input});
            }
            for (key, value) in at.payload.as_object().into_iter().flatten() {
                scope[key] = value.clone();
            }
            let point = Point {
                hook,
                loop_name: self.loop_id,
                step: at.step.map(|(id, _)| id),
                step_type: at.step.map(|(_, s)| s.body.type_name()),
                tool: at.tool.map(|(name, _)| name),
            };
            let (results, verdict) = governance::evaluate(self.config, &point, &scope, &|gate| {
                self.approved.iter().any(|a| a.gate == *gate)
            });
            for result in results {
                let kind = match result.kind {
                    RuleKind::Permission => TraceKind::PermissionResult,
                    RuleKind::Policy => TraceKind::PolicyResult,
                };
                let status = if result.matched { TraceStatus::Completed } else { TraceStatus::Skipped };
                let event = TraceEvent::new(kind, point.step).status(status);
                self.tracer.emit(event.data(serde_json::to_value(&result).unwrap_or_default()));
            }
            match verdict {
                Verdict::Proceed => {}
                Verdict::Deny { kind: RuleKind::Permission, message, .. } => {
                    return Err(LoopError::PermissionDenied(message));
                }
                Verdict::Deny { kind: RuleKind::Policy, message, .. } => return Err(LoopError::PolicyDenied(message)),
                Verdict::Approval { gate, message } => {
                    let event = TraceEvent::new(TraceKind::ApprovalRequired, point.step).status(TraceStatus::Started);
                    self.tracer.emit(event.data(json!({"gate": gate, "message": message})));
                    return Err(LoopError::ApprovalRequired { gate, message });
                }
            }
            for action in actions.unwrap_or_default() {
                if action.when.as_deref().is_some_and(|w| !holds(w, &scope)) {
                    continue;
                }
                let template = action.input.clone().unwrap_or_else(|| json!({}));
                let alias = action.save_as.clone().unwrap_or_else(|| action.tool.clone());
                let id = point.step.unwrap_or(hook.as_str());
                let ran = self.call(id, None, &alias, &action.tool, &template, context, Some(hook)).await;
                match (ran, action.on_error) {
                    (Ok(()), _) | (Err(_), Some(OnError::Continue)) => {}
                    (Err(e), _) => {
                        return Err(LoopError::HookFailed(format!(
                            "loop hook `{}` action `{}` failed: {e}",
                            hook.as_str(),
                            action.tool
                        )));
                    }
                }
            }
            Ok(())
        }
        .boxed()
    }

    async fn human(&self, id: &str, step: &HumanStep, context: &mut Value) -> Result<(), LoopError> {
        let schema = step.output.as_ref().map(|o| o.schema.clone());
        let pending = |answer| Some(PendingHuman { step: id.to_owned(), schema: schema.clone(), answer });
        let output = match self.exec.humans.wait(self.run_id, id, self.request.owner.clone(), schema.clone()) {
            // Given on another server, stored with the run, which resumed here to take it.
            Awaited::Stored(output) => output,
            Awaited::Waiting(answer) => {
                let mut request = TraceEvent::new(TraceKind::HumanRequest, Some(id))
                    .status(TraceStatus::Started)
                    .data(json!({"runId": self.run_id, "schema": schema}));
                request.human = Some(id.to_owned());
                self.tracer.emit(request);
                // Stored as waiting, with no lease: the answer may reach any server (human.rs).
                self.save(LoopRunStatus::AwaitingHuman, pending(None), None).await?;
                let handed = answer.await.map_err(|_| LoopError::Aborted)?;
                // Stored with the run before it goes on; refused if one was stored elsewhere first.
                let stored = self.save(LoopRunStatus::Running, pending(Some(handed.output.clone())), None).await;
                let _ = handed.stored.send(stored.is_ok());
                stored?;
                handed.output
            }
        };
        let mut result = TraceEvent::new(TraceKind::HumanResult, Some(id)).status(TraceStatus::Completed);
        result.human = Some(id.to_owned());
        self.tracer.emit(result);
        context::set(context, id, output.clone())?;
        *lock(&self.last) = Some(output);
        Ok(())
    }

    /// Branches at once, each on a copy of the context; done once `join` of them are (the
    /// rest are cancelled), their contexts merged over this one in branch order. Branch `i`
    /// of the step at `place` walks trail `{place}.{i}/`.
    async fn parallel(&self, place: &str, step: &ParallelStep, context: &mut Value) -> Result<(), LoopError> {
        let trails: Vec<String> = (0..step.branches.len()).map(|i| format!("{place}.{i}/")).collect();
        let need = match step.join {
            None | Some(Join::Mode(JoinMode::All)) => step.branches.len(),
            Some(Join::Mode(JoinMode::Any)) => 1,
            Some(Join::Count(n)) => (n as usize).min(step.branches.len()),
        };
        let mut copies: Vec<Value> = step.branches.iter().map(|_| context.clone()).collect();
        let mut running: FuturesUnordered<_> = step
            .branches
            .iter()
            .zip(copies.iter_mut().zip(&trails))
            .enumerate()
            .map(|(i, (branch, (copy, trail)))| self.walk(branch, trail, copy, true, false).map(move |r| r.map(|()| i)))
            .collect();
        let mut finished = Vec::with_capacity(need);
        while finished.len() < need {
            match running.next().await {
                Some(done) => finished.push(done?),
                None => break,
            }
        }
        drop(running);
        finished.sort_unstable();
        for i in finished {
            for (key, value) in copies[i].as_object().into_iter().flatten() {
                if key != REQUEST {
                    context::set(context, key, value.clone())?;
                }
            }
        }
        Ok(())
    }

    /// The body, in order, while `condition` holds (or until `until` does), at most
    /// `maxIterations` times; both guards are checked before each iteration. Body entry `j`
    /// of iteration `n` of the step at `place` walks trail `{place}.{n}.{j}/`.
    async fn repeat(
        &self,
        id: &str,
        place: &str,
        step: &WhileStep,
        context: &mut Value,
        branch: bool,
    ) -> Result<(), LoopError> {
        let max = step.max_iterations();
        let mut done = 0;
        let record = |done: u32| {
            lock(&self.while_iterations).insert(id.to_owned(), done);
        };
        record(0);
        while done < max {
            let go = match (&step.condition, &step.until) {
                (Some(condition), _) => holds(condition, context),
                (None, Some(until)) => !holds(until, context),
                (None, None) => false,
            };
            if !go {
                break;
            }
            for (j, body) in step.body.as_slice().iter().enumerate() {
                self.walk(body, &format!("{place}.{done}.{j}/"), context, branch, false).await?;
            }
            done += 1;
            record(done);
        }
        Ok(())
    }
}

/// A step execution's place in its run: `trail` (the path: empty for the run's own, else
/// the container step's place and the branch, iteration or body entry, as in `3.1/`), then
/// its position on that path — on the run's own path the run's step count when it started
/// (a checkpoint stores that count, so a resume reaches the same places), elsewhere its
/// position within its walk (a walk is sequential, so parallel branches cannot disturb it).
fn place(trail: &str, position: u32) -> String {
    let mut place = String::with_capacity(trail.len() + 10);
    place.push_str(trail);
    place.push_str(itoa::Buffer::new().format(position));
    place
}

/// The effect-ledger key of a side-effecting tool step `step` at `place` in run `run_id`
/// called with `arguments`: `loop/{run}/{place}/{step}/{sha256(arguments) prefix}`, the same
/// whenever a resumed run reaches that call again.
fn effect_key(run_id: &str, place: &str, step: &str, arguments: &Value) -> String {
    let digest = Sha256::digest(arguments.to_string().as_bytes());
    format!("loop/{run_id}/{place}/{step}/{}", hex::encode(&digest[..16]))
}

/// Where a step goes: its `next` step, the first conditional transition whose `when` holds,
/// else the first without `when`, else `end`; with the transition that decided.
fn next<'a>(step: &'a Step, context: &Value) -> (String, Option<&'a Transition>) {
    match &step.next {
        None => (END.to_owned(), None),
        Some(Next::To(to)) => (to.clone(), None),
        Some(Next::Branch(transitions)) => {
            let chosen = transitions
                .iter()
                .find(|t| t.when.as_deref().is_some_and(|w| holds(w, context)))
                .or_else(|| transitions.iter().find(|t| t.when.is_none()));
            (chosen.map_or_else(|| END.to_owned(), |t| t.to.clone()), chosen)
        }
    }
}

/// Resolve an agent step's `input` projection, check its size and `inputSchema`, and put
/// what the trace may show (binding paths, UTF-8 size, validity, sha256) on `event`.
fn project(
    template: &Value,
    schema: Option<&Value>,
    context: &Value,
    event: &mut TraceEvent,
) -> Result<Value, LoopError> {
    let mut paths = Vec::new();
    let resolved = context::resolve(template, context, &mut paths);
    let mut facts = json!({"bindings": paths});
    let checked = resolved.and_then(|value| {
        let text = value.to_string();
        facts["bytes"] = json!(text.len());
        facts["sha256"] = json!(hex::encode(Sha256::digest(text.as_bytes())));
        if text.len() > MAX_PROJECTION_BYTES {
            return Err(LoopError::InputTooLarge(text.len()));
        }
        if let Some(schema) = schema {
            let validator = jsonschema::draft202012::new(schema)
                .map_err(|e| LoopError::InputInvalid(format!("the inputSchema is invalid: {e}")))?;
            let problems: Vec<String> =
                validator.iter_errors(&value).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
            if !problems.is_empty() {
                return Err(LoopError::InputInvalid(problems.join("; ")));
            }
        }
        Ok(value)
    });
    facts["valid"] = json!(checked.is_ok());
    let data = event.data.get_or_insert_with(|| json!({}));
    data["projection"] = facts;
    checked
}

/// A `json_schema.name` from a step id (`[A-Za-z0-9_-]{1,64}`).
fn schema_name(step: &str) -> String {
    let name: String = step.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').take(64).collect();
    if name.is_empty() { "step_output".into() } else { name }
}

/// Run `run_id` of loop `loop_id` for `request`, at `state`, `running` with nothing else
/// known yet: what a start stores, and what every later write of the run fills in.
fn run_record(run_id: &str, loop_id: &str, request: &LoopRequest, state: LoopState) -> LoopRunRecord {
    LoopRunRecord {
        id: run_id.to_owned(),
        loop_id: loop_id.to_owned(),
        agent: request.agent.clone(),
        status: LoopRunStatus::Running,
        owner: request.owner.clone(),
        user: request.user.clone(),
        request: request.stored(),
        state,
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
