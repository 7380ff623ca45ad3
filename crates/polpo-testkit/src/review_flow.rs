//! The `review-flow` loop, one fixture for every test that watches a loop run wait for a person
//! (the live event bus, the dashboard): a `write` tool step `prepare` saves a draft, then the
//! human step `review` waits for a `decision`. Its definition and the trace a run of it leaves
//! are written once here, so the tests agree on what the run does.

use serde_json::{Value, json};

/// The loop's id (and `name`).
pub const NAME: &str = "review-flow";

/// What `prepare` writes to `draft.txt`: words a test can look for where they must never
/// appear (a trace, the event bus).
pub const DRAFT: &str = "draft-secret-words";

/// The loop's definition (`.polpo/loops/review-flow.json`).
pub fn definition() -> Value {
    json!({
        "name": NAME,
        "start": "prepare",
        "steps": {
            "prepare": {"type": "tool", "tool": "write", "input": {"path": "draft.txt", "content": DRAFT}, "next": "review"},
            "review": {"type": "human", "output": {"schema": {"type": "object", "properties": {"decision": {"type": "string", "description": "ship or hold"}}, "required": ["decision"]}}, "next": "end"}
        }
    })
}

/// A completed run's trace, each entry as `"{type} {stepKey or toStepKey}"` (empty for the
/// run's own events).
pub const TRACE: [&str; 12] = [
    "loop.start ",
    "step.start prepare",
    "tool.call prepare",
    "tool.result prepare",
    "step.end prepare",
    "transition review",
    "step.start review",
    "human.request review",
    "human.result review",
    "step.end review",
    "transition end",
    "loop.end ",
];
