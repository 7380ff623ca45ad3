//! What a handler answers, and how its raw output is read.
//!
//! Handler output is untrusted: it is bounded in size and parsed strictly. Anything that is
//! not one well-formed decision becomes a [`HookFailure`] with a stable cause, which the
//! folds turn into the hook's `onFailure` behaviour — or, inside a termination gate, into a
//! fail-closed rejection.

use super::limits::{MAX_ASK_TIMEOUT_SECS, MAX_FEEDBACK_BYTES, MAX_OUTPUT_BYTES};
use crate::loops::config::TimeoutAction;
use serde::Serialize;
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// One decision of one handler.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Proceed; later hooks still run.
    Allow,
    /// Block the action; the reason reaches the model.
    Deny {
        /// Why.
        reason: String,
    },
    /// Require a human approval.
    Ask {
        /// What the approver should know.
        reason: String,
        /// `data.timeout` / `data.timeoutAction`: what the server decides if nobody answers.
        #[serde(skip_serializing_if = "Option::is_none")]
        timeout: Option<AskTimeout>,
    },
    /// No opinion; fall through to the next hook and ordinary policy.
    Defer,
    /// Replace the tool input (`tool:before`) or the model-visible result (`tool:after`).
    Modify {
        /// `data.input`.
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        /// `data.result`.
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
    },
    /// End the turn; on `turn:stop`, non-empty feedback asks for a recovery step.
    Stop {
        /// Model-visible feedback.
        #[serde(skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
    },
    /// Termination gate only: send the agent back to work with model-visible diagnostics.
    Continue {
        /// JSON diagnostics for the model.
        diagnostics: Value,
    },
    /// Termination gate only: the candidate is valid.
    Accept,
}

impl Decision {
    /// The wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny { .. } => "deny",
            Self::Ask { .. } => "ask",
            Self::Defer => "defer",
            Self::Modify { .. } => "modify",
            Self::Stop { .. } => "stop",
            Self::Continue { .. } => "continue",
            Self::Accept => "accept",
        }
    }
}

/// How long an `ask`'s approval request may wait, and what the server decides then — so a
/// hook can ask for a person without a paused run waiting forever when nobody answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AskTimeout {
    /// How long after the request the server decides (1 second to 30 days).
    pub after: Duration,
    /// What it decides (`reject` unless the hook said `approve`).
    pub action: TimeoutAction,
}

/// Read an `ask`'s `data.timeout` (whole seconds, or an ISO-8601 duration such as `PT30M`)
/// and `data.timeoutAction` (`reject` | `approve`); `None` when it gives no timeout.
fn ask_timeout(data: Option<&Value>) -> Result<Option<AskTimeout>, HookFailure> {
    let bad = |detail: String| HookFailure::new(FailureCause::InvalidOutput, detail);
    let data = match data {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(data)) => data,
        Some(_) => return Err(bad("`ask`'s `data` must be an object".into())),
    };
    let range = format!("between 1 second and {MAX_ASK_TIMEOUT_SECS} seconds (30 days)");
    let after = match data.get("timeout") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64().filter(|s| (1..=MAX_ASK_TIMEOUT_SECS).contains(s)) {
            Some(secs) => Some(Duration::from_secs(secs)),
            None => return Err(bad(format!("`data.timeout` must be whole seconds {range}"))),
        },
        Some(Value::String(text)) => {
            let after = crate::tasks::parse_duration(text).map_err(|e| bad(format!("`data.timeout`: {e}")))?;
            if after < Duration::from_secs(1) || after > Duration::from_secs(MAX_ASK_TIMEOUT_SECS) {
                return Err(bad(format!("`data.timeout` must be {range}")));
            }
            Some(after)
        }
        Some(_) => return Err(bad("`data.timeout` must be seconds or an ISO-8601 duration such as PT30M".into())),
    };
    let action = match data.get("timeoutAction") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "reject" => Some(TimeoutAction::Reject),
        Some(Value::String(s)) if s == "approve" => Some(TimeoutAction::Approve),
        Some(_) => return Err(bad("`data.timeoutAction` must be `reject` or `approve`".into())),
    };
    match (after, action) {
        (Some(after), action) => Ok(Some(AskTimeout { after, action: action.unwrap_or(TimeoutAction::Reject) })),
        (None, Some(_)) => Err(bad("`data.timeoutAction` needs a `data.timeout`".into())),
        (None, None) => Ok(None),
    }
}

/// Why a handler produced no usable decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    /// The handler did not finish within its timeout.
    Timeout,
    /// Nothing (or only whitespace) came back.
    EmptyOutput,
    /// A JSON object without a `decision`.
    MissingDecision,
    /// Not JSON, not an object, an unknown decision, or a malformed payload.
    InvalidOutput,
    /// `feedback` or `diagnostics` missing, empty, of the wrong type, or too large.
    InvalidFeedback,
    /// More than the output limit came back.
    OutputTooLarge,
    /// The process exited non-zero, the endpoint answered an error status, the tool failed.
    HandlerError,
    /// This handler kind cannot run here (no MCP client, no verifier agent, hooks disabled).
    Unavailable,
    /// A well-formed decision that this event does not accept (`continue` outside a gate).
    DecisionNotAllowed,
}

