//! Folding the decisions of controlling hooks into one verdict per event.
//!
//! Each fold is a small state machine the runner feeds one hook outcome at a time, in
//! running order, because a `modify` changes what the next hook sees. The precedence rules
//! live only here (and in the README's precedence table, which the tests mirror row by row):
//!
//! * `deny` wins and stops the chain; `ask` loses to a later `deny`; `allow`/`defer` never
//!   override an earlier `deny` or `ask`.
//! * `modify` chains: the next hook sees the modified input or result.
//! * observe-only hooks are ignored by every fold, whatever they return.
//! * a failed handler obeys its `onFailure`, except inside a termination gate, which always
//!   fails closed.
//! * [`authorize`] applies the tool policy last, so no hook can grant a denied tool.

use super::decision::{AskTimeout, Decision, FailureCause, HookFailure, HookOutcome};
use super::pack::{Hook, OnFailure};
use crate::policy::ToolPolicy;
use serde_json::{Value, json};

/// Whether the runner should ask the next hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Run the next controlling hook.
    Next,
    /// The verdict is settled; skip the remaining hooks.
    Halt,
}

fn not_allowed(decision: &Decision, event: &str) -> HookFailure {
    let hint = if matches!(decision, Decision::Continue { .. }) {
        " (`continue` is only valid inside a configured termination gate)"
    } else {
        ""
    };
    HookFailure::new(
        FailureCause::DecisionNotAllowed,
        format!("`{}` is not a valid decision for {event}{hint}", decision.name()),
    )
}

/// The verdict of the `tool:before` hooks on one call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolBeforeVerdict {
    /// Run the call with this (possibly modified) input, after policy and schema checks.
    Proceed {
        /// The input to validate and run.
        input: Value,
    },
    /// Refuse the call; the model sees `Error: <code>: <reason>`.
    Deny {
        /// `hook_denied` or `hook_failed`.
        code: &'static str,
        /// `pack/id`.
        hook: String,
        /// Why.
        reason: String,
    },
    /// A human must approve first (an approval request holds the proposed call).
    ApprovalRequired {
        /// `pack/id`.
        hook: String,
        /// Why.
        reason: String,
        /// What the server decides if nobody answers in time (the first asking hook's).
        timeout: Option<AskTimeout>,
        /// The input a reviewer approves (after every `modify`).
        input: Value,
    },
    /// End the run (`hook_stopped`).
    Stop {
        /// `pack/id`.
        hook: String,
        /// Why.
        reason: String,
    },
}

/// Folds `tool:before` outcomes.
#[derive(Debug, Clone)]
pub struct ToolBeforeFold {
    input: Value,
    ask: Option<(String, String, Option<AskTimeout>)>,
    settled: Option<ToolBeforeVerdict>,
}

impl ToolBeforeFold {
    /// Start with the model's proposed input.
    pub fn new(input: Value) -> Self {
        Self { input, ask: None, settled: None }
    }

    /// The input the next hook sees (the proposal after every `modify` so far).
    pub fn input(&self) -> &Value {
        &self.input
    }

