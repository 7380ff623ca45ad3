//! Programmatic use (issue 18 item 5): a program builds a runtime over a real project on a real
//! SQLite store, hands it to `Orchestrator::with_runtime`, adds two dependent tasks, and
//! `run_until_idle` runs both, in order, through the scripted fake model.

use polpo_core::tasks::{Task, TaskStatus};
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_orchestrator::Orchestrator;
use polpo_store::{StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

#[tokio::test]
async fn a_program_adds_dependent_tasks_and_runs_them_until_idle() {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "sqlite"}))
        .unwrap()
        .agent("writer", json!({"model": "openai/fake-model"}), "You write plans.")
        .unwrap();
    let llm = FakeLlm::start([Turn::text("PLAN: step one"), Turn::text("REVIEW: looks good")]).await.unwrap();

    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(StoreKind::Sqlite, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let providers = Providers::new(BTreeMap::new(), llm.openai_env());
    let runtime = Runtime::new(Loaded::new(project).unwrap(), providers, store);
    let orchestrator = Orchestrator::with_runtime(Arc::new(runtime));

    let now = chrono::Utc::now();
    let mut plan = Task::new("plan", "Write the plan", "Write a plan for the launch", now);
    plan.assign_to = Some("writer".into());
    // `review` waits for `plan` although it would be claimed first by priority.
    let mut review = Task::new("review", "Review the plan", "Review the plan you wrote", now);
    review.assign_to = Some("writer".into());
    review.depends_on = vec!["plan".into()];
    review.priority = 10.0;
    orchestrator.create_task(plan).await.unwrap();
    orchestrator.create_task(review).await.unwrap();

    orchestrator.run_until_idle().await.unwrap();

    for id in ["plan", "review"] {
        let stored = orchestrator.task(id).await.unwrap();
        assert_eq!(stored.task.status, TaskStatus::Done, "task {id}: {:?}", stored.task.result);
    }
    let bodies: Vec<String> = llm.requests().iter().map(|r| r.body.to_string()).collect();
    assert_eq!(bodies.len(), 2, "one model call per task: {bodies:#?}");
    assert!(bodies[0].contains("Write a plan for the launch"), "first call runs `plan`: {}", bodies[0]);
    assert!(bodies[1].contains("Review the plan you wrote"), "second call runs `review`: {}", bodies[1]);
    assert_eq!(llm.remaining(), 0);

    // The work is durable: a second program over the same project sees it done.
    drop(orchestrator);
    let store = open_store(StoreKind::Sqlite, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let reopened = store.tasks.get_task("review").await.unwrap().expect("the task is in the SQLite file");
    assert_eq!(reopened.task.status, TaskStatus::Done);
}
