//! The runtime as callers see it: a loaded project, its providers, tools and store, and the
//! preparation every invocation goes through before its turn loop runs.
//!
//! Everything that must be decided once per request happens here, in one place, in the order
//! of ARCHITECTURE.md: resolve the agent → its model chain → its effective tool policy (agent
//! ∩ chat ∩ request) → its hook packs → load the session → run the turn loop → persist what
//! the turn added. Surfaces translate their input into a [`ChatInput`] and hand it to the run
//! manager's `invoke` (in `runs`), which also decides how the answer is delivered.

use crate::approvals::{ApprovalDesk, Pausable, Waiting};
use crate::error::EngineError;
use crate::events::bus::{DEFAULT_REPLAY, EventBus, RunEvents};
use crate::events::{EventSink, RunEvent};
use crate::hooks::{HookRuntime, InvocationHooks, VerifierAgent, invocation_info, system_clock};
use crate::interaction::{Interactions, Suggestion};
use crate::invocation::Invocation;
use crate::loaded::{Loaded, assigned_skills, skill_access};
use crate::request::{ChatError, ChatInput, ChatOutput, DeliveryMode, Identity};
use crate::routing::ModelRoute;
use crate::tools::exec::DirectCallError;
use crate::tools::set::ToolSet;
use crate::turn::{RunControl, RunOutcome, run_turns_controlled};
use chrono::{DateTime, Utc};
use polpo_core::config::{Agent, ChatExecution, ToolLoadingMode};
use polpo_core::hooks::{Handler, HookSet};
use polpo_core::message::{Message, Role};
use polpo_core::model::ModelSelection;
use polpo_core::policy::{PolicyLayer, ToolPolicy};
use polpo_core::problem::Problem;
use polpo_core::redact::Redactor;
use polpo_core::tool::ToolEffect;
use polpo_llm::{ModelProvider, Providers, ResolveError};
use polpo_store::{Clock, IdGen, Lease, NewMessage, NewSession, Session, Store};
use polpo_tools::{Tool, ToolContext, ToolSource};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Most stored messages replayed into one model call's history.
pub const MAX_HISTORY_MESSAGES: usize = 2000;

/// A chat request that passed every check and is ready to run. Boxed: it holds the whole
/// invocation (kilobytes), and it moves from `prepare` through every layer down to the task
/// that runs it, so a pointer moves instead of a copy at each.
pub struct PreparedChat(Box<Prepared>);

/// What a [`PreparedChat`] holds.
struct Prepared {
    runtime: Arc<Runtime>,
    invocation: Invocation,
    identity: Identity,
    session: Session,
    history: Vec<Message>,
    new_messages: Vec<Message>,
    cancel: CancellationToken,
    /// Steering (and, for a durable run, its checkpoint); `None` for plain chat.
    control: Option<Arc<dyn RunControl>>,
    /// A new session not written yet: it is written with the turn's messages in one write
    /// when the turn ends ([`polpo_store::SessionStore::create_session_with_messages`]).
    unwritten: Option<NewSession>,
    /// Which way model routing sent this request; `None` when the agent did not opt in.
    route: Option<ModelRoute>,
    /// A durable run's lease: the turn's messages are appended to the session only while it
    /// still holds the run (`None`: a turn in its caller's request).
    fence: Option<Lease>,
}

impl PreparedChat {
    /// The session this turn belongs to (already stored when new).
    pub fn session(&self) -> &Session {
        &self.0.session
    }

    /// The run id this turn reports under.
    pub fn run_id(&self) -> &str {
        &self.0.identity.run_id
    }

    /// Who invoked the agent, as hooks and custom tools see it.
    pub fn identity(&self) -> &Identity {
        &self.0.identity
    }

    /// Which way model routing sent this request (`None`: the agent did not opt in).
    pub fn route(&self) -> Option<&ModelRoute> {
        self.0.route.as_ref()
    }

    /// The request's new messages (what follows the stored history).
    pub(crate) fn new_messages(&self) -> &[Message] {
        &self.0.new_messages
    }

    /// Cancels the turn: its model call, its tools.
    pub(crate) fn cancel(&self) -> &CancellationToken {
        &self.0.cancel
    }

    /// The agent's server tools.
    pub(crate) fn tools(&self) -> &ToolSet {
        &self.0.invocation.tools
    }

    /// Run under `control`: it delivers steering at safe boundaries and keeps the gate state.
    pub(crate) fn controlled_by(mut self, control: Arc<dyn RunControl>) -> Self {
        self.0.control = Some(control);
        self
    }

    /// Run as a durable run: with `tools` (the agent's, `write` ones behind the effect
    /// ledger), with the `maxTurns` left after the `turns_used` a resumed run already spent
    /// (at least one, to finish), pausing as `run` when a hook's `ask` waits for a reviewer, and
    /// storing its messages as the holder of `fence`.
    pub(crate) fn durable(
        mut self,
        tools: Vec<Arc<dyn Tool>>,
        turns_used: u32,
        run: Arc<dyn Pausable>,
        fence: Lease,
    ) -> Self {
        self.0.fence = Some(fence);
        // A hook's `ask` pauses the run until a reviewer decides.
        if let Some(desk) = &self.0.invocation.approvals {
            let desk = ApprovalDesk { waiting: Waiting::Durable(run), ..(**desk).clone() };
            self.0.invocation.approvals = Some(Arc::new(desk));
        }
        self.0.invocation.tools = Arc::new(ToolSet::new(tools));
        self.0.invocation.max_turns = self.0.invocation.max_turns.saturating_sub(turns_used).max(1);
        self
    }

