//! What a run reports while it works.
//!
//! One event type serves every consumer: the OpenAI-compatible stream maps it to chunks, the
//! run journal stores it, `polpo run` prints it. Events carry the model-visible data only; no
//! secret reaches them because no secret reaches the model.

use polpo_core::hooks::HookEvent;
use polpo_core::message::{FinishReason, Message, Usage};
use serde::Serialize;

/// One thing that happened in a run, in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// A model call is starting (1-based turn number).
    TurnStarted {
        /// Turn number within this invocation.
        turn: u32,
    },
    /// A piece of visible answer text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of a reasoning summary.
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// A tool call is being written by the model (arguments accumulated so far).
    ToolPreparing {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments text so far.
        arguments_text: String,
    },
    /// A server tool call is about to run.
    ToolCalling {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments as parsed JSON (or the raw text when it did not parse).
        arguments: serde_json::Value,
    },
    /// A server tool call finished.
    ToolCompleted {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Model-visible result.
        result: String,
        /// True when the call failed (result starts with `Error:`).
        is_error: bool,
    },
    /// A message was added to the conversation (assistant turn or tool result); callers
    /// persist these to the session.
    MessageAppended {
        /// The message.
        message: Message,
    },
    /// A model call finished.
    TurnCompleted {
        /// Turn number.
        turn: u32,
        /// Tokens this call used.
        usage: Usage,
        /// Why the model stopped.
        finish_reason: FinishReason,
    },
    /// A runtime hook started.
    HookStarted {
        /// Stable id of this execution (the same on a replay).
        hook_execution_id: String,
        /// `pack/id`.
        hook: String,
        /// The event.
        event: HookEvent,
        /// True for observe-only hooks.
        observe: bool,
    },
    /// A runtime hook finished.
    HookCompleted {
        /// Stable id of this execution.
        hook_execution_id: String,
        /// `pack/id`.
        hook: String,
        /// The event.
        event: HookEvent,
        /// The decision, when the handler produced one.
        #[serde(skip_serializing_if = "Option::is_none")]
        decision: Option<String>,
        /// `code: sentence` when the handler failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The termination gate changed state.
    TerminationGate {
        /// `validating`, `continuing` or `accepted`.
        state: GateState,
        /// Stable id of this validation (per termination attempt).
        gate_execution_id: String,
        /// 1-based number of the candidate being judged.
        termination_attempt: u32,
        /// Repairs so far (for `continuing`: the repair now starting).
        correction_cycle: u32,
    },
    /// A runtime hook answered `ask` on a tool call and a person must approve it: the request
    /// is stored (a durable run then pauses; inline chat fails `approval_required`).
    ApprovalRequested {
        /// The approval request (`POST /api/v1/approvals/{id}/approve`).
        approval_id: String,
        /// The call it holds up.
        call_id: String,
        /// Its tool.
        tool: String,
        /// `pack/id` of the hook that asked.
        hook: String,
        /// The hook's reason.
        message: String,
    },
}

/// Trace states of a termination gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateState {
    /// A candidate is being validated; it has not been shown to the client.
    Validating,
    /// The validator sent the agent back to work.
    Continuing,
    /// The candidate was accepted and becomes the answer.
    Accepted,
}

/// Where events go. A plain function object, so a caller can forward to a channel, a
/// journal or a terminal without implementing a trait.
pub type EventSink<'a> = &'a (dyn Fn(RunEvent) + Send + Sync);