impl FailureCause {
    /// Stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Timeout => "hook_timeout",
            Self::EmptyOutput => "hook_empty_output",
            Self::MissingDecision => "hook_missing_decision",
            Self::InvalidOutput => "hook_invalid_output",
            Self::InvalidFeedback => "hook_invalid_feedback",
            Self::OutputTooLarge => "hook_output_too_large",
            Self::HandlerError => "hook_handler_failed",
            Self::Unavailable => "hook_handler_unavailable",
            Self::DecisionNotAllowed => "hook_decision_not_allowed",
        }
    }
}

/// A handler that failed, with a sentence safe to show (no secrets, bounded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// Classification.
    pub cause: FailureCause,
    /// Human detail.
    pub detail: String,
}

impl HookFailure {
    /// A failure of `cause` with a sentence.
    pub fn new(cause: FailureCause, detail: impl Into<String>) -> Self {
        Self { cause, detail: detail.into() }
    }
}

impl fmt::Display for HookFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.cause.code(), self.detail)
    }
}

/// What one handler run produced.
pub type HookOutcome = Result<Decision, HookFailure>;

/// Read a handler's raw output (stdout, HTTP body, tool text) as one decision.
pub fn parse_output(raw: &[u8]) -> HookOutcome {
    use FailureCause::*;
    if raw.len() > MAX_OUTPUT_BYTES {
        return Err(HookFailure::new(OutputTooLarge, format!("output is larger than {MAX_OUTPUT_BYTES} bytes")));
    }
    let text = std::str::from_utf8(raw).map_err(|_| HookFailure::new(InvalidOutput, "output is not UTF-8"))?;
    if text.trim().is_empty() {
        return Err(HookFailure::new(EmptyOutput, "the handler printed nothing; it must print one decision object"));
    }
    let value: Value = serde_json::from_str(text.trim())
        .map_err(|e| HookFailure::new(InvalidOutput, format!("output is not JSON: {e}")))?;
    parse_decision(&value)
}

