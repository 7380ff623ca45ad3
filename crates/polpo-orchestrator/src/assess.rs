//! Assessment (inventory §5.4): each expectation of a task checked against what its agent
//! did — `test` and `script` commands (pass on exit code 0), `file_exists`, `llm_review`
//! (three reviewers, see `review.rs`) — and each metric command compared with its threshold.
//! Progress goes on the bus as `assessment:*` events.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use polpo_core::tasks::{EvalDimension, ExpectationType, Task, TaskExpectation};
use polpo_engine::events::EventKind;
use polpo_tools::ToolContext;
use polpo_tools::sandbox::{CommandSpec, Confinement, Program, run_command, scrubbed_env};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::context::{Ctx, round2};
use crate::dimensions::DimensionSource;
use crate::review::{Consensus, Review, ReviewMode, review};

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    /// The expectation's type (`test`, `file_exists`, `script`, `llm_review`).
    #[serde(rename = "type")]
    pub kind: ExpectationType,
    /// Whether it passed.
    pub passed: bool,
    /// What happened, for people (and for the fix prompt).
    pub message: String,
    /// An LLM review's consensus score per dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<Value>,
    /// An LLM review's weighted score (1–5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_score: Option<f64>,
    /// An LLM review's individual reviewers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reviewers: Vec<Value>,
    /// The dimensions an LLM review scored, with the weights it used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<EvalDimension>,
    /// Where an LLM review's dimensions came from (given, generated, default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimension_source: Option<DimensionSource>,
    /// How an LLM review's reviewers saw the work (its output, or the files too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_mode: Option<ReviewMode>,
}

/// One metric's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricResult {
    /// The metric's name.
    pub name: String,
    /// The number its command printed (`None`: it printed none).
    pub value: Option<f64>,
    /// The number it had to reach.
    pub threshold: f64,
    /// `value ≥ threshold`.
    pub passed: bool,
}

/// A whole assessment, stored in the task's `result.assessment` (earlier ones move to
/// `assessmentHistory`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssessmentResult {
    /// Every check and metric passed.
    pub passed: bool,
    /// The checks, in expectation order.
    pub checks: Vec<CheckResult>,
    /// The metrics, in order.
    pub metrics: Vec<MetricResult>,
    /// The LLM reviews' mean weighted score, when any ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_score: Option<f64>,
    /// When it was made.
    pub timestamp: DateTime<Utc>,
    /// Why it ran: `initial`, `fix` or `retry`.
    pub trigger: String,
}

impl AssessmentResult {
    /// What failed, in a few lines: the body of a fix prompt.
    pub fn failures(&self) -> String {
        let checks = self.checks.iter().filter(|c| !c.passed).map(|c| format!("- {:?}: {}", c.kind, c.message));
        let metrics = self.metrics.iter().filter(|m| !m.passed).map(|m| {
            format!(
                "- metric {}: {} (needs {})",
                m.name,
                m.value.map_or("no number".into(), |v| v.to_string()),
                m.threshold
            )
        });
        checks.chain(metrics).collect::<Vec<_>>().join("\n")
    }
}

/// Assess `task` whose agent answered `output`, in the project root `root`.
pub(crate) async fn assess(ctx: &Arc<Ctx>, task: &Task, output: &str, root: &Path, trigger: &str) -> AssessmentResult {
    let total = task.expectations.len() + task.metrics.len();
    ctx.emit(EventKind::AssessmentStarted, json!({"taskId": task.id, "total": total}));
    let mut checks = Vec::new();
    for (index, expectation) in task.expectations.iter().enumerate() {
        let label = format!("{:?}", expectation.kind);
        ctx.emit(
            EventKind::AssessmentCheckStarted,
            json!({"taskId": task.id, "index": index, "total": total, "type": expectation.kind, "label": label}),
        );
        let check = run_check(ctx, task, expectation, output, root).await;
        ctx.emit(
            EventKind::AssessmentCheckComplete,
            json!({"taskId": task.id, "index": index, "total": total, "type": expectation.kind, "passed": check.passed, "message": check.message}),
        );
        checks.push(check);
    }
    let mut metrics = Vec::new();
    for metric in &task.metrics {
        let value = match command(ctx, &metric.command, root).await {
            Ok((_, out)) => out.split_whitespace().find_map(|w| w.parse::<f64>().ok()),
            Err(_) => None,
        };
        let passed = value.is_some_and(|v| v >= metric.threshold);
        metrics.push(MetricResult { name: metric.name.clone(), value, threshold: metric.threshold, passed });
    }
    let scored: Vec<f64> = checks.iter().filter_map(|c| c.global_score).collect();
    let global_score = (!scored.is_empty()).then(|| round2(scored.iter().sum::<f64>() / scored.len() as f64));
    let passed = checks.iter().all(|c| c.passed) && metrics.iter().all(|m| m.passed);
    let result =
        AssessmentResult { passed, checks, metrics, global_score, timestamp: ctx.now(), trigger: trigger.to_owned() };
    ctx.emit(
        EventKind::AssessmentComplete,
        json!({"taskId": task.id, "passed": result.passed, "globalScore": result.global_score}),
    );
    result
}

