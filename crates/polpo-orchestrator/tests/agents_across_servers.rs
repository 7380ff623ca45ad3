//! An agent's `maxConcurrency` holds across servers: two orchestrators (each its own runtime,
//! store connection pool and worker id, like two `polpo serve`) sharing one PostgreSQL never run
//! more of the agent's tasks at once than its limit, because the store counts the agent's
//! claimed and running tasks in the claim itself. The model is the strict scripted fake.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use polpo_core::tasks::{Task, TaskStatus};
use polpo_orchestrator::Orchestrator;
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};

/// Whether a model request carries a tool's answer (the run goes on after a tool call).
fn continues_a_run(body: &Value) -> bool {
    body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool")
}

/// The task (`job 0`, `job 1`, …) a model request works on.
fn task_of(body: &Value) -> String {
    let text = body["messages"].to_string();
    let at = text.find("Task: job ").expect("a task's request");
    text[at + 6..at + 11].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_run_an_agents_tasks_one_at_a_time_when_its_limit_is_one() {
    const TASKS: usize = 3;
    let schema = PgSchema::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Each task: a `write` call held a while (so the other server's passes come while it runs),
    // then the answer.
    let llm = FakeLlm::start((0..TASKS).flat_map(|i| {
        [
            Turn::tool_calls(vec![("write", json!({"path": format!("out/{i}.txt"), "content": "x"}))]).delay(300),
            Turn::text("Written."),
        ]
    }))
    .await
    .unwrap();
    let settings =
        json!({"storage": "postgres", "databaseUrl": schema.url(), "providers": {"fake": {"baseUrl": llm.base_url()}}});
    ProjectFixture::new(dir.path(), settings)
        .unwrap()
        .agent("writer", json!({"model": "fake/m", "allowedTools": ["write"], "maxConcurrency": 1}), "You write files.")
        .unwrap();
    let first = Orchestrator::open(dir.path()).unwrap().init().await.unwrap();
    let second = Orchestrator::open(dir.path()).unwrap().init().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let mut task = Task::new(format!("t{i}"), format!("job {i}"), "Write your file.", chrono::Utc::now());
        task.assign_to = Some("writer".into());
        ids.push(first.create_task(task).await.unwrap().task.id);
    }

    // Both servers claim at once, then each keeps passing while the other's task runs: the
    // second one starts a pass whenever a task is running.
    let busy = async {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                second.run_until_idle().await.unwrap();
                let mut open = 0;
                for id in &ids {
                    open += usize::from(second.task(id).await.unwrap().task.status != TaskStatus::Done);
                }
                if open == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("every task done")
    };
    let (done, ()) = tokio::join!(first.run_until_idle(), busy);
    done.unwrap();

    // Each task's second model call (after its `write`) came before any other task's first:
    // never two runs of `writer` at once, whichever server ran them.
    let bodies: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 2 * TASKS, "two model calls per task");
    for pair in bodies.chunks(2) {
        assert!(!continues_a_run(&pair[0]) && continues_a_run(&pair[1]), "runs never overlapped");
        assert_eq!(task_of(&pair[0]), task_of(&pair[1]), "runs never overlapped");
    }
    for i in 0..TASKS {
        assert!(dir.path().join(format!("out/{i}.txt")).exists());
    }
    drop((first, second));
    schema.drop_schema().await.unwrap();
}
