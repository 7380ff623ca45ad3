//! The runtime as callers see it: a loaded project, its providers, tools and store, and one
//! function per surface (`chat` today) that turns a request into a finished, persisted turn.
//!
//! Everything that must be decided once per request happens here, in one place, in the order
//! of ARCHITECTURE.md: resolve the agent → its model chain → its effective tool policy (agent
//! ∩ chat ∩ request) → its hook packs → load the session → run the turn loop → persist what
//! the turn added. The server and the CLI only translate their input into [`ChatInput`].

use crate::bus::{EventBus, RunEvents};
use crate::error::EngineError;
use crate::events::{EventSink, RunEvent};
use crate::hooks::{HookRuntime, InvocationHooks, LoopContext, VerifierAgent, invocation_info, system_clock};
use crate::interaction::{Capabilities, Interactions, Suggestion};
use crate::invocation::Invocation;
use crate::structured::ResponseFormat;
use crate::tool_exec::ToolSet;
use crate::turn::{RunControl, RunOutcome, run_turns_controlled};
use polpo_core::config::{Agent, Project, ToolLoadingMode};
use polpo_core::hooks::{Handler, HookPack, HookSet};
use polpo_core::message::{Message, Role};
use polpo_core::policy::{PolicyLayer, ToolPolicy};
use polpo_core::problem::Problem;
use polpo_core::tool::ToolSpec;
use polpo_llm::{ModelProvider, Providers, ResolveError, ToolChoice};
use polpo_store::{NewMessage, NewSession, Session, Store, StoreError};
use polpo_tools::ToolContext;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use tokio_util::sync::CancellationToken;

/// Most stored messages replayed into one model call's history.
pub const MAX_HISTORY_MESSAGES: usize = 2000;

/// A project as the runtime serves it: configuration plus what was derived from it once
/// (hook sets per agent). Swapped whole on reload, so a request never sees half of an edit.
pub struct Loaded {
    /// The validated project.
    pub project: Project,
    /// Hook packs by name.
    pub packs: BTreeMap<String, HookPack>,
    /// Each agent's resolved hooks (absent: the agent has none).
    hooks: BTreeMap<String, Arc<HookSet>>,
}

impl Loaded {
    /// Resolve every agent's hook packs; a project whose packs do not resolve is refused.
    pub fn new(project: Project) -> Result<Self, Vec<Problem>> {
        let (packs, problems) = polpo_project::hooks::check_project_hooks(&project);
        if !problems.is_empty() {
            return Err(problems);
        }
        let mut hooks = BTreeMap::new();
        for (id, agent) in &project.agents {
            let set = polpo_project::hooks::resolve_agent_hooks(&packs, &project, agent, &[])?;
            if !set.is_empty() {
                hooks.insert(id.clone(), Arc::new(set));
            }
        }
        Ok(Self { project, packs, hooks })
    }

    /// The agent called `id`.
    pub fn agent(&self, id: &str) -> Option<&Agent> {
        self.project.agent(id)
    }

    /// The hooks one invocation of `agent` runs: its project and agent packs (resolved once,
    /// above), plus — for a loop node — the loop's and the step's, resolved per request.
    /// `None` when no hook applies; an unknown pack name is a problem, never silently skipped.
    pub fn hooks_for(&self, agent: &Agent, loop_context: Option<&LoopContext>) -> Result<Option<Arc<HookSet>>, Vec<Problem>> {
        let Some(ctx) = loop_context else { return Ok(self.hooks.get(&agent.id).cloned()) };
        let set = polpo_project::hooks::resolve_agent_hooks(&self.packs, &self.project, agent, &ctx.assignments())?;
        Ok((!set.is_empty()).then(|| Arc::new(set)))
    }
}

