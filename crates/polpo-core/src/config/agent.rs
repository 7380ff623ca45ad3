//! `agents/<id>/agent.json`: everything about an agent except its id (the directory name)
//! and its instructions (`instructions.md`).
//!
//! Every field is optional and kept as authored (absent stays absent), so a file read and
//! written back by the server is the file the user wrote. Defaults are applied by accessors,
//! never by filling in the struct.

use super::enums::{
    ExecutionMode, LearningMode, LearningSurface, McpTransport, MemoryKind, ReasoningLevel, ResponsibilityPriority,
    RouterMode, ToolLoadingMode,
};
use super::schema::{COUNT, Field, MILLIS, POSITIVE, STRING_MAP, STRINGS, Shape};
use crate::model::MODEL_SELECTION;
use crate::model::ModelSelection;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Turns an agent may take in one invocation when `maxTurns` is absent.
pub const DEFAULT_MAX_TURNS: u32 = 150;

/// The authored configuration of one agent (`agent.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    /// What the agent is for, in a few words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Model id, profile, or primary with fallbacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSelection>,
    /// Root profiles this agent may reference (narrows `settings.modelProfiles`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_model_profiles: Option<Vec<String>>,
    /// Opt-in to project model routing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_routing: Option<ModelRouting>,
    /// Thinking level; falls back to `settings.reasoning`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningLevel>,
    /// Model behind `image_generate`.
    #[serde(rename = "image_model", skip_serializing_if = "Option::is_none")]
    pub image_model: Option<String>,
    /// Model behind `video_generate`.
    #[serde(rename = "video_model", skip_serializing_if = "Option::is_none")]
    pub video_model: Option<String>,
    /// Model behind `image_analyze`.
    #[serde(rename = "vision_model", skip_serializing_if = "Option::is_none")]
    pub vision_model: Option<String>,
    /// Model behind `audio_transcribe`.
    #[serde(rename = "transcribe_model", skip_serializing_if = "Option::is_none")]
    pub transcribe_model: Option<String>,
    /// Model behind `audio_speak`.
    #[serde(rename = "tts_model", skip_serializing_if = "Option::is_none")]
    pub tts_model: Option<String>,
    /// Backend of the search tools.
    #[serde(rename = "search_provider", skip_serializing_if = "Option::is_none")]
    pub search_provider: Option<String>,
    /// The global tool ceiling (patterns). Absent: every tool; `[]`: none beyond core tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Filesystem sandbox for file tools and bash; default the work dir.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_paths: Option<Vec<String>>,
    /// How tools are exposed to the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_loading: Option<ToolLoading>,
    /// Direct-chat policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat: Option<ChatConfig>,
    /// Channel-turn policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channels: Option<ChannelsConfig>,
    /// Memory learning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryConfig>,
    /// Persona.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// Escalation target (another agent id). The chain must be acyclic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports_to: Option<String>,
    /// Installed skill names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// MCP servers whose tools become `mcp__<server>__<tool>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<BTreeMap<String, McpServer>>,
    /// Turn budget per invocation; see [`AgentConfig::max_turns`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Concurrent tasks for this agent; absent means unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Runtime reference (default `polpo-runner`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Project Loops this agent may run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_loops: Option<Vec<String>>,
    /// Loop used by default; must be one of `assignedLoops`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_loop: Option<String>,
    /// Automatic loop selection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_router: Option<ExecutionRouter>,
    /// Deprecated inline loop collection, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loops: Option<Value>,
    /// Deprecated pipeline, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Value>,
    /// Runtime-only tool choice set from the active loop step, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Subprocess or in-process (task > agent > settings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_mode: Option<ExecutionMode>,
    /// Sandbox options (request > task > agent > settings), kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Value>,
    /// Mission-scoped agent removed when its mission ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volatile: Option<bool>,
    /// Mission group of a volatile agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mission_group: Option<String>,
    /// Persistent browser profile name (default: the agent id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub browser_profile: Option<String>,
    /// Recipient domains `email_send` may write to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_allowed_domains: Option<Vec<String>>,
    /// The team this agent belongs to (team membership lives here, not in the team file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// Runtime hook packs (`hooks/<pack>.json` names) applied to this agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Vec<String>>,
    /// Registry metadata: semantic version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Registry metadata: author.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Registry metadata: tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

impl AgentConfig {
    /// The effective turn budget (`maxTurns`, default 150).
    pub fn max_turns(&self) -> u32 {
        self.max_turns.unwrap_or(DEFAULT_MAX_TURNS)
    }
}

