//! The one invocation entry, `RunManager::invoke`: the engine, not the caller, decides how an
//! answer is delivered (`settings.chatExecution` and whether it must outlive its caller), and
//! every mode reports the same progress — events, then one `Finished` with the answer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

use polpo_core::message::Message;
use polpo_engine::meter::Meter;
use polpo_engine::runs::{Finished, Invoked, Progress, RunManager, RunOptions};
use polpo_engine::{ChatInput, DeliveryMode, Loaded, RunEvent, Runtime};
use polpo_llm::Providers;
use polpo_store::{StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

async fn manager(llm: &FakeLlm, chat_execution: &str) -> (TempDir, Arc<RunManager>) {
    polpo_llm::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "file", "chatExecution": chat_execution}))
        .unwrap()
        .agent("helper", json!({"model": "openai/fake-model", "allowedTools": ["bash"]}), "You help.")
        .unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let runtime = Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store);
    (dir, RunManager::new(Arc::new(runtime), RunOptions { lease_ttl: Duration::from_secs(5) }))
}

fn input(outlive_caller: bool) -> ChatInput {
    let mut input = ChatInput::new("helper", vec![Message::user("Hi")]);
    input.outlive_caller = outlive_caller;
    input
}

/// The streamed text and how the invocation ended.
async fn drain(invoked: &mut Invoked) -> (String, Finished) {
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match invoked.next().await.expect("progress until Finished") {
                Progress::Event(RunEvent::TextDelta { text: t }, _) => text.push_str(&t),
                Progress::Event(..) => {}
                Progress::Finished(finished) => return (text, finished),
            }
        }
    })
    .await
    .expect("the invocation finishes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_picks_the_delivery_and_every_mode_reports_the_same_way() {
    let cases = [
        ("run", true, DeliveryMode::Durable),
        ("run", false, DeliveryMode::Run),
        ("inline", true, DeliveryMode::Inline),
        ("inline", false, DeliveryMode::Inline),
    ];
    for (chat_execution, outlive_caller, mode) in cases {
        // The turn waits in a tool call until the test opens the gate, so it is checked running.
        let hold = Turn::tool_calls(vec![("bash", json!({"command": "while [ ! -f gate ]; do sleep 0.02; done"}))]);
        let llm = FakeLlm::start([hold, Turn::text("Hello there.")]).await.unwrap();
        let (dir, runs) = manager(&llm, chat_execution).await;
        let mut invoked = runs.invoke(input(outlive_caller), Meter::start()).await.unwrap();
        let case = format!("chatExecution {chat_execution}, outlive_caller {outlive_caller}");
        assert_eq!(invoked.mode(), mode, "{case}");
        // Steerable by run id while it runs: a run-mode turn here, a durable run in the store.
        assert_eq!(runs.inline_owner(invoked.run_id()).is_some(), mode == DeliveryMode::Run, "{case}");
        let attachment = invoked.attachment();
        assert_eq!(
            attachment.is_some(),
            mode != DeliveryMode::Durable,
            "{case}: only a run in the caller's request is cancelled with it"
        );

        let run_id = invoked.run_id().to_owned();
        std::fs::write(dir.path().join("gate"), "").unwrap();
        let (text, finished) = drain(&mut invoked).await;
        assert_eq!(text, "Hello there.", "{case}");
        let answer = finished.result.as_ref().expect("an answer");
        assert_eq!(
            (answer.content.as_deref(), answer.session_id.as_str()),
            (Some("Hello there."), invoked.session_id()),
            "{case}"
        );
        assert_eq!(
            finished.seq.is_some(),
            mode == DeliveryMode::Durable,
            "{case}: a durable verdict names its journal position"
        );
        assert_eq!(finished.overhead.is_some(), mode != DeliveryMode::Durable, "{case}");
        assert_eq!(
            runs.get(&run_id).await.unwrap().is_some(),
            mode == DeliveryMode::Durable,
            "{case}: only a durable run is stored"
        );
        assert!(runs.inline_owner(&run_id).is_none(), "{case}: a finished run is no longer steerable here");
        drop(attachment);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_lets_go_cancels_a_run_in_its_request() {
    let hold = Turn::tool_calls(vec![("bash", json!({"command": "while [ ! -f gate ]; do sleep 0.02; done"}))]);
    let llm = FakeLlm::start([hold, Turn::text("never")]).await.unwrap();
    let (_dir, runs) = manager(&llm, "run").await;
    let mut invoked = runs.invoke(input(false), Meter::start()).await.unwrap();
    drop(invoked.attachment());
    let (_, finished) = drain(&mut invoked).await;
    assert_eq!(finished.result.unwrap_err().code, "aborted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_cannot_run_fails_before_anything_runs_in_every_mode() {
    for (chat_execution, outlive_caller) in [("run", true), ("run", false), ("inline", false)] {
        let llm = FakeLlm::start([Turn::text("never")]).await.unwrap();
        let (_dir, runs) = manager(&llm, chat_execution).await;
        let mut unknown = input(outlive_caller);
        unknown.agent = "nobody".into();
        let Err(e) = runs.invoke(unknown, Meter::start()).await else { panic!("an unknown agent is refused") };
        assert_eq!(e.code(), "agent_not_found");
        assert!(llm.requests().is_empty(), "no model call for a refused request");
    }
}
