//! What happens when the model offers a final answer: `turn:stop` hooks (one bounded,
//! tool-free recovery step) or the termination gate (validate, and send the agent back to
//! work within cycle, time, token and turn budgets).
//!
//! The turn loop asks this module three things: may the next model call start (and with
//! which output cap), is this candidate final, and — when turns run out — which error
//! applies. Everything else about hooks stays out of the loop.

use super::gate::{GateCheckpoint, GateDecision, GateValidation};
use super::runner::{self, At};
use super::{InvocationHooks, handlers};
use crate::error::EngineError;
use crate::events::{EventSink, GateState, RunEvent};
use crate::invocation::Invocation;
use crate::turn::control::{CheckpointError, RunControl};
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
    /// A termination gate; accepted once a candidate passed (formatting may still follow).
    Gate(GateCheckpoint),
}

/// The termination state of one invocation.
pub(crate) struct Termination<'a> {
    hooks: Option<&'a InvocationHooks>,
    /// Where a durable run keeps the gate's state; `None` for plain chat.
    control: Option<&'a dyn RunControl>,
    phase: Phase,
}

impl<'a> Termination<'a> {
    /// Resolve the hooks of `inv`. With the kill switch thrown, hooks are skipped — but an
    /// agent whose termination gate would apply refuses to run rather than run unvalidated.
    /// A resumed durable run (`control`) continues from its checkpointed gate state.
    pub(crate) fn prepare(inv: &'a Invocation, control: Option<&'a dyn RunControl>) -> Result<Self, EngineError> {
        let stored = control.and_then(RunControl::gate_checkpoint);
        let Some(hooks) = inv.hooks.as_ref() else { return Self::plain(inv, stored, control) };
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
            return Self::plain(inv, stored, control);
        }
        if limits.is_some() {
            let gates = hooks
                .set
                .applicable(HookEvent::TurnStop, &target)
                .controlling
                .into_iter()
                .filter_map(|s| s.hook.gate().map(|g| (s.hook.qualified_id(), g)));
            for (id, gate) in gates {
                if let Some(why) = handlers::unavailable(hooks, &gate.validator) {
                    return Err(EngineError::TerminationGateDisabled(format!(
                        "the validator of gate {id} cannot run: {why}; refusing to run without validation"
                    )));
                }
            }
        }
        let phase = match (limits, stored) {
            (Some(limits), stored) => Phase::Gate(resume_gate(limits, stored)?),
            (None, stored @ Some(_)) => return Self::plain(inv, stored, control),
            (None, None) => match runner::stop_hooks(hooks) {
                (0, 0) => Phase::Plain,
                (controlling, _) => Phase::Hooks { recovered: false, controlling: controlling > 0 },
            },
        };
        Ok(Self { hooks: Some(hooks), control, phase })
    }

    /// No hooks run. A checkpoint that holds a gate's state refuses that: the gate was
    /// removed or switched off while the run was interrupted, and resuming must not loosen it.
    fn plain(
        inv: &Invocation,
        stored: Option<GateCheckpoint>,
        control: Option<&'a dyn RunControl>,
    ) -> Result<Self, EngineError> {
        if stored.is_some() {
            return Err(EngineError::TerminationGateCheckpointInvalid(format!(
                "the run's checkpoint holds termination gate state, but agent `{}` no longer has a gate that runs; refusing to resume without validation",
                inv.agent
            )));
        }
        Ok(Self { hooks: None, control, phase: Phase::Plain })
    }

    /// True when a termination gate judges candidates.
    pub(crate) fn is_gate(&self) -> bool {
        matches!(self.phase, Phase::Gate(_))
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

    /// Checked before every model call: the time budget. Returns the output-token cap. Inside
    /// a correction cycle, a durable run first records that the call is starting, so a crash
    /// during it is recognised instead of repeated.
    pub(crate) async fn before_model_call(&mut self) -> Result<Option<u32>, EngineError> {
        let (Phase::Gate(gate), Some(hooks)) = (&mut self.phase, self.hooks) else { return Ok(None) };
        check_time(hooks, &gate.budget)?;
        if gate.in_correction_cycle() && self.control.is_some() {
            gate.model_call_in_flight = true;
            commit(self.control, gate).await?;
        }
        Ok(gate.budget.output_cap().map(|c| u32::try_from(c).unwrap_or(u32::MAX)))
    }

    /// Checked after every model call: the token budget (`None` = the provider reported none).
    pub(crate) fn after_model_call(&mut self, usage: Option<Usage>) -> Result<(), EngineError> {
        let Phase::Gate(gate) = &mut self.phase else { return Ok(()) };
        gate.model_call_in_flight = false;
        let recorded = gate.budget.record_usage(usage).map_err(|e| exhausted(e, &gate.budget));
        if let Some(control) = self.control {
            control.keep_gate(gate);
        }
        recorded
    }

    /// Judge a candidate final answer.
    pub(crate) async fn judge(
        &mut self,
        inv: &Invocation,
        turn: u32,
        candidate: &str,
        sink: EventSink<'_>,
    ) -> Result<Judgement, EngineError> {
        let Some(hooks) = self.hooks else { return Ok(Judgement::Final) };
        match &mut self.phase {
            Phase::Plain => Ok(Judgement::Final),
            Phase::Gate(gate) if gate.accepted() => Ok(Judgement::Final),
            Phase::Hooks { recovered, .. } => {
                judge_by_stop_hooks(
                    &At { inv, hooks, turn, subject: format!("stop-{turn}"), sink },
                    candidate,
                    recovered,
                )
                .await
            }
            Phase::Gate(gate) => judge_by_gate(inv, hooks, self.control, turn, candidate, sink, gate).await,
        }
    }

    /// The error when the agent's `maxTurns` ran out: a gate turns it into its own code.
    pub(crate) fn out_of_turns(&self, max_turns: u32, transcript: Vec<Message>) -> EngineError {
        match &self.phase {
            Phase::Gate(gate) if !gate.accepted() => exhausted(GateExhaustion::Turns, &gate.budget),
            _ => EngineError::MaxTurnsExhausted { max_turns, transcript },
        }
    }
}