/// `modelRouting`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRouting {
    /// `auto` opts in.
    pub mode: RouterMode,
}

/// `toolLoading`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolLoading {
    /// Exposure mode.
    pub mode: ToolLoadingMode,
}

/// `chat`: the direct-chat layer of the tool policy and chat affordances.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChatConfig {
    /// Narrows tools in direct chat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Whether the agent may ask the user questions (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_user_questions: Option<bool>,
    /// Follow-up suggestions (default off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestions: Option<Suggestions>,
}

/// `chat.suggestions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Suggestions {
    /// On or off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// At most this many suggestions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u32>,
    /// Guidance for writing them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
}

/// `channels`: the channel-turn layer of the tool policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelsConfig {
    /// Narrows tools on channel turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
}

/// `memory`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryConfig {
    /// Post-turn learning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learning: Option<Learning>,
}

/// `memory.learning`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Learning {
    /// Off (default), suggest or automatic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<LearningMode>,
    /// Surfaces where learning happens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub surfaces: Option<Vec<LearningSurface>>,
    /// Kinds that may be learnt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<MemoryKind>>,
}

/// `identity`: who the agent is as a persona.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Identity {
    /// "Alice Chen".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Job title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Company.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub company: Option<String>,
    /// Primary email.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Short persona description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bio: Option<String>,
    /// IANA timezone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Avatar path relative to the project root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avatar: Option<String>,
    /// Areas of responsibility.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responsibilities: Option<Vec<Responsibility>>,
    /// How the agent communicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tone: Option<String>,
    /// Who the agent is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub personality: Option<String>,
    /// Platform → handle or URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socials: Option<BTreeMap<String, String>>,
}

/// One entry of `identity.responsibilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Responsibility {
    /// A plain sentence.
    Text(String),
    /// A structured area.
    Area {
        /// The area.
        area: String,
        /// What the agent does there.
        description: String,
        /// How it ranks against other areas.
        #[serde(skip_serializing_if = "Option::is_none")]
        priority: Option<ResponsibilityPriority>,
    },
}

/// One entry of `mcpServers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServer {
    /// Transport.
    #[serde(rename = "type")]
    pub transport: McpTransport,
    /// stdio: program to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// stdio: extra environment (`${vault:svc:key}` allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// sse/http: endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// sse/http: headers (`${vault:svc:key}` allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

/// `executionRouter`: automatic loop selection, which can only narrow `assignedLoops`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionRouter {
    /// Off or auto.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<RouterMode>,
    /// Loops the router may pick (required in auto mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_loops: Option<Vec<String>>,
    /// Minimum classifier confidence, 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_confidence: Option<serde_json::Number>,
    /// Classifier time budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Input characters the classifier sees.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_input_chars: Option<u32>,
}

static RESPONSIBILITY: Shape = Shape::OneOf(
    &[
        Shape::String,
        Shape::Object(&[&[
            Field::required("area", Shape::String),
            Field::required("description", Shape::String),
            Field::optional("priority", Shape::Enum(ResponsibilityPriority::NAMES)),
        ]]),
    ],
    "a sentence or {area, description, priority}",
);

static MCP_SERVER: Shape = Shape::Object(&[&[
    Field::required("type", Shape::Enum(McpTransport::NAMES)),
    Field::optional("command", Shape::String),
    Field::optional("args", STRINGS),
    Field::optional("env", STRING_MAP),
    Field::optional("url", Shape::String),
    Field::optional("headers", STRING_MAP),
]]);

