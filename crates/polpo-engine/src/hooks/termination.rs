//! What happens when the model offers a final answer: `turn:stop` hooks (one bounded,
//! tool-free recovery step) or the termination gate (validate, and send the agent back to
//! work within cycle, time, token and turn budgets).
//!
//! The turn loop asks this module three things: may the next model call start (and with
//! which output cap), is this candidate final, and — when turns run out — which error
//! applies. Everything else about hooks stays out of the loop.

use super::runner::{self, At};
use super::{InvocationHooks, handlers};
use crate::error::EngineError;
use crate::events::{EventSink, GateState, RunEvent};
use crate::invocation::Invocation;
use polpo_core::hooks::envelope::idempotency_key;
use polpo_core::hooks::{GateBudget, GateExhaustion, GateVerdict, HookEvent, StopVerdict};
use polpo_core::message::{Message, Usage};

/// What the loop does with a candidate final answer.
#[derive(Debug)]
pub(crate) enum Judgement {
    /// It is the answer (subject to the response format).
    Final,
    /// Append this model-visible message and run another turn.
    Retry(Message),
}

enum Phase {
    /// No controlling `turn:stop` hook applies.
    Plain,
    /// Ordinary stop hooks; `recovered` once the one recovery call was granted. With only
    /// observe-only hooks (`controlling: false`) the answer streams as usual and the hooks
    /// just watch.
    Hooks { recovered: bool, controlling: bool },
    /// A termination gate; `accepted` once a candidate passed (formatting may still follow).
    Gate { budget: GateBudget, accepted: bool },
}

/// The termination state of one invocation.
pub(crate) struct Termination<'a> {
    hooks: Option<&'a InvocationHooks>,
    phase: Phase,
}

impl<'a> Termination<'a> {
    /// Resolve the hooks of `inv`. With the kill switch thrown, hooks are skipped — but an
    /// agent whose termination gate would apply refuses to run rather than run unvalidated.
    pub(crate) fn prepare(inv: &'a Invocation) -> Result<Self, EngineError> {
        let Some(hooks) = inv.hooks.as_ref() else { return Ok(Self { hooks: None, phase: Phase::Plain }) };
        let target = hooks.target(None);
        let limits = hooks.set.gate_limits(&target);
        if !hooks.runtime.enabled {
            if limits.is_some() {
                return Err(EngineError::TerminationGateDisabled(format!(
                    "agent `{}` has a termination gate but runtime hooks are disabled ({}=off); refusing to run without validation",
                    inv.agent,
                    super::KILL_SWITCH_ENV
                )));
            }
            return Ok(Self { hooks: None, phase: Phase::Plain });
        }
        if limits.is_some() {
            if hooks.parallel_branch {
                return Err(EngineError::TerminationGateParallelUnsupported(format!(
                    "agent `{}` runs in a parallel loop branch, where termination gates cannot be checkpointed yet",
                    inv.agent
                )));
            }
            let gates = hooks.set.applicable(HookEvent::TurnStop, &target).controlling.into_iter().filter_map(|s| s.hook.gate().map(|g| (s.hook.qualified_id(), g)));
            for (id, gate) in gates {
                if let Some(why) = handlers::unavailable(&gate.validator) {
                    return Err(EngineError::TerminationGateDisabled(format!("the validator of gate {id} cannot run: {why}; refusing to run without validation")));
                }
            }
        }
        let phase = match limits {
            Some(limits) => Phase::Gate { budget: GateBudget::new(limits), accepted: false },
            None => match runner::stop_hooks(hooks) {
                (0, 0) => Phase::Plain,
                (controlling, _) => Phase::Hooks { recovered: false, controlling: controlling > 0 },
            },
        };
        Ok(Self { hooks: Some(hooks), phase })
    }

    /// The active hooks, `None` when there are none or they are switched off.
    pub(crate) fn hooks(&self) -> Option<&'a InvocationHooks> {
        self.hooks
    }

    /// True when a candidate must not be streamed before it is judged.
    pub(crate) fn buffers_text(&self) -> bool {
        !matches!(self.phase, Phase::Plain | Phase::Hooks { controlling: false, .. })
    }

    /// True while the next model call must be tool-free (the recovery step).
    pub(crate) fn tool_free(&self) -> bool {
        matches!(self.phase, Phase::Hooks { recovered: true, .. })
    }

    /// Checked before every model call: the time budget. Returns the output-token cap.
    pub(crate) fn before_model_call(&self) -> Result<Option<u32>, EngineError> {
        let (Phase::Gate { budget, .. }, Some(hooks)) = (&self.phase, self.hooks) else { return Ok(None) };
        check_time(hooks, budget)?;
        Ok(budget.output_cap().map(|c| u32::try_from(c).unwrap_or(u32::MAX)))
    }

    /// Checked after every model call: the token budget (`None` = the provider reported none).
    pub(crate) fn after_model_call(&mut self, usage: Option<Usage>) -> Result<(), EngineError> {
        match &mut self.phase {
            Phase::Gate { budget, .. } => budget.record_usage(usage).map_err(|e| exhausted(e, budget)),
            _ => Ok(()),
        }
    }

    /// Judge a candidate final answer.
    pub(crate) async fn judge(&mut self, inv: &Invocation, turn: u32, candidate: &str, sink: EventSink<'_>) -> Result<Judgement, EngineError> {
        let Some(hooks) = self.hooks else { return Ok(Judgement::Final) };
        match &mut self.phase {
            Phase::Plain | Phase::Gate { accepted: true, .. } => Ok(Judgement::Final),
            Phase::Hooks { recovered, .. } => judge_by_stop_hooks(&At { inv, hooks, turn, subject: format!("stop-{turn}"), sink }, candidate, recovered).await,
            Phase::Gate { budget, accepted } => judge_by_gate(inv, hooks, turn, candidate, sink, budget, accepted).await,
        }
    }

    /// The error when the agent's `maxTurns` ran out: a gate turns it into its own code.
    pub(crate) fn out_of_turns(&self, max_turns: u32, transcript: Vec<Message>) -> EngineError {
        match &self.phase {
            Phase::Gate { budget, accepted: false } => exhausted(GateExhaustion::Turns, budget),
            _ => EngineError::MaxTurnsExhausted { max_turns, transcript },
        }
    }
}

