//! Rendering a scripted turn in the OpenAI chat-completions wire format.

use crate::render::Render;
use crate::script::{Turn, pieces};
use serde_json::{Value, json};

/// The complete (non-streaming) `chat.completion` body.
pub(crate) fn body(turn: &Turn, r: &Render) -> Value {
    let (input, output) = turn.usage_or_estimate(r.request_bytes);
    let mut message = json!({"role": "assistant", "content": turn.text});
    if let Some(reasoning) = &turn.reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    if !turn.tool_calls.is_empty() {
        let calls: Vec<Value> = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| json!({"id": r.call_id("call", i), "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
            .collect();
        message["tool_calls"] = json!(calls);
    }
    json!({
        "id": format!("chatcmpl-fake-{}", r.turn_no),
        "object": "chat.completion",
        "created": 0,
        "model": r.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn)}],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
    })
}

/// The SSE `data:` payloads of a streamed answer, `[DONE]` included.
pub(crate) fn frames(turn: &Turn, r: &Render) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": format!("chatcmpl-fake-{}", r.turn_no),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": r.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for piece in turn.reasoning.iter().flat_map(|t| pieces(t, r.chunk_chars)) {
        out.push(chunk(json!({"reasoning_content": piece}), Value::Null));
    }
    for piece in turn.text.iter().flat_map(|t| pieces(t, r.chunk_chars)) {
        out.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (i, (name, args)) in turn.tool_calls.iter().enumerate() {
        let head = json!({"index": i, "id": r.call_id("call", i), "type": "function", "function": {"name": name, "arguments": ""}});
        out.push(chunk(json!({"tool_calls": [head]}), Value::Null));
        for piece in pieces(&args.to_string(), r.chunk_chars) {
            out.push(chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}), Value::Null));
        }
    }
    out.push(chunk(json!({}), json!(finish_reason(turn))));
    if r.include_usage {
        let (input, output) = turn.usage_or_estimate(r.request_bytes);
        let usage = json!({
            "id": format!("chatcmpl-fake-{}", r.turn_no),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": r.model,
            "choices": [],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
        });
        out.push(usage.to_string());
    }
    out.push("[DONE]".to_owned());
    out.into_iter().map(|data| format!("data: {data}\n\n")).collect()
}

fn finish_reason(turn: &Turn) -> &'static str {
    if turn.tool_calls.is_empty() { "stop" } else { "tool_calls" }
}