    /// Run the agent's turn loop over the session's history plus the new messages, then store
    /// the new messages and the turn's output in one append (none for an unstored turn).
    ///
    /// Nothing is stored when the turn fails before producing anything, so a client may retry
    /// with the same messages; a run that used up `maxTurns` keeps its transcript.
    pub async fn run(self, sink: EventSink<'_>) -> Result<ChatOutput, ChatError> {
        let Prepared {
            runtime,
            invocation,
            identity,
            session,
            history,
            new_messages,
            cancel,
            control,
            route: _,
            unwritten,
            fence,
        } = *self.0;
        let stored = identity.session_id.is_some();
        let run_id = identity.run_id;
        let events = RunEvents::new(&runtime.bus, &run_id, &session.id, &invocation.agent);
        events.started();
        let reasoning = std::sync::Mutex::new(crate::reasoning::ReasoningLog::default());
        let forward = |event: RunEvent| {
            events.forward(&event);
            reasoning.lock().unwrap_or_else(PoisonError::into_inner).observe(&event);
            sink(event);
        };
        let mut conversation = history;
        conversation.extend(new_messages.iter().cloned());
        let result = run_turns_controlled(&invocation, conversation, &forward, &cancel, control.as_deref()).await;
        let produced = match &result {
            Ok(outcome) => outcome.messages.clone(),
            Err(EngineError::MaxTurnsExhausted { transcript, .. }) => transcript.clone(),
            Err(_) => Vec::new(),
        };
        let nothing = produced.is_empty() && result.is_err();
        let session = if !stored || (nothing && unwritten.is_none()) {
            session
        } else {
            let produced =
                reasoning.lock().unwrap_or_else(PoisonError::into_inner).attach(produced).collect::<Vec<_>>();
            // A new session is written even when the turn failed before producing anything
            // (empty, as the client was told its id), so a retry may name it.
            let to_store = match nothing {
                true => Vec::new(),
                false => new_messages.iter().cloned().map(NewMessage::new).chain(produced).collect(),
            };
            let written = match unwritten {
                Some(new) => runtime.store.sessions.create_session_with_messages(new, to_store).await.inspect(|c| {
                    events.session_created(&c.session);
                }),
                None => {
                    runtime.store.sessions.append_messages_fenced(&session.id, to_store, None, fence.as_ref()).await
                }
            };
            match written {
                Ok(appended) => {
                    events.messages_added(&appended.messages);
                    appended.session
                }
                Err(e) => return Err(events.failed(e.into())),
            }
        };
        match result {
            Ok(outcome) => {
                // Only a stored turn is committed (an unstored one has no session id).
                if let Some(observer) = runtime.turn_observer.get()
                    && identity.session_id.is_some()
                {
                    let (agent, surface) = (&invocation.agent, identity.surface);
                    crate::committed::notify(observer, agent, &session, &run_id, surface, &new_messages, &outcome)
                        .await;
                }
                let suggestions =
                    suggestions(&invocation, runtime.ids().as_ref(), &new_messages, &outcome, &cancel).await;
                events.completed(&outcome);
                Ok(ChatOutput { run_id, session, outcome, suggestions })
            }
            Err(e) => Err(events.failed(e.into())),
        }
    }
}

/// Suggestions after a successful plain-text answer, when the invocation offers them. Never
/// for structured outputs, client hand-backs, empty answers or a cancelled request.
async fn suggestions(
    inv: &Invocation,
    ids: &dyn IdGen,
    new_messages: &[Message],
    outcome: &RunOutcome,
    cancel: &CancellationToken,
) -> Vec<Suggestion> {
    let Some(policy) = &inv.interactions.suggestions else { return Vec::new() };
    let answer = outcome.content.as_deref().unwrap_or_default();
    if outcome.finish_reason != polpo_core::message::FinishReason::Stop
        || answer.trim().is_empty()
        || inv.response_format.is_structured()
        || cancel.is_cancelled()
    {
        return Vec::new();
    }
    let question = crate::interaction::last_user_text(new_messages).unwrap_or_default();
    tokio::select! {
        _ = cancel.cancelled() => Vec::new(),
        s = crate::interaction::suggest(inv.provider.as_ref(), &inv.model, ids, policy, &question, answer) => s,
    }
}

/// An agent's run-time tools as last seen, and the tool set compiled with them.
/// An agent's cached tool set: the built-in set it was built on, the run-time tools it added,
/// and the result.
type AgentTools = (Arc<ToolSet>, Vec<Arc<dyn Tool>>, Arc<ToolSet>);

