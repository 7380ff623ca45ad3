//! `GET /api/v1/events` over real HTTP: what a dashboard watching the runtime sees, and what it
//! gets back after a dropped connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Frame, Server};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(20);

fn ask(text: &str) -> Value {
    json!({"agent": "coder", "messages": [{"role": "user", "content": text}]})
}

fn names(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(Frame::name).collect()
}

fn ids(frames: &[Frame]) -> Vec<u64> {
    frames.iter().map(|f| f.id.expect("every runtime event has an id")).collect()
}

fn assert_contiguous(ids: &[u64]) {
    for pair in ids.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "gap or duplicate in {ids:?}");
    }
}

#[tokio::test]
async fn a_subscriber_sees_a_chat_happen_in_order() {
    let llm =
        FakeLlm::start([Turn::tool_calls(vec![("ls", json!({"path": "."}))]), Turn::text("Two files.")]).await.unwrap();
    let s = Server::start(&llm).await;
    let mut live = s.stream("/api/v1/events", &[]).await;

    let r = s.post("/v1/chat/completions", &[], ask("list files")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.header("x-session-id").unwrap();
    let run = r.header("x-polpo-run-id").unwrap();

    let frames = live.until(EVENTUALLY, |f| f.name() == "run:completed").await;
    assert_eq!(
        names(&frames),
        [
            // A new session is written with its first turn's messages when the turn ends, and
            // announced then, right before those messages.
            "run:started",
            "tool:started",
            "tool:completed",
            "session:created",
            "message:added",
            "message:added",
            "message:added",
            "message:added",
            "run:completed"
        ]
    );
    assert_contiguous(&ids(&frames));
    for f in &frames {
        assert_eq!(f.json()["sessionId"], session, "{f:?}");
        assert_eq!(f.json()["runId"], run, "{f:?}");
        assert_eq!(f.json()["agent"], "coder");
    }
    assert_eq!(frames[1].json()["tool"], "ls");
    assert_eq!(frames[2].json()["isError"], false);
    let roles: Vec<Value> = frames[4..8].iter().map(|f| f.json()["role"].clone()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(frames[7].json()["message"]["content"], "Two files.");
    assert_eq!(frames[8].json()["finishReason"], "stop");
}

#[tokio::test]
async fn a_client_that_reconnects_with_last_event_id_gets_exactly_what_it_missed() {
    let llm = FakeLlm::start([Turn::text("One."), Turn::text("Two.")]).await.unwrap();
    let s = Server::start(&llm).await;
    // A watcher that never disconnects is the reference for what happened (on the /v1 alias).
    let mut watcher = s.stream("/v1/events", &[]).await;
    let mut flaky = s.stream("/api/v1/events", &[]).await;

    let r = s.post("/v1/chat/completions", &[], ask("first")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.header("x-session-id").unwrap().to_owned();
    let seen = flaky.until(EVENTUALLY, |f| f.name() == "run:started").await;
    let last_seen = *ids(&seen).last().unwrap();
    drop(flaky);

    let r = s.post("/v1/chat/completions", &[("x-session-id", &session)], ask("second")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let everything = watcher
        .until(EVENTUALLY, |f| f.name() == "run:completed" && f.json()["runId"] == r.header("x-polpo-run-id").unwrap())
        .await;
    let missed: Vec<&Frame> = everything.iter().filter(|f| f.id.unwrap() > last_seen).collect();
    let newest = everything.last().unwrap().id.unwrap();

    // Browsers reconnect to the same URL (a stale `after` included) and send Last-Event-ID.
    let last = last_seen.to_string();
    let mut resumed = s.stream("/api/v1/events?after=1", &[("last-event-id", &last)]).await;
    let got = resumed.until(EVENTUALLY, |f| f.id == Some(newest)).await;
    let pairs =
        |fs: &[&Frame]| fs.iter().map(|f| (f.id.unwrap(), f.name().to_owned(), f.data.clone())).collect::<Vec<_>>();
    assert_eq!(pairs(&got.iter().collect::<Vec<_>>()), pairs(&missed), "exactly the missed events, in order");
    assert_eq!(got[0].id, Some(last_seen + 1), "no gap");
    assert_contiguous(&ids(&got));

    // `?after=` alone resumes the same way.
    let mut by_param = s.stream(&format!("/api/v1/events?after={last}"), &[]).await;
    let again = by_param.until(EVENTUALLY, |f| f.id == Some(newest)).await;
    assert_eq!(ids(&again), ids(&got));
}

#[tokio::test]
async fn filters_narrow_the_feed_and_a_forgotten_id_is_reported_lost() {
    let llm = FakeLlm::start([Turn::text("Hi.")]).await.unwrap();
    let s = Server::start(&llm).await;
    let mut runs = s.stream("/api/v1/events?filter=run:*", &[]).await;
    let r = s.post("/v1/chat/completions", &[], ask("hello")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let frames = runs.until(EVENTUALLY, |f| f.name() == "run:completed").await;
    assert_eq!(names(&frames), ["run:started", "run:completed"]);

    // An id this server never issued (say, from before a restart): the client is told that
    // events were lost, then gets everything still kept.
    let mut stale = s.stream("/api/v1/events?filter=session:*,run:started", &[("last-event-id", "1")]).await;
    let got = stale.until(EVENTUALLY, |f| f.name() == "session:created").await;
    assert_eq!(names(&got), ["events_lost", "run:started", "session:created"]);
    assert_eq!(got[0].id, None, "the marker does not move the client's position");
    assert_eq!(got[0].json()["after"], 1);
    assert_eq!(got[0].json()["missed"], Value::Null, "unknown how many");

    let r = s.get("/api/v1/events?after=yesterday", &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["code"], "invalid_request");
}

#[tokio::test]
async fn the_events_stream_needs_the_api_key() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start_with(&llm, Some("sekret-key"), |d| {
        support::default_project(d);
    })
    .await;
    let r = s.get("/api/v1/events", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["code"], "unauthorized");
    s.stream("/api/v1/events", &[("authorization", "Bearer sekret-key")]).await;
}

/// A reviewer's dashboard learns of an approval gate and of its decision from the live bus.
#[tokio::test]
async fn an_approval_gate_is_announced_and_its_decision_too() {
    let llm = FakeLlm::start([]).await.unwrap();
    let flow = json!({
        "name": "gated-build",
        "start": "build",
        "policies": [{"id": "review-build", "hook": "tool:before", "effect": "approval", "when": "step.name == 'build'", "message": "a person reviews the build"}],
        "steps": {"build": {"type": "tool", "tool": "bash", "input": {"command": "echo build >> log.txt"}, "next": "end"}}
    });
    let s = Server::start_with(&llm, None, |d| {
        polpo_testkit::ProjectFixture::new(d, json!({"storage": "file"}))
            .unwrap()
            .agent(
                "builder",
                json!({"model": "openai/fake-model", "allowedTools": ["bash"], "assignedLoops": ["gated-build"]}),
                "You build.",
            )
            .unwrap()
            .project_loop("gated-build", flow)
            .unwrap();
    })
    .await;
    let mut live = s.stream("/api/v1/events?filter=approval:*", &[]).await;

    let body = json!({"agent": "builder", "loop": "gated-build", "messages": [{"role": "user", "content": "Build"}]});
    let r = s.post("/v1/chat/completions", &[], body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let run = r.json()["loop_run_id"].as_str().unwrap().to_owned();

    let requested = live.until(EVENTUALLY, |f| f.name() == "approval:requested").await;
    assert_eq!(names(&requested), ["approval:requested"]);
    let asked = requested[0].json();
    assert_eq!(asked["loopRunId"], run.as_str());
    assert_eq!(asked["status"], "pending");
    assert_eq!(asked["gate"]["id"], "review-build");
    assert_eq!(asked["message"], "a person reviews the build");
    let approval = asked["approvalId"].as_str().unwrap().to_owned();

    let r = s.post(&format!("/api/v1/approvals/{approval}/approve"), &[], json!({"note": "fine"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let resolved = live.until(EVENTUALLY, |f| f.name() == "approval:resolved").await;
    assert_eq!(names(&resolved), ["approval:resolved"]);
    assert_eq!(resolved[0].json()["approvalId"], approval.as_str());
    assert_eq!(resolved[0].json()["status"], "approved");
    assert_eq!(resolved[0].json()["resolvedBy"], "local");
    assert!(!s.dir.path().join("log.txt").exists(), "approving alone runs nothing before a resume");
}
