//! Runtime hooks as an OpenAI client meets them over `/v1/chat/completions`: a command hook
//! that denies `write`, and a termination gate that sends the agent back once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::path::Path;
use support::Server;

/// Agent `coder` (read, write) with pack `guard`: `tool:before` on `write` runs
/// `deny.sh` (always denies); the `turn:stop` gate runs `check.sh`, which accepts only an
/// answer containing `ACCEPT` and otherwise sends the agent back with diagnostics.
fn guarded_project(dir: &Path) {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent("coder", json!({"model": "openai/fake-model", "allowedTools": ["read", "write"], "maxTurns": 6, "hooks": ["guard"]}), "You write code.")
        .unwrap()
        .hook_pack(
            "guard",
            json!({"version": 1, "hooks": {
                "tool:before": [{"id": "no-write", "matcher": {"tools": ["write"]}, "handler": {"type": "command", "command": "sh .polpo/hooks/deny.sh", "timeoutMs": 5000}}],
                "turn:stop": [{"id": "accept-check", "terminationGate": {
                    "validator": {"type": "command", "command": "sh .polpo/hooks/check.sh", "timeoutMs": 5000},
                    "maxCycles": 2, "maxDurationMs": 60000
                }}]
            }}),
        )
        .unwrap();
    let hooks = dir.join(".polpo/hooks");
    std::fs::write(
        hooks.join("deny.sh"),
        "cat > /dev/null\necho '{\"decision\":\"deny\",\"reason\":\"writes need a review\"}'\n",
    )
    .unwrap();
    std::fs::write(
        hooks.join("check.sh"),
        "case \"$(cat)\" in\n  *ACCEPT*) echo '{\"decision\":\"accept\"}' ;;\n  *) echo '{\"decision\":\"continue\",\"diagnostics\":{\"missing\":\"the word ACCEPT\"}}' ;;\nesac\n",
    )
    .unwrap();
}

/// The model tries to write, then offers a draft the gate rejects, then the accepted answer.
fn script(llm: &FakeLlm) {
    llm.push(Turn::tool_calls(vec![("write", json!({"path": "out.txt", "content": "unreviewed"}))]));
    llm.push(Turn::text("rejected draft"));
    llm.push(Turn::text("final ACCEPT answer"));
}

fn ask(stream: bool) -> Value {
    json!({"agent": "coder", "stream": stream, "messages": [{"role": "user", "content": "write out.txt"}]})
}

/// Every message the model was sent in its `n`-th call, as text.
fn sent(llm: &FakeLlm, n: usize) -> String {
    llm.requests()[n].body["messages"].to_string()
}

/// What the model saw along the way: the denial as a tool result, then the gate's diagnostics.
fn assert_the_model_was_told(llm: &FakeLlm, first: usize) {
    assert_eq!(llm.requests().len(), first + 3, "tool call, rejected draft, accepted answer");
    assert!(
        sent(llm, first + 1).contains("writes need a review"),
        "the denial reason reaches the model: {}",
        sent(llm, first + 1)
    );
    assert!(
        sent(llm, first + 2).contains("the word ACCEPT"),
        "the gate's diagnostics reach the model: {}",
        sent(llm, first + 2)
    );
}

#[tokio::test]
async fn a_denied_write_never_touches_disk_and_the_client_only_sees_the_accepted_answer() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start_with(&llm, None, guarded_project).await;

    script(&llm);
    let r = s.post("/v1/chat/completions", &[], ask(false)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["choices"][0]["message"]["content"], "final ACCEPT answer");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(!r.text.contains("rejected draft"), "the rejected candidate is buffered, never shown: {}", r.text);
    assert!(!s.dir.path().join("out.txt").exists(), "the denied write did not run");
    assert_the_model_was_told(&llm, 0);

    // Streaming: no chunk ever carries the rejected draft.
    script(&llm);
    let r = s.post("/v1/chat/completions", &[], ask(true)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let data = r.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "final ACCEPT answer");
    assert!(!r.text.contains("rejected draft"), "{}", r.text);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");
    assert!(!s.dir.path().join("out.txt").exists());
    assert_the_model_was_told(&llm, 3);
}

#[tokio::test]
async fn hook_capabilities_reflect_the_kill_switch_of_this_process() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start_with(&llm, Some("sk-polpo"), guarded_project).await;
    assert_eq!(s.get("/v1/hooks/capabilities", &[]).await.status, 401, "behind authentication like every /v1 route");
    // Read, never set: tests share the process environment. The `off` case runs in a child
    // process in crates/polpo-cli/tests/hooks_cli.rs.
    let enabled =
        polpo_engine::hooks::hooks_enabled(std::env::var(polpo_engine::hooks::KILL_SWITCH_ENV).ok().as_deref());
    for path in ["/v1/hooks/capabilities", "/api/v1/hooks/capabilities"] {
        let r = s.get(path, &[("authorization", "Bearer sk-polpo")]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let caps = r.json();
        assert_eq!(caps["managed"]["hooks"]["mode"], if enabled { "enforce" } else { "off" });
        assert_eq!(caps["managed"]["terminationGate"]["enabled"], enabled);
        assert_eq!(caps["terminationGate"]["supported"], true);
        assert_eq!(caps["defaults"]["commandTimeoutMs"], 5000);
    }
}
