//! `project.json`: the manifest (`ProjectFile`) and its `settings` (`Settings`).
//!
//! Sections the runtime does not interpret yet (notifications, approval gates, escalation,
//! SLA, guardrails, the sandbox's `isolation`) are kept verbatim as JSON so that they
//! round-trip untouched.

use super::enums::{ChatExecution, ExecutionMode, LogLevel, ProviderApi, ReasoningLevel, StorageKind, VolatileCleanup};
use super::schema::{COUNT, Field, MILLIS, STRING_MAP, STRINGS, Shape};
use crate::model::{MODEL_SELECTION, ModelProfiles, ModelSelection};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// One entry of the top-level `apiKeys`: a key (better its `sha256:<hex>` digest) as a plain
/// string, or `{"key": …, "admin": true}` for a key that sees every client's sessions and
/// runs (a plain entry sees only its own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ApiKeyEntry {
    /// A client key.
    Plain(String),
    /// A key with its role.
    Detailed {
        /// The key or its `sha256:<hex>` digest.
        key: String,
        /// Sees everything, not only what it created.
        #[serde(default)]
        admin: bool,
    },
}

impl ApiKeyEntry {
    /// The key or digest as written.
    pub fn key(&self) -> &str {
        match self {
            Self::Plain(key) | Self::Detailed { key, .. } => key,
        }
    }

    /// Whether the key is an administrator's.
    pub fn admin(&self) -> bool {
        matches!(self, Self::Detailed { admin: true, .. })
    }
}

/// The shape of one `apiKeys` entry.
static API_KEY_ENTRY: Shape = Shape::OneOf(
    &[Shape::String, Shape::Object(&[&[Field::required("key", Shape::String), Field::optional("admin", Shape::Bool)]])],
    "a key string or {\"key\": …, \"admin\": true}",
);

/// The `schemaVersion` of the directory layout.
pub const SCHEMA_VERSION: u32 = 2;
/// Port of the local server when `settings.port` is absent.
pub const DEFAULT_PORT: u16 = 3890;

/// `.polpo/project.json` (or the legacy `polpo.json`, which lacks `schemaVersion`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProjectFile {
    /// Layout version; 2 for `project.json`, absent in legacy `polpo.json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    /// Project name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Runtime settings (absent and `{}` both mean all defaults).
    #[serde(default, skip_serializing_if = "Settings::is_default")]
    pub settings: Settings,
    /// Custom model providers by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub providers: Option<BTreeMap<String, ProviderConfig>>,
    /// Keys accepted by the server's API authentication (in addition to `POLPO_API_KEY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_keys: Option<Vec<ApiKeyEntry>>,
    /// Registry metadata: version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Registry metadata: author.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Registry metadata: tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

