//! Chat interactions over HTTP: `ask_user_question` (finish reason `ask_user`) and
//! `polpo.suggestions`, as a client that declared `polpo.capabilities` sees them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use support::{Server, default_project};

const SUGGESTIONS: &str = r#"{"suggestions":[{"label":"Show an example","prompt":"Show me a complete example."},{"label":"Validate it","prompt":"How do I validate it?"}]}"#;

async fn server(llm: &FakeLlm) -> Server {
    Server::start_with(llm, None, |d| {
        default_project(d)
            .agent(
                "support",
                json!({"model": "openai/fake-model", "chat": {"suggestions": {"enabled": true, "maxItems": 3}}}),
                "You help.",
            )
            .unwrap();
    })
    .await
}

fn ask(text: &str, capabilities: Value, stream: bool) -> Value {
    json!({"agent": "support", "stream": stream, "messages": [{"role": "user", "content": text}], "polpo": {"capabilities": capabilities}})
}

fn chunks(r: &support::Reply) -> Vec<Value> {
    let data = r.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{}", r.text);
    data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect()
}

#[tokio::test]
async fn suggestions_arrive_at_the_body_root_and_as_a_chunk_just_before_the_stop_chunk() {
    let llm = FakeLlm::start([
        Turn::text("Set it in agent.json."),
        Turn::text(SUGGESTIONS),
        Turn::text("Streamed answer."),
        Turn::text(SUGGESTIONS),
        Turn::text("No extras."),
    ])
    .await
    .unwrap();
    let s = server(&llm).await;

    let r = s.post("/v1/chat/completions", &[], ask("How?", json!({"suggestions": true}), false)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "suggestions never change the finish reason");
    let suggestions = body["polpo"]["suggestions"].as_array().unwrap();
    assert_eq!(suggestions.len(), 2);
    assert_eq!(suggestions[0]["label"], "Show an example");
    assert_eq!(suggestions[0]["prompt"], "Show me a complete example.");
    assert!(suggestions[0]["id"].as_str().unwrap().starts_with("suggestion_"));

    let r = s.post("/v1/chat/completions", &[], ask("How, streamed?", json!({"suggestions": true}), true)).await;
    let chunks = chunks(&r);
    let n = chunks.len();
    assert_eq!(chunks[n - 1]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[n - 2]["polpo"]["suggestions"][1]["label"], "Validate it", "{:?}", chunks[n - 2]);
    assert!(chunks[n - 2]["choices"][0]["finish_reason"].is_null());
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "Streamed answer.", "the suggestion call's text never reaches the answer");

    // No capability, no suggestions and no extra model call.
    let r = s.post("/v1/chat/completions", &[], ask("Plain?", json!({}), false)).await;
    assert!(r.json().get("polpo").is_none(), "{}", r.text);
    assert_eq!(llm.requests().len(), 5);
}

#[tokio::test]
async fn ask_user_question_finishes_with_ask_user_and_a_tool_message_answers_it() {
    let question = json!({"questions": [{"id": "plan", "question": "Which plan?", "header": "Plan", "options": [{"label": "Free"}, {"label": "Pro"}], "multiple": false, "custom": true}]});
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("ask_user_question", question.clone())]),
        Turn::text("Pro it is."),
        Turn::tool_calls(vec![("ask_user_question", question.clone())]),
    ])
    .await
    .unwrap();
    let s = server(&llm).await;
    let r = s.post("/v1/chat/completions", &[], ask("Upgrade me", json!({"ask_user_question": true}), false)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["choices"][0]["finish_reason"], "ask_user");
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "ask_user_question");
    let payload: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(payload, question);

    let session = r.header("x-session-id").unwrap().to_owned();
    let answer = json!({"agent": "support", "polpo": {"capabilities": {"ask_user_question": true}},
        "messages": [{"role": "tool", "tool_call_id": call["id"], "content": "{\"plan\":\"Pro\"}"}]});
    let r = s.post("/v1/chat/completions", &[("x-session-id", &session)], answer).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Pro it is.");

    // Streaming: the last chunk carries the question as a tool call and `ask_user`.
    let r =
        s.post("/v1/chat/completions", &[], ask("Upgrade me again", json!({"ask_user_question": true}), true)).await;
    let chunks = chunks(&r);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "ask_user");
    assert_eq!(last["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "ask_user_question");
}

#[tokio::test]
async fn a_durable_run_streams_its_suggestions_before_the_stop_chunk_too() {
    let llm = FakeLlm::start([Turn::text("Durable answer."), Turn::text(SUGGESTIONS)]).await.unwrap();
    let s = server(&llm).await;
    let mut req = ask("Durably?", json!({"suggestions": true}), true);
    req["polpo"]["delivery"] = json!({"onDisconnect": "continue"});
    let r = s.post("/v1/chat/completions", &[], req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let chunks = chunks(&r);
    let n = chunks.len();
    assert_eq!(chunks[n - 1]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[n - 2]["polpo"]["suggestions"][0]["label"], "Show an example", "{:?}", chunks[n - 2]);
}
