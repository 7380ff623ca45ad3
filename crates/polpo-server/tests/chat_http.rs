//! `/v1/chat/completions` over real HTTP: what an OpenAI client sees.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use support::Server;

fn ask(agent: &str, text: &str) -> Value {
    json!({"agent": agent, "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn a_plain_completion_has_the_openai_shape_and_a_session_to_continue() {
    let llm = FakeLlm::start([Turn::text("Hello from coder."), Turn::text("You said hi.")]).await.unwrap();
    let s = Server::start(&llm).await;
    let r = s.post("/v1/chat/completions", &[], ask("coder", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello from coder.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let session = r.header("x-session-id").unwrap().to_owned();
    assert!(r.header("x-polpo-run-id").unwrap().starts_with("chat-"));
    let overhead: f64 = r.header("x-polpo-overhead-ms").unwrap().parse().unwrap();
    assert!(overhead >= 0.0);

    // `model: "agent/<id>"` works as well as `agent`, and the session carries the history.
    let r = s
        .post(
            "/v1/chat/completions",
            &[("x-session-id", &session)],
            json!({"model": "agent/coder", "messages": [{"role": "user", "content": "what did I say?"}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-session-id"), Some(session.as_str()));
    let sent = &llm.requests()[1].body["messages"];
    assert_eq!(sent.as_array().unwrap().len(), 4, "system, hi, answer, new question: {sent}");
}

#[tokio::test]
async fn streaming_sends_role_deltas_tool_status_and_done() {
    let llm =
        FakeLlm::start([Turn::tool_calls(vec![("ls", json!({"path": "."}))]), Turn::text("Two files.")]).await.unwrap();
    let s = Server::start(&llm).await;
    let mut req = ask("coder", "list files");
    req["stream"] = json!(true);
    let r = s.post("/v1/chat/completions", &[], req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("content-type").unwrap().starts_with("text/event-stream"));
    assert!(r.header("x-session-id").is_some());
    let data = r.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let states: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["tool_call"]["state"].as_str()).collect();
    assert!(states.contains(&"calling") && states.contains(&"completed"), "{states:?}");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "Two files.");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert!(last["polpo"]["overhead_ms"].as_f64().is_some());
}

#[tokio::test]
async fn errors_use_the_openai_envelope_with_stable_codes() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let r = s.post("/v1/chat/completions", &[], ask("nobody", "hi")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "agent_not_found");
    assert_eq!(r.json()["error"]["type"], "not_found_error");

    // Streaming requests that fail before the run get a status, not a broken stream.
    let r = s
        .post(
            "/v1/chat/completions",
            &[("x-session-id", "missing")],
            json!({"agent": "coder", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "session_not_found");

    let r = s.post("/v1/chat/completions", &[], json!({"messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(r.json()["error"]["code"], "agent_required", "two agents: the request must name one");

    let r = s.post("/v1/chat/completions", &[], json!({"agent": "coder", "messages": "not a list"})).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "invalid_request");

    let mut widen = ask("writer", "run a command");
    widen["tool_choice"] = json!({"type": "function", "function": {"name": "bash"}});
    let r = s.post("/v1/chat/completions", &[], widen).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], "tool_policy_denied");
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn a_request_naming_skills_or_loops_the_agent_lacks_is_refused_not_ignored() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let mut with_skills = ask("coder", "hi");
    with_skills["polpo"] = json!({"skills": ["frontend-design"]});
    let mut with_loop = ask("coder", "hi");
    with_loop["loop"] = json!("router-flow");
    for (body, code) in [(with_skills, "skill_not_assigned"), (with_loop, "loop_not_assigned")] {
        let r = s.post("/v1/chat/completions", &[], body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json()["error"]["code"], code, "{body}");
    }
    assert!(llm.requests().is_empty(), "nothing ran without what it asked for");
}

#[tokio::test]
async fn with_a_key_configured_requests_need_it_but_health_does_not() {
    let llm = FakeLlm::start([Turn::text("ok")]).await.unwrap();
    let s = Server::start_with(&llm, Some("sk-polpo-secret"), |d| {
        support::default_project(d);
    })
    .await;
    let r = s.post("/v1/chat/completions", &[("authorization", "Bearer wrong")], ask("coder", "hi")).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "unauthorized");
    let r = s.get("/v1/models", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(s.get("/api/v1/health", &[]).await.status, 200);
    let r = s.post("/v1/chat/completions", &[("x-api-key", "sk-polpo-secret")], ask("coder", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s.get("/v1/models", &[("authorization", "Bearer sk-polpo-secret")]).await;
    let models = r.json();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"agent/coder") && ids.contains(&"writer"), "{ids:?}");
}

#[tokio::test]
async fn an_idempotency_key_replays_the_answer_instead_of_running_again() {
    let llm = FakeLlm::start([Turn::text("first and only"), Turn::text("a second run")]).await.unwrap();
    let s = Server::start(&llm).await;
    let key = [("idempotency-key", "order-42")];
    let a = s.post("/v1/chat/completions", &key, ask("coder", "charge the card")).await;
    let b = s.post("/v1/chat/completions", &key, ask("coder", "charge the card")).await;
    assert_eq!(a.status, 200);
    assert_eq!(b.status, 200);
    assert_eq!(a.json(), b.json(), "same key, same body → same response");
    assert_eq!(b.header("x-session-id"), a.header("x-session-id"));
    assert_eq!(llm.requests().len(), 1, "no second run");

    // Any change to the body — here asking for a stream — is a different request.
    let mut streamed = ask("coder", "charge the card");
    streamed["stream"] = json!(true);
    let c = s.post("/v1/chat/completions", &key, streamed).await;
    assert_eq!(c.status, 422, "a different body under the same key is refused: {}", c.text);
    assert_eq!(c.json()["error"]["code"], "idempotency_key_reused");
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn a_failed_run_releases_its_idempotency_key_so_a_retry_runs() {
    let llm = FakeLlm::start([Turn::error(400, "bad request upstream"), Turn::text("recovered")]).await.unwrap();
    let s = Server::start(&llm).await;
    let key = [("idempotency-key", "retry-me")];
    let a = s.post("/v1/chat/completions", &key, ask("writer", "hello")).await;
    assert!(a.status >= 400, "{}", a.text);
    let b = s.post("/v1/chat/completions", &key, ask("writer", "hello")).await;
    assert_eq!(b.status, 200, "{}", b.text);
    assert_eq!(b.json()["choices"][0]["message"]["content"], "recovered");
}

#[tokio::test]
async fn a_key_over_its_rate_limit_gets_429_with_retry_after() {
    let llm = FakeLlm::start_repeating([Turn::text("ok")]).await.unwrap();
    let s = Server::start_tweaked(
        &llm,
        Some("sk-limited"),
        |d| {
            support::default_project(d);
        },
        |state| state.rate_limit = polpo_server::ratelimit::RateLimit::new(20), // burst of 2
    )
    .await;
    let auth = [("authorization", "Bearer sk-limited")];
    assert_eq!(s.get("/v1/models", &auth).await.status, 200);
    assert_eq!(s.get("/v1/models", &auth).await.status, 200);
    let r = s.get("/v1/models", &auth).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "too_many_requests");
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    // A wrong key is refused as unauthorized, not counted against the real key's budget.
    assert_eq!(s.get("/v1/models", &[("authorization", "Bearer nope")]).await.status, 401);
}

#[tokio::test]
async fn browsers_may_call_from_local_dev_origins_only() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let preflight = |origin: &'static str| {
        s.http
            .request(reqwest::Method::OPTIONS, format!("{}/v1/chat/completions", s.url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type,x-session-id")
            .send()
    };
    let ok = preflight("http://localhost:5173").await.unwrap();
    assert_eq!(ok.headers().get("access-control-allow-origin").unwrap(), "http://localhost:5173");
    let evil = preflight("https://evil.example").await.unwrap();
    assert!(evil.headers().get("access-control-allow-origin").is_none());
}