/// Ordinary `turn:stop` hooks: feedback buys one tool-free recovery call; the recovered
/// answer is checked once more and then ends the run whatever the hooks say.
async fn judge_by_stop_hooks(at: &At<'_>, candidate: &str, recovered: &mut bool) -> Result<Judgement, EngineError> {
    match runner::turn_stop(at, candidate, *recovered).await {
        StopVerdict::Fail { hook, reason } => Err(EngineError::HookFailed(at.hooks.redact_text(format!("turn:stop hook {hook} failed: {reason}")))),
        StopVerdict::Feedback { feedback, .. } if !*recovered => {
            *recovered = true;
            let feedback = at.hooks.redact_text(feedback);
            Ok(Judgement::Retry(Message::user(format!(
                "A quality check did not accept your answer yet: {feedback}\nReply once more with your improved final answer. Tools are not available for this reply."
            ))))
        }
        StopVerdict::Feedback { .. } | StopVerdict::Accept => Ok(Judgement::Final),
    }
}

/// The termination gate: validate the buffered candidate; accept it, or reopen the
/// operational phase with model-visible diagnostics while the budgets allow.
async fn judge_by_gate(
    inv: &Invocation,
    hooks: &InvocationHooks,
    turn: u32,
    candidate: &str,
    sink: EventSink<'_>,
    budget: &mut GateBudget,
    accepted: &mut bool,
) -> Result<Judgement, EngineError> {
    check_time(hooks, budget)?;
    let attempt = budget.begin_attempt();
    let gate_execution_id = gate_execution_id(hooks, turn, attempt);
    let event = |state, correction_cycle| RunEvent::TerminationGate { state, gate_execution_id: gate_execution_id.clone(), termination_attempt: attempt, correction_cycle };
    sink(event(GateState::Validating, budget.cycles_used));
    let at = At { inv, hooks, turn, subject: format!("attempt-{attempt}"), sink };
    match runner::validate(&at, candidate, attempt, budget.cycles_used).await {
        GateVerdict::Accept => {
            *accepted = true;
            sink(event(GateState::Accepted, budget.cycles_used));
            Ok(Judgement::Final)
        }
        GateVerdict::Continue { hook, mut diagnostics } => {
            polpo_core::hooks::redact(&mut diagnostics, &hooks.secrets);
            let cycle = budget.begin_cycle().map_err(|e| exhausted(e, budget))?;
            sink(event(GateState::Continuing, cycle));
            Ok(Judgement::Retry(Message::user(format!(
                "The termination gate did not accept your final answer (correction cycle {cycle} of {max}). Diagnostics from {hook}:\n{diagnostics}\n\
                 Continue working on the task with your tools as needed, then give a new final answer.",
                max = budget.limits.max_cycles
            ))))
        }
        GateVerdict::Reject { hook, reason } => Err(EngineError::TerminationGateRejected(hooks.redact_text(format!("validator {hook} rejected the answer: {reason}")))),
    }
}

/// `maxDurationMs` counts from invocation start, by the invocation's clock.
fn check_time(hooks: &InvocationHooks, budget: &GateBudget) -> Result<(), EngineError> {
    let elapsed = u64::try_from((hooks.clock)().as_millis()).unwrap_or(u64::MAX);
    budget.check_time(elapsed).map_err(|e| exhausted(e, budget))
}

fn gate_execution_id(hooks: &InvocationHooks, turn: u32, attempt: u32) -> String {
    let key = idempotency_key(&hooks.info.run_id, turn, HookEvent::TurnStop, "termination-gate", &format!("attempt-{attempt}"));
    format!("hx_{}", &key[..32])
}

fn exhausted(reason: GateExhaustion, budget: &GateBudget) -> EngineError {
    let l = budget.limits;
    let detail = match reason {
        GateExhaustion::Cycles => format!("the validator still asked for changes after {} correction cycles", l.max_cycles),
        GateExhaustion::Turns => "the agent used all of its maxTurns before the termination gate accepted an answer".to_string(),
        GateExhaustion::Time => format!("more than {} ms passed since the invocation started", l.max_duration_ms),
        GateExhaustion::Tokens => format!("{} tokens were used, more than maxTokens {}", budget.tokens_used, l.max_tokens.unwrap_or_default()),
        GateExhaustion::UsageUnknown => "the provider reported no token usage, so maxTokens cannot be enforced".to_string(),
    };
    EngineError::TerminationGateExhausted { reason, detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polpo_core::hooks::GateLimits;

    #[test]
    fn a_token_budget_without_reported_usage_stops_the_run() {
        // The fake LLM always reports usage, so this case is proven here, at the seam.
        let limits = GateLimits { max_cycles: 1, max_duration_ms: 1000, max_tokens: Some(100) };
        let mut t = Termination { hooks: None, phase: Phase::Gate { budget: GateBudget::new(limits), accepted: false } };
        let err = t.after_model_call(None).err().map(|e| e.code());
        assert_eq!(err, Some("termination_gate_usage_unknown"));
        let mut unbounded = Termination { hooks: None, phase: Phase::Gate { budget: GateBudget::new(GateLimits { max_tokens: None, ..limits }), accepted: false } };
        assert!(unbounded.after_model_call(None).is_ok());
    }
}
