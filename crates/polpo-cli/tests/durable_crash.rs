//! The promise of durable runs, against the real binary: `polpo serve` is killed with SIGKILL
//! in the middle of a multi-turn run with `write` tools, started again on the same project,
//! and the run completes by itself — each write effect applied exactly once on disk, and the
//! client's reconnected event stream without gaps or duplicates. On the file store and on
//! PostgreSQL. A write still running when the server dies dies with it, and the restarted
//! server shows the paused call so an operator decides whether it runs (`not_applied`) or not
//! (`skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Frame, RunEvents, ServerProcess, builder_project, polpo, start_builder_run};

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
    let (chat, run) = start_builder_run(&first.url, "Build it").await;

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
    let (chat, run) = start_builder_run(&first.url, "Append one").await;
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

/// The pids whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains(marker))
        })
        .collect()
}

/// Read `events` into `seen` until an event of one of `types` (returned).
async fn read_until(events: &mut RunEvents, seen: &mut Vec<Frame>, types: &[&str]) -> Value {
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(frame) = events.next().await {
            let hit = types.contains(&frame.1["type"].as_str().unwrap_or_default());
            seen.push(frame);
            if hit {
                return seen.last().unwrap().1.clone();
            }
        }
        panic!("the stream ended before any of {types:?}");
    })
    .await;
    found.unwrap_or_else(|_| panic!("none of {types:?} within 60 s"))
}

/// `polpo serve` is SIGKILLed while a write call still waits to append its line: the call's
/// process dies with the server (nothing appends behind the operator's back), the restarted
/// server pauses the run and shows the call itself (REST and `polpo runs get`), and the
/// operator's `outcome` decides: `not-applied` runs the call now, once; `skip` never runs it.
async fn a_write_cut_by_a_crash_runs_only_if_the_operator_says_so(settings: Value, outcome: &str) {
    polpo_llm::install_crypto_provider();
    let marker = format!("polpo-crash-marker-{}-{outcome}", std::process::id());
    // Waits for `gate` (bounded at 60 s, far beyond the test), then appends.
    let command =
        format!("for i in $(seq 3000); do [ -f gate ] && break; sleep 0.02; done; echo one >> log.txt # {marker}");
    let answer = if outcome == "skip" { "Left it out." } else { "Appended after the crash." };
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": command}))]), Turn::text(answer)])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    builder_project(dir.path(), settings);
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", LEASE_MS)];

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let (chat, run) = start_builder_run(&first.url, "Append one").await;
    let mut events = RunEvents::open(&first.url, &run, None).await;
    let mut seen: Vec<Frame> = Vec::new();
    read_until(&mut events, &mut seen, &["tool.started"]).await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while processes_with(&marker).is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the write call's process runs");
    drop(first); // SIGKILL
    drop(chat);
    tokio::time::timeout(Duration::from_secs(10), async {
        while !processes_with(&marker).is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the killed server's tool processes are gone: {:?}", processes_with(&marker)));
    // Were any of them still waiting, the gate would let it append now.
    std::fs::write(dir.path().join("gate"), "").unwrap();
    let log = dir.path().join("log.txt");

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    let mut events = RunEvents::open(&second.url, &run, Some(seen.last().unwrap().0)).await;
    let paused = read_until(&mut events, &mut seen, &["run.paused", "run.completed", "run.failed"]).await;
    assert_eq!(paused["type"], "run.paused", "{paused}");
    let detail = &paused["data"]["detail"];
    assert_eq!(detail["tool"], "bash");
    assert_eq!(detail["arguments"]["command"], command.as_str(), "the pause shows the call's arguments");
    assert!(detail["startedAt"].is_string(), "{detail}");
    let key = detail["key"].as_str().unwrap().to_owned();
    assert!(!log.exists(), "nothing appended before the operator decided");

    // The run as REST shows it, and as `polpo runs get` prints it.
    let got: Value = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let got: Value = reqwest::get(format!("{}/v1/runs/{run}", second.url)).await.unwrap().json().await.unwrap();
            if got["data"]["status"] == "paused" {
                return got;
            }
        }
    })
    .await
    .expect("the run is stored as paused");
    assert_eq!(got["data"]["pause"]["code"], "effect_unconfirmed");
    assert_eq!(got["data"]["pause"]["detail"], *detail, "GET /v1/runs/{{id}} shows the paused call");
    let alias: Value = reqwest::get(format!("{}/api/v1/runs/{run}", second.url)).await.unwrap().json().await.unwrap();
    assert_eq!(alias["data"]["pause"]["detail"]["key"], key.as_str());
    let shown = polpo(&["runs", "get", &run, "--url", &second.url]).output().unwrap();
    let shown_text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{shown_text}{}", String::from_utf8_lossy(&shown.stderr));
    assert!(shown_text.contains("call     bash ") && shown_text.contains(&marker), "{shown_text}");
    assert!(shown_text.contains(&format!("effect   {key}")), "{shown_text}");

    let decided = polpo(&["runs", "reconcile", &run, outcome, "--url", &second.url]).output().unwrap();
    let decided_text = String::from_utf8_lossy(&decided.stdout);
    assert!(decided.status.success(), "{decided_text}{}", String::from_utf8_lossy(&decided.stderr));
    assert!(decided_text.contains(&key), "{decided_text}");
    let done = read_until(&mut events, &mut seen, &["run.completed", "run.failed", "run.paused"]).await;
    assert_eq!(done["type"], "run.completed", "{done}");
    assert_eq!(done["data"]["content"], answer);
    let types: Vec<&str> = seen.iter().map(|(_, e)| e["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"run.reconciled"), "{types:?}");
    let seqs: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=seen.len() as u64).collect::<Vec<_>>(), "no gaps or duplicates across both servers");
    let told = llm.requests().last().unwrap().body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    if outcome == "skip" {
        assert!(!log.exists(), "a skipped call never runs");
        assert!(told.as_str().unwrap_or_default().contains("not run"), "the model is told: {told}");
    } else {
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\n", "the call ran exactly once, after reconcile");
    }
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_cut_by_a_crash_runs_once_when_reconciled_not_applied() {
    a_write_cut_by_a_crash_runs_only_if_the_operator_says_so(json!({"storage": "file"}), "not-applied").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_cut_by_a_crash_never_runs_when_skipped() {
    a_write_cut_by_a_crash_runs_only_if_the_operator_says_so(json!({"storage": "file"}), "skip").await;
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
