//! The task record (inventory §5.1): what a task asks for, how it is checked, how often it may
//! be retried, and what it produced. Field names on the wire are the reference's camelCase,
//! so tasks written by either implementation read the same.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::status::{Phase, TaskStatus};

/// Fix rounds a failed assessment may start before the task fails or retries (`maxFixAttempts`).
pub const MAX_FIX_ATTEMPTS: u32 = 2;
/// Clarifying questions auto-answered before the task must go on without (`maxQuestionRounds`).
pub const MAX_QUESTION_ROUNDS: u32 = 2;
/// Retries when a task does not say (`maxRetries`).
pub const DEFAULT_MAX_RETRIES: u32 = 2;

/// One unit of work given to an agent, with its whole bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Stable id, made by the store.
    pub id: String,
    /// Short name; unique among the non-terminal tasks (missions refer to tasks by title).
    pub title: String,
    /// What the agent is asked to do (feedback from a "revise" approval is appended here).
    pub description: String,
    /// The agent that runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assign_to: Option<String>,
    /// The mission name the task belongs to, so a mission's tasks are listed together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The mission id, when the task was created by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
    /// Ids of the tasks that must be `done` before this one may be assigned.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Where the task is in its life (see [`TaskStatus`]).
    pub status: TaskStatus,
    /// What the agent is doing while `in_progress` or `review`; `None` in every other status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// How the result is checked (tests, files, scripts, LLM review).
    #[serde(default)]
    pub expectations: Vec<TaskExpectation>,
    /// Numbers read from commands and compared with thresholds.
    #[serde(default)]
    pub metrics: Vec<TaskMetric>,
    /// Artifacts the task should produce.
    #[serde(default)]
    pub expected_outcomes: Vec<ExpectedOutcome>,
    /// Artifacts the task did produce.
    #[serde(default)]
    pub outcomes: Vec<TaskOutcome>,
    /// Retries used so far.
    #[serde(default)]
    pub retries: u32,
    /// Automatic retries allowed after a failure.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Longest a run may take, in milliseconds; 0 means no limit.
    #[serde(default)]
    pub max_duration: u64,
    /// How retries escalate (another agent, another model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    /// Fix rounds used since the last (re)start.
    #[serde(default)]
    pub fix_attempts: u32,
    /// Clarifying questions answered so far.
    #[serde(default)]
    pub question_rounds: u32,
    /// Deadlock resolutions tried on this task.
    #[serde(default)]
    pub resolution_attempts: u32,
    /// The description before the first revision, so a revised task can show what changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_description: Option<String>,
    /// Times a human sent the task back with feedback.
    #[serde(default)]
    pub revision_count: u32,
    /// The last run's result and assessment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    /// The session the agent works in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When the task should be done by (SLA checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    /// Scheduling weight: higher runs first among ready tasks.
    #[serde(default = "default_priority")]
    pub priority: f64,
    /// Notification rules scoped to this task, kept as given until notifications exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<Value>,
    /// The task changes the world outside the workspace (sends mail, deploys): it is never
    /// retried or fixed automatically, a human approves each re-execution.
    #[serde(default)]
    pub side_effects: bool,
    /// The end user the task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The Project Loop that executes the task instead of a single agent.
    #[serde(default, rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<String>,
    /// How the runner executes it (e.g. subprocess or in-process), kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_mode: Option<String>,
    /// Sandbox overrides for the run, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Value>,
    /// Model routing overrides for the run, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Value>,
    /// The draft the task was created from (a planner's proposal), kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<Value>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

fn default_max_retries() -> u32 {
    DEFAULT_MAX_RETRIES
}

fn default_priority() -> f64 {
    1.0
}

impl Task {
    /// A task as first created: `pending` (or `draft`), nothing used, nothing produced.
    pub fn new(
        id: impl Into<String>,
        title: impl Into<String>,
        description: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id: id.into(),
            title: title.into(),
            description: description.into(),
            assign_to: None,
            group: None,
            mission_id: None,
            depends_on: Vec::new(),
            status: TaskStatus::Pending,
            phase: None,
            expectations: Vec::new(),
            metrics: Vec::new(),
            expected_outcomes: Vec::new(),
            outcomes: Vec::new(),
            retries: 0,
            max_retries: DEFAULT_MAX_RETRIES,
            max_duration: 0,
            retry_policy: None,
            fix_attempts: 0,
            question_rounds: 0,
            resolution_attempts: 0,
            original_description: None,
            revision_count: 0,
            result: None,
            session_id: None,
            deadline: None,
            priority: default_priority(),
            notifications: None,
            side_effects: false,
            user: None,
            loop_id: None,
            execution_mode: None,
            sandbox: None,
            routing: None,
            draft: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// How retries escalate once plain retries keep failing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Failures after which the task moves to `fallback_agent` and/or `escalate_model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_after: Option<u32>,
    /// The agent that takes over after `escalate_after` failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_agent: Option<String>,
    /// The model used after `escalate_after` failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_model: Option<String>,
}

/// The kind of check an expectation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpectationType {
    /// Run a test command; passes on exit code 0.
    Test,
    /// The listed paths exist.
    FileExists,
    /// Run a script; passes on exit code 0.
    Script,
    /// An LLM judge scores the work on dimensions (G-Eval).
    LlmReview,
}