/// Read one decision object.
pub fn parse_decision(value: &Value) -> HookOutcome {
    use FailureCause::*;
    let obj = value
        .as_object()
        .ok_or_else(|| HookFailure::new(InvalidOutput, "output must be a JSON object with a `decision`"))?;
    let name = match obj.get("decision") {
        None | Some(Value::Null) => return Err(HookFailure::new(MissingDecision, "the output has no `decision`")),
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(HookFailure::new(InvalidOutput, "`decision` must be a string")),
    };
    let reason = |default: &str| -> Result<String, HookFailure> {
        match obj.get("reason") {
            None | Some(Value::Null) => Ok(default.to_string()),
            Some(Value::String(s)) if s.len() <= MAX_FEEDBACK_BYTES => Ok(s.clone()),
            Some(_) => Err(HookFailure::new(
                InvalidFeedback,
                format!("`reason` must be a string of at most {MAX_FEEDBACK_BYTES} bytes"),
            )),
        }
    };
    match name {
        "allow" => Ok(Decision::Allow),
        "defer" => Ok(Decision::Defer),
        "accept" => Ok(Decision::Accept),
        "deny" => Ok(Decision::Deny { reason: reason("denied by a runtime hook")? }),
        "ask" => Ok(Decision::Ask {
            reason: reason("a runtime hook requires approval")?,
            timeout: ask_timeout(obj.get("data"))?,
        }),
        "modify" => {
            let data = obj
                .get("data")
                .and_then(Value::as_object)
                .ok_or_else(|| HookFailure::new(InvalidOutput, "`modify` needs a `data` object"))?;
            let input = data.get("input").cloned();
            let result = data.get("result").cloned();
            if input.is_none() && result.is_none() {
                return Err(HookFailure::new(InvalidOutput, "`modify` needs `data.input` or `data.result`"));
            }
            Ok(Decision::Modify { input, result })
        }
        "stop" => match obj.get("feedback") {
            None | Some(Value::Null) => Ok(Decision::Stop { feedback: None }),
            Some(Value::String(s)) if s.len() <= MAX_FEEDBACK_BYTES => {
                Ok(Decision::Stop { feedback: Some(s.clone()).filter(|s| !s.trim().is_empty()) })
            }
            Some(_) => Err(HookFailure::new(
                InvalidFeedback,
                format!("`feedback` must be a string of at most {MAX_FEEDBACK_BYTES} bytes"),
            )),
        },
        "continue" => {
            let diagnostics = obj
                .get("diagnostics")
                .filter(|d| !d.is_null())
                .cloned()
                .ok_or_else(|| HookFailure::new(InvalidFeedback, "`continue` needs model-visible `diagnostics`"))?;
            let size = serde_json::to_vec(&diagnostics).map(|b| b.len()).unwrap_or(usize::MAX);
            if size > MAX_FEEDBACK_BYTES || diagnostics.as_str().is_some_and(|s| s.trim().is_empty()) {
                return Err(HookFailure::new(
                    InvalidFeedback,
                    format!("`diagnostics` must be non-empty JSON of at most {MAX_FEEDBACK_BYTES} bytes"),
                ));
            }
            Ok(Decision::Continue { diagnostics })
        }
        other => Err(HookFailure::new(
            InvalidOutput,
            format!(
                "unknown decision `{}` (allow, deny, ask, defer, modify, stop, continue, accept)",
                other.chars().take(40).collect::<String>()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        /// Handler output is untrusted: any bytes give a decision or a failure, never a panic.
        #[test]
        fn any_output_is_read_without_panicking(raw in prop::collection::vec(any::<u8>(), 0..512), text in "\\PC{0,200}") {
            let _ = parse_output(&raw);
            let _ = parse_output(text.as_bytes());
            let _ = parse_output(format!(r#"{{"decision":"{text}","reason":"{text}"}}"#).as_bytes());
        }
    }

    fn cause(raw: &str) -> FailureCause {
        parse_output(raw.as_bytes()).unwrap_err().cause
    }

    #[test]
    fn every_decision_parses_with_its_payload() {
        assert_eq!(parse_output(br#"{"decision":"allow"}"#).unwrap(), Decision::Allow);
        assert_eq!(
            parse_output(br#" {"decision":"deny","reason":"no rm"} "#).unwrap(),
            Decision::Deny { reason: "no rm".into() }
        );
        assert_eq!(
            parse_output(br#"{"decision":"modify","data":{"input":{"path":"a"}}}"#).unwrap(),
            Decision::Modify { input: Some(json!({"path":"a"})), result: None }
        );
        assert_eq!(
            parse_output(br#"{"decision":"stop","feedback":"add tests"}"#).unwrap(),
            Decision::Stop { feedback: Some("add tests".into()) }
        );
        assert_eq!(parse_output(br#"{"decision":"stop","feedback":"  "}"#).unwrap(), Decision::Stop { feedback: None });
        assert_eq!(
            parse_output(br#"{"decision":"continue","diagnostics":{"failing":["t1"]}}"#).unwrap(),
            Decision::Continue { diagnostics: json!({"failing":["t1"]}) }
        );
    }

    #[test]
    fn malformed_output_has_a_stable_cause() {
        assert_eq!(cause(""), FailureCause::EmptyOutput);
        assert_eq!(cause("\n "), FailureCause::EmptyOutput);
        assert_eq!(cause("{}"), FailureCause::MissingDecision);
        assert_eq!(cause("ok"), FailureCause::InvalidOutput);
        assert_eq!(cause(r#"{"decision":"maybe"}"#), FailureCause::InvalidOutput);
        assert_eq!(cause(r#"{"decision":"modify","data":{}}"#), FailureCause::InvalidOutput);
        assert_eq!(cause(r#"{"decision":"stop","feedback":42}"#), FailureCause::InvalidFeedback);
        assert_eq!(cause(r#"{"decision":"continue"}"#), FailureCause::InvalidFeedback);
        assert_eq!(cause(r#"{"decision":"continue","diagnostics":""}"#), FailureCause::InvalidFeedback);
        let big = format!(r#"{{"decision":"allow","pad":"{}"}}"#, "x".repeat(MAX_OUTPUT_BYTES));
        assert_eq!(cause(&big), FailureCause::OutputTooLarge);
    }

    /// An `ask` may bound how long its approval waits; a timeout that is not one is the hook's
    /// invalid output, never a request that waits forever or expires at once.
    #[test]
    fn an_ask_reads_its_timeout_and_refuses_bad_ones() {
        let ask = |raw: &str| match parse_output(raw.as_bytes()).unwrap() {
            Decision::Ask { timeout, .. } => timeout,
            other => panic!("{other:?}"),
        };
        assert_eq!(ask(r#"{"decision":"ask"}"#), None);
        let minute = AskTimeout { after: Duration::from_secs(60), action: TimeoutAction::Reject };
        assert_eq!(ask(r#"{"decision":"ask","data":{"timeout":60}}"#), Some(minute));
        assert_eq!(
            ask(r#"{"decision":"ask","data":{"timeout":"PT1M","timeoutAction":"approve"}}"#),
            Some(AskTimeout { action: TimeoutAction::Approve, ..minute })
        );
        for bad in [
            r#"{"decision":"ask","data":{"timeout":0}}"#,
            r#"{"decision":"ask","data":{"timeout":-5}}"#,
            r#"{"decision":"ask","data":{"timeout":1.5}}"#,
            r#"{"decision":"ask","data":{"timeout":2592001}}"#,
            r#"{"decision":"ask","data":{"timeout":"PT0.5S"}}"#,
            r#"{"decision":"ask","data":{"timeout":"P31D"}}"#,
            r#"{"decision":"ask","data":{"timeout":"soon"}}"#,
            r#"{"decision":"ask","data":{"timeout":true}}"#,
            r#"{"decision":"ask","data":{"timeout":60,"timeoutAction":"ignore"}}"#,
            r#"{"decision":"ask","data":{"timeoutAction":"approve"}}"#,
            r#"{"decision":"ask","data":"PT1M"}"#,
        ] {
            assert_eq!(cause(bad), FailureCause::InvalidOutput, "{bad}");
        }
    }
}
