//! `.polpo/schedules/<id>.json`: the v2 schedule definition, as authored, and the legacy
//! mission-shaped file it replaces.
//!
//! A file is walked against the shapes below first (the invocation against the shape of its
//! `surface`, the timing against the shape of its `kind`), collecting every problem with its
//! pointer; only a clean document is deserialized and its timing checked ([`Timing`]).

use super::codes as schedule_codes;
use super::timing::{Timing, TimingConfig};
use crate::config::codes;
use crate::config::enums::string_enum;
use crate::config::parse::{Location, parse_checked};
use crate::config::schema::{Field, Shape, check};
use crate::hooks::validate::{ValidateOptions, check_url};
use crate::problem::Problem;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Default `policy.misfireGraceSeconds`: an occurrence more than a minute late is missed.
pub const DEFAULT_MISFIRE_GRACE_SECONDS: u32 = 60;
/// Default `policy.catchUpLimit` for `catchUp: "all"`.
pub const DEFAULT_CATCH_UP_LIMIT: u32 = 10;
/// Largest `policy.catchUpLimit`: catching up is bounded work after downtime.
pub const MAX_CATCH_UP_LIMIT: u32 = 1000;

string_enum! {
    /// `status`: whether the scheduler fires it.
    ScheduleStatus {
        /// Fires.
        Active = "active",
        /// Kept, not fired (`polpo schedules pause`).
        Paused = "paused",
    }
}

string_enum! {
    /// `policy.catchUp`: what happens to occurrences missed beyond the grace (the server was
    /// down).
    CatchUp {
        /// All are recorded `missed`; none fires.
        Skip = "skip",
        /// The latest fires, the others are `missed`.
        One = "one",
        /// The reference's name for `one`.
        Latest = "latest",
        /// Each fires, up to `catchUpLimit` (the latest ones); the rest are `missed`.
        All = "all",
    }
}

/// What a fire does (`invocation`), by `surface`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "surface", rename_all = "snake_case")]
pub enum Invocation {
    /// Ask an agent, in a new session.
    Agent {
        /// The agent.
        #[serde(rename = "agentName")]
        agent_name: String,
        /// What it is asked.
        input: AgentInput,
        /// `{mode: "new" | "reuse", sessionId?, userId?}`, kept as written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<Value>,
        /// `{loop?, model?, sandbox?, guardrails?, metadata?}`, kept as written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        execution: Option<Value>,
    },
    /// Create an orchestrator task from a template.
    Task {
        /// The agent assigned.
        #[serde(rename = "agentName")]
        agent_name: String,
        /// The task's title.
        title: String,
        /// The task's prompt.
        prompt: String,
        /// The end user.
        #[serde(default, rename = "userId", skip_serializing_if = "Option::is_none")]
        user_id: Option<String>,
        /// Task metadata.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
        /// Execution options, kept as written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        execution: Option<Value>,
    },
    /// Run a Project Loop with an agent.
    Loop {
        /// The loop.
        #[serde(rename = "loopName")]
        loop_name: String,
        /// The agent the loop runs for.
        #[serde(rename = "agentName")]
        agent_name: String,
        /// What it is asked.
        input: AgentInput,
    },
    /// POST a JSON payload to an https URL.
    Webhook {
        /// The target.
        url: String,
        /// The body (`{}` when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<Value>,
    },
    /// A legacy mission schedule, translated from a mission-shaped file.
    LegacyMission {
        /// The mission.
        #[serde(rename = "missionId")]
        mission_id: String,
    },
}

impl Invocation {
    /// The `surface` spelling.
    pub fn surface(&self) -> &'static str {
        match self {
            Self::Agent { .. } => "agent",
            Self::Task { .. } => "task",
            Self::Loop { .. } => "loop",
            Self::Webhook { .. } => "webhook",
            Self::LegacyMission { .. } => "legacy_mission",
        }
    }
}

/// `input` of an agent or loop invocation: a prompt, or messages, or both (prompt last).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentInput {
    /// One user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `[{role, content}]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<InputMessage>>,
}

/// One message of an `input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputMessage {
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// Its text.
    pub content: String,
}

