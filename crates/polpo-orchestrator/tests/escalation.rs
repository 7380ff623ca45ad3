//! `retryPolicy.escalateModel`: once `escalateAfter` retries are used, the task's next attempt
//! asks that model instead of the agent's own — through the orchestrator on a real SQLite
//! store, the model replaced by the strict scripted fake, which records the model asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_core::tasks::{Mission, TaskStatus};
use polpo_orchestrator::Orchestrator;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_past_escalate_after_asks_the_escalation_model() {
    let dir = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start([
        Turn::error(
            400,
            r#"{"error": {"message": "the small model cannot do this", "type": "invalid_request_error"}}"#,
        ),
        Turn::text("Done with the bigger model."),
    ])
    .await
    .unwrap();
    let settings = json!({"storage": "sqlite", "providers": {"fake": {"baseUrl": llm.base_url()}}});
    ProjectFixture::new(dir.path(), settings)
        .unwrap()
        .agent("worker", json!({"model": "fake/small"}), "You do the work.")
        .unwrap();
    let orchestrator = Orchestrator::open(dir.path()).unwrap().init().await.unwrap();

    let now = chrono::Utc::now();
    let mission: Mission = serde_json::from_value(json!({
        "id": "m1", "name": "escalation", "status": "draft", "createdAt": now, "updatedAt": now,
        "data": {"tasks": [{
            "title": "Hard", "description": "Do the hard thing.", "assignTo": "worker",
            "maxRetries": 2, "retryPolicy": {"escalateAfter": 1, "escalateModel": "fake/big"}
        }]}
    }))
    .unwrap();
    orchestrator.create_mission(mission).await.unwrap();
    orchestrator.execute_mission("m1").await.unwrap();
    orchestrator.run_until_idle().await.unwrap();

    let asked: Vec<String> = llm.requests().into_iter().map(|r| r.body["model"].as_str().unwrap().to_owned()).collect();
    assert_eq!(asked, ["small", "big"], "the first attempt asks the agent's model, the retry the escalation model");
    let report = orchestrator.mission_report("m1").await.unwrap();
    let task = report.tasks.iter().find(|t| t.title == "Hard").unwrap();
    assert_eq!(task.status, TaskStatus::Done, "{report:?}");
}
