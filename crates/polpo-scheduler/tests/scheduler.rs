//! The scheduler against real stores and the engine, the model replaced by the scripted fake
//! server: two schedulers on one PostgreSQL never fire an occurrence twice; a manual trigger
//! fires once per idempotency key; downtime follows the catch-up policy. Time is a
//! `ManualClock` shared by the stores, so every occurrence is exact.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use chrono::{DateTime, Duration, Utc};
use polpo_scheduler::{RunState, ScheduleRun, Scheduler};
use polpo_store::{ManualClock, PageRequest, StoreKind};
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tempfile::TempDir;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-29T00:59:50Z").unwrap().with_timezone(&Utc)
}

fn schedule(expression: &str, policy: Value) -> Value {
    json!({
        "timing": {"kind": "cron", "expression": expression, "timezone": "Europe/Rome"},
        "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}},
        "policy": policy
    })
}

/// One server: a store on `kind` at `url`, its runtime, run manager and scheduler.
async fn server(
    dir: &TempDir,
    kind: StoreKind,
    url: Option<&str>,
    clock: &Arc<ManualClock>,
    llm: &FakeLlm,
) -> Arc<Scheduler> {
    support::scheduler(common::runs(dir, kind, url, clock, llm).await)
}

async fn all_runs(scheduler: &Scheduler, id: &str) -> Vec<ScheduleRun> {
    scheduler.runs(id, &PageRequest::first(1000)).await.unwrap().items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_schedulers_on_one_postgres_fire_each_second_once() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start(std::iter::repeat_n(Turn::text("reported"), 20)).await.unwrap();
    let dir = common::project(&[("tick", schedule("* * * * * *", json!({"maxConcurrency": 100})))]);
    let schema = PgSchema::create().await.unwrap();
    let clock = Arc::new(ManualClock::new(start()));
    let a = server(&dir, StoreKind::Postgres, Some(&schema.url()), &clock, &llm).await;
    let b = server(&dir, StoreKind::Postgres, Some(&schema.url()), &clock, &llm).await;

    let (first_a, first_b) = tokio::join!(a.tick(), b.tick());
    assert_eq!(first_a.unwrap().fired + first_b.unwrap().fired, 0, "nothing before the schedule was first seen");
    let mut fired = 0;
    for _ in 0..20 {
        clock.advance(Duration::seconds(1));
        let (pa, pb) = tokio::join!(a.tick(), b.tick());
        fired += pa.unwrap().fired + pb.unwrap().fired;
    }
    a.settled().await;
    b.settled().await;

    assert_eq!(fired, 20);
    let runs = all_runs(&a, "tick").await;
    let instants: BTreeSet<_> = runs.iter().map(|r| r.scheduled_for).collect();
    assert_eq!((runs.len(), instants.len()), (20, 20), "one record per occurrence");
    assert_eq!(instants.first().copied(), Some(start() + Duration::seconds(1)));
    assert!(runs.iter().all(|r| r.status == RunState::Succeeded && r.run_id.is_some()), "{runs:?}");
    let owners: BTreeSet<_> = runs.iter().map(|r| r.claimed_by.as_str()).collect();
    assert!(!owners.is_empty());
    assert_eq!(llm.requests().len(), 20, "the model was asked once per occurrence");
    drop((a, b));
    schema.drop_schema().await.unwrap();
}

#[tokio::test]
async fn a_trigger_fires_once_per_idempotency_key() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start(std::iter::repeat_n(Turn::text("reported"), 2)).await.unwrap();
    let dir = common::project(&[("daily", schedule("0 9 * * *", json!({"maxConcurrency": 5})))]);
    let clock = Arc::new(ManualClock::new(start()));
    let s = server(&dir, StoreKind::Sqlite, None, &clock, &llm).await;

    let first = s.trigger("daily", "manual-check-2026-07-28").await.unwrap();
    let again = s.trigger("daily", "manual-check-2026-07-28").await.unwrap();
    s.settled().await;
    assert_eq!(first.run_id, again.run_id);
    let other = s.trigger("daily", "another").await.unwrap();
    s.settled().await;
    assert_ne!(other.run_id, first.run_id);
    assert_eq!(all_runs(&s, "daily").await.len(), 2);
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(s.trigger("ghost", "k").await.unwrap_err().code(), "schedule_not_found");
}

#[tokio::test]
async fn downtime_is_caught_up_by_the_policy_and_the_rest_is_missed() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start_repeating([Turn::text("reported")]).await.unwrap();
    let policy = |catch_up: &str| json!({"catchUp": catch_up, "misfireGraceSeconds": 5, "maxConcurrency": 10});
    let dir = common::project(&[
        ("one", schedule("* * * * *", policy("one"))),
        ("skip", schedule("* * * * *", policy("skip"))),
    ]);
    let clock = Arc::new(ManualClock::new(start()));
    let s = server(&dir, StoreKind::File, None, &clock, &llm).await;
    s.tick().await.unwrap();
    // Down for ten minutes: 01:00 … 01:09 passed, the newest 50 s ago, beyond the 5 s grace.
    clock.advance(Duration::seconds(10 * 60));
    let pass = s.tick().await.unwrap();
    s.settled().await;
    assert_eq!((pass.fired, pass.missed), (1, 19));
    let by_state = |runs: Vec<ScheduleRun>| {
        runs.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(format!("{:?}", r.status)).or_insert(0) += 1;
            m
        })
    };
    assert_eq!(by_state(all_runs(&s, "one").await), BTreeMap::from([("Missed".into(), 9), ("Succeeded".into(), 1)]));
    assert_eq!(by_state(all_runs(&s, "skip").await), BTreeMap::from([("Missed".into(), 10)]));
}

#[tokio::test]
async fn an_occurrence_beyond_max_concurrency_is_skipped_and_recorded() {
    polpo_llm::install_crypto_provider();
    // The first run's model stream stalls: it is still running when the next second comes.
    let llm = FakeLlm::start([Turn::text("still thinking").stall_after(1)]).await.unwrap();
    let dir = common::project(&[("busy", schedule("* * * * * *", json!({"maxConcurrency": 1})))]);
    let clock = Arc::new(ManualClock::new(start()));
    let s = server(&dir, StoreKind::Sqlite, None, &clock, &llm).await;
    s.tick().await.unwrap();
    clock.advance(Duration::seconds(1));
    assert_eq!(s.tick().await.unwrap().fired, 1);
    clock.advance(Duration::seconds(1));
    let pass = s.tick().await.unwrap();
    assert_eq!((pass.fired, pass.failed), (0, 1));
    let newest = &all_runs(&s, "busy").await[0];
    assert_eq!(newest.status, RunState::Skipped);
    assert_eq!(newest.error.as_ref().map(|e| e.code.as_str()), Some("max_concurrency"));
}