async fn run_check(ctx: &Arc<Ctx>, task: &Task, e: &TaskExpectation, output: &str, root: &Path) -> CheckResult {
    let verdict = |passed: bool, message: String| CheckResult {
        kind: e.kind,
        passed,
        message,
        scores: None,
        global_score: None,
        reviewers: Vec::new(),
        dimensions: Vec::new(),
        dimension_source: None,
        review_mode: None,
    };
    match e.kind {
        ExpectationType::Test | ExpectationType::Script => {
            let Some(cmd) = e.command.as_deref().filter(|c| !c.trim().is_empty()) else {
                return verdict(false, "the check has no command".into());
            };
            match command(ctx, cmd, root).await {
                Ok((0, _)) => verdict(true, format!("`{cmd}` exited 0")),
                Ok((code, out)) => verdict(false, format!("`{cmd}` exited {code}: {}", tail(&out, 2000))),
                Err(message) => verdict(false, format!("`{cmd}` could not run: {message}")),
            }
        }
        ExpectationType::FileExists => {
            let paths = e.paths.clone().unwrap_or_default();
            let missing: Vec<&String> = paths.iter().filter(|p| !inside(root, p).is_some_and(|p| p.exists())).collect();
            if paths.is_empty() {
                verdict(false, "the check lists no paths".into())
            } else if missing.is_empty() {
                verdict(true, format!("{} file(s) exist", paths.len()))
            } else {
                verdict(
                    false,
                    format!("missing: {}", missing.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")),
                )
            }
        }
        ExpectationType::LlmReview => match review(ctx, task, e, output).await {
            Ok(Review { consensus, dimensions, source, fallback, mode }) => {
                let Consensus { passed, global_score, scores, reviewers, summary } = consensus;
                let fallback = fallback.map(|why| format!(" (default dimensions: none generated, {why})"));
                CheckResult {
                    kind: e.kind,
                    passed,
                    message: format!(
                        "score {global_score} (threshold {}): {summary}{}",
                        e.threshold_or_default(),
                        fallback.unwrap_or_default()
                    ),
                    scores: Some(scores),
                    global_score: Some(global_score),
                    reviewers,
                    dimensions,
                    dimension_source: Some(source),
                    review_mode: Some(mode),
                }
            }
            Err(message) => verdict(false, message),
        },
    }
}

/// `path` under `root`, refusing absolute paths and `..`.
fn inside(root: &Path, path: &str) -> Option<std::path::PathBuf> {
    let p = Path::new(path);
    let plain = p.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    plain.then(|| root.join(p))
}

/// Run a check command (`sh -c`) in the project root, confined like `bash` (Landlock: the
/// project writable, `.polpo/` closed; own process group, limits, bounded output, timeout,
/// scrubbed environment): its exit code and output. A task's checks come from whoever may
/// create tasks — a client key, not only the project's owner — so they get no more than an
/// agent's `bash` would.
async fn command(ctx: &Ctx, cmd: &str, root: &Path) -> Result<(i32, String), String> {
    let mut spec = CommandSpec::new(Program::Shell(cmd.to_owned()), root);
    spec.confinement = Some(confinement(ctx, root)?);
    spec.env = scrubbed_env(&[]);
    spec.timeout = ctx.options.check_timeout;
    spec.merge_stderr = true;
    let outcome = run_command(spec).await.map_err(|e| e.to_string())?;
    let out = outcome.stdout.render();
    match outcome.exit_code() {
        Some(code) => Ok((code, out)),
        None => Err(format!("the command did not exit normally ({:?})", outcome.termination)),
    }
}

/// The confinement of a check command in `root`: the project's `settings.sandbox` limits and
/// user, `root` writable and the project's `.polpo/` closed; refused where Landlock is missing
/// unless the project allows running unconfined, as for `bash`.
fn confinement(ctx: &Ctx, root: &Path) -> Result<Confinement, String> {
    let loaded = ctx.runs.runtime().loaded();
    let mut tools = ToolContext::new(root);
    tools.protected_paths = vec![loaded.project.root.join(".polpo")];
    tools.sandbox = loaded.project.settings().sandbox.as_ref().map(Into::into).unwrap_or_default();
    tools.sandbox.require_confinement("checks are disabled").map_err(|e| e.to_string())?;
    Confinement::of(&tools, Vec::new()).map_err(|e| e.to_string())
}

fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}
