//! The `llm_review` check (inventory §5.4, G-Eval): three independent reviewers score the
//! work on dimensions (the check's own, else generated for the task: `dimensions.rs`),
//! through the judge model (`POLPO_JUDGE_MODEL`, `POLPO_MODEL`, `settings.orchestratorModel`,
//! else the task agent's own) with structured output (`ReviewPayload`), in parallel; the
//! consensus is each dimension's median, each score rounded and clamped to 1–5, and the
//! global score the weighted mean.
//!
//! Two modes, as in the reference. **File exploration** when the task's runs created or
//! edited files: each reviewer may look at the work itself with the read-only `read`, `glob`
//! and `grep` tools — the agent's own, in its workspace and confinement, the vault's secrets
//! cut out of what they return — for a bounded number of model calls, then scores.
//! **Output-based** otherwise: the reviewers see the task, the criteria and the agent's answer.

use polpo_core::tasks::{EvalDimension, Task, TaskExpectation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

use crate::context::{Ctx, round2};
use crate::dimensions::{Chosen, DimensionSource, choose};
use crate::judge::{Call, ask, bounded, json_format, judge_model};

/// Independent reviewers per review.
const REVIEWERS: usize = 3;
/// Most characters of the agent's answer shown to a reviewer.
const MAX_OUTPUT_CHARS: usize = 12_000;
/// The read-only tools of a file-exploration review.
const EXPLORATION_TOOLS: [&str; 3] = ["read", "glob", "grep"];
/// Most model calls of a file-exploring reviewer (the reference's 20 steps), the scoring
/// included.
const MAX_EXPLORATION_TURNS: u32 = 20;
/// Most file names listed to a reviewer.
const MAX_LISTED_FILES: usize = 50;

/// How the reviewers saw the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewMode {
    /// They read the agent's answer.
    Output,
    /// They could also read, glob and grep the files the agent created or edited.
    FileExploration,
}

/// What the reviewers agree on.
pub(crate) struct Consensus {
    pub(crate) passed: bool,
    /// The weighted score, 1–5.
    pub(crate) global_score: f64,
    /// The median score per dimension.
    pub(crate) scores: Value,
    /// Each reviewer's own answer.
    pub(crate) reviewers: Vec<Value>,
    /// The first reviewer's summary.
    pub(crate) summary: String,
}

/// A review: the consensus, on which dimensions, seen how.
pub(crate) struct Review {
    pub(crate) consensus: Consensus,
    pub(crate) dimensions: Vec<EvalDimension>,
    pub(crate) source: DimensionSource,
    /// Why generated dimensions were not used.
    pub(crate) fallback: Option<String>,
    pub(crate) mode: ReviewMode,
}

/// One reviewer's structured answer (`ReviewPayloadSchema`).
#[derive(Debug, Deserialize)]
struct ReviewPayload {
    scores: Vec<DimensionScore>,
    #[serde(default)]
    summary: String,
}

#[derive(Debug, Deserialize)]
struct DimensionScore {
    dimension: String,
    score: f64,
    #[serde(default)]
    reasoning: String,
}

fn payload_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "scores": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "dimension": {"type": "string"},
                    "score": {"type": "number", "minimum": 1, "maximum": 5},
                    "reasoning": {"type": "string"}
                },
                "required": ["dimension", "score", "reasoning"],
                "additionalProperties": false
            }},
            "summary": {"type": "string"}
        },
        "required": ["scores", "summary"],
        "additionalProperties": false
    })
}

/// The files the task's runs created or edited, as the agent named them.
fn touched_files(task: &Task) -> Vec<&str> {
    let result = task.result.as_ref();
    result.iter().flat_map(|r| r.files_created.iter().chain(&r.files_edited)).map(String::as_str).collect()
}

fn prompt(task: &Task, e: &TaskExpectation, dims: &[EvalDimension], output: &str, files: &[&str]) -> String {
    let dims: Vec<String> = dims.iter().map(|d| format!("- {}: {}", d.name, d.description)).collect();
    let mut text = format!(
        "You are reviewing work an agent did. Score each dimension from 1 (poor) to 5 (excellent) with a short reasoning, then summarise.\n\nTask: {}\n{}\n\nCriteria: {}\n\nDimensions:\n{}\n\nThe agent's answer:\n{}",
        task.title,
        task.description,
        e.criteria.as_deref().unwrap_or("the task is done well"),
        dims.join("\n"),
        bounded(output, MAX_OUTPUT_CHARS)
    );
    if !files.is_empty() {
        let listed: Vec<&str> = files.iter().copied().take(MAX_LISTED_FILES).collect();
        text.push_str(&format!(
            "\n\nThe agent created or edited these files ({} in all), relative to the workspace:\n{}\n\nLook at the work itself before scoring: read, glob and grep are yours (read-only, inside the workspace), for at most {} model calls in all. Then score from what you found.",
            files.len(),
            listed.join("\n"),
            MAX_EXPLORATION_TURNS - 2
        ));
    }
    text
}

