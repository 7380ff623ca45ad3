//! What the scheduler costs per fire: one pass that fires 100 due occurrences of an
//! every-second schedule (claim record, durable run start through `RunManager::invoke`,
//! record update), on SQLite and PostgreSQL, the model being the scripted fake; and the
//! scheduler's own part alone (claim record + record update), measured with a webhook the SSRF
//! guard refuses before any I/O, so nothing but the two record writes is left. Ignored by
//! default; `cargo test -p polpo-scheduler --test bench_fire -- --ignored --nocapture`.
//! Prints figures, asserts only that every occurrence fired.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chrono::{DateTime, Duration, Utc};
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_store::{ManualClock, StoreKind, open_store};
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

const FIRES: i64 = 100;

async fn measure(kind: StoreKind, url: Option<String>, llm: &FakeLlm, invocation: Value) -> std::time::Duration {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({}))
        .unwrap()
        .agent("reporter", json!({"model": "openai/fake-model"}), "Report.")
        .unwrap();
    std::fs::create_dir_all(dir.path().join(".polpo/schedules")).unwrap();
    let schedule = json!({
        "timing": {"kind": "cron", "expression": "* * * * * *"},
        "invocation": invocation,
        "policy": {"misfireGraceSeconds": 3600, "maxConcurrency": 100}
    });
    std::fs::write(dir.path().join(".polpo/schedules/tick.json"), schedule.to_string()).unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let start: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let store = open_store(kind, dir.path(), url.as_deref(), clock.clone()).await.unwrap();
    let runtime =
        Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store));
    let scheduler = support::scheduler(RunManager::new(runtime, RunOptions::default()));
    scheduler.tick().await.unwrap();
    clock.advance(Duration::seconds(FIRES));
    let began = std::time::Instant::now();
    let pass = scheduler.tick().await.unwrap();
    let took = began.elapsed();
    assert_eq!(pass.fired + pass.failed, FIRES as usize, "every occurrence fired (maxConcurrency 100)");
    scheduler.settled().await;
    took / FIRES as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn cost_per_fire() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start_repeating([Turn::text("reported")]).await.unwrap();
    let agent = json!({"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}});
    let refused = json!({"surface": "webhook", "url": "https://127.0.0.1:9/hook"});
    for (what, invocation) in [("claim + durable run start + record", agent), ("claim + record alone", refused)] {
        let sqlite = measure(StoreKind::Sqlite, None, &llm, invocation.clone()).await;
        // A schema each: the occurrences of both measurements are the same instants.
        let schema = PgSchema::create().await.unwrap();
        let postgres = measure(StoreKind::Postgres, Some(schema.url()), &llm, invocation).await;
        schema.drop_schema().await.unwrap();
        println!("scheduler cost per fire ({what}): sqlite {sqlite:?}, postgres {postgres:?}");
    }
}
