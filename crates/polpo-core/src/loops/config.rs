//! `.polpo/loops/<name>.json`: the canonical `ProjectLoopConfig`, its steps and its
//! governance fields, as authored.
//!
//! Like agents, every optional field stays absent when absent, so a loop read and written back
//! is the file the user wrote; defaults live in accessors. A file is first walked against the
//! shapes below (each step against the shape of its `type`, so a typo in a tool step is
//! reported against tool-step fields), collecting every problem with its pointer; only a clean
//! document is deserialized. The shapes are authoritative for unknown fields: the step structs
//! are flattened into [`Step`], where serde cannot deny them.

use crate::config::codes;
use crate::config::enums::{ReasoningLevel, string_enum};
use crate::config::parse::{Location, parse_checked};
use crate::config::schema::{Field, POSITIVE, STRINGS, Shape, check};
use crate::model::{MODEL_SELECTION, ModelSelection};
use crate::problem::{Problem, pointer_push};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The `next` value that ends the loop.
pub const END: &str = "end";
/// Iterations a `while` step may take when `maxIterations` is absent.
pub const DEFAULT_MAX_ITERATIONS: u32 = 5;
/// Largest `maxIterations` accepted: a loop is a bounded workflow, not a daemon.
pub const MAX_ITERATIONS_CAP: u32 = 10_000;

string_enum! {
    /// `kind`: the only kind of loop this contract version has.
    LoopKind {
        /// A graph of named steps.
        Graph = "graph",
    }
}

string_enum! {
    /// `context`: how steps share data.
    ContextMode {
        /// One JSON bag shared by every step.
        Shared = "shared",
    }
}

string_enum! {
    /// Lifecycle points where loop hooks, policies and permissions apply.
    LifecycleHook {
        /// Before the first step.
        LoopStart = "loop:start",
        /// Before each step.
        StepBefore = "step:before",
        /// Before an agent step calls its model.
        ModelBefore = "model:before",
        /// Before a tool runs.
        ToolBefore = "tool:before",
        /// After a tool ran.
        ToolAfter = "tool:after",
        /// After each step.
        StepAfter = "step:after",
        /// When the loop is stopped.
        LoopStop = "loop:stop",
        /// Between two steps.
        LoopTransition = "loop:transition",
        /// After the last step.
        LoopEnd = "loop:end",
    }
}

string_enum! {
    /// What a matching policy or permission does.
    Effect {
        /// Lets the action proceed (and makes the list an allow-list).
        Allow = "allow",
        /// Stops the loop.
        Deny = "deny",
        /// Pauses the loop until a person approves.
        Approval = "approval",
    }
}

string_enum! {
    /// What the server decides for an approval nobody answered before its `timeout`.
    TimeoutAction {
        /// End the run `approval_rejected` (the default).
        Reject = "reject",
        /// Let the run go past the gate.
        Approve = "approve",
    }
}

string_enum! {
    /// What a permission is about.
    PermissionResource {
        /// The loop itself.
        Loop = "loop",
        /// A step.
        Step = "step",
        /// A model call.
        Model = "model",
        /// A tool call.
        Tool = "tool",
        /// A human step.
        Human = "human",
    }
}

string_enum! {
    /// What a failing hook action does to the loop.
    OnError {
        /// The loop fails (the default).
        Fail = "fail",
        /// The failure is traced and the loop goes on.
        Continue = "continue",
    }
}

string_enum! {
    /// `toolChoice` of an agent step.
    ToolChoiceMode {
        /// The model decides.
        Auto = "auto",
        /// No tool calls.
        NoTools = "none",
        /// The model must call a tool (`tool` names which).
        Required = "required",
    }
}

string_enum! {
    /// `join` of a parallel step, besides a count.
    JoinMode {
        /// Wait for every branch.
        All = "all",
        /// Go on after the first branch.
        Any = "any",
    }
}

string_enum! {
    /// `type` of an agent step (optional: an untyped step is an agent step).
    AgentTag {
        /// An LLM turn loop.
        Agent = "agent",
    }
}

string_enum! {
    /// `type` of a tool step.
    ToolTag {
        /// A deterministic tool call.
        Tool = "tool",
    }
}

string_enum! {
    /// `type` of a human step.
    HumanTag {
        /// Input from a person.
        Human = "human",
    }
}

