//! Everything resolved for one request before the turn loop starts.
//!
//! Building an `Invocation` is where a request is checked against the agent's policy: a
//! forced tool outside the effective set, a client tool that shadows a server tool, or
//! parallel client calls fail here, before any model call is paid for.

use crate::approvals::ApprovalDesk;
use crate::error::EngineError;
use crate::hooks::InvocationHooks;
use crate::interaction::{ASK_USER_QUESTION, Interactions, ask_user_spec, check_question};
use crate::structured::ResponseFormat;
use crate::tools::set::ToolSet;
use polpo_core::config::ToolLoadingMode;
use polpo_core::message::ToolCall;
use polpo_core::policy::ToolPolicy;
use polpo_core::tool::ToolSpec;
use polpo_llm::{ModelProvider, ToolChoice};
use polpo_tools::ToolContext;
use std::sync::Arc;

/// Most client tools one request may declare.
pub const MAX_CLIENT_TOOLS: usize = 64;
/// Largest client tool schema, in bytes of JSON.
pub const MAX_CLIENT_TOOL_SCHEMA_BYTES: usize = 32 * 1024;
/// Tool names the runtime reserves for itself (disclosure and interaction tools).
pub const RESERVED_TOOL_NAMES: &[&str] =
    &["polpo_tool_list", "polpo_tool_search", "polpo_tool_load", "skill_list", "skill_read", "ask_user_question"];

/// One request to one agent, fully resolved.
pub struct Invocation {
    /// Agent id (directory name).
    pub agent: String,
    /// System prompt: instructions plus identity, skills index, memory.
    pub system_prompt: String,
    /// The model to call (profiles and fallbacks already behind this provider).
    pub provider: Arc<dyn ModelProvider>,
    /// The provider's model name.
    pub model: String,
    /// The agent's server tools (shared between requests).
    pub tools: Arc<ToolSet>,
    /// The effective policy of this execution; consulted again at every call.
    pub policy: ToolPolicy,
    /// Request-scoped client tools: shown to the model, never executed here. Shared, so each
    /// model call of the request clones pointers rather than schemas.
    pub client_tools: Vec<Arc<ToolSpec>>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// Run read-only batches concurrently.
    pub parallel_tool_calls: bool,
    /// Required shape of the final answer.
    pub response_format: ResponseFormat,
    /// Cumulative model calls allowed (`maxTurns`).
    pub max_turns: u32,
    /// Reasoning effort passed to the provider.
    pub reasoning: Option<String>,
    /// Sampling temperature passed to the provider (`None`: the provider's default).
    pub temperature: Option<f32>,
    /// Where and how tools run.
    pub tool_context: ToolContext,
    /// The agent's runtime hooks; `None` when it has no hook packs.
    pub hooks: Option<InvocationHooks>,
    /// Where a hook's `ask` on a tool call goes (a stored approval request); `None` refuses
    /// the call (`approval_required`), as for a loop's tool step, which no one can retry.
    pub approvals: Option<Arc<ApprovalDesk>>,
    /// How runtime tool schemas are shown (`toolLoading.mode`; progressive loading lives in
    /// `tools::loading`).
    pub tool_loading: ToolLoadingMode,
    /// Chat interactions offered (`ask_user_question`, suggestions).
    pub interactions: Interactions,
}

impl Invocation {
    /// Reject what the request may not do before anything runs.
    pub fn check(&self) -> Result<(), EngineError> {
        if let ToolChoice::Tool(name) = &self.tool_choice {
            let server = self.tools.get(name).is_some() && self.policy.allows(name);
            let client = self.is_client_tool(name);
            if !server && !client {
                return Err(EngineError::ToolPolicyDenied(format!(
                    "tool_choice forces `{name}`, which is not in the effective tool set of agent `{}`",
                    self.agent
                )));
            }
        }
        if self.client_tools.len() > MAX_CLIENT_TOOLS {
            return Err(EngineError::InvalidRequest(format!("at most {MAX_CLIENT_TOOLS} client tools per request")));
        }
        if !self.client_tools.is_empty() && self.parallel_tool_calls {
            return Err(EngineError::InvalidRequest("client tools require \"parallel_tool_calls\": false".into()));
        }
        for t in &self.client_tools {
            if self.tools.get(&t.name).is_some() || RESERVED_TOOL_NAMES.contains(&t.name.as_str()) {
                return Err(EngineError::InvalidRequest(format!("client tool `{}` shadows a runtime tool", t.name)));
            }
            if !valid_tool_name(&t.name) {
                return Err(EngineError::InvalidRequest(format!(
                    "client tool name `{}` must match [A-Za-z0-9_-]{{1,64}}",
                    t.name
                )));
            }
            let size = serde_json::to_vec(&t.parameters).map(|b| b.len()).unwrap_or(usize::MAX);
            if size > MAX_CLIENT_TOOL_SCHEMA_BYTES || !t.parameters.is_object() {
                return Err(EngineError::InvalidRequest(format!(
                    "client tool `{}` has an oversized or non-object parameters schema",
                    t.name
                )));
            }
        }
        if self.max_turns == 0 {
            return Err(EngineError::InvalidRequest("maxTurns must be at least 1".into()));
        }
        if let Some(hooks) = self.hooks.as_ref().filter(|h| h.parallel_branch && h.runtime.enabled)
            && hooks.set.gate_limits(&hooks.target(None)).is_some()
        {
            return Err(EngineError::TerminationGateParallelUnsupported(format!(
                "agent `{}` runs in a parallel loop branch, where termination gates cannot be checkpointed yet",
                self.agent
            )));
        }
        Ok(())
    }

    /// Runtime-provided client tools this invocation offers (`ask_user_question`).
    pub fn interaction_tools(&self) -> Option<Arc<ToolSpec>> {
        self.interactions.ask_user_question.then(ask_user_spec)
    }

    /// True when `name` runs in the client: a client tool of this request, or an offered
    /// `ask_user_question`.
    pub fn is_client_tool(&self, name: &str) -> bool {
        (self.interactions.ask_user_question && name == ASK_USER_QUESTION)
            || self.client_tools.iter().any(|t| t.name == name)
    }

    /// True when `call` ends the turn in the client: a request client tool, or a well-formed
    /// `ask_user_question` (a malformed one is answered with an error so the model can fix it).
    pub fn runs_in_client(&self, call: &ToolCall) -> bool {
        self.is_client_tool(&call.name) && (call.name != ASK_USER_QUESTION || check_question(&call.arguments).is_ok())
    }
}

/// OpenAI's rule for function names.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