/// How sure the task author is of an expectation; estimated paths may be auto-corrected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Must hold as written.
    Firm,
    /// A guess (e.g. a file path the agent may reasonably choose differently).
    Estimated,
}

/// One check of a task's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskExpectation {
    /// Which check.
    #[serde(rename = "type")]
    pub kind: ExpectationType,
    /// The command of a `test` or `script` check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The paths of a `file_exists` check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// What an `llm_review` judges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criteria: Option<String>,
    /// The dimensions an `llm_review` scores; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<Vec<EvalDimension>>,
    /// Passing score (1–5); [`TaskExpectation::threshold_or_default`] gives 3.0 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// Given confidence; [`TaskExpectation::confidence_or_default`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Confidence>,
}

impl TaskExpectation {
    /// The passing score: the given one, else 3.0.
    pub fn threshold_or_default(&self) -> f64 {
        self.threshold.unwrap_or(3.0)
    }

    /// The confidence: the given one, else `estimated` for `file_exists` and `firm` otherwise.
    pub fn confidence_or_default(&self) -> Confidence {
        self.confidence.unwrap_or(match self.kind {
            ExpectationType::FileExists => Confidence::Estimated,
            _ => Confidence::Firm,
        })
    }
}

/// One scored dimension of an LLM review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalDimension {
    /// Dimension name (e.g. `correctness`).
    pub name: String,
    /// What the dimension means.
    #[serde(default)]
    pub description: String,
    /// Share of the global score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// What each score 1..5 means.
    #[serde(default)]
    pub rubric: BTreeMap<String, String>,
}

/// A number read from a command and compared with a threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskMetric {
    /// Metric name.
    pub name: String,
    /// The command that prints the number.
    pub command: String,
    /// The value the number must reach.
    pub threshold: f64,
}

/// The kind of an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeType {
    /// A file in the workspace.
    File,
    /// A piece of text.
    Text,
    /// A link.
    Url,
    /// A JSON document.
    Json,
    /// An image, audio or video file.
    Media,
}

/// An artifact the task should produce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectedOutcome {
    /// Which kind.
    #[serde(rename = "type")]
    pub kind: OutcomeType,
    /// Display name.
    pub label: String,
    /// What it should contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where a file outcome is expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Whether the task fails without it (default true).
    #[serde(default = "yes")]
    pub required: bool,
    /// Free labels.
    #[serde(default)]
    pub tags: Vec<String>,
}

fn yes() -> bool {
    true
}

/// An artifact the task produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskOutcome {
    /// Stable id.
    pub id: String,
    /// Which kind.
    #[serde(rename = "type")]
    pub kind: OutcomeType,
    /// Display name.
    pub label: String,
    /// The file, for file and media outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The text, for text outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The link, for url outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The document, for json outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// The agent (or tool) that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub produced_by: Option<String>,
    /// When it was produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub produced_at: Option<DateTime<Utc>>,
    /// Free labels.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// What the last run of a task returned, with its assessment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    /// The runner's exit code.
    pub exit_code: i32,
    /// The agent's output.
    #[serde(default)]
    pub stdout: String,
    /// Errors the run reported.
    #[serde(default)]
    pub stderr: String,
    /// How long the run took, in milliseconds.
    #[serde(default)]
    pub duration: u64,
    /// The latest assessment (its shape belongs to the assessment pipeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment: Option<Value>,
    /// Earlier assessments, oldest first.
    #[serde(default)]
    pub assessment_history: Vec<Value>,
    /// Files the task's runs created through file-writing tools (`write`, `http_download`),
    /// as the agent named them; what `bash` commands write cannot be known and is not here.
    /// Shown in the mission report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_created: Vec<String>,
    /// Files the task's runs changed with `edit` (and did not create), as the agent named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_edited: Vec<String>,
}
