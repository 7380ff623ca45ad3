//! `DELETE /api/v1/tasks/{id}` over real HTTP: a task is deleted for good and announced as
//! `task:removed`; a task others depend on, or one being worked on, is refused with 409
//! `conflict` until its dependents are gone or it was killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;
use std::time::Duration;
use support::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_deleted_unless_others_depend_on_it_or_it_runs() {
    // The model answers the running task's request, then hangs: the task stays in progress.
    let llm = FakeLlm::start([Turn::text("never finished").stall_after(1)]).await.unwrap();
    let s = Server::start(&llm).await;
    let mut events = s.stream("/api/v1/events", &[]).await;
    let create = |title: &str, extra: serde_json::Value| {
        let mut body = json!({"title": title, "description": "Write.", "assignTo": "writer", "draft": true});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let first = s.post("/api/v1/tasks", &[], create("First", json!({}))).await.json()["data"]["id"].clone();
    let first = first.as_str().unwrap().to_owned();
    let second = s.post("/api/v1/tasks", &[], create("Second", json!({"dependsOn": [first]}))).await;
    assert_eq!(second.status, 201, "{}", second.text);
    let second = second.json()["data"]["id"].as_str().unwrap().to_owned();

    let refused = s.delete(&format!("/api/v1/tasks/{first}"), &[]).await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    assert_eq!(refused.json()["code"], "conflict");
    assert!(refused.text.contains(&second), "the refusal names the dependent: {}", refused.text);

    let removed = s.delete(&format!("/api/v1/tasks/{second}"), &[]).await;
    assert_eq!(removed.status, 200, "{}", removed.text);
    assert_eq!(removed.json()["data"], json!({"removed": true}));
    assert_eq!(s.get(&format!("/api/v1/tasks/{second}"), &[]).await.status, 404);
    assert_eq!(s.delete(&format!("/api/v1/tasks/{second}"), &[]).await.status, 404);
    let seen = events.until(Duration::from_secs(10), |f| f.name() == "task:removed").await;
    let event = seen.last().unwrap().json();
    assert_eq!((event["taskId"].as_str(), event["title"].as_str()), (Some(second.as_str()), Some("Second")));

    // Running: refused until it is killed; then deleted.
    assert_eq!(s.post(&format!("/api/v1/tasks/{first}/queue"), &[], json!({})).await.status, 200);
    let orchestrator = s.state.orchestrator.clone();
    let driving = tokio::spawn(async move { orchestrator.run_until_idle().await });
    tokio::time::timeout(Duration::from_secs(30), async {
        while llm.requests().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the task's run reaches the model");
    let running = s.delete(&format!("/api/v1/tasks/{first}"), &[]).await;
    assert_eq!(running.status, 409, "{}", running.text);
    assert!(running.text.contains("kill it first"), "{}", running.text);
    assert_eq!(s.get(&format!("/api/v1/tasks/{first}"), &[]).await.json()["data"]["status"], "in_progress");

    assert_eq!(s.post(&format!("/api/v1/tasks/{first}/kill"), &[], json!({})).await.status, 200);
    driving.await.unwrap().unwrap();
    assert_eq!(s.get(&format!("/api/v1/tasks/{first}"), &[]).await.json()["data"]["status"], "failed");
    assert_eq!(s.delete(&format!("/api/v1/tasks/{first}"), &[]).await.status, 200);
    let left = s.get("/api/v1/tasks", &[]).await.json();
    assert_eq!(left["data"]["tasks"], json!([]), "{left}");
}
