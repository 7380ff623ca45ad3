//! The execution router's decision, as data: which of an agent's `allowedLoops` a chat request
//! runs, or none (the agent answers directly).
//!
//! An agent opts in with `"executionRouter": {"mode": "auto", "allowedLoops": [...]}`. A chat that
//! names no `loop` and whose agent has no `defaultLoop` is then classified: one bounded,
//! tool-free model call with structured output (`loop`, `confidence`, `reason`) whose answer
//! [`decide`] checks here. The router can only narrow: an answer naming a loop outside
//! `allowedLoops` (already a subset of `assignedLoops`, checked at load) is refused, a confidence
//! below `minConfidence` keeps the chat direct, and anything unreadable fails open to a direct
//! chat — a router never blocks a request and never widens what the agent may run. The model call
//! itself is the engine's; the route taken is reported as an [`ExecutionRoute`].

use crate::config::agent::ExecutionRouter;
use crate::config::enums::RouterMode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `minConfidence` when the agent sets none: the classifier must lean towards the loop.
pub const DEFAULT_MIN_CONFIDENCE: f64 = 0.5;
/// `timeoutMs` when the agent sets none; a router slower than this leaves the chat direct.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// The longest `timeoutMs` honoured: a router is a preamble to the real answer.
pub const MAX_TIMEOUT_MS: u64 = 30_000;
/// `maxInputChars` when the agent sets none.
pub const DEFAULT_MAX_INPUT_CHARS: usize = 4_000;
/// The most characters of the request the classifier is ever sent, whatever the agent sets.
pub const MAX_INPUT_CHARS: usize = 32_000;
/// Output tokens the classifier may spend on its small JSON answer.
pub const ROUTER_MAX_TOKENS: u32 = 200;

/// The bounds one agent's router runs under, its settings clamped to what Polpo allows.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterLimits {
    /// Below this confidence the chat stays direct.
    pub min_confidence: f64,
    /// Time budget of the classifier call.
    pub timeout_ms: u64,
    /// Characters of the user's text the classifier sees.
    pub max_input_chars: usize,
}

impl ExecutionRouter {
    /// Whether the router decides for chats that name no loop.
    pub fn is_auto(&self) -> bool {
        self.mode == Some(RouterMode::Auto)
    }

    /// The router's bounds: defaults for what is unset, clamped to Polpo's ceilings.
    pub fn limits(&self) -> RouterLimits {
        let min_confidence =
            self.min_confidence.as_ref().and_then(serde_json::Number::as_f64).unwrap_or(DEFAULT_MIN_CONFIDENCE);
        RouterLimits {
            min_confidence: min_confidence.clamp(0.0, 1.0),
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS).clamp(1, MAX_TIMEOUT_MS),
            max_input_chars: self
                .max_input_chars
                .map_or(DEFAULT_MAX_INPUT_CHARS, |n| n as usize)
                .clamp(1, MAX_INPUT_CHARS),
        }
    }
}

/// A loop the router may pick, as the classifier is shown it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopCandidate {
    /// The loop id (`.polpo/loops/<id>.json`), the value the classifier answers.
    pub id: String,
    /// Its `label` or `description`, when it has one.
    pub about: Option<String>,
}

/// The classifier's system prompt: the candidates and how to answer.
pub fn router_prompt(candidates: &[LoopCandidate]) -> String {
    let mut prompt = String::from(
        "You route a user's request to one of the workflows below, or to none when the assistant should answer it directly.\n\
         Answer with JSON: `loop` (a workflow id exactly as listed, or null), `confidence` (0 to 1) and a short `reason`.\n\
         Workflows:\n",
    );
    for c in candidates {
        match &c.about {
            Some(about) => prompt.push_str(&format!("- {}: {}\n", c.id, about)),
            None => prompt.push_str(&format!("- {}\n", c.id)),
        }
    }
    prompt
}

/// The user text the classifier sees: at most `max_chars` characters of it, cut on a character
/// boundary.
pub fn router_input(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// The structured output the classifier must produce, as an OpenAI-style `response_format`.
pub fn router_response_format(candidates: &[LoopCandidate]) -> Value {
    let mut ids: Vec<Value> = candidates.iter().map(|c| Value::String(c.id.clone())).collect();
    ids.push(Value::Null);
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": "execution_route",
            "strict": true,
            "schema": {
                "type": "object",
                "properties": {
                    "loop": {"type": ["string", "null"], "enum": ids},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "reason": {"type": "string"}
                },
                "required": ["loop", "confidence", "reason"],
                "additionalProperties": false
            }
        }
    })
}

/// How a chat's execution path was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSource {
    /// The classifier answered and its answer was taken.
    Router,
    /// The classifier could not decide (timeout, error, unreadable or refused answer): direct chat.
    Fallback,
}

/// Whether the chat runs a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteStatus {
    /// A loop runs the request.
    Routed,
    /// The agent answers directly.
    Direct,
}

/// The route one chat took, reported on the `execution:routed` event and kept with a loop run
/// (the reference's `executionRoute`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionRoute {
    /// Loop or direct.
    pub status: RouteStatus,
    /// Router or fallback.
    pub decision_source: DecisionSource,
    /// The loop that runs the request.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<String>,
    /// The classifier's confidence, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// The classifier's reason, or why the fallback was used (a stable code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Time spent deciding.
    pub latency_ms: u64,
    /// True when the classifier could not decide and the chat fell back to direct.
    pub fallback_used: bool,
}