/// Every field of `agent.json`.
pub static AGENT_FIELDS: &[Field] = &[
    Field::optional("role", Shape::String),
    Field::optional("model", MODEL_SELECTION),
    Field::optional("allowedModelProfiles", STRINGS),
    Field::optional("modelRouting", Shape::Object(&[&[Field::required("mode", Shape::Enum(RouterMode::NAMES))]])),
    Field::optional("reasoning", Shape::Enum(ReasoningLevel::NAMES)),
    Field::optional("image_model", Shape::String),
    Field::optional("video_model", Shape::String),
    Field::optional("vision_model", Shape::String),
    Field::optional("transcribe_model", Shape::String),
    Field::optional("tts_model", Shape::String),
    Field::optional("search_provider", Shape::String),
    Field::optional("allowedTools", STRINGS),
    Field::optional("allowedPaths", STRINGS),
    Field::optional("toolLoading", Shape::Object(&[&[Field::required("mode", Shape::Enum(ToolLoadingMode::NAMES))]])),
    Field::optional(
        "chat",
        Shape::Object(&[&[
            Field::optional("allowedTools", STRINGS),
            Field::optional("allowUserQuestions", Shape::Bool),
            Field::optional(
                "suggestions",
                Shape::Object(&[&[
                    Field::optional("enabled", Shape::Bool),
                    Field::optional("maxItems", COUNT),
                    Field::optional("guidance", Shape::String),
                ]]),
            ),
        ]]),
    ),
    Field::optional("channels", Shape::Object(&[&[Field::optional("allowedTools", STRINGS)]])),
    Field::optional(
        "memory",
        Shape::Object(&[&[Field::optional(
            "learning",
            Shape::Object(&[&[
                Field::optional("mode", Shape::Enum(LearningMode::NAMES)),
                Field::optional("surfaces", Shape::Array(&Shape::Enum(LearningSurface::NAMES))),
                Field::optional("kinds", Shape::Array(&Shape::Enum(MemoryKind::NAMES))),
            ]]),
        )]]),
    ),
    Field::optional(
        "identity",
        Shape::Object(&[&[
            Field::optional("displayName", Shape::String),
            Field::optional("title", Shape::String),
            Field::optional("company", Shape::String),
            Field::optional("email", Shape::String),
            Field::optional("bio", Shape::String),
            Field::optional("timezone", Shape::String),
            Field::optional("avatar", Shape::String),
            Field::optional("responsibilities", Shape::Array(&RESPONSIBILITY)),
            Field::optional("tone", Shape::String),
            Field::optional("personality", Shape::String),
            Field::optional("socials", STRING_MAP),
        ]]),
    ),
    Field::optional("reportsTo", Shape::String),
    Field::optional("skills", STRINGS),
    Field::optional("mcpServers", Shape::Map(&MCP_SERVER)),
    Field::optional("maxTurns", POSITIVE),
    Field::optional("maxConcurrency", POSITIVE),
    Field::optional("runtime", Shape::String),
    Field::optional("assignedLoops", STRINGS),
    Field::optional("defaultLoop", Shape::String),
    Field::optional(
        "executionRouter",
        Shape::Object(&[&[
            Field::optional("mode", Shape::Enum(RouterMode::NAMES)),
            Field::optional("allowedLoops", STRINGS),
            Field::optional("minConfidence", Shape::Number { min: 0.0, max: 1.0 }),
            Field::optional("timeoutMs", MILLIS),
            Field::optional("maxInputChars", COUNT),
        ]]),
    ),
    Field::optional("loops", Shape::Any),
    Field::optional("pipeline", Shape::Any),
    Field::optional("toolChoice", Shape::Any),
    Field::optional("executionMode", Shape::Enum(ExecutionMode::NAMES)),
    Field::optional("sandbox", Shape::Any),
    Field::optional("volatile", Shape::Bool),
    Field::optional("missionGroup", Shape::String),
    Field::optional("browserProfile", Shape::String),
    Field::optional("emailAllowedDomains", STRINGS),
    Field::optional("team", Shape::String),
    Field::optional("hooks", STRINGS),
    Field::optional("version", Shape::String),
    Field::optional("author", Shape::String),
    Field::optional("tags", STRINGS),
];

/// Keys the reference keeps on the runtime agent but that must not be authored in
/// `agent.json`: the directory layout owns them.
pub static DIRECTORY_ONLY_FORBIDDEN: &[Field] = &[
    Field::forbidden("name", "`name` must not appear in agent.json: the directory name is the agent id"),
    Field::forbidden("systemPrompt", "`systemPrompt` must not appear in agent.json: write it in instructions.md"),
    Field::forbidden("createdAt", "`createdAt` must not appear in agent.json: the runtime sets it"),
];

/// The shape of `agents/<id>/agent.json`.
pub static AGENT_FILE: Shape = Shape::Object(&[AGENT_FIELDS, DIRECTORY_ONLY_FORBIDDEN]);

/// Keys a legacy `agents.json` entry carries on top of [`AGENT_FIELDS`].
pub static LEGACY_AGENT_EXTRA: &[Field] = &[
    Field::required("name", Shape::String),
    Field::optional("systemPrompt", Shape::String),
    Field::optional("createdAt", Shape::String),
];

/// The shape of one agent in a legacy `agents.json`.
pub static LEGACY_AGENT: Shape = Shape::Object(&[AGENT_FIELDS, LEGACY_AGENT_EXTRA]);
