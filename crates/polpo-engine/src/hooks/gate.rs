//! What a durable run checkpoints about a termination gate (budgets consumed, the validation
//! of the latest candidate), so a resumed run continues the same validation. Plain data,
//! shared by the termination gate, the turn loop's run control and the run's checkpoint.

use polpo_core::hooks::{GateBudget, GateLimits};
use serde::{Deserialize, Serialize};

/// What a durable run checkpoints about its termination gate, so a resume continues the same
/// validation: budgets it cannot loosen, and the decision on the latest candidate it replays
/// instead of asking the validator again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateCheckpoint {
    /// What was consumed, and the limits in force when it was written.
    pub budget: GateBudget,
    /// The validation of the latest candidate, once one started.
    #[serde(default)]
    pub validation: Option<GateValidation>,
    /// A model call inside a correction cycle started and its reply is not checkpointed yet.
    #[serde(default)]
    pub model_call_in_flight: bool,
}

impl GateCheckpoint {
    /// The state of a gate no candidate has reached yet.
    pub(crate) fn new(limits: GateLimits) -> Self {
        Self { budget: GateBudget::new(limits), validation: None, model_call_in_flight: false }
    }

    /// True once a candidate was accepted.
    pub fn accepted(&self) -> bool {
        matches!(self.validation, Some(GateValidation { decision: Some(GateDecision::Accept), .. }))
    }

    /// True while the agent repairs a rejected answer (a correction cycle): an interrupted
    /// operation then cannot be repeated blindly (`termination_gate_effect_unconfirmed`).
    pub fn in_correction_cycle(&self) -> bool {
        self.budget.cycles_used > 0 && !self.accepted()
    }
}

/// One validation of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateValidation {
    /// The stable hook execution id of this validation (its traces carry it too).
    pub gate_execution_id: String,
    /// The run's model call (1-based, counted over the whole run) that produced the candidate.
    pub turn: u32,
    /// 1-based number of the candidate.
    pub termination_attempt: u32,
    /// The validator's decision; `None` while it runs.
    #[serde(default)]
    pub decision: Option<GateDecision>,
}

/// A recorded validation decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum GateDecision {
    /// The candidate (the run's last assistant message) is the answer.
    Accept,
    /// The agent was sent back to work with this model-visible message.
    Continue {
        /// The message, diagnostics included (already redacted).
        feedback: String,
        /// The correction cycle it started.
        correction_cycle: u32,
    },
}