impl ExecutionRoute {
    /// The direct fallback, for `why` (`router_timeout`, `router_failed`, …).
    pub fn fallback(why: &str, latency_ms: u64) -> Self {
        ExecutionRoute {
            status: RouteStatus::Direct,
            decision_source: DecisionSource::Fallback,
            loop_id: None,
            confidence: None,
            reason: Some(why.to_owned()),
            latency_ms,
            fallback_used: true,
        }
    }
}

/// Longest classifier reason kept on a route (it is model output, shown to operators).
const MAX_REASON_CHARS: usize = 200;

/// Read the classifier's `answer` against the agent's `allowed` loops and its `limits`.
pub fn decide(answer: &str, allowed: &[String], limits: &RouterLimits, latency_ms: u64) -> ExecutionRoute {
    let Ok(parsed) = serde_json::from_str::<Value>(answer.trim()) else {
        return ExecutionRoute::fallback("router_unreadable", latency_ms);
    };
    let confidence = parsed.get("confidence").and_then(Value::as_f64).filter(|c| (0.0..=1.0).contains(c));
    let reason = parsed.get("reason").and_then(Value::as_str).map(|r| router_input(r, MAX_REASON_CHARS).to_owned());
    let Some(confidence) = confidence else {
        return ExecutionRoute::fallback("router_unreadable", latency_ms);
    };
    let chosen = match parsed.get("loop") {
        Some(Value::Null) => None,
        Some(Value::String(id)) if allowed.contains(id) => Some(id.clone()),
        Some(Value::String(_)) => return ExecutionRoute::fallback("router_not_allowed", latency_ms),
        _ => return ExecutionRoute::fallback("router_unreadable", latency_ms),
    };
    let taken = chosen.filter(|_| confidence >= limits.min_confidence);
    ExecutionRoute {
        status: if taken.is_some() { RouteStatus::Routed } else { RouteStatus::Direct },
        decision_source: DecisionSource::Router,
        loop_id: taken,
        confidence: Some(confidence),
        reason,
        latency_ms,
        fallback_used: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> RouterLimits {
        RouterLimits { min_confidence: 0.6, timeout_ms: 1000, max_input_chars: 10 }
    }

    fn allowed() -> Vec<String> {
        vec!["refund".into(), "triage".into()]
    }

    #[test]
    fn a_confident_answer_naming_an_allowed_loop_routes() {
        let route =
            decide(r#"{"loop":"refund","confidence":0.9,"reason":"asks for money back"}"#, &allowed(), &limits(), 7);
        assert_eq!(route.status, RouteStatus::Routed);
        assert_eq!(route.loop_id.as_deref(), Some("refund"));
        assert_eq!(route.reason.as_deref(), Some("asks for money back"));
        assert!(!route.fallback_used);
    }

    #[test]
    fn low_confidence_null_and_refused_answers_stay_direct() {
        let low = decide(r#"{"loop":"refund","confidence":0.3,"reason":"maybe"}"#, &allowed(), &limits(), 1);
        assert_eq!((low.status, low.decision_source, low.loop_id), (RouteStatus::Direct, DecisionSource::Router, None));
        let none = decide(r#"{"loop":null,"confidence":0.95,"reason":"small talk"}"#, &allowed(), &limits(), 1);
        assert_eq!(none.status, RouteStatus::Direct);
        // A loop outside allowedLoops is never run, however confident the classifier is.
        let outside = decide(r#"{"loop":"delete-all","confidence":1,"reason":"x"}"#, &allowed(), &limits(), 1);
        assert_eq!(outside, ExecutionRoute::fallback("router_not_allowed", 1));
        for bad in [
            "refund",
            "{}",
            r#"{"loop":"refund"}"#,
            r#"{"loop":"refund","confidence":7}"#,
            r#"{"loop":3,"confidence":1}"#,
        ] {
            assert_eq!(
                decide(bad, &allowed(), &limits(), 2),
                ExecutionRoute::fallback("router_unreadable", 2),
                "{bad}"
            );
        }
    }

    #[test]
    fn limits_default_and_clamp() {
        let router: ExecutionRouter = serde_json::from_value(
            json!({"mode": "auto", "allowedLoops": ["a"], "timeoutMs": 999999, "minConfidence": 2}),
        )
        .unwrap_or_default();
        assert!(router.is_auto());
        let limits = router.limits();
        assert_eq!((limits.min_confidence, limits.timeout_ms, limits.max_input_chars), (1.0, MAX_TIMEOUT_MS, 4_000));
        assert_eq!(router_input("héllo wörld", 4), "héll");
        assert_eq!(router_input("hi", 4), "hi");
    }

    #[test]
    fn the_response_format_lists_exactly_the_candidates_and_null() {
        let candidates = [LoopCandidate { id: "refund".into(), about: Some("Refunds".into()) }];
        let format = router_response_format(&candidates);
        assert_eq!(format["json_schema"]["schema"]["properties"]["loop"]["enum"], json!(["refund", null]));
        assert!(router_prompt(&candidates).contains("- refund: Refunds"));
    }
}
