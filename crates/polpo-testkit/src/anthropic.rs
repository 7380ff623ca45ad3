//! Rendering a scripted turn in the Anthropic Messages wire format.

use crate::render::Render;
use crate::script::{Turn, pieces};
use serde_json::{Value, json};

/// The complete (non-streaming) `message` body.
pub(crate) fn body(turn: &Turn, r: &Render) -> Value {
    let (input, output) = turn.usage_or_estimate(r.request_bytes);
    let mut content = Vec::new();
    if let Some(thinking) = &turn.reasoning {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": "fake-signature"}));
    }
    if let Some(text) = &turn.text {
        content.push(json!({"type": "text", "text": text}));
    }
    for (i, (name, args)) in turn.tool_calls.iter().enumerate() {
        content.push(json!({"type": "tool_use", "id": r.call_id("toolu", i), "name": name, "input": args}));
    }
    json!({
        "id": format!("msg_fake_{}", r.turn_no),
        "type": "message",
        "role": "assistant",
        "model": r.model,
        "content": content,
        "stop_reason": stop_reason(turn),
        "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output},
    })
}

/// The SSE events (`event:` and `data:` lines) of a streamed answer.
pub(crate) fn frames(turn: &Turn, r: &Render) -> Vec<String> {
    let (input, output) = turn.usage_or_estimate(r.request_bytes);
    let mut events = vec![json!({
        "type": "message_start",
        "message": {
            "id": format!("msg_fake_{}", r.turn_no), "type": "message", "role": "assistant", "model": r.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1},
        },
    })];
    events.push(json!({"type": "ping"}));
    let mut index = 0;
    let mut block = |start: Value, deltas: Vec<Value>, events: &mut Vec<Value>| {
        events.push(json!({"type": "content_block_start", "index": index, "content_block": start}));
        events.extend(deltas.into_iter().map(|d| json!({"type": "content_block_delta", "index": index, "delta": d})));
        events.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    };
    if let Some(thinking) = &turn.reasoning {
        let mut deltas: Vec<Value> = pieces(thinking, r.chunk_chars)
            .into_iter()
            .map(|p| json!({"type": "thinking_delta", "thinking": p}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": "fake-signature"}));
        block(json!({"type": "thinking", "thinking": ""}), deltas, &mut events);
    }
    if let Some(text) = &turn.text {
        let deltas =
            pieces(text, r.chunk_chars).into_iter().map(|p| json!({"type": "text_delta", "text": p})).collect();
        block(json!({"type": "text", "text": ""}), deltas, &mut events);
    }
    for (i, (name, args)) in turn.tool_calls.iter().enumerate() {
        let deltas = pieces(&args.to_string(), r.chunk_chars)
            .into_iter()
            .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
            .collect();
        block(json!({"type": "tool_use", "id": r.call_id("toolu", i), "name": name, "input": {}}), deltas, &mut events);
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(turn), "stop_sequence": null}, "usage": {"output_tokens": output}}));
    events.push(json!({"type": "message_stop"}));
    events.into_iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("unknown"))).collect()
}

fn stop_reason(turn: &Turn) -> &'static str {
    if turn.tool_calls.is_empty() { "end_turn" } else { "tool_use" }
}
