//! The dimensions an `llm_review` scores (inventory §5.4, step 1): the check's own when it
//! names some; else the judge model proposes 2–6 for the task (name, description, weight),
//! each weight held to 0.15–0.40 and all of them normalised to sum to 1; when that call fails
//! or its answer does not hold up (too few, too many, a name missing or repeated …), the
//! default dimensions, as the reference falls back to them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use polpo_core::tasks::{EvalDimension, Task, TaskExpectation};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::context::Ctx;
use crate::judge::{Call, ask, bounded, json_format, judge_model};

/// Fewest and most dimensions a generated set may have.
const GENERATED: std::ops::RangeInclusive<usize> = 2..=6;
/// Bounds of one generated weight, before the set is normalised.
const WEIGHTS: (f64, f64) = (0.15, 0.40);
/// Longest generated name and description, in characters.
const MAX_NAME_CHARS: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 500;
/// Most characters of the task description shown to the judge.
const MAX_TASK_CHARS: usize = 4_000;

/// Where the dimensions of a review came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DimensionSource {
    /// The check's `dimensions`.
    Given,
    /// Proposed by the judge model for this task.
    Generated,
    /// The defaults (correctness, completeness, quality): generation failed.
    Default,
}

/// The dimensions a review scores, where they came from, and why generation fell back.
pub(crate) struct Chosen {
    pub(crate) dimensions: Vec<EvalDimension>,
    pub(crate) source: DimensionSource,
    /// Why the generated dimensions were not used.
    pub(crate) fallback: Option<String>,
}

/// The judge's proposal.
#[derive(Deserialize)]
struct Proposal {
    dimensions: Vec<Proposed>,
}

#[derive(Deserialize)]
struct Proposed {
    name: String,
    description: String,
    weight: f64,
}

/// The dimensions of `e`: its own, else generated for `task`, else the defaults.
pub(crate) async fn choose(ctx: &Arc<Ctx>, task: &Task, e: &TaskExpectation) -> Chosen {
    if let Some(given) = e.dimensions.clone().filter(|d| !d.is_empty()) {
        return Chosen { dimensions: given, source: DimensionSource::Given, fallback: None };
    }
    match generate(ctx, task, e).await {
        Ok(dimensions) => Chosen { dimensions, source: DimensionSource::Generated, fallback: None },
        Err(why) => {
            tracing::warn!(task = %task.id, "review dimensions not generated, defaults used: {why}");
            Chosen { dimensions: default_dimensions(), source: DimensionSource::Default, fallback: Some(why) }
        }
    }
}

/// The defaults: correctness, completeness, quality, equally weighted.
pub(crate) fn default_dimensions() -> Vec<EvalDimension> {
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

async fn generate(ctx: &Arc<Ctx>, task: &Task, e: &TaskExpectation) -> Result<Vec<EvalDimension>, String> {
    let format = json_format(
        "review_dimensions",
        json!({
            "type": "object",
            "properties": {"dimensions": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "weight": {"type": "number"}
                },
                "required": ["name", "description", "weight"],
                "additionalProperties": false
            }}},
            "required": ["dimensions"],
            "additionalProperties": false
        }),
    )?;
    let prompt = format!(
        "You will judge work an agent did on the task below. Before anyone scores it, choose {} to {} evaluation dimensions specific to this task: for each a short snake_case name, a one-sentence description of what a score of 5 means, and a weight between {} and {} (more important dimensions weigh more). Answer with the dimensions only.\n\nTask: {}\n{}\n\nCriteria: {}",
        GENERATED.start(),
        GENERATED.end(),
        WEIGHTS.0,
        WEIGHTS.1,
        task.title,
        bounded(&task.description, MAX_TASK_CHARS),
        e.criteria.as_deref().unwrap_or("the task is done well"),
    );
    let call = Call { model: judge_model(ctx), prompt, format, tools: Vec::new(), max_turns: None };
    let proposal: Proposal = ask(ctx, task, call).await?;
    checked(proposal)
}

/// The proposal as dimensions, or why it does not hold up.
fn checked(proposal: Proposal) -> Result<Vec<EvalDimension>, String> {
    let n = proposal.dimensions.len();
    if !GENERATED.contains(&n) {
        return Err(format!("{n} dimensions proposed, {} to {} needed", GENERATED.start(), GENERATED.end()));
    }
    let mut seen = HashSet::new();
    let mut dims = Vec::with_capacity(n);
    for p in proposal.dimensions {
        let name = p.name.trim().to_owned();
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
            return Err(format!("a dimension name must have 1 to {MAX_NAME_CHARS} characters"));
        }
        if !seen.insert(name.to_lowercase()) {
            return Err(format!("dimension `{name}` proposed twice"));
        }
        if !(p.weight.is_finite() && p.weight > 0.0) {
            return Err(format!("dimension `{name}` has weight {}, not a positive number", p.weight));
        }
        let description = p.description.trim().chars().take(MAX_DESCRIPTION_CHARS).collect();
        let weight = Some(p.weight.clamp(WEIGHTS.0, WEIGHTS.1));
        dims.push(EvalDimension { name, description, weight, rubric: BTreeMap::new() });
    }
    let total: f64 = dims.iter().filter_map(|d| d.weight).sum();
    for d in &mut dims {
        d.weight = d.weight.map(|w| w / total);
    }
    Ok(dims)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn proposal(dims: &[(&str, f64)]) -> Proposal {
        Proposal {
            dimensions: dims
                .iter()
                .map(|(name, weight)| Proposed { name: (*name).into(), description: "d".into(), weight: *weight })
                .collect(),
        }
    }

    #[test]
    fn generated_weights_are_held_to_their_bounds_then_normalised() {
        let dims = checked(proposal(&[("accuracy", 0.9), ("tone", 0.2), ("brevity", 0.01)])).unwrap();
        let weights: Vec<f64> = dims.iter().map(|d| d.weight.unwrap()).collect();
        // 0.40, 0.20, 0.15 over 0.75.
        let expected = [0.4 / 0.75, 0.2 / 0.75, 0.15 / 0.75];
        assert!(weights.iter().zip(expected).all(|(w, e)| (w - e).abs() < 1e-9), "{weights:?}");
        assert!((weights.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_proposal_that_does_not_hold_up_is_refused_with_why() {
        let err = |p| checked(p).err().unwrap();
        assert!(err(proposal(&[("only", 0.3)])).contains("1 dimensions proposed, 2 to 6 needed"));
        assert!(err(proposal(&[("a", 0.2); 7])).contains("7 dimensions proposed"));
        assert!(err(proposal(&[("tone", 0.2), ("Tone", 0.3)])).contains("`Tone` proposed twice"));
        assert!(err(proposal(&[("tone", 0.2), (" ", 0.3)])).contains("1 to 64 characters"));
        assert!(err(proposal(&[("tone", 0.2), ("style", -1.0)])).contains("not a positive number"));
    }
}
