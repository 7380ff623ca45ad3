//! `/api/v1/schedules` over real HTTP: the schedule with its next occurrences, a trigger sent
//! twice with one idempotency key runs once (six at once too), pause with a stale revision is
//! `409 conflict` and a current one writes the file, runs listed by cursor; create, patch and
//! delete as revision-checked project edits (nothing written on a problem).

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
}

fn file(s: &Server, id: &str) -> Option<Value> {
    let text = std::fs::read_to_string(s.dir.path().join(format!(".polpo/schedules/{id}.json"))).ok()?;
    Some(serde_json::from_str(&text).unwrap())
}

#[tokio::test]
async fn create_patch_and_delete_are_revision_checked_project_edits() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = server(&llm).await;
    let weekly = json!({"id": "weekly",
        "timing": {"kind": "cron", "expression": "0 9 * * 1", "timezone": "Europe/Rome"},
        "invocation": {"surface": "task", "agentName": "writer", "title": "Weekly notes", "prompt": "Write them."}});
    let created = s.post("/api/v1/schedules", &[], weekly.clone()).await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.json()["data"]["revision"], 1);
    assert!(created.json()["data"]["nextOccurrenceAt"].as_str().unwrap().contains("T09:00:00+0"));
    assert_eq!(file(&s, "weekly").unwrap()["revision"], 1);
    let taken = s.post("/api/v1/schedules", &[], weekly.clone()).await;
    assert_eq!((taken.status, taken.json()["code"].as_str()), (409, Some("already_exists")));

    let mut bad = weekly.clone();
    bad["id"] = json!("broken");
    bad["timing"]["timezone"] = json!("Mars/Olympus");
    let refused = s.post("/api/v1/schedules", &[], bad).await;
    assert_eq!((refused.status, refused.json()["code"].as_str()), (400, Some("invalid_config")), "{}", refused.text);
    assert_eq!(refused.json()["problems"][0]["pointer"], "/timing/timezone");
    assert!(file(&s, "broken").is_none(), "nothing written");
    // The file is fine alone, but the project does not load with it: rolled back.
    let unassigned = json!({"id": "looping", "timing": {"kind": "once", "at": "2030-01-01T00:00:00Z"},
        "invocation": {"surface": "loop", "loopName": "ghost", "agentName": "writer", "input": {"prompt": "Go."}}});
    let refused = s.post("/api/v1/schedules", &[], unassigned).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("invalid_reference"), "{}", refused.text);
    assert!(file(&s, "looping").is_none(), "rolled back");

    let stale = s
        .patch("/api/v1/schedules/weekly", &[], json!({"expectedRevision": 5, "timing": {"expression": "0 8 * * 1"}}))
        .await;
    assert_eq!((stale.status, stale.json()["code"].as_str()), (409, Some("conflict")));
    let patched = s
        .patch("/api/v1/schedules/weekly", &[], json!({"expectedRevision": 1, "timing": {"expression": "0 8 * * 1"}}))
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let on_disk = file(&s, "weekly").unwrap();
    assert_eq!((on_disk["revision"].as_u64(), on_disk["timing"]["expression"].as_str()), (Some(2), Some("0 8 * * 1")));
    assert_eq!(on_disk["timing"]["timezone"], "Europe/Rome", "merged, not replaced");
    let channel =
        s.patch("/api/v1/schedules/weekly", &[("if-match", "2")], json!({"invocation": {"surface": "channel"}})).await;
    assert_eq!((channel.status, channel.json()["code"].as_str()), (400, Some("invalid_config")));
    assert_eq!(file(&s, "weekly").unwrap()["revision"], 2, "unchanged");

    let stale = s.delete("/api/v1/schedules/weekly?expectedRevision=1", &[]).await;
    assert_eq!(stale.status, 409);
    let deleted = s.delete("/api/v1/schedules/weekly?expectedRevision=2", &[]).await;
    assert_eq!((deleted.status, deleted.json()["data"]["deleted"].as_bool()), (200, Some(true)), "{}", deleted.text);
    assert!(file(&s, "weekly").is_none());
    assert_eq!(s.get("/api/v1/schedules/weekly", &[]).await.status, 404);

    let legacy =
        s.post("/api/v1/schedules", &[], json!({"id": "old", "missionId": "m1", "expression": "0 8 * * 1"})).await;
    assert_eq!(legacy.status, 201, "{}", legacy.text);
    assert_eq!(legacy.json()["data"]["warnings"][0]["code"], "legacy_schedule");
    let v2 = file(&s, "old").unwrap();
    assert_eq!((v2["timing"]["kind"].as_str(), v2["invocation"]["missionId"].as_str()), (Some("cron"), Some("m1")));
}

#[tokio::test]
async fn concurrent_triggers_with_one_key_fire_once_and_runs_page_by_cursor() {
    let llm = FakeLlm::start(std::iter::repeat_n(Turn::text("Reported."), 3)).await.unwrap();
    let s = server(&llm).await;
    let key = json!({"idempotencyKey": "same"});
    let replies =
        futures::future::join_all((0..6).map(|_| s.post("/api/v1/schedules/daily/trigger", &[], key.clone()))).await;
    let ids: std::collections::BTreeSet<_> = replies.iter().map(|r| r.json()["data"]["runId"].to_string()).collect();
    s.state.scheduler.settled().await;
    let after = s.post("/api/v1/schedules/daily/trigger", &[], key).await;
    assert_eq!(after.json()["data"]["status"], "succeeded");
    assert_eq!(llm.requests().len(), 1, "six triggers with one key asked the model once: {ids:?}");
    for k in ["b", "c"] {
        s.post("/api/v1/schedules/daily/trigger", &[], json!({"idempotencyKey": k})).await;
        s.state.scheduler.settled().await;
    }
    let first = s.get("/api/v1/schedules/daily/runs?limit=2", &[]).await.json();
    assert_eq!(first["data"]["runs"].as_array().unwrap().len(), 2);
    let cursor = first["data"]["nextCursor"].as_str().unwrap().to_owned();
    let second = s.get(&format!("/api/v1/schedules/daily/runs?limit=2&cursor={cursor}"), &[]).await.json();
    assert_eq!(second["data"]["runs"].as_array().unwrap().len(), 1);
    assert_eq!(second["data"]["nextCursor"], Value::Null);
    let keys: std::collections::BTreeSet<_> = first["data"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["data"]["runs"].as_array().unwrap())
        .map(|r| r["idempotencyKey"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 3, "three runs, none twice: {keys:?}");
    assert_eq!(llm.requests().len(), 3);
}
