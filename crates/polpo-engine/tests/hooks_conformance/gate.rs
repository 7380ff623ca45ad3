//! The termination gate: validate and repair inside the same invocation, within budgets,
//! failing closed.

use super::support::*;
use polpo_engine::{GateState, RunEvent};
use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};

/// A gate whose validator is `command`, with the given limits.
fn gate_pack(command: String, limits: Value) -> polpo_core::hooks::HookPack {
    let mut gate = json!({"validator": {"type": "command", "command": command, "timeoutMs": 3000}});
    for (k, v) in limits.as_object().unwrap() {
        gate[k] = v.clone();
    }
    pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"id": "tests-pass", "onFailure": "continue", "terminationGate": gate}]}}),
    )
}

/// A validator that accepts only answers containing `ACCEPT`, saving every envelope.
fn picky_validator(ws: &Workspace) -> String {
    let dir = ws.path().join(".hooks");
    std::fs::create_dir_all(&dir).unwrap();
    ws.script(
        "validator",
        &format!(
            r#"n=$(ls {d}/validator-*.json 2>/dev/null | wc -l | tr -d ' ')
input=$(cat)
printf '%s' "$input" > {d}/validator-$n.json
case "$input" in
  *ACCEPT*) echo '{{"decision":"accept"}}' ;;
  *) echo '{{"decision":"continue","diagnostics":{{"failing":["test_total"],"attempt":'$n'}}}}' ;;
esac"#,
            d = dir.display()
        ),
    )
}

fn gate_states(events: &[RunEvent]) -> Vec<(GateState, u32, u32)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::TerminationGate { state, termination_attempt, correction_cycle, .. } => {
                Some((*state, *termination_attempt, *correction_cycle))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_gate_sends_the_agent_back_twice_and_the_client_only_sees_the_third_answer() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 3, "maxDurationMs": 600000}));
    let llm = FakeLlm::start([
        Turn::text("first draft"),
        Turn::tool_calls(vec![("write", json!({"path": "fix.txt", "content": "repaired"}))]),
        Turn::text("second draft"),
        Turn::text("final ACCEPT answer"),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "do the task").await;
    assert_eq!(seen.content(), "final ACCEPT answer");
    assert_eq!(seen.streamed_text(), "final ACCEPT answer", "rejected candidates are never streamed");
    assert!(ws.file("fix.txt").exists(), "the reopened phase has the same tools");
    assert!(seen.events.iter().any(|e| matches!(e, RunEvent::ToolCompleted { .. })), "tool events stay observable");
    assert_eq!(
        gate_states(&seen.events),
        [
            (GateState::Validating, 1, 0),
            (GateState::Continuing, 1, 1),
            (GateState::Validating, 2, 1),
            (GateState::Continuing, 2, 2),
            (GateState::Validating, 3, 2),
            (GateState::Accepted, 3, 2),
        ]
    );
    let envs = ws.envelopes("validator");
    let seen_by_validator: Vec<(Value, Value, Value)> = envs
        .iter()
        .map(|e| {
            (
                e["data"]["candidate"].clone(),
                e["data"]["terminationAttempt"].clone(),
                e["data"]["correctionCycle"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen_by_validator,
        [
            (json!("first draft"), json!(1), json!(0)),
            (json!("second draft"), json!(2), json!(1)),
            (json!("final ACCEPT answer"), json!(3), json!(2))
        ]
    );
    let keys: std::collections::HashSet<_> = envs.iter().map(|e| e["idempotencyKey"].clone()).collect();
    assert_eq!(keys.len(), 3, "each validation has its own idempotency key");
    // The diagnostics are model-visible, and the repair turn offers the same tools.
    assert!(request_text(&llm, 1).contains("test_total"));
    assert!(request_tools(&llm, 1).contains(&"write".to_string()));
    assert_eq!(llm.requests().len(), 4);
}

#[tokio::test]
async fn cycles_exhausted() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 1, "maxDurationMs": 600000}));
    let llm = FakeLlm::start([Turn::text("a"), Turn::text("b"), Turn::text("c")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_cycles_exhausted");
    assert_eq!(llm.requests().len(), 2, "one repair, then stop");
    assert_eq!(seen.streamed_text(), "");
}

#[tokio::test]
async fn turns_exhausted() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 10, "maxDurationMs": 600000}));
    let llm = FakeLlm::start([Turn::text("a"), Turn::text("b"), Turn::text("c")]).await.unwrap();
    let mut inv = invocation(&llm, &ws, Some(hooks(&[p])));
    inv.max_turns = 2;
    let seen = run(&inv, "task").await;
    assert_eq!(seen.error_code(), "termination_gate_turns_exhausted");
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn time_exhausted() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 10, "maxDurationMs": 1500000}));
    let mut h = hooks(&[p]);
    // Each reading of the invocation clock is ten minutes later: 0 (first call), 10 (first
    // validation), 20 (second call), 30 min — past the 25-minute budget at the next check.
    h.clock = stepping_clock(600_000);
    let llm = FakeLlm::start([Turn::text("a"), Turn::text("b"), Turn::text("c")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(h)), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_time_exhausted");
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn tokens_exhausted_and_the_next_output_is_capped() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 10, "maxDurationMs": 600000, "maxTokens": 100}));
    let llm = FakeLlm::start([Turn::text("a").usage(50, 10), Turn::text("b").usage(60, 10), Turn::text("ACCEPT")])
        .await
        .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_tokens_exhausted");
    assert_eq!(llm.requests()[0].body["max_tokens"], 100);
    assert_eq!(llm.requests()[1].body["max_tokens"], 40, "the output cap shrinks with the budget");
    assert_eq!(llm.requests().len(), 2);
}

