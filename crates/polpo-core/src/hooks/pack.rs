//! The shapes of a hook pack (`.polpo/hooks/<pack>.json`) once it has been validated.
//!
//! A pack is a list of hooks per event. Where the pack is assigned (project, agent, loop,
//! step) decides its [`Scope`]; the pack itself does not say, so one pack file can be reused
//! at several levels without copies.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// The only pack format version this runtime reads.
pub const PACK_VERSION: u32 = 1;
/// Default `priority`: lower numbers run first, as in the orchestrator hook registry.
pub const DEFAULT_PRIORITY: i32 = 100;

/// The moments a hook can run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before a model call (observe or deny; optional event).
    #[serde(rename = "model:before")]
    ModelBefore,
    /// Before a locally executed tool call: may deny, ask, or modify the input.
    #[serde(rename = "tool:before")]
    ToolBefore,
    /// After a tool call: may replace the model-visible result.
    #[serde(rename = "tool:after")]
    ToolAfter,
    /// When the model offers a final answer: feedback recovery or a termination gate.
    #[serde(rename = "turn:stop")]
    TurnStop,
}

impl HookEvent {
    /// Every event, in the order a turn meets them.
    pub const ALL: [HookEvent; 4] =
        [HookEvent::ModelBefore, HookEvent::ToolBefore, HookEvent::ToolAfter, HookEvent::TurnStop];

    /// The name used in pack files and envelopes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ModelBefore => "model:before",
            Self::ToolBefore => "tool:before",
            Self::ToolAfter => "tool:after",
            Self::TurnStop => "turn:stop",
        }
    }

    /// Parse a pack-file event name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// True when the event concerns one tool call, so a `tools` matcher means something.
    pub fn is_tool_event(self) -> bool {
        matches!(self, Self::ToolBefore | Self::ToolAfter)
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The surface an agent runs on. Run-backed chat is `chat`; an agent node in a Project Loop
/// is `loop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutionMode {
    /// Direct or run-backed chat (`/v1/chat/completions`, `polpo run`).
    Chat,
    /// A Channel conversation (Slack, Telegram, …).
    Channel,
    /// An agent node inside a Project Loop.
    Loop,
}

impl ExecutionMode {
    /// The name used in pack files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Channel => "channel",
            Self::Loop => "loop",
        }
    }
}

/// Where a pack was assigned. Controlling hooks run scope by scope in this order (the
/// broadest policy first), then by priority, then in declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// `project.json`.
    Project,
    /// `agent.json` `hooks`.
    Agent,
    /// A Project Loop definition.
    Loop,
    /// One step of a Project Loop.
    Step,
}

/// Which executions a hook applies to. A missing field does not restrict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Matcher {
    /// Tool-name patterns: exact names or globs with `*` and `?` (case-insensitive, like
    /// tool policies). Only meaningful on `tool:*` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Loop step ids (exact or glob). When present the hook applies only inside Project
    /// Loops; remove it to apply the pack to chat as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<String>>,
    /// Execution modes the hook applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<Vec<ExecutionMode>>,
}

/// What a failing handler (crash, timeout, unreadable output) means for a controlling hook.
/// Inside a termination gate a failure always fails closed, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Fail closed: deny the tool call, withhold the tool result, or end the run.
    #[default]
    Fail,
    /// Treat the failure as `defer`: the hook has no say this time.
    Continue,
}