/// `settings` in `project.json` (`PolpoSettings` in the reference).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// Task retries before failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Working directory of agent tools, relative to the project root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<String>,
    /// Orchestrator verbosity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    /// Task timeout in ms (default 30 minutes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_timeout: Option<u64>,
    /// Stale process threshold in ms (default 5 minutes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_threshold: Option<u64>,
    /// Escalation after repeated failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_retry_policy: Option<RetryPolicy>,
    /// Whether missions may create volatile teams (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_volatile_teams: Option<bool>,
    /// When volatile agents are removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volatile_cleanup: Option<VolatileCleanup>,
    /// Fix attempts per review (default 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_fix_attempts: Option<u32>,
    /// Question rounds with the orchestrator (default 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_question_rounds: Option<u32>,
    /// Deadlock resolution attempts (default 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_resolution_attempts: Option<u32>,
    /// Whether estimated expectations may be corrected (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_correct_expectations: Option<bool>,
    /// Skills injected into the orchestrator prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orchestrator_skills: Option<Vec<String>>,
    /// Model of the orchestrator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orchestrator_model: Option<ModelSelection>,
    /// Named model profiles agents can reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_profiles: Option<ModelProfiles>,
    /// How requests of agents that opted in (`modelRouting: {mode: auto}`) pick a profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_routing: Option<crate::routing::ModelRoutingSettings>,
    /// Typed memory: the embedder that adds semantic candidates to lexical search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySettings>,
    /// Project-wide rules of schedules (the webhook host allowlist).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedules: Option<crate::schedules::ScheduleSettings>,
    /// How custom tools run; see [`CustomToolSettings`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_tools: Option<CustomToolSettings>,
    /// Default image model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_model: Option<String>,
    /// Allowed models: spec → `{alias, params}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_allowlist: Option<BTreeMap<String, ModelAllowlistEntry>>,
    /// Default reasoning level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningLevel>,
    /// Storage backend; see [`Settings::storage`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageKind>,
    /// PostgreSQL URL when `DATABASE_URL` is not set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// How tasks execute (default subprocess).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_execution: Option<ExecutionMode>,
    /// How the `bash` tool is confined; see [`SandboxSettings`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSettings>,
    /// How chat completions execute (default run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_execution: Option<ChatExecution>,
    /// Step executions one Project Loop run may make (default 100); back-edges are bounded
    /// by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_step_budget: Option<u32>,
    /// Assessment retries (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_assessment_retries: Option<u32>,
    /// Global concurrent agent limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Legacy approval gates, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_gates: Option<Vec<Value>>,
    /// Legacy notification channels and rules, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notifications: Option<Value>,
    /// Legacy escalation policy, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalation_policy: Option<Value>,
    /// Legacy SLA settings, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sla: Option<Value>,
    /// Whether the scheduler runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_scheduler: Option<bool>,
    /// Default assessment threshold, 1 to 5 (a JSON number kept as written: `3` stays `3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_quality_threshold: Option<serde_json::Number>,
    /// Recipient domains `email_send` may write to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_allowed_domains: Option<Vec<String>>,
    /// An AI gateway in front of the providers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Gateway>,
    /// Guardrail packs, kept verbatim (absent means disabled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guardrails: Option<Value>,
    /// `"enforce"` to enforce context trust.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_trust: Option<String>,
    /// Provider endpoint overrides by provider name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub providers: Option<BTreeMap<String, ProviderConfig>>,
    /// Provider API keys by provider name (literal or `${ENV}`); never logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_keys: Option<BTreeMap<String, String>>,
    /// Port of the local server; see [`Settings::port`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Connections the local server serves at once (default 1,024; `POLPO_MAX_CONNECTIONS`
    /// wins): beyond it a new connection is answered `503 too_many_connections`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Runtime hook packs (`hooks/<pack>.json` names) applied to every agent of the project,
    /// before the agent's own packs (project scope).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Vec<String>>,
}

impl Settings {
    /// The storage backend (default `file`).
    pub fn storage(&self) -> StorageKind {
        self.storage.unwrap_or(StorageKind::File)
    }

    /// The JavaScript runtime of custom tools (default `node`).
    pub fn js_runtime(&self) -> JsRuntimeName {
        self.custom_tools.as_ref().and_then(|c| c.runtime).unwrap_or(JsRuntimeName::Node)
    }

    /// How chat completions execute (default `run`).
    pub fn chat_execution(&self) -> ChatExecution {
        self.chat_execution.unwrap_or(ChatExecution::Run)
    }

    /// The server port (default 3890).
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }

    /// True when nothing is set, so an empty `settings` is not written back.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// `settings.sandbox`: the confinement of the `bash` tool. Absent fields take the tool
/// sandbox's defaults (600 CPU seconds, 8192 MB of address space, 512 processes, 2048 MB files,
/// the server's own user, refuse to run where Landlock is missing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxSettings {
    /// Legacy task isolation mode (`fresh`, `reuse`), kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Value>,
    /// Run `bash` without file-system confinement on hosts without Landlock (default false:
    /// it is refused with `sandbox_unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_unconfined: Option<bool>,
    /// User `bash` runs as when the server runs as root; it must be able to write the
    /// workspace. Absent: the server's user, with every capability dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    /// CPU seconds per command (`RLIMIT_CPU`); 0 for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Address space per process in MB (`RLIMIT_AS`); 0 for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Processes of the command's user (`RLIMIT_NPROC`, counted host-wide per user and not
    /// enforced for root); 0 for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// Largest file a command may write, in MB (`RLIMIT_FSIZE`); 0 for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_size_mb: Option<u64>,
}

/// `settings.defaultRetryPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    /// Failures before escalating.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalate_after: Option<u32>,
    /// Agent used for escalation retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_agent: Option<String>,
    /// Model used for escalation retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalate_model: Option<String>,
}

/// One entry of `settings.modelAllowlist`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelAllowlistEntry {
    /// Display alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Provider parameters, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Map<String, Value>>,
}

/// `settings.gateway`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gateway {
    /// Gateway base URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Environment variable holding the gateway key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Extra headers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

/// A model provider endpoint (top-level `providers` and `settings.providers`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// Endpoint base URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Environment variable holding the key (the key itself never lives here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Extra headers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Wire API spoken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api: Option<ProviderApi>,
    /// Models offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<CustomModel>>,
}

