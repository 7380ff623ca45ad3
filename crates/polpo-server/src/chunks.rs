//! Run events → OpenAI chat-completion objects and stream chunks.
//!
//! Plain OpenAI clients read `delta.content`, `delta.tool_calls` and `finish_reason` and
//! ignore the rest; Polpo clients also read the extensions `choices[0].thinking` (reasoning
//! summaries) and `choices[0].tool_call` (server tool lifecycle: preparing → calling →
//! completed | error). Every chunk has a `delta`, possibly empty, so strict parsers accept it.

use crate::wire::{finish_reason, wire_tool_calls, wire_usage};
use polpo_core::message::{FinishReason, ToolCall, Usage};
use polpo_engine::RunEvent;
use polpo_engine::interaction::Suggestion;
use serde_json::{Value, json};

/// The model name every response reports (the agent decides the real model).
pub const RESPONSE_MODEL: &str = "polpo";

/// Stamps chunks of one completion with the same id and creation time.
#[derive(Debug, Clone)]
pub struct Completion {
    /// `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: i64,
}

impl Completion {
    fn chunk(&self, choice: Value) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": RESPONSE_MODEL, "choices": [choice]})
    }

    /// The first chunk: the assistant role.
    pub fn role_chunk(&self) -> Value {
        self.chunk(json!({"index": 0, "delta": {"role": "assistant"}, "finish_reason": null}))
    }

    /// The chunk for one run event, if it has a wire form.
    pub fn event_chunk(&self, event: &RunEvent) -> Option<Value> {
        let choice = match event {
            RunEvent::TextDelta { text } => json!({"index": 0, "delta": {"content": text}, "finish_reason": null}),
            RunEvent::ReasoningDelta { text } => {
                json!({"index": 0, "delta": {}, "finish_reason": null, "thinking": text})
            }
            RunEvent::ToolPreparing { id, name, arguments_text } => {
                json!({"index": 0, "delta": {}, "finish_reason": null,
                "tool_call": {"id": id, "name": name, "state": "preparing", "argumentsText": arguments_text}})
            }
            RunEvent::ToolCalling { id, name, arguments } => json!({"index": 0, "delta": {}, "finish_reason": null,
                "tool_call": {"id": id, "name": name, "arguments": arguments, "state": "calling"}}),
            RunEvent::ToolCompleted { id, name, result, is_error } => {
                json!({"index": 0, "delta": {}, "finish_reason": null,
                "tool_call": {"id": id, "name": name, "result": result, "state": if *is_error { "error" } else { "completed" }}})
            }
            _ => return None,
        };
        Some(self.chunk(choice))
    }

    /// The last chunk: client tool calls (if any), the finish reason and usage.
    pub fn final_chunk(&self, finish: &FinishReason, client_calls: &[ToolCall], usage: &Usage) -> Value {
        let delta = if client_calls.is_empty() {
            json!({})
        } else {
            json!({"role": "assistant", "tool_calls": wire_tool_calls(client_calls, true)})
        };
        let mut c = self.chunk(json!({"index": 0, "delta": delta, "finish_reason": finish_reason(finish)}));
        c["usage"] = wire_usage(usage);
        c
    }

    /// Suggested next messages as a root-level `polpo.suggestions` object, sent just before
    /// the final chunk; its choice has an empty delta so strict parsers accept it.
    pub fn suggestions_chunk(&self, suggestions: &[Suggestion]) -> Value {
        let mut c = self.chunk(json!({"index": 0, "delta": {}, "finish_reason": null}));
        c["polpo"] = json!({"suggestions": suggestions});
        c
    }

    /// An in-stream error: a stop chunk carrying the error envelope.
    pub fn error_chunk(&self, message: &str, code: &str) -> Value {
        let mut c = self.chunk(json!({"index": 0, "delta": {}, "finish_reason": "stop"}));
        c["error"] = json!({"message": message, "type": "runtime_error", "code": code});
        c
    }

    /// An in-stream error for an answer that did not end here, since its run `run_id` goes
    /// on elsewhere: no finish reason (the answer is not complete), the error envelope with
    /// the run to follow.
    pub fn unfinished_chunk(&self, message: &str, code: &str, run_id: &str) -> Value {
        let mut c = self.chunk(json!({"index": 0, "delta": {}, "finish_reason": null}));
        c["error"] = json!({"message": message, "type": "runtime_error", "code": code, "run_id": run_id});
        c
    }

    /// A Project Loop's trace event as a chunk extension (`loop_trace: [event]`, with the
    /// loop run id), no content.
    pub fn loop_trace_chunk(&self, loop_run_id: &str, event: Value) -> Value {
        let mut c = self.chunk(json!({"index": 0, "delta": {}, "finish_reason": null}));
        c["loop_run_id"] = json!(loop_run_id);
        c["loop_trace"] = json!([event]);
        c
    }

    /// A whole non-streaming `chat.completion`.
    pub fn body(
        &self,
        content: Option<&str>,
        finish: &FinishReason,
        client_calls: &[ToolCall],
        usage: &Usage,
    ) -> Value {
        let mut message = json!({"role": "assistant", "content": content});
        if !client_calls.is_empty() {
            message["tool_calls"] = serde_json::to_value(wire_tool_calls(client_calls, false)).unwrap_or(Value::Null);
        }
        json!({"id": self.id, "object": "chat.completion", "created": self.created, "model": RESPONSE_MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(finish)}], "usage": wire_usage(usage)})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_lifecycle_uses_the_tool_call_extension() {
        let c = Completion { id: "chatcmpl-1".into(), created: 1 };
        let ch = c
            .event_chunk(&RunEvent::ToolCompleted {
                id: "t".into(),
                name: "read".into(),
                result: "x".into(),
                is_error: true,
            })
            .unwrap();
        assert_eq!(ch["choices"][0]["tool_call"]["state"], "error");
        assert_eq!(ch["choices"][0]["delta"], json!({}));
        assert!(c.event_chunk(&RunEvent::TurnStarted { turn: 1 }).is_none());
        let fin = c.final_chunk(
            &FinishReason::ToolCalls,
            &[ToolCall { id: "c".into(), name: "ui".into(), arguments: "{}".into() }],
            &Usage::default(),
        );
        assert_eq!(fin["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(fin["choices"][0]["finish_reason"], "tool_calls");
    }
}