    /// Fold one hook's outcome.
    pub fn apply(&mut self, hook: &Hook, outcome: HookOutcome) -> Flow {
        if hook.observe || self.settled.is_some() {
            return if self.settled.is_some() { Flow::Halt } else { Flow::Next };
        }
        let decision = match outcome.and_then(|d| match d {
            Decision::Modify { input: None, .. } => {
                Err(HookFailure::new(FailureCause::InvalidOutput, "`modify` on tool:before needs `data.input`"))
            }
            Decision::Modify { input: Some(ref i), .. } if !i.is_object() => {
                Err(HookFailure::new(FailureCause::InvalidOutput, "`data.input` must be a JSON object"))
            }
            Decision::Continue { .. } | Decision::Accept => Err(not_allowed(&d, "tool:before")),
            d => Ok(d),
        }) {
            Ok(d) => d,
            Err(f) => match hook.on_failure {
                OnFailure::Continue => return Flow::Next,
                OnFailure::Fail => {
                    self.settled = Some(ToolBeforeVerdict::Deny {
                        code: "hook_failed",
                        hook: hook.qualified_id(),
                        reason: f.to_string(),
                    });
                    return Flow::Halt;
                }
            },
        };
        match decision {
            Decision::Allow | Decision::Defer => Flow::Next,
            Decision::Modify { input: Some(input), .. } => {
                self.input = input;
                Flow::Next
            }
            Decision::Ask { reason, timeout } => {
                self.ask.get_or_insert((hook.qualified_id(), reason, timeout));
                Flow::Next
            }
            Decision::Deny { reason } => {
                self.settled = Some(ToolBeforeVerdict::Deny { code: "hook_denied", hook: hook.qualified_id(), reason });
                Flow::Halt
            }
            Decision::Stop { feedback } => {
                let reason = feedback.unwrap_or_else(|| "a runtime hook stopped the run".into());
                self.settled = Some(ToolBeforeVerdict::Stop { hook: hook.qualified_id(), reason });
                Flow::Halt
            }
            // Filtered above.
            Decision::Modify { input: None, .. } | Decision::Continue { .. } | Decision::Accept => Flow::Next,
        }
    }

    /// The verdict after every hook ran (or the chain halted).
    pub fn finish(self) -> ToolBeforeVerdict {
        if let Some(v) = self.settled {
            return v;
        }
        match self.ask {
            Some((hook, reason, timeout)) => {
                ToolBeforeVerdict::ApprovalRequired { hook, reason, timeout, input: self.input }
            }
            None => ToolBeforeVerdict::Proceed { input: self.input },
        }
    }
}

/// What happens to a tool call once policy and hooks have both spoken.
#[derive(Debug, Clone, PartialEq)]
pub enum Authorization {
    /// Validate `input` against the tool's schema, then run it.
    Execute {
        /// The input.
        input: Value,
    },
    /// Do not run; the model sees `Error: <code>: <message>`.
    Refuse {
        /// Stable code.
        code: &'static str,
        /// Model-visible sentence.
        message: String,
    },
    /// A person must approve this call (with this input) before it runs; the runtime keeps
    /// an approval request and runs the call only once a reviewer approved it.
    Ask {
        /// `pack/id` of the hook that asked.
        hook: String,
        /// Its reason.
        reason: String,
        /// What the server decides if nobody answers in time (`None`: it waits).
        timeout: Option<AskTimeout>,
        /// The input to approve, validate and run.
        input: Value,
    },
    /// Do not run, and end the run.
    EndRun {
        /// Stable code.
        code: &'static str,
        /// Sentence.
        message: String,
    },
}

/// Combine the tool policy with the hooks' verdict. The policy is applied last and
/// unconditionally: a hook can restrict or reshape a call, never grant one.
pub fn authorize(policy: &ToolPolicy, tool: &str, verdict: ToolBeforeVerdict) -> Authorization {
    if let Some(layer) = policy.denied_by(tool) {
        return Authorization::Refuse {
            code: "tool_policy_denied",
            message: format!("`{tool}` is not allowed by the {layer:?} tool policy"),
        };
    }
    match verdict {
        ToolBeforeVerdict::Proceed { input } => Authorization::Execute { input },
        ToolBeforeVerdict::Deny { code, hook, reason } => {
            Authorization::Refuse { code, message: format!("{reason} (hook {hook})") }
        }
        ToolBeforeVerdict::ApprovalRequired { hook, reason, timeout, input } => {
            Authorization::Ask { hook, reason, timeout, input }
        }
        ToolBeforeVerdict::Stop { hook, reason } => {
            Authorization::EndRun { code: "hook_stopped", message: format!("{reason} (hook {hook})") }
        }
    }
}

/// The verdict of the `tool:after` hooks on one result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAfterVerdict {
    /// The model-visible result.
    pub result: String,
    /// True when the result is an error (the call failed, or a hook withheld its result).
    pub is_error: bool,
    /// Set when a hook ended the run: (`pack/id`, reason).
    pub stop: Option<(String, String)>,
}