string_enum! {
    /// `type` of a parallel step.
    ParallelTag {
        /// Branches at once.
        Parallel = "parallel",
    }
}

string_enum! {
    /// `type` of a while step.
    WhileTag {
        /// A bounded repetition.
        While = "while",
    }
}

/// One loop as loaded: its id (the file name), config and where it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Loop {
    /// The id: `<name>` of `loops/<name>.json`.
    pub id: String,
    /// The file, shared: every run of the loop reads it, none copies it.
    pub config: Arc<LoopConfig>,
    /// Where the config was read from, for locating problems.
    pub source: Location,
}

/// The canonical `ProjectLoopConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopConfig {
    /// Contract version (`"1"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Always `graph`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<LoopKind>,
    /// The loop's name; when present it must be the file name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What the loop is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Free metadata, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Display sections; a step joins one with `group`. Groups do not nest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<BTreeMap<String, Group>>,
    /// Always `shared`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextMode>,
    /// Loop-level narrowing of the agent's tool ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Tool actions per lifecycle point (keys are [`LifecycleHook`] names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<BTreeMap<String, Vec<HookAction>>>,
    /// Allow/deny/approval rules on resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Vec<Permission>>,
    /// Expression gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<Policy>>,
    /// The first step.
    pub start: String,
    /// Steps by id.
    pub steps: BTreeMap<String, Step>,
}

/// One display section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Group {
    /// Display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What the section does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One step: the fields every type shares, and its type's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Display name (never changes execution).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Display description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The display group this step belongs to (at most one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Guard: the step is skipped when this expression is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Where to go next; absent ends the loop like `"end"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<Next>,
    /// The type and its fields.
    #[serde(flatten)]
    pub body: StepBody,
}

/// A step's type and its own fields. Non-agent variants require their `type`, so the first
/// variant that accepts a document is the right one.
// Agent steps are the big variant and the common one; a loop is parsed once, so boxing them
// would buy nothing but noise at every match.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StepBody {
    /// `type: tool`.
    Tool(ToolStep),
    /// `type: human`.
    Human(HumanStep),
    /// `type: parallel`.
    Parallel(ParallelStep),
    /// `type: while`.
    While(WhileStep),
    /// `type: agent` or no type.
    Agent(AgentStep),
}

impl StepBody {
    /// The type's name as written in `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Tool(_) => ToolTag::Tool.as_str(),
            Self::Human(_) => HumanTag::Human.as_str(),
            Self::Parallel(_) => ParallelTag::Parallel.as_str(),
            Self::While(_) => WhileTag::While.as_str(),
            Self::Agent(_) => AgentTag::Agent.as_str(),
        }
    }
}

/// An LLM turn loop with a narrowed prompt, tools and model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStep {
    /// `agent`, or absent.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<AgentTag>,
    /// The step's instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Step-level narrowing of the tool ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Deprecated alias of `allowedTools`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Skills for this step (absent: the agent's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// Whether and which tool the model must call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Model for this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSelection>,
    /// Thinking level for this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningLevel>,
    /// Sampling temperature, 0 to 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Number>,
    /// Turn budget of this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Ends the step's turn loop once the expression holds over the context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_when: Option<StopWhen>,
    /// The typed deliverable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSpec>,
    /// The step's only input (with `{"$context": path}` bindings), replacing the shared
    /// context and the conversation for this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// JSON Schema the resolved `input` must satisfy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

impl AgentStep {
    /// The step's tool narrowing: `allowedTools`, or the legacy `tools`.
    pub fn allowed_tools(&self) -> Option<&[String]> {
        self.allowed_tools.as_deref().or(self.tools.as_deref())
    }
}

/// A deterministic tool call, no LLM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolStep {
    /// `tool`.
    #[serde(rename = "type")]
    pub kind: ToolTag,
    /// The tool to call.
    pub tool: String,
    /// Static JSON arguments with `{"$context": path}` bindings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Context path of the result (default: the tool name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_as: Option<String>,
}

/// A pause for a person's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HumanStep {
    /// `human`.
    #[serde(rename = "type")]
    pub kind: HumanTag,
    /// The shape of the person's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSpec>,
    /// Who to tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<Vec<String>>,
}

