//! Model routing over `/v1/chat/completions`: a client's `routing.labels` reach the project's
//! rules, the OpenAI response keeps its usual `model`, and malformed labels are refused before
//! any model call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_engine::Delivery;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use support::Server;

async fn start(llm: &FakeLlm) -> Server {
    Server::start_with(llm, None, |dir| {
        let settings = json!({
            "storage": "file",
            "modelProfiles": {"balanced": "openai/balanced-model"},
            "modelRouting": {"rules": [{"when": {"labels": ["vip"]}, "profile": "balanced"}]}
        });
        ProjectFixture::new(dir, settings)
            .unwrap()
            .agent("router", json!({"model": "openai/pinned-model", "modelRouting": {"mode": "auto"}}), "You route.")
            .unwrap();
    })
    .await
}

fn ask(routing: Value) -> Value {
    json!({"agent": "router", "messages": [{"role": "user", "content": "hello"}], "routing": routing})
}

#[tokio::test]
async fn request_labels_route_and_the_response_model_is_unchanged() {
    let llm = FakeLlm::start([Turn::text("VIP answer."), Turn::text("Plain answer.")]).await.unwrap();
    let s = start(&llm).await;
    let r = s.post("/v1/chat/completions", &[], ask(json!({"labels": ["VIP"]}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["model"], "polpo", "clients see the same model name whichever way a request went");
    let r = s.post("/v1/chat/completions", &[], ask(Value::Null)).await;
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Plain answer.");
    let models: Vec<Value> = llm.requests().iter().map(|r| r.body["model"].clone()).collect();
    assert_eq!(models, ["balanced-model", "pinned-model"]);

    let (backlog, _) = s.state.runtime.events().subscribe_after(Some(0));
    let routes: Vec<Value> = backlog
        .into_iter()
        .filter_map(|d| match d {
            Delivery::Event(e) if e.event == "model:routed" => Some(e.payload()["via"].clone()),
            _ => None,
        })
        .collect();
    assert_eq!(routes, ["rule", "pinned"]);
}

#[tokio::test]
async fn malformed_routing_labels_are_refused_before_any_model_call() {
    let llm = FakeLlm::start([Turn::text("never")]).await.unwrap();
    let s = start(&llm).await;
    let too_many: Vec<String> = (0..17).map(|i| format!("l{i}")).collect();
    for routing in [
        json!({"labels": too_many}),
        json!({"labels": [""]}),
        json!({"labels": "vip"}),
        json!({"labels": ["vip"], "mode": "x"}),
    ] {
        let r = s.post("/v1/chat/completions", &[], ask(routing.clone())).await;
        assert_eq!(r.status, 400, "{routing}: {}", r.text);
        assert_eq!(r.json()["error"]["code"], "invalid_request");
    }
    assert!(llm.requests().is_empty());
}