/// `policy`: misfires, catch-up and concurrency; every field optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulePolicy {
    /// What happens to occurrences missed beyond the grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<CatchUp>,
    /// How many missed occurrences `catchUp: "all"` fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_limit: Option<u32>,
    /// How late an occurrence may still fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire_grace_seconds: Option<u32>,
    /// Running invocations of this schedule at most; further occurrences are `skipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
}

impl SchedulePolicy {
    /// `catchUp`, `skip` when absent; `latest` reads as `one`.
    pub fn catch_up(&self) -> CatchUp {
        match self.catch_up.unwrap_or(CatchUp::Skip) {
            CatchUp::Latest => CatchUp::One,
            c => c,
        }
    }

    /// `catchUpLimit`, [`DEFAULT_CATCH_UP_LIMIT`] when absent.
    pub fn catch_up_limit(&self) -> u32 {
        self.catch_up_limit.unwrap_or(DEFAULT_CATCH_UP_LIMIT)
    }

    /// `misfireGraceSeconds`, [`DEFAULT_MISFIRE_GRACE_SECONDS`] when absent.
    pub fn misfire_grace_seconds(&self) -> u32 {
        self.misfire_grace_seconds.unwrap_or(DEFAULT_MISFIRE_GRACE_SECONDS)
    }

    /// `maxConcurrency`, 1 when absent.
    pub fn max_concurrency(&self) -> u32 {
        self.max_concurrency.unwrap_or(1)
    }
}

/// The v2 file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleConfig {
    /// Must equal the file name when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When it fires.
    pub timing: TimingConfig,
    /// What a fire does.
    pub invocation: Invocation,
    /// `active` (when absent) or `paused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ScheduleStatus>,
    /// Misfires, catch-up, concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<SchedulePolicy>,
    /// Free-form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Bumped by every write through the API; `expectedRevision` is compared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
}

impl ScheduleConfig {
    /// Whether the scheduler fires it.
    pub fn is_active(&self) -> bool {
        self.status.unwrap_or(ScheduleStatus::Active) == ScheduleStatus::Active
    }

    /// The revision (0 for a file never written through the API).
    pub fn revision(&self) -> u64 {
        self.revision.unwrap_or(0)
    }

    /// The policy, defaults when absent.
    pub fn policy(&self) -> SchedulePolicy {
        self.policy.clone().unwrap_or_default()
    }
}

/// One schedule as loaded: its id (the file name), config, checked timing and source.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The id: `<id>` of `schedules/<id>.json`.
    pub id: String,
    /// The definition (the v2 translation of a legacy file).
    pub config: ScheduleConfig,
    /// Its timing, checked.
    pub timing: Timing,
    /// The file.
    pub source: Location,
    /// Read from a legacy mission-shaped file.
    pub legacy: bool,
}

const AGENT_INPUT: Shape = Shape::Object(&[&[
    Field::optional("prompt", Shape::String),
    Field::optional(
        "messages",
        Shape::Array(&Shape::Object(&[&[
            Field::required("role", Shape::Enum(&["user", "assistant", "system"])),
            Field::required("content", Shape::String),
        ]])),
    ),
]]);

const POLICY: Shape = Shape::Object(&[&[
    Field::optional("catchUp", Shape::Enum(CatchUp::NAMES)),
    Field::optional("catchUpLimit", Shape::Integer { min: 1, max: MAX_CATCH_UP_LIMIT as i64 }),
    Field::optional("misfireGraceSeconds", Shape::Integer { min: 0, max: 7 * 24 * 3600 }),
    // The scheduler counts running invocations among a schedule's newest 100 runs.
    Field::optional("maxConcurrency", Shape::Integer { min: 1, max: 100 }),
]]);

