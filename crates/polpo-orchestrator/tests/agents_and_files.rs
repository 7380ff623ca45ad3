//! An agent's `maxConcurrency` holds its tasks back while it is busy, and the files a task's
//! run writes and the outcomes it registers show in its result and its mission's report: through the orchestrator on a real
//! SQLite store, the model replaced by the strict scripted fake.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_core::tasks::{Mission, MissionStatus, TaskStatus};
use polpo_orchestrator::Orchestrator;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};

/// Whether a model request carries a tool's answer (the run goes on after a tool call).
fn continues_a_run(body: &Value) -> bool {
    body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool")
}

/// The task title a model request works on.
fn task_of(body: &Value) -> &'static str {
    let text = body["messages"].to_string();
    match (text.contains("Task: First"), text.contains("Task: Second")) {
        (true, false) => "First",
        (false, true) => "Second",
        _ => panic!("a request for one task: {text}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_max_concurrency_one_runs_its_tasks_one_after_the_other_and_the_report_lists_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start([
        // Held a while, so a second run started meanwhile would send its request before this
        // answer (the order asserted below does not depend on it: it makes a broken limit show).
        Turn::tool_calls(vec![
            ("write", json!({"path": "out/a.txt", "content": "a"})),
            ("register_outcome", json!({"type": "json", "label": "Stats", "data": {"lines": 1}, "tags": ["count"]})),
            // Refused by the tool (a text outcome needs `text`): not registered.
            ("register_outcome", json!({"type": "text", "label": "Empty"})),
        ])
        .delay(300),
        Turn::text("Wrote a."),
        Turn::tool_calls(vec![("write", json!({"path": "out/b.txt", "content": "b"}))]),
        Turn::text("Wrote b."),
    ])
    .await
    .unwrap();
    let settings = json!({"storage": "sqlite", "providers": {"fake": {"baseUrl": llm.base_url()}}});
    ProjectFixture::new(dir.path(), settings)
        .unwrap()
        .agent(
            "writer",
            json!({"model": "fake/m", "allowedTools": ["write", "register_outcome"], "maxConcurrency": 1}),
            "You write files.",
        )
        .unwrap();
    let orchestrator = Orchestrator::open(dir.path()).unwrap().init().await.unwrap();

    // Two independent tasks of one mission, both for `writer`.
    let now = chrono::Utc::now();
    let mission: Mission = serde_json::from_value(json!({
        "id": "m1", "name": "files", "status": "draft", "createdAt": now, "updatedAt": now,
        "data": {"tasks": [
            {"title": "First", "description": "Write a.", "assignTo": "writer"},
            {"title": "Second", "description": "Write b.", "assignTo": "writer"}
        ]}
    }))
    .unwrap();
    orchestrator.create_mission(mission).await.unwrap();
    orchestrator.execute_mission("m1").await.unwrap();
    orchestrator.run_until_idle().await.unwrap();

    // Each task's second model call (after its `write`) came before the other task's first:
    // the second task started only once the first had its answer.
    let bodies: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 4, "two model calls per task: {bodies:#?}");
    let shape: Vec<(&str, bool)> = bodies.iter().map(|b| (task_of(b), continues_a_run(b))).collect();
    let (first, second) = (shape[0].0, shape[2].0);
    assert_ne!(first, second);
    assert_eq!(shape, [(first, false), (first, true), (second, false), (second, true)], "runs never overlapped");

    // The files are on disk, in each task's result and in the mission report.
    assert_eq!(std::fs::read_to_string(dir.path().join("out/a.txt")).unwrap(), "a");
    let report = orchestrator.mission_report("m1").await.unwrap();
    assert_eq!(report.status, MissionStatus::Completed, "{report:?}");
    assert_eq!(report.files_created, ["out/a.txt", "out/b.txt"]);
    assert!(report.files_edited.is_empty());
    let row = |title: &str| report.tasks.iter().find(|t| t.title == title).unwrap().clone();
    assert_eq!(row(first).files_created, ["out/a.txt"]);
    assert_eq!(row(second).files_created, ["out/b.txt"]);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["filesCreated"], json!(["out/a.txt", "out/b.txt"]), "the report's wire names: {json}");
    assert_eq!(json["tasks"][0]["filesEdited"], json!([]), "{json}");
    for t in &report.tasks {
        assert_eq!(t.status, TaskStatus::Done);
    }

    // The outcome the first task's run registered is in its row and the report's list, once;
    // the one the tool refused is not.
    let outcomes = serde_json::to_value(&row(first).outcomes).unwrap();
    assert_eq!(outcomes.as_array().unwrap().len(), 1, "{outcomes}");
    assert_eq!(outcomes[0]["type"], "json");
    assert_eq!(outcomes[0]["label"], "Stats");
    assert_eq!(outcomes[0]["data"], json!({"lines": 1}));
    assert_eq!(outcomes[0]["tags"], json!(["count"]));
    assert_eq!(outcomes[0]["producedBy"], "writer");
    assert!(outcomes[0]["producedAt"].is_string(), "{outcomes}");
    assert!(row(second).outcomes.is_empty());
    assert_eq!(json["outcomes"], outcomes, "{json}");
}
