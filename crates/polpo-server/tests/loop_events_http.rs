//! A loop run on the live bus, over real HTTP: a dashboard subscribed to `/api/v1/events` sees
//! a run's whole trace as it happens — in order, numbered, with the loop run id —, the run's
//! turning points by name (`loop_run:started`, `…:awaiting_human`, `…:completed`), and never
//! the values the run handled (a tool's content, a person's answer).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, review_flow};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Frame, Server};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(20);

/// The `review-flow` loop (a tool step writes a draft, a human step waits for a `decision`).
fn review_project(dir: &std::path::Path) {
    let agent = json!({"model": "openai/fake-model", "allowedTools": ["write"], "assignedLoops": [review_flow::NAME]});
    polpo_testkit::ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent("builder", agent, "You build things.")
        .unwrap()
        .project_loop(review_flow::NAME, review_flow::definition())
        .unwrap();
}

/// `type step` of a `loop_run:trace` frame.
fn traced(frame: &Frame) -> String {
    let e = frame.json();
    let step = e["stepKey"].as_str().or(e["toStepKey"].as_str()).unwrap_or_default().to_owned();
    format!("{} {step}", e["type"].as_str().unwrap())
}

#[tokio::test]
async fn a_subscriber_sees_a_loop_runs_trace_in_order_with_its_run_id() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start_with(&llm, None, review_project).await;
    let mut live = s.stream("/api/v1/events?filter=loop_run:*", &[]).await;
    let mut only_trace = s.stream("/api/v1/events?filter=loop_run:trace", &[]).await;

    let chat =
        json!({"agent": "builder", "loop": review_flow::NAME, "messages": [{"role": "user", "content": "Review"}]});
    let (url, http) = (s.url.clone(), s.http.clone());
    let answered = tokio::spawn(async move {
        let r = http.post(format!("{url}/v1/chat/completions")).json(&chat).send().await.unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });

    // The run waits for a person: the dashboard learns it without asking.
    let waiting = live.until(EVENTUALLY, |f| f.name() == "loop_run:awaiting_human").await;
    let asked = waiting.last().unwrap().json();
    let run = asked["loopRunId"].as_str().unwrap().to_owned();
    assert!(run.starts_with("looprun-"), "{asked}");
    assert_eq!(
        (asked["step"].clone(), asked["loop"].clone(), asked["agent"].clone()),
        (json!("review"), json!(review_flow::NAME), json!("builder"))
    );

    let r =
        s.post(&format!("/api/v1/loop-runs/{run}/human"), &[], json!({"output": {"decision": "ship-it-now"}})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut frames = waiting;
    frames.extend(live.until(EVENTUALLY, |f| f.name() == "loop_run:completed").await);
    let (status, body) = answered.await.unwrap();
    assert_eq!(status, 200, "{body}");

    let names: Vec<&str> = frames.iter().map(Frame::name).filter(|n| *n != "loop_run:trace").collect();
    assert_eq!(names, ["loop_run:started", "loop_run:awaiting_human", "loop_run:completed"]);
    let trace: Vec<&Frame> = frames.iter().filter(|f| f.name() == "loop_run:trace").collect();
    assert!(trace.iter().all(|f| f.json()["loopRunId"] == run.as_str() && f.json()["loop"] == review_flow::NAME));
    assert_eq!(trace.iter().map(|f| traced(f)).collect::<Vec<_>>(), review_flow::TRACE);
    let numbered: Vec<String> = trace.iter().map(|f| f.json()["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(numbered, (1..=review_flow::TRACE.len()).map(|n| format!("trace-{n}")).collect::<Vec<_>>());
    // The same events as the run's stored trace and the chat's answer.
    let stored = s.get(&format!("/api/v1/loop-runs/{run}"), &[]).await.json()["data"]["trace"].clone();
    let ids = |events: &Value| events.as_array().unwrap().iter().map(|e| e["id"].clone()).collect::<Vec<_>>();
    assert_eq!(ids(&stored), ids(&body["loop_trace"]));
    assert_eq!(ids(&stored).len(), numbered.len());

    // A turning point names its run; nothing on the feed carries the values the run handled.
    for frame in &frames {
        assert!(!frame.data.contains(review_flow::DRAFT) && !frame.data.contains("ship-it-now"), "{}", frame.data);
    }
    assert!(std::fs::read_to_string(s.dir.path().join("draft.txt")).unwrap().contains(review_flow::DRAFT));

    // A subscriber narrowing the feed to `loop_run:trace` gets those alone, the same ones.
    let narrowed = only_trace.until(EVENTUALLY, |f| f.json()["type"] == "loop.end").await;
    assert!(narrowed.iter().all(|f| f.name() == "loop_run:trace"));
    assert_eq!(narrowed.len(), trace.len());
}