/// Ordinary `turn:stop` hooks: feedback buys one tool-free recovery call; the recovered
/// answer is checked once more and then ends the run whatever the hooks say.
async fn judge_by_stop_hooks(at: &At<'_>, candidate: &str, recovered: &mut bool) -> Result<Judgement, EngineError> {
    match runner::turn_stop(at, candidate, *recovered).await {
        StopVerdict::Fail { hook, reason } => {
            Err(EngineError::HookFailed(at.hooks.redact_text(format!("turn:stop hook {hook} failed: {reason}"))))
        }
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

/// The gate of a new invocation, or of a resumed one from its checkpoint: consumption is
/// kept and the limits are the stricter of the stored and the configured ones. A resume
/// interrupted during a correction cycle's model call stops here (nothing is repeated).
fn resume_gate(
    limits: polpo_core::hooks::GateLimits,
    stored: Option<GateCheckpoint>,
) -> Result<GateCheckpoint, EngineError> {
    let Some(stored) = stored else { return Ok(GateCheckpoint::new(limits)) };
    if stored.model_call_in_flight {
        return Err(EngineError::TerminationGateEffectUnconfirmed(format!(
            "the run was interrupted during a model call of correction cycle {}; its outcome and cost are unknown, so it is not repeated",
            stored.budget.cycles_used
        )));
    }
    Ok(GateCheckpoint { budget: GateBudget::resumed(stored.budget, limits), ..stored })
}

/// Keep the gate state and wait until it is durable. A durable run that cannot write it fails
/// closed: a validation a resume could not reproduce must not count.
async fn commit(control: Option<&dyn RunControl>, gate: &GateCheckpoint) -> Result<(), EngineError> {
    let Some(control) = control else { return Ok(()) };
    control.keep_gate(gate);
    control.commit().await.map_err(|e| match e {
        CheckpointError::TooLarge(why) => EngineError::TerminationGateCheckpointTooLarge(format!(
            "the termination gate's checkpoint cannot be written: {why}"
        )),
        CheckpointError::Failed(why) => EngineError::TerminationGateCheckpointInvalid(format!(
            "the termination gate's checkpoint could not be written: {why}"
        )),
    })
}

/// The termination gate: validate the buffered candidate; accept it, or reopen the
/// operational phase with model-visible diagnostics while the budgets allow. A decision
/// already recorded for this candidate (a resumed run) is replayed without running the
/// validator again; a validation that started but has no decision runs again under the same
/// attempt number, so the validator sees the same idempotency key.
async fn judge_by_gate(
    inv: &Invocation,
    hooks: &InvocationHooks,
    control: Option<&dyn RunControl>,
    turn: u32,
    candidate: &str,
    sink: EventSink<'_>,
    gate: &mut GateCheckpoint,
) -> Result<Judgement, EngineError> {
    check_time(hooks, &gate.budget)?;
    let (attempt, gate_execution_id) = match &gate.validation {
        Some(v) if v.turn == turn => match &v.decision {
            Some(GateDecision::Accept) => return Ok(Judgement::Final),
            Some(GateDecision::Continue { feedback, .. }) => {
                return Ok(Judgement::Retry(Message::user(feedback.clone())));
            }
            None => (v.termination_attempt, v.gate_execution_id.clone()),
        },
        _ => {
            let attempt = gate.budget.begin_attempt();
            let id = gate_execution_id(hooks, turn, attempt);
            gate.validation = Some(GateValidation {
                gate_execution_id: id.clone(),
                turn,
                termination_attempt: attempt,
                decision: None,
            });
            // Durable before the validator runs, so a resume gives it the same key.
            commit(control, gate).await?;
            (attempt, id)
        }
    };
    let event = |state, correction_cycle| RunEvent::TerminationGate {
        state,
        gate_execution_id: gate_execution_id.clone(),
        termination_attempt: attempt,
        correction_cycle,
    };
    sink(event(GateState::Validating, gate.budget.cycles_used));
    let at = At { inv, hooks, turn, subject: format!("attempt-{attempt}"), sink };
    let verdict = runner::validate(&at, candidate, attempt, gate.budget.cycles_used).await;
    let decide = |gate: &mut GateCheckpoint, decision| {
        if let Some(v) = gate.validation.as_mut() {
            v.decision = Some(decision);
        }
    };
    match verdict {
        GateVerdict::Accept => {
            decide(gate, GateDecision::Accept);
            commit(control, gate).await?;
            sink(event(GateState::Accepted, gate.budget.cycles_used));
            Ok(Judgement::Final)
        }
        GateVerdict::Continue { hook, mut diagnostics } => {
            polpo_core::hooks::redact(&mut diagnostics, &hooks.secrets);
            let cycle = gate.budget.begin_cycle().map_err(|e| exhausted(e, &gate.budget))?;
            let feedback = format!(
                "The termination gate did not accept your final answer (correction cycle {cycle} of {max}). Diagnostics from {hook}:\n{diagnostics}\n\
                 Continue working on the task with your tools as needed, then give a new final answer.",
                max = gate.budget.limits.max_cycles
            );
            decide(gate, GateDecision::Continue { feedback: feedback.clone(), correction_cycle: cycle });
            commit(control, gate).await?;
            sink(event(GateState::Continuing, cycle));
            Ok(Judgement::Retry(Message::user(feedback)))
        }
        GateVerdict::Reject { hook, reason } => Err(EngineError::TerminationGateRejected(
            hooks.redact_text(format!("validator {hook} rejected the answer: {reason}")),
        )),
    }
}

/// `maxDurationMs` counts from invocation start, by the invocation's clock.
fn check_time(hooks: &InvocationHooks, budget: &GateBudget) -> Result<(), EngineError> {
    let elapsed = u64::try_from((hooks.clock)().as_millis()).unwrap_or(u64::MAX);
    budget.check_time(elapsed).map_err(|e| exhausted(e, budget))
}

fn gate_execution_id(hooks: &InvocationHooks, turn: u32, attempt: u32) -> String {
    let key = idempotency_key(
        &hooks.info.run_id,
        turn,
        HookEvent::TurnStop,
        "termination-gate",
        &format!("attempt-{attempt}"),
    );
    format!("hx_{}", &key[..32])
}

fn exhausted(reason: GateExhaustion, budget: &GateBudget) -> EngineError {
    let l = budget.limits;
    let detail = match reason {
        GateExhaustion::Cycles => {
            format!("the validator still asked for changes after {} correction cycles", l.max_cycles)
        }
        GateExhaustion::Turns => {
            "the agent used all of its maxTurns before the termination gate accepted an answer".to_string()
        }
        GateExhaustion::Time => format!("more than {} ms passed since the invocation started", l.max_duration_ms),
        GateExhaustion::Tokens => {
            format!("{} tokens were used, more than maxTokens {}", budget.tokens_used, l.max_tokens.unwrap_or_default())
        }
        GateExhaustion::UsageUnknown => {
            "the provider reported no token usage, so maxTokens cannot be enforced".to_string()
        }
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
        let gate = |limits| Phase::Gate(GateCheckpoint::new(limits));
        let mut t = Termination { hooks: None, control: None, phase: gate(limits) };
        let err = t.after_model_call(None).err().map(|e| e.code());
        assert_eq!(err, Some("termination_gate_usage_unknown"));
        let mut unbounded =
            Termination { hooks: None, control: None, phase: gate(GateLimits { max_tokens: None, ..limits }) };
        assert!(unbounded.after_model_call(None).is_ok());
    }
}
