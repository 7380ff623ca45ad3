//! `/api/v1/schedules` over real HTTP: the schedule with its next occurrences, a trigger sent
//! twice with one idempotency key runs once, pause with a stale revision is `409 conflict`
//! and a current one writes the file, runs listed by cursor.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use support::{Server, default_project};

const DAILY: &str = r#"{"timing": {"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Rome"},
    "invocation": {"surface": "agent", "agentName": "writer", "input": {"prompt": "Report."}},
    "policy": {"maxConcurrency": 5}}"#;

async fn server(llm: &FakeLlm) -> Server {
    Server::start_with(llm, None, |d| {
        default_project(d);
        std::fs::create_dir_all(d.join(".polpo/schedules")).unwrap();
        std::fs::write(d.join(".polpo/schedules/daily.json"), DAILY).unwrap();
    })
    .await
}

#[tokio::test]
async fn a_trigger_sent_twice_with_one_key_runs_once() {
    let llm = FakeLlm::start([Turn::text("Reported."), Turn::text("Reported again.")]).await.unwrap();
    let s = server(&llm).await;

    let listed = s.get("/api/v1/schedules", &[]).await.json();
    assert_eq!(listed["data"][0]["id"], "daily");
    let next = listed["data"][0]["nextOccurrenceAt"].as_str().unwrap();
    assert!(next.contains("T09:00:00+0"), "shown in the schedule's zone: {next}");

    let key = json!({"idempotencyKey": "manual-check-2026-07-28"});
    let first = s.post("/api/v1/schedules/daily/trigger", &[], key.clone()).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let again = s.post("/api/v1/schedules/daily/trigger", &[], key).await;
    assert_eq!(again.json()["data"]["runId"], first.json()["data"]["runId"]);
    s.state.scheduler.settled().await;

    let runs = s.get("/api/v1/schedules/daily/runs?limit=1", &[]).await.json();
    assert_eq!(runs["data"]["runs"].as_array().unwrap().len(), 1);
    assert_eq!(runs["data"]["runs"][0]["status"], "succeeded");
    assert_eq!(runs["data"]["nextCursor"], Value::Null, "one run in all");
    assert_eq!(llm.requests().len(), 1, "the model was asked once");
    let missing = s.post("/api/v1/schedules/ghost/trigger", &[], json!({})).await;
    assert_eq!((missing.status, missing.json()["code"].as_str()), (404, Some("schedule_not_found")));
}

#[tokio::test]
async fn pause_with_a_stale_revision_is_a_conflict() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = server(&llm).await;
    let stale = s.post("/api/v1/schedules/daily/pause", &[], json!({"expectedRevision": 3})).await;
    assert_eq!((stale.status, stale.json()["code"].as_str()), (409, Some("conflict")), "{}", stale.text);

    let paused = s.post("/api/v1/schedules/daily/pause", &[], json!({"expectedRevision": 0})).await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(
        (paused.json()["data"]["status"].as_str(), paused.json()["data"]["revision"].as_u64()),
        (Some("paused"), Some(1))
    );
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(s.dir.path().join(".polpo/schedules/daily.json")).unwrap())
            .unwrap();
    assert_eq!((file["status"].as_str(), file["revision"].as_u64()), (Some("paused"), Some(1)));
    // The same revision again is now stale.
    let again = s.post("/api/v1/schedules/daily/resume", &[], json!({"expectedRevision": 0})).await;
    assert_eq!(again.status, 409);
    let created = s.post("/api/v1/schedules", &[], json!({})).await;
    assert_eq!(created.json()["code"], "feature_unavailable");
}
