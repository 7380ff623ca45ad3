//! The `llm_review` check (inventory §5.4, G-Eval): three independent reviewers score the
//! work on dimensions, through the judge model (`POLPO_JUDGE_MODEL`, `POLPO_MODEL`,
//! `settings.orchestratorModel`, else the task agent's own) with structured output
//! (`ReviewPayload`), in parallel; the consensus is each dimension's median, each score
//! rounded and clamped to 1–5, and the global score the weighted mean. Output-based review:
//! the reviewers see the task, the criteria and the agent's answer (file exploration and
//! generated dimensions are not built yet: the default dimensions are used when none given).

use std::collections::BTreeMap;
use std::sync::Arc;

use polpo_core::message::Message;
use polpo_core::model::ModelSelection;
use polpo_core::tasks::{EvalDimension, Task, TaskExpectation};
use polpo_engine::structured::ResponseFormat;
use polpo_engine::{ChatInput, Surface};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::context::{Ctx, round2, run_to_end};

/// Independent reviewers per review.
const REVIEWERS: usize = 3;
/// Most characters of the agent's answer shown to a reviewer.
const MAX_OUTPUT_CHARS: usize = 12_000;

/// A review's consensus.
pub(crate) struct Review {
    pub(crate) passed: bool,
    pub(crate) global_score: f64,
    pub(crate) scores: Value,
    pub(crate) reviewers: Vec<Value>,
    pub(crate) summary: String,
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

fn default_dimensions() -> Vec<EvalDimension> {
    [
        ("correctness", "The work does what the task asks, without errors."),
        ("completeness", "Every part of the task is addressed."),
        ("quality", "The work is clear, well made and maintainable."),
    ]
    .into_iter()
    .map(|(name, description)| EvalDimension {
        name: name.into(),
        description: description.into(),
        weight: None,
        rubric: BTreeMap::new(),
    })
    .collect()
}

fn payload_format() -> Result<ResponseFormat, String> {
    ResponseFormat::from_wire(&json!({
        "type": "json_schema",
        "json_schema": {"name": "review", "strict": true, "schema": {
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
        }}
    }))
}

fn prompt(task: &Task, e: &TaskExpectation, dims: &[EvalDimension], output: &str) -> String {
    let dims: Vec<String> = dims.iter().map(|d| format!("- {}: {}", d.name, d.description)).collect();
    let shown: String = output.chars().take(MAX_OUTPUT_CHARS).collect();
    format!(
        "You are reviewing work an agent did. Score each dimension from 1 (poor) to 5 (excellent) with a short reasoning, then summarise.\n\nTask: {}\n{}\n\nCriteria: {}\n\nDimensions:\n{}\n\nThe agent's answer:\n{}",
        task.title,
        task.description,
        e.criteria.as_deref().unwrap_or("the task is done well"),
        dims.join("\n"),
        shown
    )
}

/// Environment variable naming the judge model of every review (`provider/model`).
pub const JUDGE_MODEL_ENV: &str = "POLPO_JUDGE_MODEL";
/// Environment variable naming the project's default model, the judge's first fallback.
pub const MODEL_ENV: &str = "POLPO_MODEL";

/// The judge model, as the reference picks it: `POLPO_JUDGE_MODEL`, else `POLPO_MODEL`, else
/// `settings.orchestratorModel`; `None` leaves the task agent's own model (the reference's last
/// resort, a fixed Anthropic model, would need a key the project may not have).
fn judge_model(settings_model: Option<&ModelSelection>) -> Option<ModelSelection> {
    [JUDGE_MODEL_ENV, MODEL_ENV]
        .into_iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .map(|id| ModelSelection::Id(id.trim().to_owned()))
        .or_else(|| settings_model.cloned())
}

/// Review `output` of `task` for expectation `e`: `Err` with a diagnostic when no reviewer
/// answered.
pub(crate) async fn review(ctx: &Arc<Ctx>, task: &Task, e: &TaskExpectation, output: &str) -> Result<Review, String> {
    let agent = task.assign_to.clone().ok_or("the task has no agent to review with")?;
    let dims = e.dimensions.clone().filter(|d| !d.is_empty()).unwrap_or_else(default_dimensions);
    let format = payload_format()?;
    let text = prompt(task, e, &dims, output);
    let judge = judge_model(ctx.runs.runtime().loaded().project.settings().orchestrator_model.as_ref());
    let reviewers = (0..REVIEWERS).map(|_| {
        let mut input = ChatInput::new(agent.clone(), vec![Message::user(text.clone())]);
        input.model = judge.clone();
        input.surface = Surface::Task;
        input.response_format = format.clone();
        input.allowed_tools = Some(Vec::new());
        let runs = ctx.runs.clone();
        async move {
            match run_to_end(&runs, input).await {
                Ok((_, Ok(answer))) => serde_json::from_str::<ReviewPayload>(&answer.content.unwrap_or_default())
                    .map_err(|err| format!("unreadable review: {err}")),
                Ok((_, Err(f))) => Err(format!("{}: {}", f.code, f.message)),
                Err(err) => Err(format!("{}: {err}", err.code())),
            }
        }
    });
    let answers = futures::future::join_all(reviewers).await;
    let mut errors = Vec::new();
    let payloads: Vec<ReviewPayload> = answers.into_iter().filter_map(|a| a.map_err(|e| errors.push(e)).ok()).collect();
    if payloads.is_empty() {
        return Err(format!("every reviewer failed: {}", errors.join("; ")));
    }
    Ok(consensus(&dims, &payloads, e.threshold_or_default()))
}

/// Each dimension's median score over the reviewers (rounded, clamped 1–5), weighted.
fn consensus(dims: &[EvalDimension], payloads: &[ReviewPayload], threshold: f64) -> Review {
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
    Review { passed: global_score >= threshold, global_score, scores: Value::Object(scores), reviewers, summary }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