/// Steps run at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParallelStep {
    /// `parallel`.
    #[serde(rename = "type")]
    pub kind: ParallelTag,
    /// The step ids each branch starts at.
    pub branches: Vec<String>,
    /// When the step is done (default all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join: Option<Join>,
}

/// `join`: all, any, or this many branches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Join {
    /// `all` or `any`.
    Mode(JoinMode),
    /// A positive count.
    Count(u32),
}

/// A bounded repetition of a body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhileStep {
    /// `while`.
    #[serde(rename = "type")]
    pub kind: WhileTag,
    /// Repeat while this holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Repeat until this holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The step or steps repeated, in order.
    pub body: Names,
    /// At most this many iterations; see [`WhileStep::max_iterations`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
}

impl WhileStep {
    /// The iteration budget (`maxIterations`, default 5).
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations.unwrap_or(DEFAULT_MAX_ITERATIONS)
    }
}

/// A name or a list of names (`body`, permission `match` entries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Names {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Names {
    /// The names, one or many.
    pub fn as_slice(&self) -> &[String] {
        match self {
            Self::One(name) => std::slice::from_ref(name),
            Self::Many(names) => names,
        }
    }
}

/// `next`: one step (or `"end"`), or conditional transitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Next {
    /// A step id or `"end"`.
    To(String),
    /// The first transition whose `when` holds; the first without `when` is the fallback.
    Branch(Vec<Transition>),
}

/// One conditional transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Transition {
    /// Guard; absent makes this the fallback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// A step id or `"end"`.
    pub to: String,
    /// Display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Display description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `toolChoice`: a mode, or `{mode, tool}` to force one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolChoice {
    /// `auto`, `none` or `required`.
    Mode(ToolChoiceMode),
    /// `{mode: required, tool}`.
    Forced(ForcedTool),
}

/// `{mode, tool}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForcedTool {
    /// Usually `required`.
    pub mode: ToolChoiceMode,
    /// The tool the model must call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// `stopWhen`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StopWhen {
    /// A guard over the context.
    pub expression: String,
}

/// `output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutputSpec {
    /// JSON Schema of the step's result.
    pub schema: Value,
}

/// A tool run at a lifecycle point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookAction {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Context path of its output (default: the tool name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_as: Option<String>,
    /// Runs only when this holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Fail (default) or continue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
}

/// A readable allow/deny/approval rule on a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Permission {
    /// Id shown in traces and approvals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// What it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What it governs.
    pub resource: PermissionResource,
    /// Free-form action, e.g. `call`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// What a match does.
    pub effect: Effect,
    /// Which resources it applies to.
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<PermissionMatch>,
    /// Applies only when this holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Shown when it denies or asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// An approval's ISO-8601 time limit (`PT30M`); unanswered by then, the server decides
    /// `timeout_action`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// What a timed-out approval becomes (default `reject`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_action: Option<TimeoutAction>,
}

/// `match` of a permission: names per resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionMatch {
    /// Loop names.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<Names>,
    /// Step ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<Names>,
    /// Tool names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<Names>,
    /// Human step ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub human: Option<Names>,
    /// Lifecycle points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<Names>,
}

/// An expression gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Id shown in traces and approvals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// What it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where it applies (default `tool:before`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<LifecycleHook>,
    /// What a match does.
    pub effect: Effect,
    /// When it matches.
    pub when: String,
    /// Shown when it denies or asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// An approval's ISO-8601 time limit (`PT30M`); unanswered by then, the server decides
    /// `timeout_action`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// What a timed-out approval becomes (default `reject`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_action: Option<TimeoutAction>,
}

// ---- shapes ----

static NAMES: Shape = Shape::OneOf(&[Shape::String, STRINGS], "a name or a list of names");
static OUTPUT: Shape = Shape::Object(&[&[Field::required("schema", Shape::Map(&Shape::Any))]]);
static TRANSITION: Shape = Shape::Object(&[&[
    Field::optional("when", Shape::String),
    Field::required("to", Shape::String),
    Field::optional("label", Shape::String),
    Field::optional("description", Shape::String),
]]);
const NESTED_GROUP: &str = "groups do not nest in this contract version: a group has only `label` and `description`";
static GROUP: Shape = Shape::Object(&[&[
    Field::optional("label", Shape::String),
    Field::optional("description", Shape::String),
    Field::forbidden("groups", NESTED_GROUP),
    Field::forbidden("group", NESTED_GROUP),
    Field::forbidden("parent", NESTED_GROUP),
]]);