/// One model of a custom provider (`CustomModelDef`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomModel {
    /// Model id sent to the provider.
    pub id: String,
    /// Display name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether it supports reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<bool>,
    /// Input modalities: `text`, `image`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Vec<String>>,
    /// Prices per million tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<ModelCost>,
    /// Context window in tokens (default 200000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// Output limit in tokens (default 8192).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// `cost` of a custom model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelCost {
    /// Input price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Number>,
    /// Output price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Number>,
    /// Cache read price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<serde_json::Number>,
    /// Cache write price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<serde_json::Number>,
}

/// `settings.memory`: typed memory's semantic retrieval. Without `embedding`, search is lexical.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemorySettings {
    /// The embedder, as `polpo-embed`'s `EmbeddingConfig` reads it (`provider`, `model`,
    /// `baseUrl`, `apiKeyEnv`, `dimensions`); its shape is checked with the settings, its meaning
    /// (keys present, model installed) when the server starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<serde_json::Value>,
    /// `fallback` (default): an embedder outage answers with lexical results and a warning;
    /// `fail`: it fails the search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_failure_mode: Option<EmbeddingFailureMode>,
}

/// What a memory search does when the embedder cannot answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbeddingFailureMode {
    /// Lexical results, with a warning.
    #[default]
    Fallback,
    /// An error.
    Fail,
}

/// `settings.customTools`: how custom tools of `.polpo/tools/` run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomToolSettings {
    /// The JavaScript runtime of `index.ts|js|mjs` entrypoints (default `node`); a project
    /// whose tools were written for Deno or Bun names it here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<JsRuntimeName>,
}

crate::config::enums::string_enum! {
    /// The JavaScript runtime that runs custom tools written with `defineTool(...)`.
    JsRuntimeName {
        /// Node ≥ 20 (the default).
        Node = "node",
        /// Deno, with permissions limited to what the tool's bridge needs.
        Deno = "deno",
        /// Bun.
        Bun = "bun",
    }
}

static MEMORY: Shape = Shape::Object(&[&[
    Field::optional(
        "embedding",
        Shape::Object(&[&[
            Field::required("provider", Shape::Enum(&["openai", "local", "hashing"])),
            Field::optional("model", Shape::String),
            Field::optional("baseUrl", Shape::String),
            Field::optional("apiKeyEnv", Shape::String),
            Field::optional("dimensions", Shape::Integer { min: 1, max: 16_384 }),
        ]]),
    ),
    Field::optional("embeddingFailureMode", Shape::Enum(&["fallback", "fail"])),
]]);

static PROVIDER: Shape = Shape::Object(&[&[
    Field::optional("baseUrl", Shape::String),
    Field::optional("apiKeyEnv", Shape::String),
    Field::optional("headers", STRING_MAP),
    Field::optional("api", Shape::Enum(ProviderApi::NAMES)),
    Field::optional("models", Shape::Array(&CUSTOM_MODEL)),
]]);

static PRICE: Shape = Shape::Number { min: 0.0, max: f64::MAX };

static CUSTOM_MODEL: Shape = Shape::Object(&[&[
    Field::required("id", Shape::String),
    Field::optional("name", Shape::String),
    Field::optional("reasoning", Shape::Bool),
    Field::optional("input", Shape::Array(&Shape::Enum(&["text", "image"]))),
    Field::optional(
        "cost",
        Shape::Object(&[&[
            Field::optional("input", PRICE),
            Field::optional("output", PRICE),
            Field::optional("cacheRead", PRICE),
            Field::optional("cacheWrite", PRICE),
        ]]),
    ),
    Field::optional("contextWindow", COUNT),
    Field::optional("maxTokens", COUNT),
]]);

