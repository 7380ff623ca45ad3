//! The turn loop as an agent's user sees it: real built-in tools in a temp workspace, the
//! scripted fake LLM over HTTP through the OpenAI provider, no hooks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

#[path = "hooks_conformance/support.rs"]
mod support;

use polpo_core::message::{FinishReason, Message};
use polpo_core::tool::ToolSpec;
use polpo_engine::run_turns;
use polpo_llm::ToolChoice;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;
use support::{Workspace, invocation, invocation_with, request_text, request_tools, run};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_multi_turn_tool_loop_edits_a_file_and_answers() {
    let ws = Workspace::new();
    std::fs::write(ws.file("notes.txt"), "hello world\n").unwrap();
    let llm = FakeLlm::start(vec![
        Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]),
        Turn::tool_calls(vec![("edit", json!({"path": "notes.txt", "old_text": "world", "new_text": "polpo"}))]),
        Turn::text("I renamed the greeting."),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, None), "Rename world to polpo in notes.txt").await;
    assert_eq!(seen.content(), "I renamed the greeting.");
    assert_eq!(std::fs::read_to_string(ws.file("notes.txt")).unwrap(), "hello polpo\n");
    assert_eq!(llm.requests().len(), 3);
    assert!(request_text(&llm, 1).contains("hello world"), "the read result reaches the model");
    let outcome = seen.result.unwrap();
    assert_eq!(outcome.turns, 3);
    assert_eq!(outcome.messages.len(), 5, "3 assistant turns and 2 tool results are kept for the session");
}

#[tokio::test]
async fn a_tool_outside_the_policy_is_neither_shown_nor_run() {
    let ws = Workspace::new();
    let llm =
        FakeLlm::start(vec![Turn::tool_calls(vec![("bash", json!({"command": "touch pwned"}))]), Turn::text("ok")])
            .await
            .unwrap();
    let inv = invocation_with(&llm, &ws, None, polpo_tools::tools::system_tools(), Some(&["read", "glob"]));
    let seen = run(&inv, "try bash").await;
    assert_eq!(seen.content(), "ok");
    assert!(!ws.file("pwned").exists(), "a denied tool must not run");
    let (result, is_error) = &seen.tool_results()[0];
    assert!(*is_error && result.contains("tool_policy_denied"), "{result}");
    let offered = request_tools(&llm, 0);
    assert!(offered.contains(&"read".to_string()) && !offered.contains(&"bash".to_string()), "{offered:?}");
}

#[tokio::test]
async fn a_read_only_parallel_batch_keeps_the_models_order() {
    let ws = Workspace::new();
    for (name, body) in [("a.txt", "alpha"), ("b.txt", "bravo"), ("c.txt", "charlie")] {
        std::fs::write(ws.file(name), body).unwrap();
    }
    let llm = FakeLlm::start(vec![
        Turn::tool_calls(vec![
            ("read", json!({"path": "c.txt"})),
            ("read", json!({"path": "a.txt"})),
            ("read", json!({"path": "b.txt"})),
        ]),
        Turn::text("read all three"),
    ])
    .await
    .unwrap();
    let mut inv = invocation(&llm, &ws, None);
    inv.parallel_tool_calls = true;
    let seen = run(&inv, "read them").await;
    let results: Vec<String> = seen.tool_results().into_iter().map(|(r, _)| r).collect();
    assert!(
        results[0].contains("charlie") && results[1].contains("alpha") && results[2].contains("bravo"),
        "{results:?}"
    );
    let sent = &llm.requests()[1].body["messages"];
    let tool_msgs: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        tool_msgs[0].contains("charlie") && tool_msgs[2].contains("bravo"),
        "history keeps the model's order: {tool_msgs:?}"
    );
}

#[tokio::test]
async fn a_client_tool_is_handed_back_and_the_conversation_continues() {
    let ws = Workspace::new();
    let llm = FakeLlm::start(vec![
        Turn::tool_calls(vec![("configure_module", json!({"module": "commerce"}))]),
        Turn::text("Commerce is configured."),
    ])
    .await
    .unwrap();
    let mut inv = invocation(&llm, &ws, None);
    inv.client_tools =
        vec![ToolSpec {
        name: "configure_module".into(),
        description: "Open the module configuration UI.".into(),
        parameters: json!({"type": "object", "properties": {"module": {"type": "string"}}, "required": ["module"]}),
    }
    .into()];
    let first = run(&inv, "Configure commerce").await.result.unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(first.client_tool_calls[0].name, "configure_module");
    assert!(first.content.is_none());

    let mut history = vec![Message::user("Configure commerce")];
    history.extend(first.messages.clone());
    history.push(Message::tool_result(first.client_tool_calls[0].id.clone(), r#"{"configured":true}"#));
    let second = run_turns(&inv, history, &|_| {}, &CancellationToken::new()).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("Commerce is configured."));
    assert!(request_text(&llm, 1).contains("configured"), "the client's result reaches the model");
}

#[tokio::test]
async fn client_tools_that_shadow_runtime_tools_are_refused_before_any_model_call() {
    let ws = Workspace::new();
    let llm = FakeLlm::start(vec![]).await.unwrap();
    let mut inv = invocation(&llm, &ws, None);
    let ui = ToolSpec { name: "bash".into(), description: String::new(), parameters: json!({"type": "object"}) };
    inv.client_tools = vec![ui.clone().into()];
    assert_eq!(run(&inv, "hi").await.error_code(), "invalid_request");
    inv.client_tools = vec![ToolSpec { name: "ui".into(), ..ui }.into()];
    inv.parallel_tool_calls = true;
    assert_eq!(run(&inv, "hi").await.error_code(), "invalid_request");
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn a_forced_tool_outside_the_policy_fails_before_the_model_runs() {
    let ws = Workspace::new();
    let llm = FakeLlm::start(vec![]).await.unwrap();
    let mut inv = invocation_with(&llm, &ws, None, polpo_tools::tools::system_tools(), Some(&["read"]));
    inv.tool_choice = ToolChoice::Tool("bash".into());
    assert_eq!(run(&inv, "hi").await.error_code(), "tool_policy_denied");
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn max_turns_ends_the_run_and_keeps_the_transcript() {
    let ws = Workspace::new();
    std::fs::write(ws.file("a.txt"), "a").unwrap();
    let again = || Turn::tool_calls(vec![("read", json!({"path": "a.txt"}))]);
    let llm = FakeLlm::start(vec![again(), again(), again()]).await.unwrap();
    let mut inv = invocation(&llm, &ws, None);
    inv.max_turns = 2;
    let seen = run(&inv, "loop").await;
    match seen.result {
        Err(polpo_engine::EngineError::MaxTurnsExhausted { max_turns, transcript }) => {
            assert_eq!(max_turns, 2);
            assert_eq!(transcript.len(), 4, "two assistant turns and two tool results are kept");
        }
        other => panic!("expected max_turns_exhausted, got {other:?}"),
    }
    assert_eq!(llm.requests().len(), 2);
}
