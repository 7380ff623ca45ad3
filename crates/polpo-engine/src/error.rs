//! Errors that end a run, each with a stable code.

use polpo_core::hooks::GateExhaustion;
use polpo_core::message::Message;
use polpo_llm::LlmError;

/// Why a run ended without a final answer.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The agent used all of its `maxTurns` model calls. The transcript so far is kept so the
    /// caller can persist it and a person can see how far the agent got.
    #[error("max_turns_exhausted: the agent used all {max_turns} turns without a final answer")]
    MaxTurnsExhausted {
        /// The limit that was reached.
        max_turns: u32,
        /// Messages produced before the limit (assistant turns and tool results).
        transcript: Vec<Message>,
    },
    /// A forced `tool_choice` names a tool outside the effective set.
    #[error("tool_policy_denied: {0}")]
    ToolPolicyDenied(String),
    /// The model call failed.
    #[error("{0}")]
    Model(#[from] LlmError),
    /// The final answer did not match the requested `response_format`, even after one repair.
    #[error("structured_output_invalid: {0}")]
    StructuredOutputInvalid(String),
    /// The request itself is not acceptable (bad schema, unsafe client tool …).
    #[error("invalid_request: {0}")]
    InvalidRequest(String),
    /// The run was aborted by its caller.
    #[error("aborted: the run was aborted")]
    Aborted,
    /// A termination gate budget (cycles, turns, time, tokens) ran out, or token usage could
    /// not be known, before a candidate was accepted.
    #[error("{}: {detail}", reason.code())]
    TerminationGateExhausted {
        /// Which budget.
        reason: GateExhaustion,
        /// Human sentence.
        detail: String,
    },
    /// The validator rejected the candidate or failed (fail closed).
    #[error("termination_gate_rejected: {0}")]
    TerminationGateRejected(String),
    /// A termination gate applies but runtime hooks are switched off.
    #[error("termination_gate_disabled: {0}")]
    TerminationGateDisabled(String),
    /// A termination gate applies to a durable agent node in a parallel loop branch.
    #[error("termination_gate_parallel_unsupported: {0}")]
    TerminationGateParallelUnsupported(String),
    /// A durable run could not write (`invalid`) the checkpoint a termination gate needs
    /// before it validates or continues, or its stored gate state is unusable: the gate fails
    /// closed rather than validate what a resume could not reproduce.
    #[error("termination_gate_checkpoint_invalid: {0}")]
    TerminationGateCheckpointInvalid(String),
    /// The run's checkpoint exceeds the store's size limit, so the gate's state cannot be kept.
    #[error("termination_gate_checkpoint_too_large: {0}")]
    TerminationGateCheckpointTooLarge(String),
    /// A resumed run was interrupted during a model call inside a correction cycle: whether it
    /// happened (and what it cost) is unknown, so it is not repeated blindly.
    #[error("termination_gate_effect_unconfirmed: {0}")]
    TerminationGateEffectUnconfirmed(String),
    /// A hook answered `stop` on a tool event.
    #[error("hook_stopped: {0}")]
    HookStopped(String),
    /// A `turn:stop` hook failed and its `onFailure` is `fail`.
    #[error("hook_failed: {0}")]
    HookFailed(String),
    /// A hook asked for approval of a tool call in a chat that cannot wait for it (not a
    /// durable run): the client approves the request and retries with its `Idempotency-Key`.
    #[error("approval_required: {0}")]
    ApprovalRequired(String),
}

impl EngineError {
    /// Stable snake_case code, as returned to HTTP clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MaxTurnsExhausted { .. } => "max_turns_exhausted",
            Self::ToolPolicyDenied(_) => "tool_policy_denied",
            Self::Model(e) => e.kind.code(),
            Self::StructuredOutputInvalid(_) => "structured_output_invalid",
            Self::InvalidRequest(_) => "invalid_request",
            Self::Aborted => "aborted",
            Self::TerminationGateExhausted { reason, .. } => reason.code(),
            Self::TerminationGateRejected(_) => "termination_gate_rejected",
            Self::TerminationGateDisabled(_) => "termination_gate_disabled",
            Self::TerminationGateParallelUnsupported(_) => "termination_gate_parallel_unsupported",
            Self::TerminationGateCheckpointInvalid(_) => "termination_gate_checkpoint_invalid",
            Self::TerminationGateCheckpointTooLarge(_) => "termination_gate_checkpoint_too_large",
            Self::TerminationGateEffectUnconfirmed(_) => "termination_gate_effect_unconfirmed",
            Self::HookStopped(_) => "hook_stopped",
            Self::HookFailed(_) => "hook_failed",
            Self::ApprovalRequired(_) => "approval_required",
        }
    }
}
