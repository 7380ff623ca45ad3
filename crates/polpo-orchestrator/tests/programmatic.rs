//! Programmatic use (issue 18 item 5): a program opens a project folder with
//! `Orchestrator::open(dir)?.init()` (the runtime `polpo serve` builds), or builds a runtime
//! itself and hands it to `Orchestrator::with_runtime`, adds tasks, and `run_until_idle` runs
//! them through the scripted fake model on a real SQLite store.

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

#[tokio::test]
async fn a_program_opens_a_project_folder_and_runs_its_tasks_like_serve() {
    let dir = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start([Turn::text("NOTES: written")]).await.unwrap();
    // The project's own provider entry, read by the same assembly as `polpo serve`.
    let settings = json!({"storage": "sqlite", "providers": {"fake": {"baseUrl": llm.base_url()}}});
    ProjectFixture::new(dir.path(), settings)
        .unwrap()
        .agent("writer", json!({"model": "fake/notes-model"}), "You write notes.")
        .unwrap();
    std::fs::create_dir_all(dir.path().join("docs")).unwrap();

    // Opened from a folder inside the project: the root is found above it.
    let orchestrator = Orchestrator::open(dir.path().join("docs")).unwrap().init().await.unwrap();
    let mut task = Task::new("notes", "Write notes", "Write the release notes", chrono::Utc::now());
    task.assign_to = Some("writer".into());
    orchestrator.create_task(task).await.unwrap();
    orchestrator.run_until_idle().await.unwrap();

    let stored = orchestrator.task("notes").await.unwrap();
    assert_eq!(stored.task.status, TaskStatus::Done, "{:?}", stored.task.result);
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["model"], "notes-model", "the project's provider served the agent's model");
    assert!(dir.path().join(".polpo/polpo.db").is_file(), "the settings' SQLite store holds the work");
}

#[test]
fn a_folder_with_a_broken_project_is_refused_naming_each_problem() {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({})).unwrap().agent("bad", json!({"model": 42}), "x").unwrap();
    let Err(e) = Orchestrator::open(dir.path()) else { panic!("a broken project must not open") };
    assert_eq!(e.code(), "invalid_input");
    assert!(e.to_string().contains("bad"), "{e}");
}