/// One chat request, in the runtime's terms (the server translates the OpenAI wire into this).
#[derive(Debug, Clone)]
pub struct ChatInput {
    /// The agent to talk to.
    pub agent: String,
    /// Continue this session; `None` starts a new one.
    pub session_id: Option<String>,
    /// The messages the client sent. With a session, only what follows the last assistant
    /// message is new (clients may resend the whole conversation or just the new turn).
    pub messages: Vec<Message>,
    /// Request-scoped client tools.
    pub client_tools: Vec<ToolSpec>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// Run read-only batches concurrently.
    pub parallel_tool_calls: bool,
    /// Required shape of the answer.
    pub response_format: ResponseFormat,
    /// `polpo.execution.allowedTools`: narrows, never widens.
    pub allowed_tools: Option<Vec<String>>,
    /// Set when the agent runs as a node of a Project Loop: mode `loop`, the step matchers
    /// see, and the loop- and step-scope hook packs (`None`: chat).
    pub loop_context: Option<LoopContext>,
    /// End-user id stored on a new session.
    pub user: Option<String>,
    /// Metadata stored on a new session (a JSON object or null).
    pub metadata: Value,
    /// The API client a new session belongs to (a key id, never the key); the server keeps
    /// other clients' keys away from it.
    pub owner: Option<String>,
    /// Routing labels (`routing.labels` of a chat request) that `settings.modelRouting` rules
    /// may match, for agents that opted in to model routing.
    pub routing_labels: Vec<String>,
    /// The run id this turn reports under (hook envelopes, events, `x-polpo-run-id`).
    pub run_id: String,
    /// What the client can render (`polpo.capabilities`): questions, suggestions.
    pub capabilities: Capabilities,
    /// The agent runs as a node of a parallel loop branch, which has no durable checkpoint of
    /// its own yet: an agent with a termination gate is refused there before inference.
    pub parallel_branch: bool,
}

impl ChatInput {
    /// A plain request: these messages to this agent, new session, defaults elsewhere.
    pub fn new(agent: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            agent: agent.into(),
            session_id: None,
            messages,
            client_tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: false,
            response_format: ResponseFormat::Text,
            allowed_tools: None,
            loop_context: None,
            user: None,
            metadata: Value::Null,
            owner: None,
            routing_labels: Vec::new(),
            run_id: format!("chat-{}", uuid::Uuid::now_v7().simple()),
            capabilities: Capabilities::default(),
            parallel_branch: false,
        }
    }
}

/// What a finished chat turn produced.
#[derive(Debug, Clone)]
pub struct ChatOutput {
    /// The session the turn was stored in (new or continued).
    pub session: Session,
    /// The answer, usage and messages added.
    pub outcome: RunOutcome,
    /// Suggested next messages (`polpo.suggestions`); empty unless both the agent and the
    /// client opted in, and whenever generating them failed.
    pub suggestions: Vec<Suggestion>,
}

/// Why a chat request failed, each with a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// No agent with that id.
    #[error("agent_not_found: no agent named `{0}` in this project")]
    AgentNotFound(String),
    /// The `x-session-id` names no session.
    #[error("session_not_found: no session `{0}`")]
    SessionNotFound(String),
    /// The session belongs to another agent.
    #[error("session_agent_mismatch: session `{session}` belongs to agent `{agent}`")]
    SessionAgentMismatch {
        /// The session.
        session: String,
        /// Its agent.
        agent: String,
    },
    /// The request carries no new message to answer.
    #[error("invalid_request: {0}")]
    InvalidRequest(String),
    /// The loop context assigns a hook pack that does not exist.
    #[error("unknown_hook_pack: {0}")]
    UnknownHookPack(String),
    /// The agent's model selection does not resolve.
    #[error("{0}")]
    Model(#[from] ResolveError),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The turn loop failed.
    #[error("{0}")]
    Engine(#[from] EngineError),
}

impl ChatError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::AgentNotFound(_) => "agent_not_found",
            Self::SessionNotFound(_) => "session_not_found",
            Self::SessionAgentMismatch { .. } => "session_agent_mismatch",
            Self::InvalidRequest(_) => "invalid_request",
            Self::UnknownHookPack(_) => "unknown_hook_pack",
            Self::Model(e) => e.code(),
            Self::Store(e) => e.code(),
            Self::Engine(e) => e.code(),
        }
    }
}

/// A chat request that passed every check and is ready to run.
pub struct PreparedChat {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) invocation: Invocation,
    pub(crate) session: Session,
    pub(crate) history: Vec<Message>,
    pub(crate) new_messages: Vec<Message>,
    pub(crate) cancel: CancellationToken,
    pub(crate) run_id: String,
    /// Steering of a durable run (`crate::runs`); `None` for plain chat.
    pub(crate) control: Option<Arc<dyn RunControl>>,
    /// Which way model routing sent this request; `None` when the agent did not opt in.
    pub(crate) route: Option<crate::routing::ModelRoute>,
}

