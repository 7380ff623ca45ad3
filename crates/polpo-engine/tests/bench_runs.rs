//! Benchmark (ignored by default): what durability costs per chat turn — a plain
//! `Runtime::chat` against the same turn as a durable run (run record, lease, journal,
//! checkpoints, status), on the file store and on PostgreSQL, over the fake LLM.
//!
//! `cargo test --release -p polpo-engine --test bench_runs -- --ignored --nocapture`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failed setup should panic loudly

use futures::StreamExt;
use polpo_core::message::Message;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_engine::{ChatInput, Loaded, Runtime};
use polpo_llm::Providers;
use polpo_store::{StoreKind, SystemClock, open_store};
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const N: usize = 200;

fn p(sorted: &[Duration], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0
}

async fn bench(kind: StoreKind) {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start_repeating([Turn::text("The answer is 42.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let schema = match kind {
        StoreKind::Postgres => Some(PgSchema::create().await.unwrap()),
        _ => None,
    };
    ProjectFixture::new(dir.path(), json!({"storage": kind.as_str()}))
        .unwrap()
        .agent("a", json!({"model": "openai/fake-model"}), "You answer.")
        .unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let env: polpo_llm::EnvLookup = llm.openai_env();
    let url = schema.as_ref().map(PgSchema::url);
    let store = open_store(kind, dir.path(), url.as_deref(), Arc::new(SystemClock)).await.unwrap();
    let runtime = Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), env), store));
    let runs = RunManager::new(runtime.clone(), RunOptions::default());
    let input = || ChatInput::new("a", vec![Message::user("What is the answer?")]);

    let mut plain = Vec::with_capacity(N);
    let mut durable = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        runtime.chat(input(), &|_| {}, &CancellationToken::new()).await.unwrap();
        plain.push(t.elapsed());
        let t = Instant::now();
        let run = runs.start(input()).await.unwrap();
        let events: Vec<_> = runs.events(&run.run_id, 0).collect().await;
        assert_eq!(events.last().unwrap().as_ref().unwrap().event_type, "run.completed");
        durable.push(t.elapsed());
    }
    plain.sort();
    durable.sort();
    println!(
        "{:>8}: plain chat p50 {:.2} ms p99 {:.2} ms | durable run p50 {:.2} ms p99 {:.2} ms (to the terminal event, {N} turns)",
        kind.as_str(),
        p(&plain, 0.5),
        p(&plain, 0.99),
        p(&durable, 0.5),
        p(&durable, 0.99)
    );
    if let Some(schema) = schema {
        drop(runs);
        schema.drop_schema().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn durable_run_cost_per_turn() {
    bench(StoreKind::File).await;
    bench(StoreKind::Sqlite).await;
    bench(StoreKind::Postgres).await;
}