/// The top level of a v2 file; `timing` and `invocation` are checked by their kind.
pub static SCHEDULE_FILE: Shape = Shape::Object(&[&[
    Field::optional("id", Shape::String),
    Field::optional("name", Shape::String),
    Field::optional("description", Shape::String),
    Field::required("timing", Shape::Any),
    Field::required("invocation", Shape::Any),
    Field::optional("status", Shape::Enum(ScheduleStatus::NAMES)),
    Field::optional("policy", POLICY),
    Field::optional("metadata", Shape::Map(&Shape::Any)),
    Field::optional("revision", Shape::Integer { min: 0, max: i64::MAX }),
]]);

/// The legacy mission schedule: `{missionId, expression, recurring, endDate}`.
static LEGACY_FILE: Shape = Shape::Object(&[&[
    Field::optional("id", Shape::String),
    Field::optional("name", Shape::String),
    Field::required("missionId", Shape::String),
    Field::required("expression", Shape::String),
    Field::optional("recurring", Shape::Bool),
    Field::optional("endDate", Shape::String),
    Field::optional("enabled", Shape::Bool),
    Field::optional("timezone", Shape::String),
]]);

const KIND: Field = Field::required("kind", Shape::String);
const SURFACE: Field = Field::required("surface", Shape::String);
const TIMEZONE: Field = Field::optional("timezone", Shape::String);
const END_AT: Field = Field::optional("endAt", Shape::String);
const EXECUTION: Field = Field::optional("execution", Shape::Map(&Shape::Any));
static CRON_TIMING: Shape = Shape::Object(&[&[KIND, Field::required("expression", Shape::String), TIMEZONE, END_AT]]);
static ONCE_TIMING: Shape = Shape::Object(&[&[KIND, Field::required("at", Shape::String), TIMEZONE]]);
static INTERVAL_TIMING: Shape = Shape::Object(&[&[
    KIND,
    Field::required("every", Shape::String),
    Field::optional("startAt", Shape::String),
    END_AT,
]]);
static AGENT_INVOCATION: Shape = Shape::Object(&[&[
    SURFACE,
    Field::required("agentName", Shape::String),
    Field::required("input", AGENT_INPUT),
    Field::optional("session", Shape::Map(&Shape::Any)),
    EXECUTION,
]]);
static TASK_INVOCATION: Shape = Shape::Object(&[&[
    SURFACE,
    Field::required("agentName", Shape::String),
    Field::required("title", Shape::String),
    Field::required("prompt", Shape::String),
    Field::optional("userId", Shape::String),
    Field::optional("metadata", Shape::Map(&Shape::Any)),
    EXECUTION,
]]);
static LOOP_INVOCATION: Shape = Shape::Object(&[&[
    SURFACE,
    Field::required("loopName", Shape::String),
    Field::required("agentName", Shape::String),
    Field::required("input", AGENT_INPUT),
]]);
static WEBHOOK_INVOCATION: Shape =
    Shape::Object(&[&[SURFACE, Field::required("url", Shape::String), Field::optional("payload", Shape::Any)]]);
static LEGACY_MISSION_INVOCATION: Shape = Shape::Object(&[&[SURFACE, Field::required("missionId", Shape::String)]]);

fn timing_shape(kind: &str) -> Option<&'static Shape> {
    match kind {
        "cron" => Some(&CRON_TIMING),
        "once" => Some(&ONCE_TIMING),
        "interval" => Some(&INTERVAL_TIMING),
        _ => None,
    }
}

fn invocation_shape(surface: &str) -> Option<&'static Shape> {
    match surface {
        "agent" => Some(&AGENT_INVOCATION),
        "task" => Some(&TASK_INVOCATION),
        "loop" => Some(&LOOP_INVOCATION),
        "webhook" => Some(&WEBHOOK_INVOCATION),
        "legacy_mission" => Some(&LEGACY_MISSION_INVOCATION),
        _ => None,
    }
}