async fn fail_closed(script_body: &str, expected_cause: &str) {
    let ws = Workspace::new();
    let v = ws.script("validator", script_body);
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"onFailure": "continue", "terminationGate": {
            "validator": {"type": "command", "command": v, "timeoutMs": 300}, "maxCycles": 3, "maxDurationMs": 600000}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("candidate"), Turn::text("again")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_rejected", "{expected_cause}");
    assert!(seen.error_text().contains(expected_cause), "{}", seen.error_text());
    assert_eq!(seen.streamed_text(), "", "nothing unvalidated reaches the client");
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn fail_closed_on_empty_output() {
    fail_closed("cat >/dev/null", "hook_empty_output").await;
}

#[tokio::test]
async fn fail_closed_on_missing_decision() {
    fail_closed(r#"cat >/dev/null; echo '{"diagnostics":{"x":1}}'"#, "hook_missing_decision").await;
}

#[tokio::test]
async fn fail_closed_on_invalid_feedback() {
    fail_closed(r#"cat >/dev/null; echo '{"decision":"stop","feedback":42}'"#, "hook_invalid_feedback").await;
}

#[tokio::test]
async fn fail_closed_on_continue_without_diagnostics() {
    fail_closed(r#"cat >/dev/null; echo '{"decision":"continue"}'"#, "hook_invalid_feedback").await;
}

#[tokio::test]
async fn fail_closed_on_timeout() {
    // The validator never answers; its whole process group is killed at the timeout.
    fail_closed("cat >/dev/null; exec sleep 30", "hook_timeout").await;
}

#[tokio::test]
async fn fail_closed_on_a_crashing_validator() {
    fail_closed("cat >/dev/null; exit 1", "hook_handler_failed").await;
}

#[tokio::test]
async fn stop_with_feedback_inside_a_gate_means_continue() {
    let ws = Workspace::new();
    let v = ws.script(
        "validator",
        r#"input=$(cat); case "$input" in *ACCEPT*) echo '{"decision":"accept"}' ;; *) echo '{"decision":"stop","feedback":"cite your sources"}' ;; esac"#,
    );
    let p = gate_pack(v, json!({"maxCycles": 2, "maxDurationMs": 600000}));
    let llm = FakeLlm::start([Turn::text("draft"), Turn::text("ACCEPT with sources")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.content(), "ACCEPT with sources");
    assert!(request_text(&llm, 1).contains("cite your sources"));
}

#[tokio::test]
async fn several_gates_use_the_strictest_limits() {
    let ws = Workspace::new();
    let v = picky_validator(&ws);
    let loose = gate_pack(v.clone(), json!({"maxCycles": 10, "maxDurationMs": 600000}));
    let strict = pack(
        "strict",
        json!({"version": 1, "hooks": {"turn:stop": [{"terminationGate": {
        "validator": {"type": "command", "command": v}, "maxCycles": 1, "maxDurationMs": 600000}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("a"), Turn::text("b"), Turn::text("c")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[loose, strict]))), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_cycles_exhausted");
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn a_gate_limited_to_loop_steps_does_not_apply_to_chat() {
    let ws = Workspace::new();
    let v = picky_validator(&ws);
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"matcher": {"steps": ["build"]}, "terminationGate": {
        "validator": {"type": "command", "command": v}, "maxCycles": 1, "maxDurationMs": 600000}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("chat answer")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(std::slice::from_ref(&p)))), "task").await;
    assert_eq!(seen.content(), "chat answer");
    assert_eq!(seen.streamed_text(), "chat answer");
    let llm = FakeLlm::start([Turn::text("node answer"), Turn::text("node ACCEPT")]).await.unwrap();
    let h = hooks_in(&[p], polpo_core::hooks::ExecutionMode::Loop, Some("build"));
    let seen = run(&invocation(&llm, &ws, Some(h)), "task").await;
    assert_eq!(seen.content(), "node ACCEPT");
    assert_eq!(ws.envelopes("validator")[0]["invocation"]["step"], "build");
}

#[tokio::test]
async fn the_kill_switch_blocks_an_agent_with_a_gate_before_any_inference() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 1, "maxDurationMs": 600000}));
    let mut h = hooks(&[p]);
    h.runtime.enabled = false;
    let llm = FakeLlm::start([Turn::text("unvalidated")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(h)), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_disabled");
    assert!(llm.requests().is_empty(), "no model call was paid for");
}

#[tokio::test]
async fn structured_output_is_formatted_after_acceptance() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 2, "maxDurationMs": 600000}));
    let llm = FakeLlm::start([
        Turn::text("{\"tier\":\"gold\"}"),
        Turn::text("ACCEPT but not json"),
        Turn::text("{\"tier\":\"paid\"}"),
    ])
    .await
    .unwrap();
    let mut inv = invocation(&llm, &ws, Some(hooks(&[p])));
    inv.response_format = polpo_engine::structured::ResponseFormat::from_wire(&json!({"type": "json_object"})).unwrap();
    let seen = run(&inv, "task").await;
    assert_eq!(seen.content(), r#"{"tier":"paid"}"#);
    assert_eq!(ws.envelopes("validator").len(), 2, "the formatting repair is not validated again");
    assert!(request_tools(&llm, 2).is_empty(), "formatting is tool-free");
}

