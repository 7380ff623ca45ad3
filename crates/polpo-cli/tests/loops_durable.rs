//! Durable loop runs against the real binary: a loop whose tool step appends a line and whose
//! human step then waits is stored `awaiting_human`; `polpo serve` is killed with SIGKILL and
//! started again on the same project; the restarted server resumes the run at the human step
//! (the tool step is not run again), a person answers over REST and the run completes — the
//! line appears once. Cancelling a waiting run stores it `cancelled`. On the file store and on
//! PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::{ServerProcess, on_postgres};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(60);

fn project(dir: &Path, settings: Value) {
    let flow = json!({
        "name": "append-then-ask",
        "start": "append",
        "steps": {
            "append": {"type": "tool", "tool": "bash", "input": {"command": "echo one >> log.txt"}, "next": "review"},
            "review": {"type": "human", "output": {"schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}, "next": "end"}
        }
    });
    ProjectFixture::new(dir, settings)
        .unwrap()
        .agent(
            "builder",
            json!({"model": "openai/fake-model", "allowedTools": ["bash"], "assignedLoops": ["append-then-ask"]}),
            "You build things.",
        )
        .unwrap()
        .project_loop("append-then-ask", flow)
        .unwrap();
}

/// Start a loop chat (streamed, so the run id arrives at once) and return the run id and the
/// open response (dropping it cancels the run).
async fn start_loop(url: &str) -> (String, reqwest::Response) {
    let body = json!({"agent": "builder", "loop": "append-then-ask", "stream": true,
        "messages": [{"role": "user", "content": "Append and ask"}]});
    let response = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    (response.headers()["x-polpo-loop-run-id"].to_str().unwrap().to_owned(), response)
}

async fn loop_run(url: &str, id: &str) -> Value {
    let response = reqwest::get(format!("{url}/api/v1/loop-runs/{id}")).await.unwrap();
    assert_eq!(response.status(), 200);
    response.json::<Value>().await.unwrap()["data"].clone()
}

/// The stored run once `done` holds for it (polled, bounded by [`EVENTUALLY`]).
async fn until(url: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    tokio::time::timeout(EVENTUALLY, async {
        loop {
            let run = loop_run(url, id).await;
            if done(&run) {
                return run;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the loop run reaches the expected state")
}

fn types(run: &Value) -> Vec<String> {
    run["trace"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect()
}

async fn killed_while_a_human_step_waits_the_run_resumes_without_rerunning_the_tool(settings: Value) {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), settings);
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")];

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let (id, chat) = start_loop(&first.url).await;
    let waiting = until(&first.url, &id, |r| r["status"] == "awaiting_human").await;
    assert_eq!(waiting["state"]["frontier"], json!(["review"]));
    assert_eq!(waiting["human"]["step"], "review");
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\n");
    drop(first); // SIGKILL (Child::kill), then reaped
    drop(chat);

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    let resumed =
        until(&second.url, &id, |r| r["status"] == "awaiting_human" && types(r).iter().any(|t| t == "loop.resume"))
            .await;
    assert_eq!(resumed["state"]["frontier"], json!(["review"]));
    let client = reqwest::Client::new();
    let human = format!("{}/api/v1/loop-runs/{id}/human", second.url);
    let answered = client.post(&human).json(&json!({"output": {"ok": true}})).send().await.unwrap();
    assert_eq!(answered.status(), 200);
    let done = until(&second.url, &id, |r| r["status"] != "awaiting_human" && r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({"ok": true}));
    assert_eq!(done["state"]["context"]["review"], json!({"ok": true}));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("log.txt")).unwrap(),
        "one\n",
        "the tool step before the checkpoint ran once"
    );
    let trace = types(&done);
    assert_eq!(trace.iter().filter(|t| *t == "tool.call").count(), 1, "{trace:?}");
    assert_eq!(trace.first().map(String::as_str), Some("loop.start"));
    assert_eq!(trace.last().map(String::as_str), Some("loop.end"));
    let ids: Vec<&str> = done["trace"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    let numbered: Vec<String> = (1..=ids.len()).map(|n| format!("trace-{n}")).collect();
    assert_eq!(ids, numbered, "the resumed trace goes on numbering where the stored one stopped");

    // Listed among completed runs; a waiting run can be cancelled once.
    let listed: Value =
        reqwest::get(format!("{}/api/v1/loop-runs?status=completed", second.url)).await.unwrap().json().await.unwrap();
    let runs = listed["data"]["loopRuns"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0]["id"].as_str(), runs[0]["loop"].as_str()), (Some(id.as_str()), Some("append-then-ask")));
    let (other, _open) = start_loop(&second.url).await;
    until(&second.url, &other, |r| r["status"] == "awaiting_human").await;
    let cancel = format!("{}/api/v1/loop-runs/{other}/cancel", second.url);
    let cancelled = client.post(&cancel).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
    assert_eq!(loop_run(&second.url, &other).await["status"], "cancelled");
    let again = client.post(&cancel).send().await.unwrap();
    assert_eq!(again.status(), 409);
    assert_eq!(again.json::<Value>().await.unwrap()["code"], "loop_run_finished");
    let late = client
        .post(format!("{}/api/v1/loop-runs/{other}/human", second.url))
        .json(&json!({"output": {"ok": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 404, "a cancelled run waits for nobody");
    let waiting: Value = reqwest::get(format!("{}/api/v1/loop-runs?status=awaiting_human", second.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(waiting["data"]["loopRuns"], json!([]));
    assert!(llm.requests().is_empty(), "a tool-and-human loop never asks the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_loop_run_survives_sigkill_at_a_human_step() {
    killed_while_a_human_step_waits_the_run_resumes_without_rerunning_the_tool(json!({"storage": "file"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_loop_run_survives_sigkill_at_a_human_step() {
    on_postgres(killed_while_a_human_step_waits_the_run_resumes_without_rerunning_the_tool).await;
}
