//! Structured output over `/v1/chat/completions` against the strict fake, which answers in
//! JSON only when the request asks for it natively (as OpenAI, vLLM and Ollama do).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use support::Server;

fn person_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "Person", "strict": true, "schema": {
        "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false}}})
}

fn ask(agent: &str, text: &str, format: Value, stream: bool) -> Value {
    json!({"agent": agent, "stream": stream, "response_format": format, "messages": [{"role": "user", "content": text}]})
}

/// The answer text of a completion, streamed (content deltas joined) or not.
fn answer(reply: &support::Reply, stream: bool) -> String {
    if !stream {
        return reply.json()["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    }
    let data = reply.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}

/// The model's script: it lists the folder, says who Ada is in prose, and (asked for the
/// format) answers with the Person object.
fn looks_then_describes_ada() -> [Turn; 3] {
    [
        Turn::tool_calls(vec![("ls", json!({"path": "."}))]),
        Turn::text("Ada is 36."),
        Turn::json(json!({"name": "Ada", "age": 36})),
    ]
}

#[tokio::test]
async fn a_json_schema_answer_after_a_tool_call_parses_streamed_or_not() {
    for stream in [false, true] {
        let llm = FakeLlm::start(looks_then_describes_ada()).await.unwrap();
        let s = Server::start(&llm).await;
        let r = s.post("/v1/chat/completions", &[], ask("coder", "Describe Ada", person_format(), stream)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let value: Value = serde_json::from_str(&answer(&r, stream)).unwrap();
        assert_eq!(value, json!({"name": "Ada", "age": 36}), "stream: {stream}");
        let requests = llm.requests();
        assert_eq!(requests.len(), 3);
        assert!(requests[1].body.get("response_format").is_none(), "the tools phase is not constrained");
        assert_eq!(
            requests[2].body["response_format"],
            person_format(),
            "the format reaches the provider as the client sent it"
        );
        assert!(requests[2].body.get("tools").is_none(), "formatting is tool-free");
    }
}

#[tokio::test]
async fn a_json_object_answer_without_tools_takes_one_call_streamed_or_not() {
    for stream in [false, true] {
        let llm = FakeLlm::start([Turn::json(json!({"mood": "calm"}))]).await.unwrap();
        let s = Server::start(&llm).await;
        let r = s
            .post(
                "/v1/chat/completions",
                &[],
                ask("writer", "How do you feel?", json!({"type": "json_object"}), stream),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(answer(&r, stream), r#"{"mood":"calm"}"#, "stream: {stream}");
        let requests = llm.requests();
        assert_eq!(requests.len(), 1, "an agent without tools answers in one constrained call");
        assert_eq!(requests[0].body["response_format"], json!({"type": "json_object"}));
    }
}

#[tokio::test]
async fn a_schema_the_provider_refuses_is_a_clear_error_not_a_prose_answer() {
    // OpenAI refuses a strict schema whose object is open; the fake does too.
    let open = json!({"type": "json_schema", "json_schema": {"name": "Loose", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}});
    let llm = FakeLlm::start([Turn::json(json!({"a": "x"}))]).await.unwrap();
    let s = Server::start(&llm).await;
    let r = s.post("/v1/chat/completions", &[], ask("writer", "hi", open, false)).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "invalid_request");
    assert!(r.text.contains("additionalProperties"), "the provider's reason reaches the client: {}", r.text);
}

#[tokio::test]
async fn an_agent_on_claude_answers_through_the_forced_schema_tool_streamed_or_not() {
    for stream in [false, true] {
        let llm = FakeLlm::start(looks_then_describes_ada()).await.unwrap();
        let s = Server::start_with(&llm, None, |dir| {
            ProjectFixture::new(dir, json!({"storage": "file"}))
                .unwrap()
                .agent("claude", json!({"model": "anthropic/claude-test", "allowedTools": ["ls"]}), "You help.")
                .unwrap();
        })
        .await;
        let r = s.post("/v1/chat/completions", &[], ask("claude", "Describe Ada", person_format(), stream)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let value: Value = serde_json::from_str(&answer(&r, stream)).unwrap();
        assert_eq!(value, json!({"name": "Ada", "age": 36}), "stream: {stream}");
        let requests = llm.requests();
        assert!(requests.iter().all(|r| r.path == "/v1/messages"), "the Anthropic wire");
        assert_eq!(requests[2].body["tool_choice"], json!({"type": "tool", "name": "Person"}));
        assert_eq!(requests[2].body["tools"][0]["input_schema"], person_format()["json_schema"]["schema"]);
    }
}
