//! Client tools (the request's OpenAI `tools`) obey the agent's effective tool policy, like
//! server tools: agent `allowedTools` ∩ `chat.allowedTools` ∩ `polpo.execution.allowedTools`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use support::Server;

fn client_tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": "A UI action.", "parameters": {"type": "object", "properties": {}}}})
}

/// An agent whose ceiling admits `read` and every `ui_` client tool.
async fn server(llm: &FakeLlm) -> Server {
    Server::start_with(llm, None, |dir| {
        ProjectFixture::new(dir, json!({"storage": "file"}))
            .unwrap()
            .agent("assistant", json!({"model": "openai/fake-model", "allowedTools": ["read", "ui_*"]}), "You help.")
            .unwrap();
    })
    .await
}

fn ask(tools: &[&str], allowed: &[&str]) -> Value {
    json!({
        "agent": "assistant",
        "parallel_tool_calls": false,
        "tools": tools.iter().map(|t| client_tool(t)).collect::<Vec<_>>(),
        "polpo": {"execution": {"allowedTools": allowed}},
        "messages": [{"role": "user", "content": "Tidy up the page"}],
    })
}

fn offered(llm: &FakeLlm) -> Vec<String> {
    let tools = llm.requests()[0].body["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_client_tool_the_request_excludes_never_reaches_the_model() {
    let llm = FakeLlm::start([Turn::text("Done.")]).await.unwrap();
    let s = server(&llm).await;
    let r = s.post("/v1/chat/completions", &[], ask(&["ui_open", "ui_delete"], &["read", "ui_open"])).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let offered = offered(&llm);
    assert!(offered.contains(&"ui_open".to_owned()) && offered.contains(&"read".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"ui_delete".to_owned()), "excluded by polpo.execution.allowedTools: {offered:?}");
}

#[tokio::test]
async fn a_client_tool_outside_the_agent_ceiling_never_reaches_the_model() {
    let llm = FakeLlm::start([Turn::text("Done.")]).await.unwrap();
    let s = server(&llm).await;
    let mut request = ask(&["ui_open", "get_weather"], &[]);
    request.as_object_mut().unwrap().remove("polpo");
    let r = s.post("/v1/chat/completions", &[], request).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let offered = offered(&llm);
    assert!(offered.contains(&"ui_open".to_owned()) && !offered.contains(&"get_weather".to_owned()), "{offered:?}");
}

#[tokio::test]
async fn forcing_an_excluded_client_tool_is_refused_before_any_model_call() {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("ui_delete", json!({}))])]).await.unwrap();
    let s = server(&llm).await;
    for stream in [false, true] {
        let mut request = ask(&["ui_open", "ui_delete"], &["ui_open"]);
        request["tool_choice"] = json!({"type": "function", "function": {"name": "ui_delete"}});
        request["stream"] = json!(stream);
        let r = s.post("/v1/chat/completions", &[], request).await;
        assert_eq!(r.status, 403, "{}", r.text);
        assert_eq!(r.json()["error"]["code"], "tool_policy_denied");
    }
    assert!(llm.requests().is_empty(), "no model call was paid for");
}
