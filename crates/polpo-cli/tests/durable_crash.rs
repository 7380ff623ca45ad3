//! The promise of durable runs, against the real binary: `polpo serve` is killed with SIGKILL
//! in the middle of a multi-turn run with `write` tools, started again on the same project,
//! and the run completes by itself — each write effect applied exactly once on disk, and the
//! client's reconnected event stream without gaps or duplicates. On the file store and on
//! PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Frame, RunEvents, ServerProcess, builder_project};

/// Leases lapse after 1 s, so the restarted server takes the run over quickly.
const LEASE_MS: &str = "1000";

fn append(line: &str) -> Turn {
    Turn::tool_calls(vec![("bash", json!({"command": format!("echo {line} >> log.txt")}))])
}

async fn killed_mid_run_and_restarted_the_run_completes_with_each_effect_once(settings: Value) {
    // Turns 1–2 write; the third model call hangs (the server is killed during it); after the
    // restart the run asks the model again and gets turn 4 (another write) and the answer.
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        append("one"),
        append("two"),
        Turn::text("lost with the process").stall_after(1),
        append("three"),
        Turn::text("Built."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    builder_project(dir.path(), settings);
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", LEASE_MS)];

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let body = json!({"agent": "builder", "stream": true, "messages": [{"role": "user", "content": "Build it"}], "polpo": {"delivery": {"onDisconnect": "continue"}}});
    let chat =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", first.url)).json(&body).send().await.unwrap();
    assert_eq!(chat.status(), 200);
    let run = chat.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();

    // The client follows the run until the third model call is under way.
    let mut seen: Vec<Frame> = Vec::new();
    let mut events = RunEvents::open(&first.url, &run, None).await;
    let followed = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(frame) = events.next().await {
            let third_call = frame.1["type"] == "turn.started" && frame.1["data"]["turn"] == 3;
            seen.push(frame);
            if third_call {
                return;
            }
        }
        panic!("the stream ended before the third model call");
    })
    .await;
    followed.expect("the run reaches its third model call");
    drop(first); // SIGKILL (Child::kill), then reaped
    drop(chat);

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    let last = seen.last().unwrap().0;
    let mut events = RunEvents::open(&second.url, &run, Some(last)).await;
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(frame) = events.next().await {
            let done = ["run.completed", "run.failed", "run.paused", "run.cancelled"]
                .contains(&frame.1["type"].as_str().unwrap_or_default());
            seen.push(frame);
            if done {
                return;
            }
        }
    })
    .await;
    finished.expect("the restarted server finishes the run");

    let types: Vec<&str> = seen.iter().map(|(_, e)| e["type"].as_str().unwrap()).collect();
    let last_event = &seen.last().unwrap().1;
    assert_eq!(last_event["type"], "run.completed", "{types:?}");
    assert_eq!(last_event["data"]["content"], "Built.");
    assert!(types.contains(&"run.resumed"), "{types:?}");
    let seqs: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=seen.len() as u64).collect::<Vec<_>>(), "the reconnected stream has no gaps or duplicates");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("log.txt")).unwrap(),
        "one\ntwo\nthree\n",
        "each write effect applied exactly once"
    );
    assert_eq!(llm.requests().len(), 5);

    // The stored status follows the terminal event.
    let status = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let run_json: Value =
                reqwest::get(format!("{}/v1/runs/{run}", second.url)).await.unwrap().json().await.unwrap();
            if run_json["data"]["status"] != "running" {
                return run_json["data"]["status"].clone();
            }
        }
    })
    .await
    .expect("the run's status is stored");
    assert_eq!(status, "completed");
}

/// Killed while a `write` call runs: after the restart nobody knows whether it took effect, so
/// the run pauses (`effect_unconfirmed`) instead of repeating it; a person confirms it over
/// HTTP and the run finishes, the effect still applied once.
async fn killed_during_a_write_the_run_pauses_until_reconciled(settings: Value) {
    polpo_llm::install_crypto_provider();
    // The call appends, then waits (bounded) on a gate that never opens: the kill lands
    // after the effect and before its result is recorded.
    let command = "echo one >> log.txt; for i in $(seq 300); do [ -f gate ] && break; sleep 0.02; done";
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", json!({"command": command}))]),
        Turn::text("Confirmed and finished."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    builder_project(dir.path(), settings);
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", LEASE_MS)];

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let body = json!({"agent": "builder", "messages": [{"role": "user", "content": "Append one"}], "polpo": {"delivery": {"onDisconnect": "continue"}}, "stream": true});
    let chat =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", first.url)).json(&body).send().await.unwrap();
    let run = chat.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    let mut events = RunEvents::open(&first.url, &run, None).await;
    let mut seen: Vec<Frame> = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(frame) = events.next().await {
            let started = frame.1["type"] == "tool.started";
            seen.push(frame);
            if started {
                return;
            }
        }
    })
    .await
    .expect("the write call starts");
    // Wait for the effect itself (the file line), not for time.
    let log = dir.path().join("log.txt");
    tokio::time::timeout(Duration::from_secs(10), async {
        while std::fs::read_to_string(&log).unwrap_or_default() != "one\n" {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the effect happens");
    drop(first);
    drop(chat);

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    let mut events = RunEvents::open(&second.url, &run, Some(seen.last().unwrap().0)).await;
    let paused = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(frame) = events.next().await {
            let kind = frame.1["type"].as_str().unwrap_or_default().to_owned();
            seen.push(frame);
            if ["run.paused", "run.completed", "run.failed"].contains(&kind.as_str()) {
                return seen.last().unwrap().1.clone();
            }
        }
        panic!("the stream ended without a verdict");
    })
    .await
    .expect("the restarted server decides");
    assert_eq!(paused["type"], "run.paused", "{paused}");
    assert_eq!(paused["data"]["code"], "effect_unconfirmed");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\n", "the uncertain write was not repeated");

    let key = paused["data"]["detail"]["key"].as_str().unwrap();
    let reconcile = json!({"key": key, "outcome": "applied", "result": "appended"});
    let reply = reqwest::Client::new()
        .post(format!("{}/v1/runs/{run}/reconcile", second.url))
        .json(&reconcile)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let mut events = RunEvents::open(&second.url, &run, Some(seen.last().unwrap().0)).await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(frame) = events.next().await {
            let done = frame.1["type"] == "run.completed";
            seen.push(frame);
            if done {
                return;
            }
        }
        panic!("the stream ended before the run completed");
    })
    .await
    .expect("the reconciled run completes");
    assert_eq!(seen.last().unwrap().1["data"]["content"], "Confirmed and finished.");
    let seqs: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=seen.len() as u64).collect::<Vec<_>>(), "no gaps or duplicates across both servers");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\n");
    assert_eq!(
        llm.requests().last().unwrap().body["messages"].as_array().unwrap().last().unwrap()["content"],
        "appended"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_a_write_on_the_file_store() {
    killed_during_a_write_the_run_pauses_until_reconciled(json!({"storage": "file"})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_a_write_on_postgres() {
    support::on_postgres(killed_during_a_write_the_run_pauses_until_reconciled).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_run_on_the_file_store() {
    killed_mid_run_and_restarted_the_run_completes_with_each_effect_once(json!({"storage": "file"})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_run_on_postgres() {
    support::on_postgres(killed_mid_run_and_restarted_the_run_completes_with_each_effect_once).await;
}