/// Fields every step type has.
static COMMON: &[Field] = &[
    Field::optional("label", Shape::String),
    Field::optional("description", Shape::String),
    Field::optional("group", Shape::OneOf(&[Shape::String], "one group id (a step belongs to at most one group)")),
    Field::optional("when", Shape::String),
    Field::optional(
        "next",
        Shape::OneOf(&[Shape::String, Shape::Array(&TRANSITION)], "a step id, \"end\", or [{when, to, label}]"),
    ),
];

static AGENT_STEP: Shape = Shape::Object(&[
    COMMON,
    &[
        Field::optional("type", Shape::Enum(AgentTag::NAMES)),
        Field::optional("systemPrompt", Shape::String),
        Field::optional("allowedTools", STRINGS),
        Field::optional("tools", STRINGS),
        Field::optional("skills", STRINGS),
        Field::optional(
            "toolChoice",
            Shape::OneOf(
                &[
                    Shape::Enum(ToolChoiceMode::NAMES),
                    Shape::Object(&[&[
                        Field::required("mode", Shape::Enum(ToolChoiceMode::NAMES)),
                        Field::optional("tool", Shape::String),
                    ]]),
                ],
                "`auto`, `none`, `required` or {\"mode\": \"required\", \"tool\": name}",
            ),
        ),
        Field::optional("model", MODEL_SELECTION),
        Field::optional("reasoning", Shape::Enum(ReasoningLevel::NAMES)),
        Field::optional("temperature", Shape::Number { min: 0.0, max: 2.0 }),
        Field::optional("maxTurns", POSITIVE),
        Field::optional("stopWhen", Shape::Object(&[&[Field::required("expression", Shape::String)]])),
        Field::optional("output", OUTPUT),
        Field::optional("input", Shape::Any),
        Field::optional("inputSchema", Shape::OneOf(&[Shape::Map(&Shape::Any), Shape::Bool], "a JSON Schema")),
    ],
]);

static TOOL_STEP: Shape = Shape::Object(&[
    COMMON,
    &[
        Field::required("type", Shape::Enum(ToolTag::NAMES)),
        Field::required("tool", Shape::String),
        Field::optional("input", Shape::Any),
        Field::optional("saveAs", Shape::String),
    ],
]);

static HUMAN_STEP: Shape = Shape::Object(&[
    COMMON,
    &[
        Field::required("type", Shape::Enum(HumanTag::NAMES)),
        Field::optional("output", OUTPUT),
        Field::optional("notify", STRINGS),
    ],
]);

static PARALLEL_STEP: Shape = Shape::Object(&[
    COMMON,
    &[
        Field::required("type", Shape::Enum(ParallelTag::NAMES)),
        Field::required("branches", STRINGS),
        Field::optional(
            "join",
            Shape::OneOf(&[Shape::Enum(JoinMode::NAMES), POSITIVE], "`all`, `any` or a positive count"),
        ),
    ],
]);

static WHILE_STEP: Shape = Shape::Object(&[
    COMMON,
    &[
        Field::required("type", Shape::Enum(WhileTag::NAMES)),
        Field::optional("condition", Shape::String),
        Field::optional("until", Shape::String),
        Field::required("body", NAMES),
        Field::optional("maxIterations", Shape::Integer { min: 1, max: MAX_ITERATIONS_CAP as i64 }),
    ],
]);

static HOOK_ACTION: Shape = Shape::Object(&[&[
    Field::required("tool", Shape::String),
    Field::optional("input", Shape::Any),
    Field::optional("saveAs", Shape::String),
    Field::optional("when", Shape::String),
    Field::optional("onError", Shape::Enum(OnError::NAMES)),
]]);

