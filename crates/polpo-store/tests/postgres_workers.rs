//! PostgreSQL as the shared state of several workers: two processes claiming from one run
//! queue never get the same run, and a created run wakes a listening worker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use polpo_store::{NewRun, RunStore, SystemClock};
use sqlx::Row;

const WORKER_ENV: &str = "POLPO_STORE_CLAIM_WORKER";
const RUNS: usize = 1000;
const TTL: Duration = Duration::from_secs(600);

/// Worker mode: does nothing in a normal run; in a child, claims runs until the queue is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else { return };
    let (schema, owner) = spec.split_once(':').unwrap();
    let store = support::pg_store(schema, Arc::new(SystemClock)).await.unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let mut empty = 0;
    while empty < 3 {
        match store.claim_next_run(owner, TTL).await.unwrap() {
            Some(lease) => {
                empty = 0;
                writeln!(out, "claimed {}", lease.run_id).unwrap();
            }
            None => empty += 1,
        }
    }
    writeln!(out, "done").unwrap();
    out.flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_never_claim_the_same_run() {
    let schema = support::create_schema().await;
    let store = support::pg_store(&schema, Arc::new(SystemClock)).await.unwrap();
    for _ in 0..RUNS {
        store.create_run(NewRun { agent: "a".into(), ..Default::default() }).await.unwrap();
    }
    let worker_schema = schema.clone();
    let race = tokio::task::spawn_blocking(move || {
        let mut workers: Vec<_> = ["w1", "w2"]
            .into_iter()
            .map(|owner| {
                let mut child = Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", "claim_worker", "--nocapture", "--test-threads=1"])
                    .env(WORKER_ENV, format!("{worker_schema}:{owner}"))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                let lines = BufReader::new(child.stdout.take().unwrap()).lines();
                (owner, child, lines)
            })
            .collect();
        // Start both together so they really compete.
        for (_, _, lines) in &mut workers {
            for line in lines.by_ref() {
                // libtest may print "test claim_worker ... " on the same line first.
                if line.unwrap().ends_with("ready") {
                    break;
                }
            }
        }
        for (_, child, _) in &mut workers {
            child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        }
        workers
            .into_iter()
            .map(|(owner, mut child, lines)| {
                let claimed: Vec<String> = lines
                    .map(|l| l.unwrap())
                    .filter_map(|l| l.split_once("claimed ").map(|(_, run)| run.to_owned()))
                    .collect();
                assert!(child.wait().unwrap().success());
                (owner, claimed)
            })
            .collect::<Vec<_>>()
    });
    let outputs = tokio::time::timeout(Duration::from_secs(300), race).await.expect("workers did not finish").unwrap();

    let mut claims: HashMap<String, &str> = HashMap::new();
    for (owner, claimed) in &outputs {
        for run in claimed {
            assert!(claims.insert(run.clone(), owner).is_none(), "run {run} claimed twice");
        }
    }
    // A claimer racing the other may stop on a spurious "empty"; sweep what is left.
    while let Some(lease) = store.claim_next_run("sweeper", TTL).await.unwrap() {
        assert!(claims.insert(lease.run_id, "sweeper").is_none());
    }
    assert_eq!(claims.len(), RUNS, "every run claimed exactly once");
    let per_worker: Vec<usize> = outputs.iter().map(|(_, c)| c.len()).collect();
    println!("claims per worker: {per_worker:?}, left for the sweeper: {}", RUNS - per_worker.iter().sum::<usize>());
    // The database agrees with what each worker was told.
    let rows = sqlx::query("SELECT run_id, owner FROM run_leases").fetch_all(store.pool()).await.unwrap();
    assert_eq!(rows.len(), RUNS);
    for row in rows {
        let (run, owner): (String, String) = (row.get("run_id"), row.get("owner"));
        assert_eq!(claims[&run], owner);
    }
    support::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_events_wake_a_follower_in_another_connection() {
    let schema = support::create_schema().await;
    let follower = support::pg_store(&schema, Arc::new(SystemClock)).await.unwrap();
    let writer = support::pg_store(&schema, Arc::new(SystemClock)).await.unwrap();
    let run = writer.create_run(NewRun { agent: "a".into(), ..Default::default() }).await.unwrap();
    let mut listener = follower.event_listener().await.unwrap();
    writer.append_event(&run.id, "run.started", serde_json::json!({})).await.unwrap();
    let expected = format!("{}:1", run.id);
    let woke = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if listener.recv().await.unwrap().payload() == expected {
                break;
            }
        }
    })
    .await;
    assert!(woke.is_ok(), "the follower was not woken");
    assert_eq!(follower.events_after(&run.id, 0, 10).await.unwrap().len(), 1, "the announced event is readable");
    support::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_run_wakes_a_listening_worker() {
    let schema = support::create_schema().await;
    let worker = support::pg_store(&schema, Arc::new(SystemClock)).await.unwrap();
    let mut listener = worker.run_listener().await.unwrap();
    let server = support::pg_store(&schema, Arc::new(SystemClock)).await.unwrap();
    let run = server.create_run(NewRun { agent: "a".into(), ..Default::default() }).await.unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(30), async {
        // The channel is database-wide: other tests' runs may arrive first.
        loop {
            let n = listener.recv().await.unwrap();
            if n.payload() == run.id {
                break;
            }
        }
    })
    .await;
    assert!(woke.is_ok(), "the worker was not woken");
    assert_eq!(worker.claim_next_run("worker", TTL).await.unwrap().unwrap().run_id, run.id);
    support::drop_schema(&schema).await;
}