/// The runtime: one per server or CLI process.
pub struct Runtime {
    loaded: RwLock<Arc<Loaded>>,
    providers: RwLock<Arc<Providers>>,
    store: Store,
    tools: Arc<ToolSet>,
    /// The system tools plus `skill_list` and `skill_read`, for agents with skills.
    skilled_tools: Arc<ToolSet>,
    /// Where an agent's run-time tools come from (its MCP servers), when anywhere.
    tool_source: Option<Arc<dyn ToolSource>>,
    /// Per agent, the built-in set and run-time tools last seen and the tool set compiled
    /// with them, so schemas are compiled again only when either changes (a server's listing,
    /// or the agent gaining or losing skills on a reload).
    agent_tools: Mutex<HashMap<String, AgentTools>>,
    hook_runtime: HookRuntime,
    offline_model: Option<String>,
    bus: EventBus,
    redactor: Redactor,
    connections: Option<Arc<polpo_connections::Connections>>,
    /// Woken when an approval request with a deadline is stored (by a loop gate or a hook's
    /// `ask`), so the one timeout enforcer looks again.
    approval_deadlines: Arc<tokio::sync::Notify>,
    /// Told about every committed turn (memory learning), once a host sets it.
    turn_observer: std::sync::OnceLock<Arc<dyn crate::committed::TurnObserver>>,
}

impl Runtime {
    /// A runtime for `loaded`, calling models through `providers` and keeping sessions in
    /// `store`. The system tools are compiled once here and shared by every request. Time and
    /// new ids come from the store's seams ([`Store::seams`]): one clock and one id generator
    /// for everything a run records, so a test that fixes them gets the same run every time.
    pub fn new(loaded: Loaded, providers: Providers, store: Store) -> Self {
        let bus = EventBus::with_clock(DEFAULT_REPLAY, store.seams().clock.clone());
        Self {
            loaded: RwLock::new(Arc::new(loaded)),
            providers: RwLock::new(Arc::new(providers)),
            store,
            tools: Arc::new(ToolSet::new(polpo_tools::tools::system_tools())),
            skilled_tools: Arc::new(ToolSet::new(
                polpo_tools::tools::system_tools().into_iter().chain(polpo_skills::skill_tools()).collect(),
            )),
            tool_source: None,
            agent_tools: Mutex::default(),
            hook_runtime: HookRuntime::from_env(),
            offline_model: None,
            bus,
            redactor: Redactor::new(),
            connections: None,
            approval_deadlines: Arc::default(),
            turn_observer: std::sync::OnceLock::new(),
        }
    }

    /// Tell `observer` about every turn committed from now on (a host's memory learning). Set
    /// once, after the runtime is shared, because the observer usually needs the runtime
    /// itself; `false` when one was already set.
    pub fn observe_turns(&self, observer: Arc<dyn crate::committed::TurnObserver>) -> bool {
        self.turn_observer.set(observer).is_ok()
    }

    /// Signalled when an approval request with a deadline is stored: the approval timeout
    /// enforcer waits on it besides the earliest deadline it knows.
    pub fn approval_deadlines(&self) -> &tokio::sync::Notify {
        &self.approval_deadlines
    }