impl PreparedChat {
    /// The session this turn belongs to (already stored when new).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The run id this turn reports under.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Which way model routing sent this request (`None`: the agent did not opt in).
    pub fn route(&self) -> Option<&crate::routing::ModelRoute> {
        self.route.as_ref()
    }

    /// Run the agent's turn loop over the session's history plus the new messages, then store
    /// the new messages and the turn's output in one append.
    ///
    /// Nothing is stored when the turn fails before producing anything, so a client may retry
    /// with the same messages; a run that used up `maxTurns` keeps its transcript.
    pub async fn run(self, sink: EventSink<'_>) -> Result<ChatOutput, ChatError> {
        let Self { runtime, invocation, session, history, new_messages, cancel, run_id, control, route: _ } = self;
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
        let session = if produced.is_empty() && result.is_err() {
            session
        } else {
            let produced = reasoning.lock().unwrap_or_else(PoisonError::into_inner).attach(produced).collect::<Vec<_>>();
            let to_store = new_messages.iter().cloned().map(NewMessage::new).chain(produced).collect();
            match runtime.store.sessions.append_messages(&session.id, to_store, None).await {
                Ok(appended) => {
                    events.messages_added(&appended.messages);
                    appended.session
                }
                Err(e) => return Err(events.failed(e.into())),
            }
        };
        match result {
            Ok(outcome) => {
                let suggestions = suggestions(&invocation, &new_messages, &outcome, &cancel).await;
                events.completed(&outcome);
                Ok(ChatOutput { session, outcome, suggestions })
            }
            Err(e) => Err(events.failed(e.into())),
        }
    }
}

/// Suggestions after a successful plain-text answer, when the invocation offers them. Never
/// for structured outputs, client hand-backs, empty answers or a cancelled request.
async fn suggestions(inv: &Invocation, new_messages: &[Message], outcome: &RunOutcome, cancel: &CancellationToken) -> Vec<Suggestion> {
    let Some(policy) = &inv.interactions.suggestions else { return Vec::new() };
    let answer = outcome.content.as_deref().unwrap_or_default();
    if outcome.finish_reason != polpo_core::message::FinishReason::Stop || answer.trim().is_empty() || inv.response_format.is_structured() || cancel.is_cancelled() {
        return Vec::new();
    }
    let question = crate::interaction::last_user_text(new_messages).unwrap_or_default();
    tokio::select! {
        _ = cancel.cancelled() => Vec::new(),
        s = crate::interaction::suggest(inv, policy, &question, answer) => s,
    }
}

/// The runtime: one per server or CLI process.
pub struct Runtime {
    loaded: RwLock<Arc<Loaded>>,
    providers: Providers,
    store: Store,
    tools: Arc<ToolSet>,
    hook_runtime: HookRuntime,
    offline_model: Option<String>,
    bus: EventBus,
}

