//! What the turn loop hands back when a run did not fail.

use polpo_core::message::{FinishReason, Message, ToolCall, Usage};

/// How a run ended when it did not fail.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The final answer (canonical JSON for structured outputs); `None` when handing
    /// client tool calls back to the caller.
    pub content: Option<String>,
    /// `stop`, or `tool_calls` when client tools must run in the caller.
    pub finish_reason: FinishReason,
    /// Client tool calls the caller must execute, in the model's order.
    pub client_tool_calls: Vec<ToolCall>,
    /// Total tokens over every model call of this invocation.
    pub usage: Usage,
    /// Model calls made.
    pub turns: u32,
    /// Messages this invocation added (assistant turns and tool results), in order.
    pub messages: Vec<Message>,
}
