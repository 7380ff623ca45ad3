//! A request to run an agent and what comes back, in the runtime's terms: every surface (the
//! chat route, `polpo run`, durable runs, and later tasks, loop steps, schedules and channels)
//! translates its own input into a [`ChatInput`] and gets a [`ChatOutput`] or a [`ChatError`].
//! The [`Identity`] of an invocation is what hooks and custom tools see of who asked.

use crate::error::EngineError;
use crate::hooks::LoopContext;
use crate::interaction::{Capabilities, Suggestion};
use crate::structured::ResponseFormat;
use crate::turn::outcome::RunOutcome;
use polpo_core::message::{FinishReason, Message, ToolCall, Usage};
use polpo_core::tool::ToolSpec;
use polpo_llm::{ResolveError, ToolChoice};
use polpo_store::{Session, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The surface an agent is invoked from: it decides nothing about how the agent runs, but
/// hooks and custom tools see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// `POST /v1/chat/completions`, `polpo run`.
    #[default]
    Chat,
    /// A task of the orchestrator.
    Task,
    /// An agent step of a Project Loop.
    Loop,
    /// A schedule firing.
    Schedule,
    /// A message on a channel.
    Channel,
}

/// How an invocation's answer reaches its caller; the runtime decides
/// ([`crate::Runtime::delivery_mode`]), the caller only says whether it must outlive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryMode {
    /// Runs in the caller's request and ends with it (`settings.chatExecution: "inline"`).
    Inline,
    /// Runs in the caller's request, steerable and abortable by its run id while it runs.
    Run,
    /// A durable run: journaled, checkpointed, leased; it outlives its caller and a restart.
    Durable,
}

/// A finished run's answer (`run.completed`): what a client is answered with, whichever way
/// the run was delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAnswer {
    /// The final answer; `None` when client tool calls are handed back.
    pub content: Option<String>,
    /// `stop`, `tool_calls`, `ask_user` … (`stop` when a journal entry lacks it).
    #[serde(default = "stopped")]
    pub finish_reason: FinishReason,
    /// Client tool calls the caller must execute.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Tokens over every model call.
    #[serde(default)]
    pub usage: Usage,
    /// Model calls made.
    #[serde(default)]
    pub turns: u32,
    /// The session the turn was stored in.
    #[serde(default)]
    pub session_id: String,
    /// Suggested next messages (`polpo.suggestions`).
    #[serde(default)]
    pub suggestions: Vec<Suggestion>,
}

fn stopped() -> FinishReason {
    FinishReason::Stop
}

/// Why a run ended without an answer (`run.failed`), or why a chat failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Stable snake_case code.
    pub code: String,
    /// Human sentence.
    pub message: String,
}

/// Who invoked the agent, as hooks and custom tools see it (never a credential).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// This request.
    pub request_id: String,
    /// The run it reports under.
    pub run_id: String,
    /// The session, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The end user, when the caller named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The caller's metadata (a JSON object or null).
    pub metadata: Value,
    /// Where the request came from.
    pub surface: Surface,
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
    /// The run id this turn reports under (hook envelopes, events, `x-polpo-run-id`); `None`
    /// lets the runtime name it (a resumed run keeps its own).
    pub run_id: Option<String>,
    /// The caller's id for this request (custom tools and hooks see it); `None` lets the
    /// runtime name it.
    pub request_id: Option<String>,
    /// Which surface invokes the agent.
    pub surface: Surface,
    /// Whether the answer must outlive the caller (`polpo.delivery.onDisconnect: "continue"`):
    /// the runtime then runs it as a durable run when the project allows.
    pub outlive_caller: bool,
    /// What the client can render (`polpo.capabilities`): questions, suggestions.
    pub capabilities: Capabilities,
    /// The agent runs as a node of a parallel loop branch, which has no durable checkpoint of
    /// its own yet: an agent with a termination gate is refused there before inference.
    pub parallel_branch: bool,
    /// `polpo.skills`: assigned skills whose `SKILL.md` joins this request's prompt (only this
    /// request's; an unassigned one is `skill_not_assigned`).
    pub skills: Vec<String>,
    /// A model the surface picks instead of the agent's (the orchestrator's judge for task
    /// reviews), resolved under the agent's `allowedModelProfiles` like its own; a loop step's
    /// `model` still wins. Kept in a durable run's spec, so a resumed run asks the same model.
    pub model: Option<polpo_core::model::ModelSelection>,
    /// A cap on model calls the surface sets (the orchestrator's reviewers exploring files),
    /// under the agent's own `maxTurns` (or a loop step's), never above it. Kept in a durable
    /// run's spec.
    pub max_turns: Option<u32>,
    /// Whether the turn is stored (`store` of a chat request; `true` unless the client says
    /// `false`). An unstored turn is for clients that send the whole conversation every time:
    /// it runs like any other (policy, hooks, tools, events) but writes no session, message or
    /// run record, so it cannot continue a session, outlive its caller, or wait for an approval.
    pub store: bool,
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
            run_id: None,
            request_id: None,
            surface: Surface::Chat,
            outlive_caller: false,
            capabilities: Capabilities::default(),
            parallel_branch: false,
            skills: Vec::new(),
            model: None,
            max_turns: None,
            store: true,
        }
    }
}

/// What a finished chat turn produced.
#[derive(Debug, Clone)]
pub struct ChatOutput {
    /// The run id the turn reported under.
    pub run_id: String,
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
    /// The request needs what an unstored turn (`store: false`) cannot have: a stored session
    /// to continue, a durable run, an idempotent replay, a loop's run record.
    #[error("store_required: {0}")]
    StoreRequired(String),
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
    /// `polpo.skills` named a skill the agent does not have, or its bundle does not read.
    #[error("{}: {}", .0.code(), .0)]
    Skill(#[from] polpo_skills::ActivationError),
}

impl ChatError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::AgentNotFound(_) => "agent_not_found",
            Self::SessionNotFound(_) => "session_not_found",
            Self::SessionAgentMismatch { .. } => "session_agent_mismatch",
            Self::InvalidRequest(_) => "invalid_request",
            Self::StoreRequired(_) => "store_required",
            Self::UnknownHookPack(_) => "unknown_hook_pack",
            Self::Model(e) => e.code(),
            Self::Store(e) => e.code(),
            Self::Engine(e) => e.code(),
            Self::Skill(e) => e.code(),
        }
    }
}

impl From<&ChatError> for Failure {
    fn from(e: &ChatError) -> Self {
        Self { code: e.code().to_owned(), message: e.to_string() }
    }
}

impl ChatOutput {
    /// The answer as every delivery reports it (the body of `run.completed`).
    pub fn answer(&self) -> RunAnswer {
        let o = &self.outcome;
        RunAnswer {
            content: o.content.clone(),
            finish_reason: o.finish_reason.clone(),
            tool_calls: o.client_tool_calls.clone(),
            usage: o.usage,
            turns: o.turns,
            session_id: self.session.id.clone(),
            suggestions: self.suggestions.clone(),
        }
    }
}