/// Every problem of a v2 document, pointers relative to the document.
pub fn check_schedule(value: &Value) -> Vec<Problem> {
    let mut problems = check(value, &SCHEDULE_FILE);
    let mut by_kind = |key: &str, tag: &str, shape: fn(&str) -> Option<&'static Shape>, expected: &str| {
        let Some(part) = value.get(key) else { return };
        let at = format!("/{key}");
        let found = match part.get(tag).and_then(Value::as_str) {
            Some("channel") if key == "invocation" => vec![
                Problem::new(
                    codes::FEATURE_UNAVAILABLE,
                    "channel schedules need channels, which this runtime does not have yet",
                )
                .at(format!("/{tag}")),
            ],
            Some(kind) => match shape(kind) {
                Some(shape) => check(part, shape),
                None => vec![
                    Problem::new(codes::INVALID_VALUE, format!("expected {expected}, found `{kind}`"))
                        .at(format!("/{tag}")),
                ],
            },
            None => vec![
                Problem::new(codes::INVALID_VALUE, format!("missing `{tag}`: expected {expected}"))
                    .at(format!("/{tag}")),
            ],
        };
        problems.extend(found.into_iter().map(|p| {
            let pointer = format!("{at}{}", p.pointer.as_deref().unwrap_or(""));
            p.at(pointer)
        }));
    };
    by_kind("timing", "kind", timing_shape, "one of cron, once, interval");
    by_kind("invocation", "surface", invocation_shape, "one of agent, task, loop, webhook, legacy_mission");
    problems
}

/// Whether a document is a legacy mission-shaped schedule.
pub fn is_legacy(value: &Value) -> bool {
    value.get("missionId").is_some() && value.get("timing").is_none()
}

/// The v2 document a legacy one stands for: a recurring `expression` is a cron expression, a
/// one-off one an instant; `endDate` becomes `timing.endAt`; `enabled: false` is `paused`.
fn translate_legacy(value: &Value) -> Value {
    let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
    let recurring = value.get("recurring").and_then(Value::as_bool).unwrap_or(true);
    let mut timing = if recurring {
        json!({"kind": "cron", "expression": text("expression")})
    } else {
        json!({"kind": "once", "at": text("expression")})
    };
    if let Some(tz) = text("timezone") {
        timing["timezone"] = json!(tz);
    }
    if let (true, Some(end)) = (recurring, text("endDate")) {
        timing["endAt"] = json!(end);
    }
    let mut out =
        json!({"timing": timing, "invocation": {"surface": "legacy_mission", "missionId": text("missionId")}});
    for key in ["id", "name"] {
        if let Some(v) = text(key) {
            out[key] = json!(v);
        }
    }
    if value.get("enabled").and_then(Value::as_bool) == Some(false) {
        out["status"] = json!("paused");
    }
    out
}

/// A file's definition and checked timing, or every problem in it, located at `at`. The bool
/// is true for a legacy file (the caller warns).
pub fn parse_schedule(value: &Value, at: &Location) -> Result<(ScheduleConfig, Timing, bool), Vec<Problem>> {
    let legacy = is_legacy(value);
    let document = if legacy {
        parse_checked::<Value>(value, &LEGACY_FILE, at)?;
        translate_legacy(value)
    } else {
        value.clone()
    };
    let problems = check_schedule(&document);
    if !problems.is_empty() {
        return Err(problems.into_iter().map(|p| at.locate(p)).collect());
    }
    let config: ScheduleConfig = parse_checked(&document, &Shape::Any, at)?;
    let timing = Timing::from_config(&config.timing).map_err(|p| {
        // A legacy file's timing came from its `expression`.
        let p = if legacy { (*p).at("/expression") } else { *p };
        vec![at.locate(p)]
    })?;
    if let Invocation::Webhook { url, .. } = &config.invocation
        // `http://127.0.0.1` passes for a local receiver: the scheduler's SSRF guard still
        // refuses it unless the server exempts that address.
        && let Err(problem) = check_url(url, &ValidateOptions { allow_loopback_http: true })
    {
        return Err(vec![at.locate(problem.at("/invocation/url"))]);
    }
    if matches!(timing, Timing::Cron { .. }) && timing.next_after(chrono::DateTime::UNIX_EPOCH).is_none() {
        let pointer = if legacy { "/expression" } else { "/timing/expression" };
        return Err(vec![at.problem(
            schedule_codes::SCHEDULE_NEVER_FIRES,
            "the cron expression matches no date",
            pointer,
        )]);
    }
    Ok((config, timing, legacy))
}
