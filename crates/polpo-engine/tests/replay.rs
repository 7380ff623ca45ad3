//! A durable run is reproducible: with the clock and ids fixed (given to the store, which passes
//! them on to the runtime), the same request against the same model script writes the same
//! journal, byte for byte — run ids, session ids, lease owner, event times and payloads included.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

use chrono::TimeZone;
use futures::StreamExt;
use polpo_core::message::Message;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_engine::{ChatInput, Loaded, Runtime};
use polpo_llm::Providers;
use polpo_store::{Clock, IdGen, ManualClock, Seams, SequentialIds, StoreKind, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One durable run of the `coder` agent in a fresh project: it reads a file, writes one
/// (through the effect ledger), then answers. Returns its run id and its journal file.
async fn journal_of_one_run() -> (String, Vec<u8>) {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]),
        Turn::tool_calls(vec![("bash", json!({"command": "printf done > out.txt"}))]),
        Turn::text("Read the notes and wrote out.txt."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent(
            "coder",
            json!({"model": "openai/fake-model", "allowedTools": ["read", "bash"], "maxTurns": 5}),
            "You write code.",
        )
        .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "ship on friday\n").unwrap();
    let start = chrono::Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(start));
    let ids: Arc<dyn IdGen> = Arc::new(SequentialIds::default());
    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(StoreKind::File, dir.path(), None, Seams::new(clock, ids)).await.unwrap();
    let runtime = Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store);
    let runs = RunManager::new(Arc::new(runtime), RunOptions { lease_ttl: Duration::from_secs(5) });

    let run = runs
        .start(ChatInput::new("coder", vec![Message::user("Summarise notes.txt into out.txt")]))
        .await
        .unwrap()
        .run_id;
    let journal: Vec<_> =
        tokio::time::timeout(Duration::from_secs(20), runs.events(&run, 0).collect()).await.expect("the run ends");
    assert_eq!(journal.last().unwrap().as_ref().unwrap().event_type, "run.completed");
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "done");
    let bytes = std::fs::read(dir.path().join(".polpo").join("runs").join(&run).join("events.jsonl")).unwrap();
    (run, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_run_with_fixed_clock_and_ids_writes_the_same_journal_twice() {
    polpo_llm::install_crypto_provider();
    let (first_run, first) = journal_of_one_run().await;
    let (second_run, second) = journal_of_one_run().await;
    assert_eq!(first_run, second_run, "run ids come from the id generator");
    let text = String::from_utf8(first.clone()).unwrap();
    for kind in ["run.accepted", "run.started", "tool.started", "tool.completed", "usage.completed", "run.completed"] {
        assert!(text.contains(&format!("\"{kind}\"")), "{kind} missing from the journal:\n{text}");
    }
    assert!(text.contains("2026-01-02T03:04:05"), "event times come from the clock:\n{text}");
    assert_eq!(String::from_utf8(second).unwrap(), text, "the two journals differ");
}
