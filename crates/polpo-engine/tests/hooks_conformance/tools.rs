//! `tool:before` and `tool:after`: the precedence table, row by row, end to end.

use super::support::*;
use polpo_engine::RunEvent;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;

fn cmd(command: String) -> serde_json::Value {
    json!({"type": "command", "command": command})
}

async fn write_then_done(path: &str) -> FakeLlm {
    FakeLlm::start([Turn::tool_calls(vec![("write", json!({"path": path, "content": "hello"}))]), Turn::text("done")])
        .await
        .unwrap()
}

#[tokio::test]
async fn deny_refuses_the_call_and_tells_the_model_why() {
    let ws = Workspace::new();
    let guard = ws.recording_script("guard", r#"{"decision":"deny","reason":"writes need review"}"#);
    let p = pack(
        "policy",
        json!({"version": 1, "hooks": {"tool:before": [{"id": "guard", "matcher": {"tools": ["write"]}, "handler": cmd(guard)}]}}),
    );
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert_eq!(seen.content(), "done");
    assert!(!ws.file("a.txt").exists(), "the denied call never ran");
    let (result, is_error) = &seen.tool_results()[0];
    assert!(*is_error && result.starts_with("Error: hook_denied: writes need review"), "{result}");
    assert!(request_text(&llm, 1).contains("hook_denied: writes need review"), "the model sees the reason");
    let env = &ws.envelopes("guard")[0];
    assert_eq!(env["version"], 1);
    assert_eq!(env["event"], "tool:before");
    assert_eq!(env["data"]["tool"], json!({"name": "write", "input": {"path": "a.txt", "content": "hello"}}));
    assert_eq!(env["hook"]["pack"], "policy");
}

#[tokio::test]
async fn matchers_select_tools_by_exact_name_and_glob() {
    let ws = Workspace::new();
    let deny = ws.recording_script("deny", r#"{"decision":"deny"}"#);
    let p = pack(
        "policy",
        json!({"version": 1, "hooks": {"tool:before": [{"matcher": {"tools": ["read", "bash*"]}, "handler": cmd(deny)}]}}),
    );
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert_eq!(seen.content(), "done");
    assert!(ws.file("a.txt").exists(), "write matches neither `read` nor `bash*`");
    assert!(ws.envelopes("deny").is_empty(), "the hook did not run");
}

#[tokio::test]
async fn a_hook_cannot_widen_the_tool_policy() {
    let ws = Workspace::new();
    let allow = ws.recording_script("allow", r#"{"decision":"allow"}"#);
    let p = pack("policy", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(allow)}]}}));
    let llm = write_then_done("a.txt").await;
    let inv = invocation_with(&llm, &ws, Some(hooks(&[p])), polpo_tools::tools::system_tools(), Some(&["read"]));
    let seen = run(&inv, "write a").await;
    assert!(!ws.file("a.txt").exists());
    assert!(seen.tool_results()[0].0.starts_with("Error: tool_policy_denied"), "{:?}", seen.tool_results());
    assert_eq!(request_tools(&llm, 0), ["read"], "the model is not even offered the tool");
}

#[tokio::test]
async fn modify_rewrites_the_input_which_is_then_validated_and_run() {
    let ws = Workspace::new();
    let redirect = ws.script(
        "redirect",
        r#"cat >/dev/null; echo '{"decision":"modify","data":{"input":{"path":"safe/a.txt","content":"hello"}}}'"#,
    );
    let p = pack("policy", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(redirect)}]}}));
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert_eq!(seen.content(), "done");
    assert!(!ws.file("a.txt").exists());
    assert_eq!(std::fs::read_to_string(ws.file("safe/a.txt")).unwrap(), "hello");
}

#[tokio::test]
async fn an_invalid_modified_input_is_refused_by_the_schema() {
    let ws = Workspace::new();
    let smuggle = ws.script("smuggle", r#"cat >/dev/null; echo '{"decision":"modify","data":{"input":{"path":"a.txt","content":"x","mode":"append"}}}'"#);
    let p = pack("policy", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(smuggle)}]}}));
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert!(!ws.file("a.txt").exists(), "the modified call never ran");
    assert!(seen.tool_results()[0].0.starts_with("Error: invalid_arguments"), "{:?}", seen.tool_results());
}