/// Folds `tool:after` outcomes.
#[derive(Debug, Clone)]
pub struct ToolAfterFold {
    verdict: ToolAfterVerdict,
    settled: bool,
}

impl ToolAfterFold {
    /// Start with the tool's model-visible result.
    pub fn new(result: String, is_error: bool) -> Self {
        Self { verdict: ToolAfterVerdict { result, is_error, stop: None }, settled: false }
    }

    /// The result the next hook sees.
    pub fn result(&self) -> &str {
        &self.verdict.result
    }

    /// True when the current result is an error.
    pub fn is_error(&self) -> bool {
        self.verdict.is_error
    }

    /// Fold one hook's outcome.
    pub fn apply(&mut self, hook: &Hook, outcome: HookOutcome) -> Flow {
        if self.settled {
            return Flow::Halt;
        }
        if hook.observe {
            return Flow::Next;
        }
        let decision = match outcome.and_then(|d| match d {
            Decision::Modify { result: None, .. } => {
                Err(HookFailure::new(FailureCause::InvalidOutput, "`modify` on tool:after needs `data.result`"))
            }
            Decision::Ask { .. } | Decision::Continue { .. } | Decision::Accept => Err(not_allowed(&d, "tool:after")),
            d => Ok(d),
        }) {
            Ok(d) => d,
            Err(f) => match hook.on_failure {
                OnFailure::Continue => return Flow::Next,
                OnFailure::Fail => {
                    // Fail closed: a failing post-processor (say, a redactor) must not leak
                    // the raw result to the model.
                    self.withhold(format!(
                        "Error: hook_failed: the result was withheld because hook {} failed: {f}",
                        hook.qualified_id()
                    ));
                    return Flow::Halt;
                }
            },
        };
        match decision {
            Decision::Allow | Decision::Defer => Flow::Next,
            Decision::Modify { result: Some(result), .. } => {
                self.verdict.result = match result {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                Flow::Next
            }
            Decision::Deny { reason } => {
                self.withhold(format!("Error: hook_denied: {reason} (hook {})", hook.qualified_id()));
                Flow::Halt
            }
            Decision::Stop { feedback } => {
                self.verdict.stop =
                    Some((hook.qualified_id(), feedback.unwrap_or_else(|| "a runtime hook stopped the run".into())));
                self.settled = true;
                Flow::Halt
            }
            Decision::Modify { result: None, .. }
            | Decision::Ask { .. }
            | Decision::Continue { .. }
            | Decision::Accept => Flow::Next,
        }
    }

    fn withhold(&mut self, text: String) {
        self.verdict.result = text;
        self.verdict.is_error = true;
        self.settled = true;
    }

    /// The verdict.
    pub fn finish(self) -> ToolAfterVerdict {
        self.verdict
    }
}

/// The verdict of `turn:stop` hooks when no termination gate applies.
#[derive(Debug, Clone, PartialEq)]
pub enum StopVerdict {
    /// End with the candidate.
    Accept,
    /// One tool-free recovery call with this model-visible feedback.
    Feedback {
        /// `pack/id`.
        hook: String,
        /// The feedback.
        feedback: String,
    },
    /// End the run with `hook_failed`.
    Fail {
        /// `pack/id`.
        hook: String,
        /// Why.
        reason: String,
    },
}

/// Folds `turn:stop` outcomes outside a gate.
#[derive(Debug, Clone, Default)]
pub struct StopFold {
    settled: Option<StopVerdict>,
}

impl StopFold {
    /// Fold one hook's outcome.
    pub fn apply(&mut self, hook: &Hook, outcome: HookOutcome) -> Flow {
        if self.settled.is_some() {
            return Flow::Halt;
        }
        if hook.observe {
            return Flow::Next;
        }
        let decision = outcome.and_then(|d| match d {
            Decision::Allow | Decision::Defer | Decision::Accept | Decision::Stop { .. } => Ok(d),
            other => Err(not_allowed(&other, "turn:stop")),
        });
        match decision {
            Ok(Decision::Stop { feedback: Some(feedback) }) => {
                self.settled = Some(StopVerdict::Feedback { hook: hook.qualified_id(), feedback });
                Flow::Halt
            }
            Ok(_) => Flow::Next,
            Err(_) if hook.on_failure == OnFailure::Continue => Flow::Next,
            Err(f) => {
                self.settled = Some(StopVerdict::Fail { hook: hook.qualified_id(), reason: f.to_string() });
                Flow::Halt
            }
        }
    }