impl Runtime {
    /// A runtime for `loaded`, calling models through `providers` and keeping sessions in
    /// `store`. The system tools are compiled once here and shared by every request.
    pub fn new(loaded: Loaded, providers: Providers, store: Store) -> Self {
        Self {
            loaded: RwLock::new(Arc::new(loaded)),
            providers,
            store,
            tools: Arc::new(ToolSet::new(polpo_tools::tools::system_tools())),
            hook_runtime: HookRuntime::from_env(),
            offline_model: None,
            bus: EventBus::default(),
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
    pub(crate) fn provider_for_model(&self, loaded: &Loaded, agent: &Agent, selection: Option<&polpo_core::model::ModelSelection>) -> Result<Arc<dyn ModelProvider>, ChatError> {
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
        let ready = || ids.iter().any(|id| polpo_llm::split_model_id(id).is_some_and(|(p, _)| self.providers.is_ready(p)));
        let chain = match &self.offline_model {
            Some(fallback) if !ready() => self.providers.chain(std::slice::from_ref(fallback)),
            None if !ready() => Err(self.not_configured(&agent.id, &ids)),
            _ => self.providers.chain(&ids),
        }
        .map_err(ResolveError::from)?;
        Ok(Arc::new(chain))
    }

    /// Why none of `ids` can be called, and the two ways forward: a key for the provider, or the
    /// offline model. Said before any request, which would otherwise leave without credentials.
    fn not_configured(&self, agent: &str, ids: &[String]) -> polpo_llm::LlmError {
        let keys: Vec<String> = ids
            .iter()
            .filter_map(|id| polpo_llm::split_model_id(id).and_then(|(p, _)| self.providers.missing_key(p)))
            .collect();
        let set = if keys.is_empty() { "configure its provider".to_owned() } else { format!("set {}", keys.join(" or ")) };
        polpo_llm::LlmError::new(
            polpo_llm::LlmErrorKind::NotConfigured,
            format!(
                "agent `{agent}` cannot call {}: {set}, or run offline with `polpo models install` (a polpo built with `--features local-model`)",
                ids.join(", ")
            ),
        )
    }

    /// Answer one chat request: [`Runtime::prepare`] then [`PreparedChat::run`].
    pub async fn chat(self: &Arc<Self>, input: ChatInput, sink: EventSink<'_>, cancel: &CancellationToken) -> Result<ChatOutput, ChatError> {
        self.prepare(input, cancel).await?.run(sink).await
    }

    /// Everything that can fail before the model is called, checked now: the agent, its model
    /// chain, the session (created when new), the request against the tool policy. A server
    /// answers these with a proper HTTP status before it starts streaming.
    pub async fn prepare(self: &Arc<Self>, input: ChatInput, cancel: &CancellationToken) -> Result<PreparedChat, ChatError> {
        let loaded = self.loaded();
        let agent = loaded.agent(&input.agent).ok_or_else(|| ChatError::AgentNotFound(input.agent.clone()))?;
        let provider = self.provider_for(&loaded, agent)?;
        let mut invocation = self.invocation(&loaded, agent, provider, &input, cancel)?;
        // Checked before the session is created, so a refused request leaves nothing behind.
        invocation.check()?;
        let (session, history, new_messages) = self.prepare_session(&input).await?;
        // Routed only once the request is known to run, so a refused one costs no classifier
        // call; a routed chain that cannot be built leaves the agent on its own (pinned) model.
        let mut route = crate::routing::route(&self.providers, &loaded, agent, &input, cancel).await;
        if let Some(route) = &mut route {
            if let Some(routed) = route.selection() {
                match self.provider_for_model(&loaded, agent, Some(&routed)) {
                    Ok(provider) => invocation.provider = provider,
                    Err(e) => route.fail_open(e.code()),
                }
            }
            RunEvents::new(&self.bus, &input.run_id, &session.id, &input.agent).model_routed(route);
        }
        if let Some(hooks) = &mut invocation.hooks {
            hooks.info.session_id = Some(session.id.clone());
        }
        Ok(PreparedChat { runtime: self.clone(), invocation, session, history, new_messages, cancel: cancel.clone(), run_id: input.run_id, control: None, route })
    }

    /// Find or create the session and split the request into stored history and new messages.
    async fn prepare_session(&self, input: &ChatInput) -> Result<(Session, Vec<Message>, Vec<Message>), ChatError> {
        let Some(id) = &input.session_id else {
            if !input.messages.iter().any(|m| m.role != Role::System) {
                return Err(ChatError::InvalidRequest("messages must contain at least one non-system message".into()));
            }
            let new = NewSession { id: None, agent: input.agent.clone(), title: None, user: input.user.clone(), metadata: input.metadata.clone(), owner: input.owner.clone() };
            let session = self.store.sessions.create_session(new).await?;
            RunEvents::new(&self.bus, &input.run_id, &session.id, &input.agent).session_created(&session);
            return Ok((session, Vec::new(), input.messages.clone()));
        };
        let session = self.store.sessions.get_session(id).await?.ok_or_else(|| ChatError::SessionNotFound(id.clone()))?;
        if session.agent != input.agent {
            return Err(ChatError::SessionAgentMismatch { session: session.id, agent: session.agent });
        }
        let start = input.messages.iter().rposition(|m| m.role == Role::Assistant).map_or(0, |i| i + 1);
        let mut new: Vec<Message> = input.messages[start..].iter().filter(|m| m.role != Role::System).cloned().collect();
        if new.is_empty() {
            return Err(ChatError::InvalidRequest("no new message after the last assistant message".into()));
        }
        let history = self.history(&session.id).await?;
        crate::interaction::answer_pending_questions(&history, &mut new);
        Ok((session, history, new))
    }

    /// The last [`MAX_HISTORY_MESSAGES`] stored messages of a session, oldest first.
    pub(crate) async fn history(&self, session_id: &str) -> Result<Vec<Message>, ChatError> {
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
            let agent = loaded.agent(id).ok_or_else(|| ChatError::UnknownHookPack(format!("verifier agent `{id}` (hook `{}`) is not an agent of this project", scoped.hook.qualified_id())))?;
            let verifier = VerifierAgent {
                agent: id.clone(),
                system_prompt: polpo_core::prompt::system_prompt(agent),
                provider: self.provider_for(loaded, agent)?,
                policy: ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, agent.config.allowed_tools.as_deref()),
            };
            found.insert(id.clone(), Arc::new(verifier));
        }
        Ok(found)
    }