/// Review `output` of `task` for expectation `e`: `Err` with a diagnostic when no reviewer
/// answered.
pub(crate) async fn review(ctx: &Arc<Ctx>, task: &Task, e: &TaskExpectation, output: &str) -> Result<Review, String> {
    let Chosen { dimensions: dims, source, fallback } = choose(ctx, task, e).await;
    let files = touched_files(task);
    let (mode, tools, max_turns) = if files.is_empty() {
        (ReviewMode::Output, Vec::new(), None)
    } else {
        (ReviewMode::FileExploration, EXPLORATION_TOOLS.map(String::from).to_vec(), Some(MAX_EXPLORATION_TURNS))
    };
    let format = json_format("review", payload_schema())?;
    let text = prompt(task, e, &dims, output, &files);
    let judge = judge_model(ctx);
    let reviewers = (0..REVIEWERS).map(|_| {
        let call = Call {
            model: judge.clone(),
            prompt: text.clone(),
            format: format.clone(),
            tools: tools.clone(),
            max_turns,
        };
        async move { ask::<ReviewPayload>(ctx, task, call).await.map_err(|e| format!("reviewer: {e}")) }
    });
    let answers = futures::future::join_all(reviewers).await;
    let mut errors = Vec::new();
    let payloads: Vec<ReviewPayload> = answers.into_iter().filter_map(|a| a.map_err(|e| errors.push(e)).ok()).collect();
    if payloads.is_empty() {
        return Err(format!("every reviewer failed: {}", errors.join("; ")));
    }
    let consensus = consensus(&dims, &payloads, e.threshold_or_default());
    Ok(Review { consensus, dimensions: dims, source, fallback, mode })
}

/// Each dimension's median score over the reviewers (rounded, clamped 1–5), weighted.
fn consensus(dims: &[EvalDimension], payloads: &[ReviewPayload], threshold: f64) -> Consensus {
    let given: f64 = dims.iter().filter_map(|d| d.weight).sum();
    let weight = |d: &EvalDimension| match d.weight {
        Some(w) if given > 0.0 => w / given,
        _ => 1.0 / dims.len() as f64,
    };
    let mut scores = serde_json::Map::new();
    let mut global = 0.0;
    for d in dims {
        let mut s: Vec<f64> = payloads
            .iter()
            .filter_map(|p| p.scores.iter().find(|x| x.dimension == d.name))
            .map(|x| x.score.round().clamp(1.0, 5.0))
            .collect();
        s.sort_by(f64::total_cmp);
        let median = match s.len() {
            0 => 1.0,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        };
        scores.insert(d.name.clone(), json!(median));
        global += median * weight(d);
    }
    let global_score = round2(global);
    let reviewers = payloads
        .iter()
        .map(|p| {
            let s: Vec<Value> = p
                .scores
                .iter()
                .map(|x| json!({"dimension": x.dimension, "score": x.score, "reasoning": x.reasoning}))
                .collect();
            json!({"scores": s, "summary": p.summary})
        })
        .collect();
    let summary = payloads.first().map(|p| p.summary.clone()).unwrap_or_default();
    Consensus { passed: global_score >= threshold, global_score, scores: Value::Object(scores), reviewers, summary }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::dimensions::default_dimensions;

    fn payload(scores: &[(&str, f64)]) -> ReviewPayload {
        ReviewPayload {
            scores: scores
                .iter()
                .map(|(d, s)| DimensionScore { dimension: (*d).into(), score: *s, reasoning: String::new() })
                .collect(),
            summary: "ok".into(),
        }
    }

    #[test]
    fn the_consensus_is_the_median_per_dimension_clamped_and_weighted() {
        let mut dims = default_dimensions();
        dims.truncate(2);
        dims[0].weight = Some(3.0);
        dims[1].weight = Some(1.0);
        let payloads = [
            payload(&[("correctness", 5.0), ("completeness", 1.0)]),
            payload(&[("correctness", 2.0), ("completeness", 9.0)]),
            payload(&[("correctness", 4.4), ("completeness", 2.0)]),
        ];
        let r = consensus(&dims, &payloads, 3.0);
        assert_eq!(r.scores, json!({"correctness": 4.0, "completeness": 2.0}));
        assert_eq!(r.global_score, 3.5, "weights normalised: 4·0.75 + 2·0.25");
        assert!(r.passed);
        assert!(!consensus(&dims, &payloads, 3.6).passed);
    }
}