    /// The verdict.
    pub fn finish(self) -> StopVerdict {
        self.settled.unwrap_or(StopVerdict::Accept)
    }
}

/// The verdict of `turn:stop` hooks while a termination gate applies.
#[derive(Debug, Clone, PartialEq)]
pub enum GateVerdict {
    /// Every validator accepted: the candidate becomes the answer.
    Accept,
    /// Reopen the operational phase with these model-visible diagnostics.
    Continue {
        /// `pack/id`.
        hook: String,
        /// JSON diagnostics.
        diagnostics: Value,
    },
    /// Fail closed: `termination_gate_rejected`.
    Reject {
        /// `pack/id`.
        hook: String,
        /// Why (a failure cause code and sentence, or the validator's reason).
        reason: String,
    },
}

/// Folds `turn:stop` outcomes while a gate applies: validators decide, ordinary stop hooks'
/// feedback becomes `continue`, and every validator failure fails closed.
#[derive(Debug, Clone, Default)]
pub struct GateFold {
    settled: Option<GateVerdict>,
}

impl GateFold {
    /// Fold one hook's outcome.
    pub fn apply(&mut self, hook: &Hook, outcome: HookOutcome) -> Flow {
        if self.settled.is_some() {
            return Flow::Halt;
        }
        if hook.observe {
            return Flow::Next;
        }
        let id = hook.qualified_id();
        let validator = hook.gate().is_some();
        let verdict = match outcome {
            Ok(Decision::Accept | Decision::Allow | Decision::Defer) if !validator => None,
            Ok(Decision::Stop { feedback: None }) if !validator => None,
            Ok(Decision::Accept) => None,
            Ok(Decision::Continue { diagnostics }) => Some(GateVerdict::Continue { hook: id, diagnostics }),
            // Compatibility form: `stop` with non-empty feedback means `continue`.
            Ok(Decision::Stop { feedback: Some(f) }) => {
                Some(GateVerdict::Continue { hook: id, diagnostics: json!({ "feedback": f }) })
            }
            Ok(Decision::Stop { feedback: None }) => Some(GateVerdict::Reject {
                hook: id,
                reason: format!(
                    "{}: a validator's `stop` needs non-empty string feedback",
                    FailureCause::InvalidFeedback.code()
                ),
            }),
            Ok(Decision::Deny { reason }) if validator => Some(GateVerdict::Reject { hook: id, reason }),
            Ok(other) if validator => Some(GateVerdict::Reject {
                hook: id,
                reason: format!(
                    "{}: a validator must answer `accept` or `continue`, not `{}`",
                    FailureCause::DecisionNotAllowed.code(),
                    other.name()
                ),
            }),
            Ok(other) => self.ordinary_failure(hook, not_allowed(&other, "turn:stop")),
            // Validators fail closed whatever `onFailure` says.
            Err(f) if validator => Some(GateVerdict::Reject { hook: id, reason: f.to_string() }),
            Err(f) => self.ordinary_failure(hook, f),
        };
        match verdict {
            Some(v) => {
                self.settled = Some(v);
                Flow::Halt
            }
            None => Flow::Next,
        }
    }

    fn ordinary_failure(&self, hook: &Hook, f: HookFailure) -> Option<GateVerdict> {
        (hook.on_failure == OnFailure::Fail)
            .then(|| GateVerdict::Reject { hook: hook.qualified_id(), reason: f.to_string() })
    }

    /// The verdict.
    pub fn finish(self) -> GateVerdict {
        self.settled.unwrap_or(GateVerdict::Accept)
    }
}

#[cfg(test)]
mod tests;