    /// Everything the turn loop needs, resolved for this agent and request.
    pub(crate) fn invocation(&self, loaded: &Loaded, agent: &Agent, provider: Arc<dyn ModelProvider>, input: &ChatInput, cancel: &CancellationToken) -> Result<Invocation, ChatError> {
        let c = &agent.config;
        let policy = ToolPolicy::unrestricted()
            .narrow(PolicyLayer::Agent, c.allowed_tools.as_deref())
            .narrow(PolicyLayer::Chat, c.chat.as_ref().and_then(|chat| chat.allowed_tools.as_deref()))
            .narrow(PolicyLayer::Request, input.allowed_tools.as_deref());
        let unknown = |problems: Vec<Problem>| ChatError::UnknownHookPack(problems.into_iter().map(|p| p.message).collect::<Vec<_>>().join("; "));
        let hooks = match loaded.hooks_for(agent, input.loop_context.as_ref()).map_err(unknown)? {
            None => None,
            Some(set) => Some(InvocationHooks {
                verifiers: self.verifiers(loaded, &set)?,
                set,
                info: invocation_info(&input.run_id, &agent.id, input.loop_context.as_ref()),
                runtime: self.hook_runtime,
                clock: system_clock(),
                secrets: Vec::new(),
                parallel_branch: input.parallel_branch,
            }),
        };
        let interactions = Interactions::resolve(c.chat.as_ref(), input.capabilities, &policy);
        // Client tools obey the same effective policy as server tools: an excluded one is never
        // shown to the model, and forcing it is refused by `Invocation::check`.
        let client_tools = input.client_tools.iter().filter(|t| policy.allows(&t.name)).cloned().map(Arc::new).collect();
        Ok(Invocation {
            agent: agent.id.clone(),
            system_prompt: polpo_core::prompt::system_prompt(agent),
            provider,
            model: String::new(),
            tools: self.tools.clone(),
            policy,
            client_tools,
            tool_choice: input.tool_choice.clone(),
            parallel_tool_calls: input.parallel_tool_calls,
            response_format: input.response_format.clone(),
            max_turns: c.max_turns(),
            reasoning: c.reasoning.or(loaded.project.settings().reasoning).map(|r| r.as_str().to_owned()),
            tool_context: tool_context(&loaded.project, agent, cancel),
            hooks,
            tool_loading: c.tool_loading.as_ref().map_or(ToolLoadingMode::Auto, |t| t.mode),
            interactions,
        })
    }
}

/// Where the agent's tools run: the project's work dir, confined to `allowedPaths`, with the
/// agent's memory file, cancelled with the request.
fn tool_context(project: &Project, agent: &Agent, cancel: &CancellationToken) -> ToolContext {
    let workspace: PathBuf = match project.settings().work_dir.as_deref() {
        Some(dir) => project.root.join(dir),
        None => project.root.clone(),
    };
    let polpo_dir = project.root.join(".polpo");
    let mut ctx = ToolContext::new(workspace.clone());
    ctx.allowed_paths = agent.config.allowed_paths.iter().flatten().map(|p| workspace.join(p)).collect();
    // The project's own folder (agents, hooks, sessions, keys) is never the agent's to read or
    // edit, whatever the workspace or allowedPaths say; only the memory tools reach their file.
    ctx.protected_paths = vec![polpo_dir.clone()];
    ctx.sandbox = project.settings().sandbox.as_ref().map(Into::into).unwrap_or_default();
    ctx.memory_file = Some(polpo_dir.join("memory").join(format!("{}.md", agent.id)));
    ctx.cancel = cancel.child_token();
    ctx
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
