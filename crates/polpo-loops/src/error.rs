//! Why a loop run failed, each with a stable snake_case code.

use polpo_engine::ChatError;

/// A loop run's failure.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// No loop with that id in the project.
    #[error("loop_not_found: no loop named `{0}` in this project")]
    NotFound(String),
    /// The loop is not among the agent's `assignedLoops`, or the agent has none to default to.
    #[error("loop_not_assigned: {0}")]
    NotAssigned(String),
    /// The request asks for something a loop cannot give (`response_format`, client tools,
    /// `ask_user_question`); refused before any step runs.
    #[error("loop_request_unsupported: {0}")]
    Unsupported(String),
    /// A `{"$context": path}` binding names nothing in the context.
    #[error("loop_binding_missing: `{0}` is not in the loop context")]
    BindingMissing(String),
    /// A `$context` marker that is not exactly one key with a non-empty dotted path.
    #[error("loop_binding_invalid: {0}")]
    BindingInvalid(String),
    /// A tool step's resolved input does not match the tool's schema; the tool did not run.
    #[error("loop_tool_input_invalid: {0}")]
    ToolInputInvalid(String),
    /// An agent step's projected `input` does not match its `inputSchema`.
    #[error("loop_input_invalid: {0}")]
    InputInvalid(String),
    /// An agent step's projected `input` is larger than [`crate::MAX_PROJECTION_BYTES`].
    #[error("loop_input_too_large: the projected input is {0} bytes, more than {max}", max = crate::MAX_PROJECTION_BYTES)]
    InputTooLarge(usize),
    /// A step tried to write under `request`, which is read-only.
    #[error("loop_context_readonly: `{0}` is under `request`, which steps cannot write")]
    ContextReadonly(String),
    /// The run executed more steps than its budget (back-edges are bounded by it).
    #[error("loop_step_budget_exceeded: more than {0} step executions")]
    StepBudgetExceeded(u32),
    /// A tool step's tool was refused (unknown, outside the policy) or failed.
    #[error("loop_tool_failed: {0}")]
    ToolFailed(String),
    /// An agent step's invocation failed.
    #[error("loop_step_failed: step `{step}`: {code}: {message}")]
    StepFailed {
        /// The step.
        step: String,
        /// The engine's code.
        code: String,
        /// The engine's sentence.
        message: String,
    },
    /// An agent step's `stopWhen` still false when its turn budget ran out.
    #[error("loop_stop_condition_unmet: step `{step}`: `{expression}` does not hold after {turns} turn(s)")]
    StopConditionUnmet {
        /// The step.
        step: String,
        /// Its `stopWhen.expression`.
        expression: String,
        /// Model turns the step used.
        turns: u32,
    },
    /// A human answer that does not match the step's `output.schema`.
    #[error("loop_human_output_invalid: {0}")]
    HumanOutputInvalid(String),
    /// No loop run with that id (that the caller sees), or none of its steps waits for a
    /// person when answering one.
    #[error("loop_run_not_found: no loop run `{0}` here, or it does not wait for a person")]
    RunNotFound(String),
    /// The run was cancelled (its caller went away, or over REST).
    #[error("aborted: the loop run was aborted")]
    Aborted,
    /// Cancelling (or answering) a run that already ended.
    #[error("loop_run_finished: loop run `{0}` has already ended")]
    RunFinished(String),
    /// A stored loop run that does not read back as one.
    #[error("loop_run_record_invalid: {0}")]
    RunRecordInvalid(String),
    /// A permission denied the action (a matching `deny`, or an allow-list nothing matched).
    #[error("loop_permission_denied: {0}")]
    PermissionDenied(String),
    /// A policy denied the action.
    #[error("loop_policy_denied: {0}")]
    PolicyDenied(String),
    /// A hook action failed (its `onError` is not `continue`).
    #[error("loop_hook_failed: {0}")]
    HookFailed(String),
    /// A gate needs a reviewer (raised inside a run; the run answers [`LoopError::AwaitingApproval`]).
    #[error("loop_approval_required: {message}")]
    ApprovalRequired {
        /// The gate.
        gate: polpo_core::loops::governance::Gate,
        /// The rule's message.
        message: String,
    },
    /// The run stopped at an approval gate, stored `awaiting_approval` with request `approval`.
    #[error("loop_approval_required: {message} (approval request `{approval}`)")]
    AwaitingApproval {
        /// The approval request's id.
        approval: String,
        /// The rule's message.
        message: String,
    },
    /// A side-effecting tool step a server started (its intent is in the effect ledger) but
    /// stopped before recording how it ended: it may or may not have happened, so the run
    /// taking over does not run it again blindly.
    #[error(
        "effect_unconfirmed: step `{step}`'s `{tool}` may already have run (effect `{key}`, started {started_at}); check what it did: it is not run again"
    )]
    EffectUnconfirmed {
        /// The tool step.
        step: String,
        /// Its tool.
        tool: String,
        /// The effect ledger key.
        key: String,
        /// When its intent was recorded.
        started_at: String,
    },
    /// No approval request with that id (that the caller sees).
    #[error("approval_not_found: no approval request `{0}`")]
    ApprovalNotFound(String),
    /// Approving, rejecting or resuming something not in the state that allows it.
    #[error("loop_run_not_resumable: {0}")]
    NotResumable(String),
    /// The store refused a loop run's record.
    #[error("{0}")]
    Store(#[from] polpo_store::StoreError),
    /// The engine refused the request before anything ran.
    #[error("{0}")]
    Chat(#[from] ChatError),
}

impl LoopError {
    /// Stable snake_case code.
    pub fn code(&self) -> &str {
        match self {
            Self::NotFound(_) => "loop_not_found",
            Self::NotAssigned(_) => "loop_not_assigned",
            Self::Unsupported(_) => "loop_request_unsupported",
            Self::BindingMissing(_) => "loop_binding_missing",
            Self::BindingInvalid(_) => "loop_binding_invalid",
            Self::ToolInputInvalid(_) => "loop_tool_input_invalid",
            Self::InputInvalid(_) => "loop_input_invalid",
            Self::InputTooLarge(_) => "loop_input_too_large",
            Self::ContextReadonly(_) => "loop_context_readonly",
            Self::StepBudgetExceeded(_) => "loop_step_budget_exceeded",
            Self::ToolFailed(_) => "loop_tool_failed",
            Self::StepFailed { .. } => "loop_step_failed",
            Self::StopConditionUnmet { .. } => "loop_stop_condition_unmet",
            Self::HumanOutputInvalid(_) => "loop_human_output_invalid",
            Self::RunNotFound(_) => "loop_run_not_found",
            Self::Aborted => "aborted",
            Self::RunFinished(_) => "loop_run_finished",
            Self::RunRecordInvalid(_) => "loop_run_record_invalid",
            Self::Store(e) => e.code(),
            Self::PermissionDenied(_) => "loop_permission_denied",
            Self::PolicyDenied(_) => "loop_policy_denied",
            Self::HookFailed(_) => "loop_hook_failed",
            Self::ApprovalRequired { .. } | Self::AwaitingApproval { .. } => "loop_approval_required",
            Self::EffectUnconfirmed { .. } => "effect_unconfirmed",
            Self::ApprovalNotFound(_) => "approval_not_found",
            Self::NotResumable(_) => "loop_run_not_resumable",
            Self::Chat(e) => e.code(),
        }
    }
}