static PERMISSION: Shape = Shape::Object(&[&[
    Field::optional("id", Shape::String),
    Field::optional("description", Shape::String),
    Field::required("resource", Shape::Enum(PermissionResource::NAMES)),
    Field::optional("action", Shape::String),
    Field::required("effect", Shape::Enum(Effect::NAMES)),
    Field::optional(
        "match",
        Shape::Object(&[&[
            Field::optional("loop", NAMES),
            Field::optional("step", NAMES),
            Field::optional("tool", NAMES),
            Field::optional("human", NAMES),
            Field::optional("hook", NAMES),
        ]]),
    ),
    Field::optional("when", Shape::String),
    Field::optional("message", Shape::String),
    Field::optional("timeout", Shape::String),
    Field::optional("timeoutAction", Shape::Enum(TimeoutAction::NAMES)),
]]);

static POLICY: Shape = Shape::Object(&[&[
    Field::optional("id", Shape::String),
    Field::optional("description", Shape::String),
    Field::optional("hook", Shape::Enum(LifecycleHook::NAMES)),
    Field::required("effect", Shape::Enum(Effect::NAMES)),
    Field::required("when", Shape::String),
    Field::optional("message", Shape::String),
    Field::optional("timeout", Shape::String),
    Field::optional("timeoutAction", Shape::Enum(TimeoutAction::NAMES)),
]]);

/// The shape of a loop file; each step is checked against its type's shape separately.
pub static LOOP_FILE: Shape = Shape::Object(&[&[
    Field::optional("version", Shape::Enum(&["1"])),
    Field::optional("kind", Shape::Enum(LoopKind::NAMES)),
    Field::optional("name", Shape::String),
    Field::optional("label", Shape::String),
    Field::optional("description", Shape::String),
    Field::optional("metadata", Shape::Map(&Shape::Any)),
    Field::optional("groups", Shape::Map(&GROUP)),
    Field::optional("context", Shape::Enum(ContextMode::NAMES)),
    Field::optional("allowedTools", STRINGS),
    Field::optional("hooks", Shape::Map(&Shape::Array(&HOOK_ACTION))),
    Field::optional("permissions", Shape::Array(&PERMISSION)),
    Field::optional("policies", Shape::Array(&POLICY)),
    Field::required("start", Shape::String),
    Field::required("steps", Shape::Map(&Shape::Any)),
]]);

/// The shape of a step, chosen by its `type`; `Err` when the type is not one of the five.
fn step_shape(step: &Value) -> Result<&'static Shape, String> {
    let kind = match step.get("type") {
        None => return Ok(&AGENT_STEP),
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => return Err(format!("expected a step type, found {other}")),
    };
    Ok(match kind {
        "agent" => &AGENT_STEP,
        "tool" => &TOOL_STEP,
        "human" => &HUMAN_STEP,
        "parallel" => &PARALLEL_STEP,
        "while" => &WHILE_STEP,
        other => return Err(format!("unknown step type `{other}`; expected agent, tool, human, parallel or while")),
    })
}

/// Every shape problem of a loop document, with pointers from its root.
pub fn check_loop(value: &Value) -> Vec<Problem> {
    let mut problems = check(value, &LOOP_FILE);
    for (id, step) in value.get("steps").and_then(Value::as_object).into_iter().flatten() {
        let here = pointer_push("/steps", id);
        let found = match step_shape(step) {
            Ok(shape) => check(step, shape),
            Err(message) => vec![Problem::new(codes::INVALID_VALUE, message).at("/type")],
        };
        problems.extend(found.into_iter().map(|p| {
            let pointer = format!("{here}{}", p.pointer.as_deref().unwrap_or(""));
            p.at(pointer)
        }));
    }
    for key in value.get("hooks").and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
        if !LifecycleHook::NAMES.contains(&key.as_str()) {
            problems.push(
                Problem::new(
                    codes::UNKNOWN_FIELD,
                    format!("`{key}` is not a lifecycle point; expected one of {}", LifecycleHook::NAMES.join(", ")),
                )
                .at(pointer_push("/hooks", key)),
            );
        }
    }
    problems
}

/// Every shape problem of the loop file at `at`, located; or the typed config.
pub fn parse_loop(value: &Value, at: &Location) -> Result<LoopConfig, Vec<Problem>> {
    let problems = check_loop(value);
    if !problems.is_empty() {
        return Err(problems.into_iter().map(|p| at.locate(p)).collect());
    }
    parse_checked(value, &Shape::Any, at)
}