    /// Where this runtime reads "now" (the store's clock).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.store.seams().clock
    }

    /// Where this runtime gets new ids (the store's generator).
    pub fn ids(&self) -> &Arc<dyn IdGen> {
        &self.store.seams().ids
    }

    /// How `input` is delivered: durable when it must outlive its caller and the project runs
    /// chats as runs (`settings.chatExecution: "run"`, the default), steerable in this process
    /// when it runs chats as runs, plain otherwise.
    pub fn delivery_mode(&self, input: &ChatInput) -> DeliveryMode {
        match self.loaded().project.settings().chat_execution() {
            ChatExecution::Run if input.outlive_caller => DeliveryMode::Durable,
            ChatExecution::Run => DeliveryMode::Run,
            _ => DeliveryMode::Inline,
        }
    }

    /// Live events of this runtime (sessions, messages, runs, tools), for SSE subscribers.
    pub fn events(&self) -> &EventBus {
        &self.bus
    }

    /// Use model `id` (e.g. `local/qwen2.5-coder-1.5b`) for agents none of whose models can be
    /// called because their providers have no API key: the project then works offline.
    pub fn with_offline_model(mut self, id: impl Into<String>) -> Self {
        self.offline_model = Some(id.into());
        self
    }

    /// Add each agent's run-time tools from `source` (its MCP servers) to the built-in ones;
    /// they run under the same policy, hooks and schema checks.
    pub fn with_tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.tool_source = Some(source);
        self
    }

    /// The tools of `agent` for one invocation running in `ctx`: the built-in ones, plus
    /// what the tool source has for it.
    async fn agent_tool_set(&self, agent: &Agent, ctx: &ToolContext) -> Arc<ToolSet> {
        let base = self.base_tools(ctx.skills.is_some());
        let Some(source) = &self.tool_source else { return base.clone() };
        let extra = source.tools_for(agent, ctx).await;
        if extra.is_empty() {
            return base.clone();
        }
        let mut cache = self.agent_tools.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen_base, seen, set)) = cache.get(&agent.id)
            && Arc::ptr_eq(seen_base, base)
            && seen.len() == extra.len()
            && seen.iter().zip(&extra).all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return set.clone();
        }
        let builtin = base.specs().filter_map(|s| base.get(&s.name).cloned());
        let set = Arc::new(ToolSet::new(builtin.chain(extra.iter().cloned()).collect()));
        cache.insert(agent.id.clone(), (base.clone(), extra, set.clone()));
        set
    }

    /// Add the project's custom tools (`.polpo/tools/`) to the built-in ones of every agent;
    /// like them, an agent reaches one only through its tool policy, hooks and schema checks.
    pub fn with_custom_tools(mut self, custom: Vec<Arc<dyn Tool>>) -> Self {
        let extend = |set: &ToolSet| {
            let builtin = set.specs().filter_map(|s| set.get(&s.name).cloned());
            Arc::new(ToolSet::new(builtin.chain(custom.iter().cloned()).collect()))
        };
        self.tools = extend(&self.tools);
        self.skilled_tools = extend(&self.skilled_tools);
        self
    }

    /// Cut the values of `redactor` (filled from the vault) out of hook envelopes and tool
    /// results; the list may change while the runtime serves (a vault write refills it).
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// The project's Connections: `http` hook handlers with `connection` get their auth headers
    /// from here, resolved right before each call.
    pub fn with_connections(mut self, connections: Arc<polpo_connections::Connections>) -> Self {
        self.connections = Some(connections);
        self
    }

    /// The redaction list this runtime applies.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// The built-in tools an invocation starts from: with the skill tools when it has skills.
    fn base_tools(&self, skilled: bool) -> &Arc<ToolSet> {
        if skilled { &self.skilled_tools } else { &self.tools }
    }

    /// Override how hooks run (tests let `http` hooks reach loopback).
    pub fn with_hook_runtime(mut self, hook_runtime: HookRuntime) -> Self {
        self.hook_runtime = hook_runtime;
        self
    }

    /// How this runtime runs hooks (what `GET /v1/hooks/capabilities` reports).
    pub fn hook_runtime(&self) -> HookRuntime {
        self.hook_runtime
    }

    /// The project as currently loaded.
    pub fn loaded(&self) -> Arc<Loaded> {
        self.loaded.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Serve a new version of the project from the next request on; requests in flight
    /// finish with the version they started with.
    pub fn reload(&self, loaded: Loaded) {
        *self.loaded.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(loaded);
    }

    /// [`Runtime::reload`] with the providers built from the new version too (a project whose
    /// `providers` changed, e.g. on a `polpo dev` reload): both are replaced together.
    pub fn rebuild(&self, loaded: Loaded, providers: Providers) {
        let mut served = self.loaded.write().unwrap_or_else(PoisonError::into_inner);
        *self.providers.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(providers);
        *served = Arc::new(loaded);
    }

    /// The model providers as currently built.
    fn providers(&self) -> Arc<Providers> {
        self.providers.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The store sessions and runs live in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The model chain of `agent`, resolved (profiles, fallbacks, allowed profiles) before
    /// anything is paid for.
    pub fn provider_for(&self, loaded: &Loaded, agent: &Agent) -> Result<Arc<dyn ModelProvider>, ChatError> {
        self.provider_for_model(loaded, agent, agent.config.model.as_ref())
    }

    /// The chain of `selection` for `agent`: its own `model`, or the profile model routing
    /// picked (resolved under the same `allowedModelProfiles`, so routing can never widen).
    pub(crate) fn provider_for_model(
        &self,
        loaded: &Loaded,
        agent: &Agent,
        selection: Option<&ModelSelection>,
    ) -> Result<Arc<dyn ModelProvider>, ChatError> {
        let settings = loaded.project.settings();
        let selection = selection.cloned().ok_or_else(|| {
            ChatError::Model(ResolveError::Model(polpo_llm::LlmError::new(
                polpo_llm::LlmErrorKind::ModelNotFound,
                format!("agent `{}` has no model: set \"model\" in its agent.json", agent.id),
            )))
        })?;
        let profiles = settings.model_profiles.clone().unwrap_or_default();
        let allowed = agent.config.allowed_model_profiles.as_deref();
        // Resolved once: profiles and grants are checked even when the offline model answers.
        let ids = polpo_core::model::resolve_model_chain(&selection, &profiles, allowed).map_err(ResolveError::from)?;
        // The offline model stands in only when no model of the chain can be called at all (no
        // key set, e.g. on a laptop without network); a chain with one ready target is used as
        // written.
        let providers = self.providers();
        let ready = || ids.iter().any(|id| polpo_llm::split_model_id(id).is_some_and(|(p, _)| providers.is_ready(p)));
        let chain = match &self.offline_model {
            Some(fallback) if !ready() => providers.chain(std::slice::from_ref(fallback)),
            None if !ready() => Err(self.not_configured(&agent.id, &ids)),
            _ => providers.chain(&ids),
        }
        .map_err(ResolveError::from)?;
        Ok(Arc::new(chain))
    }

    /// Why none of `ids` can be called, and the two ways forward: a key for the provider, or the
    /// offline model. Said before any request, which would otherwise leave without credentials.
    fn not_configured(&self, agent: &str, ids: &[String]) -> polpo_llm::LlmError {
        let providers = self.providers();
        let keys: Vec<String> = ids
            .iter()
            .filter_map(|id| polpo_llm::split_model_id(id).and_then(|(p, _)| providers.missing_key(p)))
            .collect();
        let set =
            if keys.is_empty() { "configure its provider".to_owned() } else { format!("set {}", keys.join(" or ")) };
        polpo_llm::LlmError::new(
            polpo_llm::LlmErrorKind::NotConfigured,
            format!(
                "agent `{agent}` cannot call {}: {set}, or run offline with `polpo models install` (a polpo built with `--features local-model`)",
                ids.join(", ")
            ),
        )
    }

    /// Answer one chat request: [`Runtime::prepare`] then [`PreparedChat::run`].
    pub async fn chat(
        self: &Arc<Self>,
        input: ChatInput,
        sink: EventSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<ChatOutput, ChatError> {
        self.prepare(input, cancel).await?.run(sink).await
    }

    /// Everything that can fail before the model is called, checked now: the agent, its model
    /// chain, the session (created when new), the request against the tool policy. A server
    /// answers these with a proper HTTP status before it starts streaming.
    pub async fn prepare(
        self: &Arc<Self>,
        mut input: ChatInput,
        cancel: &CancellationToken,
    ) -> Result<PreparedChat, ChatError> {
        let loaded = self.loaded();
        let agent = loaded.agent(&input.agent).ok_or_else(|| ChatError::AgentNotFound(input.agent.clone()))?;
        self.check_unstored(&input)?;
        let run_id = input.run_id.take().unwrap_or_else(|| format!("chat-{}", self.ids().next_id()));
        let provider = self.provider_for_input(&loaded, agent, &input)?;
        let mut invocation = self.invocation(&loaded, agent, provider, &input, &run_id, cancel)?;
        invocation.tools = self.agent_tool_set(agent, &invocation.tool_context).await;
        // Checked before the session is created, so a refused request leaves nothing behind.
        invocation.check()?;
        let (session, history, new_messages, unwritten) = self.prepare_session(&input, &run_id).await?;
        // Routed only once the request is known to run, so a refused one costs no classifier
        // call; a routed chain that cannot be built leaves the agent on its own (pinned) model.
        let mut route = crate::routing::route(&self.providers(), &loaded, agent, &input, cancel).await;
        if let Some(route) = &mut route {
            if let Some(routed) = route.selection() {
                match self.provider_for_model(&loaded, agent, Some(&routed)) {
                    Ok(provider) => invocation.provider = provider,
                    Err(e) => route.fail_open(e.code()),
                }
            }
            RunEvents::new(&self.bus, &run_id, &session.id, &input.agent).model_routed(route);
        }
        let mut prepared =
            self.prepared(invocation, input, run_id, session, history, new_messages, cancel.clone(), route);
        prepared.0.unwritten = unwritten;
        Ok(prepared)
    }

    /// The model chain of `agent` for `input`: a loop step's own `model`, else the one the
    /// surface picked, else the agent's.
    fn provider_for_input(
        &self,
        loaded: &Loaded,
        agent: &Agent,
        input: &ChatInput,
    ) -> Result<Arc<dyn ModelProvider>, ChatError> {
        match input.loop_context.as_ref().and_then(|l| l.model.as_ref()).or(input.model.as_ref()) {
            Some(model) => self.provider_for_model(loaded, agent, Some(model)),
            None => self.provider_for(loaded, agent),
        }
    }

    /// Call the agent's tool `name` outside a model turn (a loop's tool step), under the
    /// policy `input` resolves (its mode's layers included) and the same gates and hooks as a
    /// model's call (`tool:before`/`tool:after`, whose events go to `sink`). `Err` when the
    /// request itself does not resolve (unknown agent, model, hook packs).
    pub async fn call_tool(
        self: &Arc<Self>,
        input: &ChatInput,
        name: &str,
        arguments: Value,
        cancel: &CancellationToken,
        sink: EventSink<'_>,
    ) -> Result<Result<String, DirectCallError>, ChatError> {
        let loaded = self.loaded();
        let agent = loaded.agent(&input.agent).ok_or_else(|| ChatError::AgentNotFound(input.agent.clone()))?;
        let provider = match self.provider_for_input(&loaded, agent, input) {
            // A direct call asks no model: a tool step runs on a machine without the agent's
            // provider key, and only a call that asks the model gets the refusal.
            Err(ChatError::Model(ResolveError::Model(e))) if e.kind == polpo_llm::LlmErrorKind::NotConfigured => {
                Arc::new(Unconfigured(e))
            }
            resolved => resolved?,
        };
        let run_id = input.run_id.clone().unwrap_or_default();
        let mut invocation = self.invocation(&loaded, agent, provider, input, &run_id, cancel)?;
        invocation.tools = self.agent_tool_set(agent, &invocation.tool_context).await;
        // Boxed: the call's future (gates, hooks, the tool) is kilobytes, and a caller that
        // held it inline would copy it at every level it is awaited through.
        Ok(Box::pin(crate::tools::exec::call_direct(&invocation, name, arguments, sink)).await)
    }

    /// How a call of `input`'s agent's tool `name` with `arguments` touches the world (`None`:
    /// the agent has no such tool), as [`Runtime::call_tool`] would run it: a loop's tool step
    /// puts a call that is not replayable through the effect ledger, so a run taken over
    /// after a crash never runs it blindly again.
    pub async fn tool_effect(self: &Arc<Self>, input: &ChatInput, name: &str, arguments: &Value) -> Option<ToolEffect> {
        // The built-in, skill and custom tools are every agent's; only a tool source's (MCP)
        // depend on the agent.
        if let Some(tool) = self.skilled_tools.get(name) {
            return Some(tool.call_effect(arguments));
        }
        let loaded = self.loaded();
        let agent = loaded.agent(&input.agent)?;
        let context = loaded.tool_context(agent, &CancellationToken::new());
        self.agent_tool_set(agent, &context).await.get(name).map(|tool| tool.call_effect(arguments))
    }

    /// A durable run again, from what its checkpoint kept: the request (`input`, naming the
    /// run), the profile routing chose when it was accepted (no second routing, no classifier),
    /// the messages it added so far, and when it was accepted — a termination gate's
    /// `maxDurationMs` counts from then, not from the takeover (downtime included, the safe side).
    pub(crate) async fn prepare_resumed(
        self: &Arc<Self>,
        input: ChatInput,
        model_profile: Option<String>,
        new_messages: Vec<Message>,
        accepted_at: DateTime<Utc>,
    ) -> Result<PreparedChat, ChatError> {
        let loaded = self.loaded();
        let agent = loaded.agent(&input.agent).ok_or_else(|| ChatError::AgentNotFound(input.agent.clone()))?;
        let provider = match model_profile {
            Some(profile) => self.provider_for_model(&loaded, agent, Some(&ModelSelection::Profile { profile }))?,
            None => self.provider_for(&loaded, agent)?,
        };
        let run_id = input.run_id.clone().unwrap_or_default();
        let session_id = input.session_id.clone().unwrap_or_default();
        let cancel = CancellationToken::new();
        let mut invocation = self.invocation(&loaded, agent, provider, &input, &run_id, &cancel)?;
        invocation.tools = self.agent_tool_set(agent, &invocation.tool_context).await;
        let session =
            self.store.sessions.get_session(&session_id).await?.ok_or(ChatError::SessionNotFound(session_id))?;
        if let Some(hooks) = &mut invocation.hooks {
            let before = (self.clock().now() - accepted_at).to_std().unwrap_or_default();
            let resumed_at = Instant::now();
            hooks.clock = Arc::new(move || before + resumed_at.elapsed());
        }
        let history = self.history(&session.id).await?;
        Ok(self.prepared(invocation, input, run_id, session, history, new_messages, cancel, None))
    }

    /// The prepared form of a resolved request, its session known.
    #[allow(clippy::too_many_arguments)]
    fn prepared(
        self: &Arc<Self>,
        mut invocation: Invocation,
        input: ChatInput,
        run_id: String,
        session: Session,
        history: Vec<Message>,
        new_messages: Vec<Message>,
        cancel: CancellationToken,
        route: Option<ModelRoute>,
    ) -> PreparedChat {
        // An unstored turn has no session anyone could read or continue.
        let session_id = input.store.then(|| session.id.clone());
        if let Some(hooks) = &mut invocation.hooks {
            hooks.info.session_id = session_id.clone();
        }
        let bound_request = input.request_id.clone();
        let identity = Identity {
            request_id: input.request_id.unwrap_or_else(|| format!("req-{}", self.ids().next_id())),
            run_id,
            session_id,
            user: input.user,
            metadata: input.metadata,
            surface: input.surface,
        };
        invocation.tool_context.invocation = serde_json::to_value(&identity).unwrap_or_default();
        // A hook's `ask` in chat becomes an approval request, bound to the caller's request id
        // (the server's `Idempotency-Key` binding) so a retry of that request finds the decision;
        // a loop node's ask stays a refusal (its loop has gates of its own), and so does an
        // unstored turn's (an approval request is a stored record).
        if invocation.hooks.is_some() && input.loop_context.is_none() && input.store {
            invocation.approvals = Some(Arc::new(ApprovalDesk {
                store: self.store.records.clone(),
                events: self.bus.clone(),
                clock: self.clock().clone(),
                agent: invocation.agent.clone(),
                run_id: identity.run_id.clone(),
                session_id: session.id.clone(),
                owner: session.owner.clone(),
                waiting: bound_request.map_or(Waiting::Unbound, Waiting::Inline),
                deadlines: self.approval_deadlines.clone(),
            }));
        }
        PreparedChat(Box::new(Prepared {
            runtime: self.clone(),
            invocation,
            identity,
            session,
            history,
            new_messages,
            cancel,
            control: None,
            route,
            unwritten: None,
            fence: None,
        }))
    }

    /// Find or create the session and split the request into stored history and new messages.
    /// A new session of a turn that runs in its caller's request is not written yet (the last
    /// item): the turn writes it with its messages in one write. A durable run's is written
    /// now, as its journal names it from the start.
    async fn prepare_session(
        &self,
        input: &ChatInput,
        run_id: &str,
    ) -> Result<(Session, Vec<Message>, Vec<Message>, Option<NewSession>), ChatError> {
        let Some(id) = &input.session_id else {
            if !input.messages.iter().any(|m| m.role != Role::System) {
                return Err(ChatError::InvalidRequest("messages must contain at least one non-system message".into()));
            }
            if !input.store {
                return Ok((self.unstored_session(input), Vec::new(), input.messages.clone(), None));
            }
            let new = NewSession {
                id: Some(self.ids().next_id()),
                agent: input.agent.clone(),
                title: None,
                user: input.user.clone(),
                metadata: input.metadata.clone(),
                owner: input.owner.clone(),
            };
            if self.delivery_mode(input) == DeliveryMode::Durable {
                let session = self.store.sessions.create_session(new).await?;
                RunEvents::new(&self.bus, run_id, &session.id, &input.agent).session_created(&session);
                return Ok((session, Vec::new(), input.messages.clone(), None));
            }
            // Checked now (metadata, id), so a request that cannot be stored fails before it runs.
            let session = polpo_store::session_from_new(new.clone(), self.clock().now(), self.ids().as_ref())?;
            return Ok((session, Vec::new(), input.messages.clone(), Some(new)));
        };
        let session =
            self.store.sessions.get_session(id).await?.ok_or_else(|| ChatError::SessionNotFound(id.clone()))?;
        if session.agent != input.agent {
            return Err(ChatError::SessionAgentMismatch { session: session.id, agent: session.agent });
        }
        let start = input.messages.iter().rposition(|m| m.role == Role::Assistant).map_or(0, |i| i + 1);
        let mut new: Vec<Message> =
            input.messages[start..].iter().filter(|m| m.role != Role::System).cloned().collect();
        if new.is_empty() {
            return Err(ChatError::InvalidRequest("no new message after the last assistant message".into()));
        }
        let history = self.history(&session.id).await?;
        crate::interaction::answer_pending_questions(&history, &mut new);
        Ok((session, history, new, None))
    }

    /// An unstored turn (`store: false`) asks for nothing that must be written: no session to
    /// continue (the client sends the whole conversation), no durable run.
    fn check_unstored(&self, input: &ChatInput) -> Result<(), ChatError> {
        if input.store {
            return Ok(());
        }
        if input.session_id.is_some() {
            return Err(ChatError::StoreRequired(
                "a request with `store: false` cannot continue a stored session: send the whole conversation without `x-session-id`, or drop `store: false`".into(),
            ));
        }
        if self.delivery_mode(input) == DeliveryMode::Durable {
            return Err(ChatError::StoreRequired(
                "a request with `store: false` cannot outlive its caller (`polpo.delivery.onDisconnect: \"continue\"` is a durable, stored run)".into(),
            ));
        }
        Ok(())
    }

    /// The session an unstored turn (`store: false`) runs in: its messages are the whole
    /// conversation, nothing is read or written, and its id is empty (no session exists).
    fn unstored_session(&self, input: &ChatInput) -> Session {
        let now = self.clock().now();
        Session {
            id: String::new(),
            agent: input.agent.clone(),
            title: String::new(),
            user: input.user.clone(),
            metadata: input.metadata.clone(),
            owner: input.owner.clone(),
            created_at: now,
            updated_at: now,
            message_count: 0,
            revision: 0,
        }
    }

    /// The last [`MAX_HISTORY_MESSAGES`] stored messages of a session, oldest first.
    async fn history(&self, session_id: &str) -> Result<Vec<Message>, ChatError> {
        let recent = self.store.sessions.recent_messages(session_id, MAX_HISTORY_MESSAGES as u32).await?;
        let mut messages: Vec<Message> = recent.into_iter().map(|m| m.message).collect();
        // Never start the history with tool results whose assistant call was cut off.
        let first_kept = messages.iter().position(|m| m.role != Role::Tool).unwrap_or(messages.len());
        messages.drain(..first_kept);
        Ok(messages)
    }

    /// The agents named by `set`'s `verifier` handlers, each with its own model chain and tool
    /// policy, so a verifier that cannot run fails the request before any model call.
    fn verifiers(&self, loaded: &Loaded, set: &HookSet) -> Result<BTreeMap<String, Arc<VerifierAgent>>, ChatError> {
        let mut found = BTreeMap::new();
        for scoped in set.hooks() {
            let Handler::Verifier { agent: id, .. } = scoped.hook.action.handler() else { continue };
            if found.contains_key(id) {
                continue;
            }
            let agent = loaded.agent(id).ok_or_else(|| {
                ChatError::UnknownHookPack(format!(
                    "verifier agent `{id}` (hook `{}`) is not an agent of this project",
                    scoped.hook.qualified_id()
                ))
            })?;
            let verifier = VerifierAgent {
                agent: id.clone(),
                system_prompt: loaded.system_prompt(agent),
                provider: self.provider_for(loaded, agent)?,
                policy: ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, agent.config.allowed_tools.as_deref()),
            };
            found.insert(id.clone(), Arc::new(verifier));
        }
        Ok(found)
    }

    /// Everything the turn loop needs, resolved for this agent and request.
    fn invocation(
        &self,
        loaded: &Loaded,
        agent: &Agent,
        provider: Arc<dyn ModelProvider>,
        input: &ChatInput,
        run_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Invocation, ChatError> {
        let c = &agent.config;
        let skills = invocation_skills(agent, input.loop_context.as_ref());
        // The static allowlists of an agent with skills admit the skill tools without naming
        // them; the request layer and grants below can still narrow them away.
        let admit = |layer: Option<&[String]>| admit_skill_tools(layer, !skills.is_empty());
        let ceiling =
            ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, admit(c.allowed_tools.as_deref()).as_deref());
        // The mode's layers: a loop node's are the loop's and the step's, never chat's.
        let moded = match &input.loop_context {
            Some(l) => ceiling
                .narrow(PolicyLayer::Loop, admit(l.allowed_tools.as_deref()).as_deref())
                .narrow(PolicyLayer::Step, admit(l.step_allowed_tools.as_deref()).as_deref()),
            None => ceiling.narrow(
                PolicyLayer::Chat,
                admit(c.chat.as_ref().and_then(|chat| chat.allowed_tools.as_deref())).as_deref(),
            ),
        };
        let activated = polpo_skills::activation_prompt(&loaded.project.root, &agent.id, &skills, &input.skills)?;
        let mut system_prompt = loaded.system_prompt(agent);
        if let Some(section) = activated {
            system_prompt = format!("{}\n\n{section}", system_prompt.trim_end());
        }
        let policy = moded.narrow(PolicyLayer::Request, input.allowed_tools.as_deref());
        let unknown = |problems: Vec<Problem>| {
            ChatError::UnknownHookPack(problems.into_iter().map(|p| p.message).collect::<Vec<_>>().join("; "))
        };
        let hooks = match loaded.hooks_for(agent, input.loop_context.as_ref()).map_err(unknown)? {
            None => None,
            Some(set) => Some(InvocationHooks {
                verifiers: self.verifiers(loaded, &set)?,
                set,
                info: invocation_info(run_id, &agent.id, input.loop_context.as_ref()),
                runtime: self.hook_runtime,
                clock: system_clock(),
                secrets: self.redactor.secrets().to_vec(),
                parallel_branch: input.parallel_branch,
                connections: self.connections.clone(),
            }),
        };
        let interactions = Interactions::resolve(c.chat.as_ref(), input.capabilities, &policy);
        let step = input.loop_context.as_ref();
        // Client tools obey the same effective policy as server tools: an excluded one is never
        // shown to the model, and forcing it is refused by `Invocation::check`.
        let client_tools =
            input.client_tools.iter().filter(|t| policy.allows(&t.name)).cloned().map(Arc::new).collect();
        Ok(Invocation {
            agent: agent.id.clone(),
            system_prompt,
            provider,
            model: String::new(),
            tools: self.base_tools(!skills.is_empty()).clone(),
            policy,
            client_tools,
            tool_choice: input.tool_choice.clone(),
            parallel_tool_calls: input.parallel_tool_calls,
            response_format: input.response_format.clone(),
            // A surface's cap (the orchestrator's reviewers) never raises the agent's own.
            max_turns: step
                .and_then(|l| l.max_turns)
                .unwrap_or_else(|| c.max_turns())
                .min(input.max_turns.unwrap_or(u32::MAX)),
            reasoning: step
                .and_then(|l| l.reasoning)
                .or(c.reasoning)
                .or(loaded.project.settings().reasoning)
                .map(|r| r.as_str().to_owned()),
            tool_context: ToolContext {
                redactor: self.redactor.clone(),
                skills: skill_access(&loaded.project, &skills),
                ..loaded.tool_context(agent, cancel)
            },
            hooks,
            approvals: None,
            tool_loading: c.tool_loading.as_ref().map_or(ToolLoadingMode::Auto, |t| t.mode),
            interactions,
            // Numbers of a config file fit an f32 sampling parameter (0 to 2).
            temperature: step
                .and_then(|l| l.temperature.as_ref())
                .and_then(serde_json::Number::as_f64)
                .map(|t| t as f32),
        })
    }
}

/// The skills one invocation of `agent` may use: its assigned ones, narrowed to a loop step's
/// `skills` when the step names some; never one the agent is not assigned.
fn invocation_skills(agent: &Agent, loop_context: Option<&crate::hooks::LoopContext>) -> Vec<String> {
    let assigned = assigned_skills(agent);
    match loop_context.and_then(|l| l.step_skills.as_deref()) {
        Some(step) => assigned.iter().filter(|s| step.contains(s)).cloned().collect(),
        None => assigned.to_vec(),
    }
}

/// A configured static allowlist, with `skill_list` and `skill_read` added when the agent has
/// skills; an unconfigured layer stays unconfigured (it does not narrow).
fn admit_skill_tools(layer: Option<&[String]>, has_skills: bool) -> Option<Vec<String>> {
    layer.map(|patterns| {
        let mut patterns = patterns.to_vec();
        if has_skills {
            patterns.extend(polpo_skills::SKILL_TOOLS.map(String::from));
        }
        patterns
    })
}

/// The model of an agent whose provider has no key, for a call that asks no model
/// ([`Runtime::call_tool`]): every request is refused with why, as a chat would have been.
struct Unconfigured(polpo_llm::LlmError);

#[async_trait::async_trait]
impl ModelProvider for Unconfigured {
    async fn stream(&self, _request: polpo_llm::ModelRequest) -> Result<polpo_llm::ModelStream, polpo_llm::LlmError> {
        Err(self.0.clone())
    }
}

/// Compile-time guard: the server spawns these futures, so they must stay `Send` (a closure
/// held across an await in the turn loop once broke this without any test noticing).
#[cfg(test)]
mod send_check {
    use super::*;
    fn assert_send<T: Send>(_: T) {}
    #[allow(dead_code)]
    fn futures_are_send(p: PreparedChat, rt: Arc<Runtime>, input: ChatInput, c: CancellationToken) {
        assert_send(p.run(&|_| {}));
        assert_send(async move { rt.prepare(input, &c).await });
    }
}