#[tokio::test]
async fn a_gate_whose_validator_cannot_run_blocks_before_inference() {
    let ws = Workspace::new();
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"terminationGate": {
        "validator": {"type": "http", "url": "https://hooks.example.com/check", "connection": "ci"}, "maxCycles": 1, "maxDurationMs": 60000}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("unvalidated")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_disabled");
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn a_gate_in_a_parallel_loop_branch_is_rejected_before_inference() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 1, "maxDurationMs": 600000}));
    let mut h = hooks_in(&[p], polpo_core::hooks::ExecutionMode::Loop, Some("fanout"));
    h.parallel_branch = true;
    let llm = FakeLlm::start([Turn::text("x")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(h)), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_parallel_unsupported");
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn diagnostics_are_redacted_before_the_model_sees_them() {
    let ws = Workspace::new();
    let v = ws.script(
        "validator",
        r#"input=$(cat); case "$input" in *ACCEPT*) echo '{"decision":"accept"}' ;; *) echo '{"decision":"continue","diagnostics":{"log":"db password is vault-pw-0042","apiKey":"k"}}' ;; esac"#,
    );
    let p = gate_pack(v, json!({"maxCycles": 2, "maxDurationMs": 600000}));
    let mut h = hooks(&[p]);
    h.secrets = vec!["vault-pw-0042".into()];
    let llm = FakeLlm::start([Turn::text("draft"), Turn::text("ACCEPT")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(h)), "task").await;
    assert_eq!(seen.content(), "ACCEPT");
    let sent = request_text(&llm, 1);
    assert!(sent.contains("db password is [REDACTED]") && !sent.contains("vault-pw-0042"), "{sent}");
}

#[tokio::test]
async fn a_client_tool_handoff_is_not_a_successful_termination() {
    let ws = Workspace::new();
    let p = gate_pack(picky_validator(&ws), json!({"maxCycles": 1, "maxDurationMs": 600000}));
    let llm = FakeLlm::start([Turn::tool_calls(vec![("ask_user", json!({"question": "which file?"}))])]).await.unwrap();
    let mut inv = invocation(&llm, &ws, Some(hooks(&[p])));
    inv.client_tools = vec![
        polpo_core::tool::ToolSpec {
            name: "ask_user".into(),
            description: "ask".into(),
            parameters: json!({"type": "object"}),
        }
        .into(),
    ];
    let seen = run(&inv, "task").await;
    let outcome = seen.result.as_ref().unwrap();
    assert_eq!(outcome.finish_reason, polpo_core::message::FinishReason::ToolCalls);
    assert_eq!(outcome.content, None);
    assert!(ws.envelopes("validator").is_empty(), "nothing was offered for validation");
    assert!(!gate_states(&seen.events).iter().any(|(s, _, _)| *s == GateState::Accepted));
}