static SETTINGS: Shape = Shape::Object(&[&[
    Field::optional("maxRetries", COUNT),
    Field::optional("workDir", Shape::String),
    Field::optional("logLevel", Shape::Enum(LogLevel::NAMES)),
    Field::optional("taskTimeout", MILLIS),
    Field::optional("staleThreshold", MILLIS),
    Field::optional(
        "defaultRetryPolicy",
        Shape::Object(&[&[
            Field::optional("escalateAfter", COUNT),
            Field::optional("fallbackAgent", Shape::String),
            Field::optional("escalateModel", Shape::String),
        ]]),
    ),
    Field::optional("enableVolatileTeams", Shape::Bool),
    Field::optional("volatileCleanup", Shape::Enum(VolatileCleanup::NAMES)),
    Field::optional("maxFixAttempts", COUNT),
    Field::optional("maxQuestionRounds", COUNT),
    Field::optional("maxResolutionAttempts", COUNT),
    Field::optional("autoCorrectExpectations", Shape::Bool),
    Field::optional("orchestratorSkills", STRINGS),
    Field::optional("orchestratorModel", MODEL_SELECTION),
    Field::optional("modelProfiles", Shape::Map(&MODEL_SELECTION)),
    Field::optional("modelRouting", crate::routing::MODEL_ROUTING),
    Field::optional("memory", MEMORY),
    Field::optional("schedules", crate::schedules::settings::SCHEDULE_SETTINGS),
    Field::optional("customTools", Shape::Object(&[&[Field::optional("runtime", Shape::Enum(JsRuntimeName::NAMES))]])),
    Field::optional("imageModel", Shape::String),
    Field::optional(
        "modelAllowlist",
        Shape::Map(&Shape::Object(&[&[
            Field::optional("alias", Shape::String),
            Field::optional("params", Shape::Map(&Shape::Any)),
        ]])),
    ),
    Field::optional("reasoning", Shape::Enum(ReasoningLevel::NAMES)),
    Field::optional("storage", Shape::Enum(StorageKind::NAMES)),
    Field::optional("databaseUrl", Shape::String),
    Field::optional("taskExecution", Shape::Enum(ExecutionMode::NAMES)),
    Field::optional(
        "sandbox",
        Shape::Object(&[&[
            Field::optional("isolation", Shape::Any),
            Field::optional("allowUnconfined", Shape::Bool),
            Field::optional("runAs", Shape::String),
            Field::optional("cpuSeconds", COUNT),
            Field::optional("memoryMb", COUNT),
            Field::optional("maxProcesses", COUNT),
            Field::optional("fileSizeMb", COUNT),
        ]]),
    ),
    Field::optional("chatExecution", Shape::Enum(ChatExecution::NAMES)),
    Field::optional("loopStepBudget", Shape::Integer { min: 1, max: 100_000 }),
    Field::optional("maxAssessmentRetries", COUNT),
    Field::optional("maxConcurrency", Shape::Integer { min: 1, max: u32::MAX as i64 }),
    Field::optional("approvalGates", Shape::Array(&Shape::Any)),
    Field::optional("notifications", Shape::Any),
    Field::optional("escalationPolicy", Shape::Any),
    Field::optional("sla", Shape::Any),
    Field::optional("enableScheduler", Shape::Bool),
    Field::optional("defaultQualityThreshold", Shape::Number { min: 1.0, max: 5.0 }),
    Field::optional("emailAllowedDomains", STRINGS),
    Field::optional(
        "gateway",
        Shape::Object(&[&[
            Field::optional("url", Shape::String),
            Field::optional("apiKeyEnv", Shape::String),
            Field::optional("headers", STRING_MAP),
        ]]),
    ),
    Field::optional("guardrails", Shape::Any),
    Field::optional("contextTrust", Shape::Enum(&["enforce"])),
    Field::optional("providers", Shape::Map(&PROVIDER)),
    Field::optional("apiKeys", STRING_MAP),
    Field::optional("port", Shape::Integer { min: 1, max: u16::MAX as i64 }),
    Field::optional("maxConnections", Shape::Integer { min: 1, max: 1_000_000 }),
    Field::optional("hooks", STRINGS),
]]);

static PROJECT_FIELDS: &[Field] = &[
    Field::optional("project", Shape::String),
    Field::optional("settings", SETTINGS),
    Field::optional("providers", Shape::Map(&PROVIDER)),
    Field::optional("apiKeys", Shape::Array(&API_KEY_ENTRY)),
    Field::optional("version", Shape::String),
    Field::optional("author", Shape::String),
    Field::optional("tags", STRINGS),
];

/// The shape of `project.json` (requires `schemaVersion: 2`).
pub static PROJECT_FILE: Shape = Shape::Object(&[
    PROJECT_FIELDS,
    &[Field::required("schemaVersion", Shape::Integer { min: SCHEMA_VERSION as i64, max: SCHEMA_VERSION as i64 })],
]);

/// The shape of the legacy `polpo.json` (no `schemaVersion`).
pub static LEGACY_PROJECT_FILE: Shape = Shape::Object(&[
    PROJECT_FIELDS,
    &[Field::forbidden("schemaVersion", "`schemaVersion` belongs in project.json; polpo.json is the legacy manifest")],
]);