#[tokio::test]
async fn modify_chains_and_the_next_hook_sees_the_new_input() {
    let ws = Workspace::new();
    let first = ws.script(
        "first",
        r#"cat >/dev/null; echo '{"decision":"modify","data":{"input":{"path":"b.txt","content":"hello"}}}'"#,
    );
    let second = ws.recording_script("second", r#"{"decision":"allow"}"#);
    let p = pack(
        "policy",
        json!({"version": 1, "hooks": {"tool:before": [{"priority": 1, "handler": cmd(first)}, {"priority": 2, "handler": cmd(second)}]}}),
    );
    let llm = write_then_done("a.txt").await;
    run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert_eq!(ws.envelopes("second")[0]["data"]["tool"]["input"]["path"], "b.txt");
    assert!(ws.file("b.txt").exists());
}

#[tokio::test]
async fn deny_wins_over_allow_and_order_follows_scope_then_priority() {
    let ws = Workspace::new();
    let allow = ws.recording_script("allow", r#"{"decision":"allow"}"#);
    let deny = ws.recording_script("deny", r#"{"decision":"deny","reason":"step policy"}"#);
    let never = ws.recording_script("never", r#"{"decision":"allow"}"#);
    let agent = pack(
        "agent",
        json!({"version": 1, "hooks": {"tool:before": [{"id": "late", "priority": 500, "handler": cmd(never)}, {"id": "a", "priority": 1, "handler": cmd(allow)}]}}),
    );
    let project = pack(
        "project",
        json!({"version": 1, "hooks": {"tool:before": [{"id": "p", "priority": 900, "handler": cmd(deny)}]}}),
    );
    let mut h = hooks(&[]);
    h.set = std::sync::Arc::new(polpo_core::hooks::HookSet::resolve([
        (polpo_core::hooks::Scope::Agent, &agent),
        (polpo_core::hooks::Scope::Project, &project),
    ]));
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(h)), "write a").await;
    assert!(!ws.file("a.txt").exists());
    assert_eq!(
        seen.hooks_completed(),
        [("project/p".to_string(), "deny".to_string())],
        "project scope runs first and deny halts the chain"
    );
}

#[tokio::test]
async fn ask_where_nobody_can_approve_refuses_the_call() {
    let ws = Workspace::new();
    let ask = ws.script("ask", r#"cat >/dev/null; echo '{"decision":"ask","reason":"needs a human"}'"#);
    let p = pack("policy", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(ask)}]}}));
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert!(!ws.file("a.txt").exists());
    assert!(
        seen.tool_results()[0].0.starts_with("Error: approval_required: needs a human"),
        "{:?}",
        seen.tool_results()
    );
}

#[tokio::test]
async fn a_failing_hook_obeys_on_failure() {
    let ws = Workspace::new();
    let broken = ws.script("broken", "cat >/dev/null; echo oops >&2; exit 3");
    let strict = pack("strict", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(broken.clone())}]}}));
    let lenient = pack(
        "lenient",
        json!({"version": 1, "hooks": {"tool:before": [{"onFailure": "continue", "handler": cmd(broken)}]}}),
    );

    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[strict]))), "write a").await;
    assert!(!ws.file("a.txt").exists(), "onFailure: fail (the default) denies");
    assert!(seen.tool_results()[0].0.contains("hook_failed"), "{:?}", seen.tool_results());

    let llm = write_then_done("b.txt").await;
    run(&invocation(&llm, &ws, Some(hooks(&[lenient]))), "write b").await;
    assert!(ws.file("b.txt").exists(), "onFailure: continue lets the call through");
}

