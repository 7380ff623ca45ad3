//! PostgreSQL as the shared state of several workers: two processes claiming from one run
//! queue never get the same run, a created run wakes a listening worker, the live event feed
//! keeps its order, and a server stalled inside a transaction cannot hold the others.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use polpo_store::shared::FEED_KEEP;
use polpo_store::{EventFeed, NewFeedEvent, NewRun, RunStore, SystemClock};
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

fn feed_event(n: usize) -> NewFeedEvent {
    NewFeedEvent { ts: chrono::Utc::now(), event: "test:event".into(), data: format!("{{\"n\":{n}}}") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_hands_out_ids_in_order_and_keeps_only_the_newest_events() {
    let schema = support::create_schema().await;
    let store = support::pg_store(&schema, Arc::new(SystemClock)).await.unwrap();
    let (_, start) = store.feed_tail(1).await.unwrap();
    let batch = 100;
    let mut last = start;
    let mut published = 0;
    while published < FEED_KEEP as usize + 3 * 256 {
        let events = (published..published + batch).map(feed_event).collect();
        let now = store.publish_feed(events).await.unwrap();
        assert_eq!(now, last + batch as u64, "a batch takes the next {batch} ids");
        last = now;
        published += batch;
    }
    let kept = store.feed_after(0, 1000).await.unwrap();
    let oldest = kept[0].id;
    assert!(oldest > start + 1, "the oldest events were pruned");
    assert!(last - oldest < FEED_KEEP + 256, "at most a prune step more than FEED_KEEP kept: {}", last - oldest);
    assert!(last - oldest >= FEED_KEEP - 1, "the newest FEED_KEEP events are kept: {}", last - oldest);
    // Each event sits at its own id, in the order it was published.
    for (i, event) in kept.iter().enumerate() {
        assert_eq!(event.id, oldest + i as u64);
        let n = (event.id - start - 1) as usize;
        assert_eq!(event.data, format!("{{\"n\":{n}}}"));
        assert_eq!(event.event, "test:event");
    }
    let (tail, tail_last) = store.feed_tail(3).await.unwrap();
    assert_eq!(tail_last, last);
    assert_eq!(tail.last().unwrap().id, last);
    support::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_stalled_inside_a_transaction_does_not_hold_other_servers_forever() {
    let schema = support::create_schema().await;
    let default = support::pg_store(&schema, Arc::new(SystemClock)).await.unwrap();
    let shown: String =
        sqlx::query("SHOW idle_in_transaction_session_timeout").fetch_one(default.pool()).await.unwrap().get(0);
    assert_eq!(shown, "10s", "a store's transactions cannot idle forever by default");

    // A URL's own setting wins (here a short one, so the test need not wait ten seconds).
    let options = sqlx::postgres::PgConnectOptions::from_str(&support::database_url())
        .unwrap()
        .options([("search_path", schema.as_str()), ("idle_in_transaction_session_timeout", "1s")]);
    let stalled = polpo_store::PgStore::connect_with(options, Arc::new(SystemClock)).await.unwrap();
    let shown: String =
        sqlx::query("SHOW idle_in_transaction_session_timeout").fetch_one(stalled.pool()).await.unwrap().get(0);
    assert_eq!(shown, "1s");
    // A server stopped in the middle of a write: it holds the feed's counter row and never
    // sends its next statement.
    let mut held = stalled.pool().begin().await.unwrap();
    sqlx::query("SELECT last_id FROM feed_counter FOR UPDATE").execute(&mut *held).await.unwrap();
    // Every other server's events wait for that lock only until the database ends the session.
    let published = tokio::time::timeout(Duration::from_secs(60), default.publish_feed(vec![feed_event(0)])).await;
    assert!(published.expect("the stalled transaction held the feed").is_ok());
    // The stalled server, waking, finds its write refused, not half done.
    let woke = sqlx::query("UPDATE feed_counter SET last_id = last_id + 1").execute(&mut *held).await;
    assert!(woke.is_err() || held.commit().await.is_err(), "a transaction past the timeout cannot commit");
    support::drop_schema(&schema).await;
}