/// How a hook runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum Handler {
    /// A shell command in the agent's sandbox: envelope on stdin, decision JSON on stdout.
    Command {
        /// Command line, run by `sh -c` in the agent's workspace.
        command: String,
        /// Extra non-secret environment variables.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// Timeout; default 5 s (60 s on a managed host).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// A POST of the envelope to a public `https` endpoint; the decision is the response body.
    Http {
        /// Endpoint URL.
        url: String,
        /// Project Connection that supplies authentication (never inline credentials).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        connection: Option<String>,
        /// Extra non-secret headers.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        /// Timeout; default 5 s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// A tool of the agent, run through the same policy and schema checks as model calls.
    /// Its arguments are `input` plus `hook` (the envelope); its text output is the decision.
    Tool {
        /// Tool name.
        tool: String,
        /// Fixed arguments.
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        input: Map<String, Value>,
        /// Timeout; default 5 s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// A tool of an MCP server connected to the project.
    McpTool {
        /// MCP server (Connection) name.
        server: String,
        /// Tool name on that server.
        tool: String,
        /// Fixed arguments.
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        input: Map<String, Value>,
        /// Timeout; default 5 s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// One bounded, tool-free model call that answers with a decision. Not deterministic,
    /// so never a termination-gate validator.
    Prompt {
        /// Instructions for the judging model; the envelope is appended.
        prompt: String,
        /// Model id; defaults to the agent's model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// Timeout; default 30 s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// A verifier agent with bounded turns. Not deterministic, so never a gate validator.
    Verifier {
        /// Agent id.
        agent: String,
        /// Most model calls the verifier may make (1–10).
        #[serde(default = "default_verifier_turns")]
        max_turns: u32,
        /// Timeout; default 60 s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
}

fn default_verifier_turns() -> u32 {
    3
}

impl Handler {
    /// The `type` name, for traces and `hooks explain`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Command { .. } => "command",
            Self::Http { .. } => "http",
            Self::Tool { .. } => "tool",
            Self::McpTool { .. } => "mcp_tool",
            Self::Prompt { .. } => "prompt",
            Self::Verifier { .. } => "verifier",
        }
    }

    /// Deterministic handlers may validate a termination gate; model-backed ones may not.
    pub fn is_deterministic(&self) -> bool {
        !matches!(self, Self::Prompt { .. } | Self::Verifier { .. })
    }

    /// The configured timeout, if any.
    pub fn timeout_ms(&self) -> Option<u64> {
        match self {
            Self::Command { timeout_ms, .. }
            | Self::Http { timeout_ms, .. }
            | Self::Tool { timeout_ms, .. }
            | Self::McpTool { timeout_ms, .. }
            | Self::Prompt { timeout_ms, .. }
            | Self::Verifier { timeout_ms, .. } => *timeout_ms,
        }
    }
}

/// The opt-in `terminationGate` of a `turn:stop` hook: a deterministic validator and the
/// cumulative limits of the validate-and-repair loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerminationGate {
    /// The validator: `command`, `http`, `tool` or `mcp_tool`.
    pub validator: Handler,
    /// Allowed repairs (1–20).
    pub max_cycles: u32,
    /// Elapsed time from invocation start (at most one hour).
    pub max_duration_ms: u64,
    /// Reported agent and compaction tokens (at most 10 million).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// What a hook does: run a handler, or guard termination.
#[derive(Debug, Clone, PartialEq)]
pub enum HookAction {
    /// An ordinary hook.
    Handler(Handler),
    /// A termination gate (only on `turn:stop`).
    Gate(TerminationGate),
}

impl HookAction {
    /// The handler that runs: the hook's own, or the gate's validator.
    pub fn handler(&self) -> &Handler {
        match self {
            Self::Handler(h) => h,
            Self::Gate(g) => &g.validator,
        }
    }
}

/// One validated hook of a pack.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    /// The pack it came from (file stem).
    pub pack: String,
    /// Unique within the pack: the `id` field, or `<event>#<index>`.
    pub id: String,
    /// What the hook is for, shown by `hooks explain`.
    pub description: Option<String>,
    /// When it runs.
    pub event: HookEvent,
    /// Position within its event's list; ties in priority run in this order.
    pub declaration: usize,
    /// Lower runs first.
    pub priority: i32,
    /// Observe-only hooks run concurrently and cannot change execution.
    pub observe: bool,
    /// Which executions it applies to.
    pub matcher: Matcher,
    /// What it does.
    pub action: HookAction,
    /// What a handler failure means (ignored inside a gate: gates fail closed).
    pub on_failure: OnFailure,
}

impl Hook {
    /// `pack/id`, the stable name used in traces and idempotency keys.
    pub fn qualified_id(&self) -> String {
        format!("{}/{}", self.pack, self.id)
    }

    /// JSON pointer of the handler that runs (the hook's own, or its gate's validator) in the
    /// pack file, for problems found after parsing.
    pub fn handler_pointer(&self) -> String {
        let at = match self.action {
            HookAction::Handler(_) => "handler",
            HookAction::Gate(_) => "terminationGate/validator",
        };
        format!("/hooks/{}/{}/{at}", self.event.as_str(), self.declaration)
    }

    /// The termination gate, when this hook is one.
    pub fn gate(&self) -> Option<&TerminationGate> {
        match &self.action {
            HookAction::Gate(g) => Some(g),
            HookAction::Handler(_) => None,
        }
    }
}

/// A validated pack.
#[derive(Debug, Clone, PartialEq)]
pub struct HookPack {
    /// File stem (`quality` for `.polpo/hooks/quality.json`).
    pub name: String,
    /// Human description.
    pub description: Option<String>,
    /// Hooks, grouped by event in [`HookEvent::ALL`] order, declaration order within.
    pub hooks: Vec<Hook>,
}