#[tokio::test]
async fn stop_on_a_tool_event_ends_the_run() {
    let ws = Workspace::new();
    let stop = ws.script("stop", r#"cat >/dev/null; echo '{"decision":"stop","feedback":"budget reached"}'"#);
    let p = pack("policy", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(stop)}]}}));
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert_eq!(seen.error_code(), "hook_stopped");
    assert!(!ws.file("a.txt").exists());
    assert_eq!(llm.requests().len(), 1, "no further model call");
}

#[tokio::test]
async fn tool_after_replaces_the_model_visible_result() {
    let ws = Workspace::new();
    std::fs::write(ws.file("secret.txt"), "password=hunter2").unwrap();
    let redact = ws.script(
        "redact",
        r#"cat >/dev/null; echo '{"decision":"modify","data":{"result":"[file contents withheld]"}}'"#,
    );
    let p = pack(
        "policy",
        json!({"version": 1, "hooks": {"tool:after": [{"matcher": {"tools": ["read"]}, "handler": cmd(redact)}]}}),
    );
    let llm = FakeLlm::start([Turn::tool_calls(vec![("read", json!({"path": "secret.txt"}))]), Turn::text("ok")])
        .await
        .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "read it").await;
    assert_eq!(seen.tool_results()[0], ("[file contents withheld]".to_string(), false));
    assert!(!request_text(&llm, 1).contains("hunter2"), "the model never sees the raw result");
}

#[tokio::test]
async fn observe_only_hooks_run_but_cannot_change_anything() {
    let ws = Workspace::new();
    let deny = ws.recording_script("audit", r#"{"decision":"deny","reason":"ignored"}"#);
    let p = pack(
        "audit",
        json!({"version": 1, "hooks": {
        "tool:before": [{"observe": true, "handler": cmd(deny.clone())}],
        "tool:after": [{"id": "after", "observe": true, "handler": {"type": "command", "command": format!("{deny}"), "timeoutMs": 3000}}]}}),
    );
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "write a").await;
    assert_eq!(seen.content(), "done");
    assert!(ws.file("a.txt").exists(), "an observer's deny is telemetry only");
    assert!(!seen.tool_results()[0].1);
    assert_eq!(ws.envelopes("audit").len(), 2, "both observers ran");
    assert!(seen.events.iter().any(|e| matches!(e, RunEvent::HookStarted { observe: true, .. })));
}

#[tokio::test]
async fn the_kill_switch_without_a_gate_skips_hooks() {
    let ws = Workspace::new();
    let deny = ws.recording_script("deny", r#"{"decision":"deny"}"#);
    let p = pack("policy", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(deny)}]}}));
    let mut h = hooks(&[p]);
    h.runtime.enabled = false;
    let llm = write_then_done("a.txt").await;
    let seen = run(&invocation(&llm, &ws, Some(h)), "write a").await;
    assert_eq!(seen.content(), "done");
    assert!(ws.file("a.txt").exists());
    assert!(ws.envelopes("deny").is_empty());
    assert!(!seen.events.iter().any(|e| matches!(e, RunEvent::HookStarted { .. })));
}

#[tokio::test]
async fn secrets_and_vault_values_never_reach_a_hook() {
    let ws = Workspace::new();
    let rec = ws.recording_script("rec", r#"{"decision":"allow"}"#);
    let p = pack("policy", json!({"version": 1, "hooks": {"tool:before": [{"handler": cmd(rec)}]}}));
    let mut h = hooks(&[p]);
    h.secrets = vec!["vault-s3cr3t-value".into()];
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "a.txt", "content": "key is vault-s3cr3t-value"}))]),
        Turn::text("done"),
    ])
    .await
    .unwrap();
    run(&invocation(&llm, &ws, Some(h)), "write").await;
    let raw = std::fs::read_to_string(ws.path().join(".hooks/rec-0.json")).unwrap();
    assert!(!raw.contains("vault-s3cr3t-value"), "{raw}");
    let env = &ws.envelopes("rec")[0];
    assert_eq!(env["redacted"], json!(["/tool/input/content"]));
    assert_eq!(env["idempotencyKey"].as_str().map(str::len), Some(64));
}
