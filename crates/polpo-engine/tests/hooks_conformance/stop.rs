//! `turn:stop` without a gate: one bounded, tool-free recovery step.

use super::support::*;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;

#[tokio::test]
async fn feedback_buys_one_tool_free_recovery_call_then_the_run_ends() {
    let ws = Workspace::new();
    // Always unhappy: a naive loop would never end.
    let reviewer = ws.recording_script("review", r#"{"decision":"stop","feedback":"mention the deadline"}"#);
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"handler": {"type": "command", "command": reviewer}}]}}),
    );
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", json!({"command": "echo ran >> log.txt"}))]),
        Turn::text("draft"),
        Turn::text("draft with the deadline"),
        Turn::text("never requested"),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.content(), "draft with the deadline");
    assert_eq!(seen.streamed_text(), "draft with the deadline", "the first candidate was never streamed");
    assert_eq!(llm.requests().len(), 3, "exactly one extra model call");
    assert!(request_tools(&llm, 2).is_empty(), "the recovery call is tool-free");
    assert!(request_text(&llm, 2).contains("mention the deadline"));
    assert_eq!(std::fs::read_to_string(ws.file("log.txt")).unwrap(), "ran\n", "completed tools are never replayed");
    let envs = ws.envelopes("review");
    assert_eq!(envs.len(), 2, "the result is checked once more, then the run ends");
    assert_eq!(envs[1]["data"]["candidate"], "draft with the deadline");
    assert_eq!(envs[1]["data"]["recovery"], true);
}

#[tokio::test]
async fn continue_outside_a_gate_is_rejected() {
    let ws = Workspace::new();
    let h = ws.script("bad", r#"cat >/dev/null; echo '{"decision":"continue","diagnostics":{"x":1}}'"#);
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"handler": {"type": "command", "command": h}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("answer")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.error_code(), "hook_failed");
    assert!(seen.error_text().contains("only valid inside a configured termination gate"), "{}", seen.error_text());
}

#[tokio::test]
async fn an_accepting_stop_hook_streams_the_answer_once() {
    let ws = Workspace::new();
    let h = ws.script("ok", r#"cat >/dev/null; echo '{"decision":"allow"}'"#);
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"handler": {"type": "command", "command": h}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("fine answer")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.content(), "fine answer");
    assert_eq!(seen.streamed_text(), "fine answer");
}

#[tokio::test]
async fn observe_only_stop_hooks_fire_and_the_answer_still_streams() {
    let ws = Workspace::new();
    let watcher = ws.recording_script("watch", r#"{"decision":"stop","feedback":"ignored"}"#);
    let p = pack(
        "audit",
        json!({"version": 1, "hooks": {"turn:stop": [{"observe": true, "handler": {"type": "command", "command": watcher}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("streamed answer")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.content(), "streamed answer");
    assert_eq!(llm.requests().len(), 1, "an observer's feedback buys no recovery call");
    assert_eq!(ws.envelopes("watch")[0]["data"]["candidate"], "streamed answer", "the observer fired");
    let deltas = seen.events.iter().filter(|e| matches!(e, polpo_engine::RunEvent::TextDelta { .. })).count();
    assert!(deltas > 1, "the answer streamed in pieces, not as one buffered block");
}

#[tokio::test]
async fn a_prompt_hook_judges_with_one_bounded_tool_free_model_call() {
    let ws = Workspace::new();
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"handler": {"type": "prompt", "prompt": "Does the answer have a title?"}}]}}),
    );
    let llm = FakeLlm::start([
        Turn::text("body only"),
        Turn::text(r#"{"decision":"stop","feedback":"add a title"}"#),
        Turn::text("Title\nbody"),
        Turn::text(r#"{"decision":"allow"}"#),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.content(), "Title\nbody");
    let judge = &llm.requests()[1].body;
    assert!(judge["tools"].is_null(), "the judging call is tool-free");
    assert_eq!(judge["max_tokens"], 512);
    assert!(judge["messages"].to_string().contains("Does the answer have a title?"));
    assert_eq!(llm.requests().len(), 4);
}
