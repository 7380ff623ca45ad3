//! The execution router over `/v1/chat/completions`: an agent with `executionRouter` in `auto`
//! mode gets each chat that names no loop classified by its own model (structured output, the
//! user text bounded); a confident pick among `allowedLoops` runs that loop, anything else — low
//! confidence, no loop, a loop outside `allowedLoops`, an unreadable answer, a failed call —
//! leaves the chat direct. Every decision is an `execution:routed` event and a routed loop run
//! keeps its route.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_engine::Delivery;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use support::Server;

/// `desk` may run `notes` (writes `routed.txt`) and `audit`, but its router may only pick `notes`.
async fn start(llm: &FakeLlm) -> Server {
    Server::start_with(llm, None, |dir| {
        let router = json!({"mode": "auto", "allowedLoops": ["notes"], "minConfidence": 0.6, "maxInputChars": 40});
        ProjectFixture::new(dir, json!({"storage": "file"}))
            .unwrap()
            .agent(
                "desk",
                json!({"model": "openai/fake-model", "allowedTools": ["write"], "assignedLoops": ["notes", "audit"],
                       "executionRouter": router}),
                "You help.",
            )
            .unwrap();
        let loops = dir.join(".polpo/loops");
        std::fs::create_dir_all(&loops).unwrap();
        for (id, file, about) in [("notes", "routed.txt", "Saves a note to a file"), ("audit", "audit.txt", "Audits")] {
            let body = json!({
                "name": id, "description": about, "start": "save",
                "steps": {"save": {"type": "tool", "tool": "write", "input": {"path": file, "content": "saved"}, "next": "end"}}
            });
            std::fs::write(loops.join(format!("{id}.json")), body.to_string()).unwrap();
        }
    })
    .await
}

fn chat(text: &str) -> Value {
    json!({"agent": "desk", "messages": [{"role": "user", "content": text}]})
}

fn routes(s: &Server) -> Vec<Value> {
    let (backlog, _) = s.state.runtime.events().subscribe_after(Some(0));
    backlog
        .into_iter()
        .filter_map(|d| match d {
            Delivery::Event(e) if e.event == "execution:routed" => Some(e.payload()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_confident_pick_runs_the_loop_and_the_run_keeps_its_route() {
    let llm = FakeLlm::start([Turn::json(json!({"loop": "notes", "confidence": 0.9, "reason": "wants a note saved"}))])
        .await
        .unwrap();
    let s = start(&llm).await;
    let long = format!("Please save a note for me {}", "x".repeat(200));
    let r = s.post("/v1/chat/completions", &[], chat(&long)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(s.dir.path().join("routed.txt").exists(), "the routed loop ran");
    let body = r.json();
    assert_eq!(body["loop"], "notes");
    assert_eq!(body["execution_route"]["loop"], "notes");
    assert_eq!(body["execution_route"]["decisionSource"], "router");
    assert_eq!(body["execution_route"]["confidence"], 0.9);

    // The classifier was asked with structured output, saw the candidates and at most 40
    // characters of the request, and was offered no tools.
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "a tool-only loop costs no further model call");
    let sent = &requests[0].body;
    assert_eq!(sent["response_format"]["json_schema"]["name"], "execution_route");
    assert_eq!(sent["response_format"]["json_schema"]["schema"]["properties"]["loop"]["enum"], json!(["notes", null]));
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("notes: Saves a note to a file") && !system.contains("audit"), "{system}");
    assert_eq!(sent["messages"][1]["content"].as_str().unwrap().chars().count(), 40);
    assert!(sent.get("tools").is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)), "{sent}");

    let run = body["loop_run_id"].as_str().unwrap();
    let stored = s.get(&format!("/api/v1/loop-runs/{run}"), &[]).await;
    assert_eq!(stored.status, 200, "{}", stored.text);
    assert_eq!(stored.json()["data"]["request"]["route"]["loop"], "notes", "{}", stored.text);
    let seen = routes(&s);
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0]["agent"].clone(), seen[0]["status"].clone()), (json!("desk"), json!("routed")));
}

#[tokio::test]
async fn anything_but_a_confident_allowed_pick_leaves_the_chat_direct() {
    let llm = FakeLlm::start([
        Turn::json(json!({"loop": "notes", "confidence": 0.3, "reason": "unsure"})),
        Turn::text("Direct one."),
        Turn::json(json!({"loop": null, "confidence": 0.95, "reason": "small talk"})),
        Turn::text("Direct two."),
        // `audit` is assigned to the agent but not among the router's allowedLoops.
        Turn::json(json!({"loop": "audit", "confidence": 1.0, "reason": "audit it"})),
        Turn::text("Direct three."),
        Turn::error(400, r#"{"error": {"message": "bad request"}}"#),
        Turn::text("Direct four."),
    ])
    .await
    .unwrap();
    let s = start(&llm).await;
    for expected in ["Direct one.", "Direct two.", "Direct three.", "Direct four."] {
        let r = s.post("/v1/chat/completions", &[], chat("hello there")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json()["choices"][0]["message"]["content"], expected);
        assert!(r.json().get("loop_run_id").is_none(), "{}", r.text);
    }
    assert!(!s.dir.path().join("routed.txt").exists() && !s.dir.path().join("audit.txt").exists());
    let seen = routes(&s);
    let summary: Vec<(Value, Value, Value)> =
        seen.iter().map(|r| (r["status"].clone(), r["decisionSource"].clone(), r["reason"].clone())).collect();
    assert_eq!(
        summary,
        [
            (json!("direct"), json!("router"), json!("unsure")),
            (json!("direct"), json!("router"), json!("small talk")),
            (json!("direct"), json!("fallback"), json!("router_not_allowed")),
            (json!("direct"), json!("fallback"), json!("router_failed")),
        ]
    );
}

#[tokio::test]
async fn a_named_loop_skips_the_router() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = start(&llm).await;
    let mut body = chat("save it");
    body["loop"] = json!("audit");
    let r = s.post("/v1/chat/completions", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(s.dir.path().join("audit.txt").exists());
    assert!(r.json().get("execution_route").is_none());
    assert!(llm.requests().is_empty(), "no classifier call");
    assert!(routes(&s).is_empty());
}
