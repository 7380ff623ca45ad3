//! Durable runs below HTTP, on the file store, SQLite and PostgreSQL: steering at the next safe
//! boundary, follow-ups after the run would finish, duplicate steering ids, abort of a running
//! tool, journal replay from any position, and resuming a crashed run from its checkpoint
//! with the effect ledger deciding whether a `write` call runs again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

use futures::StreamExt;
use polpo_core::message::{Message, Role, ToolCall};
use polpo_engine::runs::{CheckpointState, Queued, RunManager, RunOptions, RunSpec, SteerMessage, SteerMode, effect_key};
use polpo_engine::{ChatInput, Loaded, Runtime};
use polpo_llm::Providers;
use polpo_store::{EffectClaim, NewRun, RunEvent, RunStatus, StoreKind, SystemClock, open_store};
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

/// Generous bound for "eventually" (a slow CI machine), never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(20);

struct Setup {
    dir: TempDir,
    runs: Arc<RunManager>,
    schema: Option<PgSchema>,
}

impl Setup {
    async fn new(kind: StoreKind, llm: &FakeLlm) -> Self {
        polpo_llm::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let storage = kind.as_str();
        ProjectFixture::new(dir.path(), json!({"storage": storage}))
            .unwrap()
            .agent("coder", json!({"model": "openai/fake-model", "allowedTools": ["read", "bash"], "maxTurns": 8}), "You write code.")
            .unwrap()
            .hook_pack("quality", json!({"version": 1, "hooks": {"turn:stop": [{"id": "accept", "terminationGate": {
                "validator": {"type": "command", "command": "echo '{\"decision\":\"accept\"}'", "timeoutMs": 3000},
                "maxCycles": 2, "maxDurationMs": 3_600_000
            }}]}}))
            .unwrap()
            .agent("gated", json!({"model": "openai/fake-model", "allowedTools": ["read"], "hooks": ["quality"]}), "You answer.")
            .unwrap();
        let project = polpo_project::load_project(dir.path()).unwrap();
        let env: polpo_llm::EnvLookup = llm.openai_env();
        let schema = match kind {
            StoreKind::Postgres => Some(PgSchema::create().await.unwrap()),
            _ => None,
        };
        let url = schema.as_ref().map(PgSchema::url);
        let store = open_store(kind, dir.path(), url.as_deref(), Arc::new(SystemClock)).await.unwrap();
        let runtime = Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), env), store));
        let runs = RunManager::new(runtime, RunOptions { lease_ttl: Duration::from_secs(5) });
        Self { dir, runs, schema }
    }

    fn runs_store(&self) -> polpo_store::Store {
        self.runs.runtime().store().clone()
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    async fn start(&self, text: &str) -> String {
        self.runs.start(ChatInput::new("coder", vec![Message::user(text)])).await.unwrap().run_id
    }

    /// Events from `after` until the first of type `until` (included).
    async fn read_until(&self, run: &str, after: u64, until: &str) -> Vec<RunEvent> {
        let mut stream = Box::pin(self.runs.events(run, after));
        let mut out = Vec::new();
        tokio::time::timeout(EVENTUALLY, async {
            while let Some(e) = stream.next().await {
                let e = e.unwrap();
                let done = e.event_type == until;
                out.push(e);
                if done {
                    break;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no `{until}` event; got {:?}", out.iter().map(|e| &e.event_type).collect::<Vec<_>>()));
        out
    }

    /// The whole journal until the run's stream ends.
    async fn journal(&self, run: &str) -> Vec<RunEvent> {
        let stream = self.runs.events(run, 0).map(Result::unwrap).collect::<Vec<_>>();
        tokio::time::timeout(EVENTUALLY, stream).await.expect("the run ends")
    }

    async fn finish(self) {
        if let Some(schema) = self.schema {
            drop(self.runs);
            schema.drop_schema().await.unwrap();
        }
    }
}

fn steer(id: &str, mode: SteerMode, text: &str) -> SteerMessage {
    SteerMessage { id: id.into(), mode, message: Message::user(text) }
}

/// A bash call that blocks until the test creates `gate` in the workspace, then appends
/// `line` to `log.txt`: lets a test act while a tool is running, without sleeping.
fn gated_append(gate: &str, line: &str) -> serde_json::Value {
    json!({"command": format!("while [ ! -f {gate} ]; do sleep 0.02; done; echo {line} >> log.txt")})
}

fn user_texts(body: &serde_json::Value) -> Vec<String> {
    body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "user").map(|m| m["content"].as_str().unwrap_or_default().to_owned()).collect()
}

fn types(events: &[RunEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

fn assert_gap_free(events: &[RunEvent]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "sequence numbers are 1..n without gaps or duplicates");
}

async fn steer_reaches_the_next_model_call_without_interrupting_the_tool(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", gated_append("go", "tool-finished"))]), Turn::text("Using PostgreSQL.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let run = s.start("Build the app").await;
    s.read_until(&run, 0, "tool.started").await;

    assert_eq!(s.runs.steer(&run, steer("s1", SteerMode::Steer, "Use PostgreSQL.")).await.unwrap(), Queued::Accepted);
    std::fs::write(s.path("go"), "").unwrap();
    let journal = s.journal(&run).await;

    assert_eq!(journal.last().unwrap().event_type, "run.completed");
    assert_eq!(journal.last().unwrap().data["content"], "Using PostgreSQL.");
    assert_eq!(std::fs::read_to_string(s.path("log.txt")).unwrap(), "tool-finished\n", "the tool ran to its end");
    let requests = llm.requests();
    assert_eq!(user_texts(&requests[0].body), ["Build the app"]);
    let second: Vec<&str> = requests[1].body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(second, ["system", "user", "assistant", "tool", "user"], "the steer follows the tool result");
    assert_eq!(user_texts(&requests[1].body), ["Build the app", "Use PostgreSQL."]);
    let t = types(&journal);
    let delivered = t.iter().position(|x| *x == "run.steering.delivered").unwrap();
    assert!(t.iter().position(|x| *x == "tool.completed").unwrap() < delivered);
    assert_gap_free(&journal);

    // The steer is part of the stored conversation.
    let session = s.runs.get(&run).await.unwrap().unwrap().session_id.unwrap();
    let stored = s.runs_store().sessions.recent_messages(&session, 100).await.unwrap();
    assert!(stored.iter().any(|m| m.message.role == Role::User && m.message.text_content() == "Use PostgreSQL."));
    s.finish().await;
}

async fn follow_up_starts_another_turn_after_the_answer_and_duplicates_are_ignored(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", gated_append("go", "one"))]), Turn::text("First answer."), Turn::text("Second answer.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let run = s.start("Do it").await;
    s.read_until(&run, 0, "tool.started").await;

    assert_eq!(s.runs.steer(&run, steer("f1", SteerMode::FollowUp, "Now add tests.")).await.unwrap(), Queued::Accepted);
    assert_eq!(s.runs.steer(&run, steer("f1", SteerMode::FollowUp, "Now add tests.")).await.unwrap(), Queued::Duplicate);
    std::fs::write(s.path("go"), "").unwrap();
    let journal = s.journal(&run).await;

    assert_eq!(journal.last().unwrap().data["content"], "Second answer.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(user_texts(&requests[1].body), ["Do it"], "a follow-up waits until the run would finish");
    assert_eq!(user_texts(&requests[2].body), ["Do it", "Now add tests."], "delivered once");
    let queued = journal.iter().filter(|e| e.event_type == "run.steering.queued").count();
    assert_eq!(queued, 1);
    assert_gap_free(&journal);
    s.finish().await;
}

async fn abort_stops_a_running_tool_within_a_second(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": "sleep 60"}))]), Turn::text("never")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let run = s.start("Wait").await;
    let seen = s.read_until(&run, 0, "tool.started").await;

    s.runs.abort(&run, Some("changed my mind".into())).await.unwrap();
    let rest = tokio::time::timeout(Duration::from_secs(1), async {
        let mut stream = Box::pin(s.runs.events(&run, seen.last().unwrap().seq));
        let mut out = Vec::new();
        while let Some(e) = stream.next().await {
            out.push(e.unwrap());
        }
        out
    })
    .await
    .expect("the run ends within 1 s of the abort");
    assert_eq!(rest.last().unwrap().event_type, "run.cancelled");
    assert!(types(&rest).contains(&"run.cancelling"));
    // The status follows the terminal event.
    tokio::time::timeout(EVENTUALLY, async {
        while s.runs.get(&run).await.unwrap().unwrap().status != RunStatus::Aborted {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(llm.requests().len(), 1, "no model call after the abort");
    assert_eq!(s.runs.abort(&run, None).await.unwrap_err().code(), "run_not_active");
    s.finish().await;
}

async fn a_follower_resumes_after_any_sequence_number(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("read", json!({"path": "missing.txt"}))]), Turn::text("Done.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let run = s.start("Go").await;
    let all = s.journal(&run).await;
    assert_gap_free(&all);
    assert_eq!(types(&all)[..2], ["run.accepted", "run.started"]);
    for cut in [1, 3, all.len() as u64 - 1] {
        let rest: Vec<RunEvent> = s.runs.events(&run, cut).map(Result::unwrap).collect().await;
        assert_eq!(rest, all[cut as usize..].to_vec(), "after {cut}");
    }
    s.finish().await;
}

/// A run as a crashed process leaves it: created, checkpointed after an assistant message
/// that asked for a `bash` call, no lease.
async fn crashed_run(s: &Setup, command: &str) -> (String, String) {
    let store = s.runs_store();
    let session = store.sessions.create_session(polpo_store::NewSession { agent: "coder".into(), ..Default::default() }).await.unwrap();
    let run = store.runs.create_run(NewRun { id: Some(format!("chat-{}", uuid_like())), agent: "coder".into(), session_id: Some(session.id.clone()) }).await.unwrap();
    let seq = store.runs.append_event(&run.id, "run.accepted", json!({})).await.unwrap();
    let call = ToolCall { id: "call_1".into(), name: "bash".into(), arguments: json!({"command": command}).to_string() };
    let assistant = Message { role: Role::Assistant, content: None, tool_calls: vec![call], tool_call_id: None, name: None };
    let spec = RunSpec { agent: "coder".into(), session_id: session.id, messages: vec![Message::user("Append a line")], ..Default::default() };
    let state = CheckpointState { spec, produced: vec![assistant], ..Default::default() };
    store.runs.put_checkpoint(&run.id, seq, serde_json::to_value(state).unwrap()).await.unwrap();
    let key = effect_key(&run.id, 1, 0, &json!({"command": command}));
    (run.id, key)
}

fn uuid_like() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos())
}

async fn a_recovered_run_returns_a_recorded_effect_instead_of_running_it_again(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("Appended once.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    std::fs::write(s.path("log.txt"), "line\n").unwrap();
    let (run, key) = crashed_run(&s, "echo line >> log.txt").await;
    let store = s.runs_store();
    // The crashed process ran the effect and recorded its result.
    assert_eq!(store.effects.record_effect_intent(&key).await.unwrap(), EffectClaim::Fresh);
    store.effects.record_effect_result(&key, json!({"ok": true, "text": "(no output)"})).await.unwrap();

    assert_eq!(s.runs.recover().await.unwrap(), std::slice::from_ref(&run));
    let journal = s.journal(&run).await;
    assert_eq!(journal.last().unwrap().event_type, "run.completed", "{:?}", types(&journal));
    assert!(types(&journal).contains(&"run.resumed"));
    assert_eq!(std::fs::read_to_string(s.path("log.txt")).unwrap(), "line\n", "the effect happened exactly once");
    let sent = &llm.requests()[0].body["messages"];
    assert_eq!(sent.as_array().unwrap().last().unwrap()["content"], "(no output)", "the model sees the recorded result");
    assert_gap_free(&journal);
    s.finish().await;
}

async fn a_write_with_intent_but_no_result_pauses_the_run(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("never")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let (run, key) = crashed_run(&s, "echo line >> log.txt").await;
    assert_eq!(s.runs_store().effects.record_effect_intent(&key).await.unwrap(), EffectClaim::Fresh);

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    let last = journal.last().unwrap();
    assert_eq!(last.event_type, "run.paused");
    assert_eq!(last.data["code"], "effect_unconfirmed");
    assert!(!s.path("log.txt").exists(), "the uncertain effect was not repeated");
    assert!(llm.requests().is_empty());
    tokio::time::timeout(EVENTUALLY, async {
        while s.runs.get(&run).await.unwrap().unwrap().status != RunStatus::Paused {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    // A person decides: abort the paused run.
    s.runs.abort(&run, None).await.unwrap();
    assert_eq!(s.runs.get(&run).await.unwrap().unwrap().status, RunStatus::Aborted);
    s.finish().await;
}

async fn a_person_reconciles_a_paused_run_and_it_finishes(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("Noted, the line is there.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let (run, key) = crashed_run(&s, "echo line >> log.txt").await;
    s.runs_store().effects.record_effect_intent(&key).await.unwrap();
    s.runs.recover().await.unwrap();
    let paused = s.journal(&run).await;
    assert_eq!(paused.last().unwrap().data["detail"]["key"], key.as_str(), "the pause names the effect to decide on");
    tokio::time::timeout(EVENTUALLY, async {
        while s.runs.get(&run).await.unwrap().unwrap().status != RunStatus::Paused {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();

    assert_eq!(s.runs.reconcile(&run, "run/other/turn/1", polpo_engine::runs::Reconcile::NotApplied).await.unwrap_err().code(), "invalid_request");
    s.runs.reconcile(&run, &key, polpo_engine::runs::Reconcile::Applied { result: Some("line appended".into()) }).await.unwrap();
    let rest = s.read_until(&run, paused.last().unwrap().seq, "run.completed").await;
    assert_eq!(rest[0].event_type, "run.reconciled");
    assert!(!s.path("log.txt").exists(), "reconciling never performs the effect");
    let sent = &llm.requests()[0].body["messages"];
    assert_eq!(sent.as_array().unwrap().last().unwrap()["content"], "line appended");
    s.finish().await;
}

async fn pending_steering_survives_a_crash(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("Done, with tests.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let (run, _) = crashed_run(&s, "echo a >> other.txt").await;
    // The crashed process had accepted a steer and ran the tool; its checkpoint says so.
    let store = s.runs_store();
    let mut state: CheckpointState = serde_json::from_value(store.runs.latest_checkpoint(&run).await.unwrap().unwrap().state).unwrap();
    state.produced.push(Message::tool_result("call_1", "(no output)"));
    state.pending.push(steer("s1", SteerMode::Steer, "Also add tests."));
    state.steering_ids.push("s1".into());
    let seq = store.runs.get_run(&run).await.unwrap().unwrap().last_seq;
    store.runs.put_checkpoint(&run, seq, serde_json::to_value(state).unwrap()).await.unwrap();

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    assert_eq!(journal.last().unwrap().event_type, "run.completed", "{:?}", types(&journal));
    assert!(!s.path("other.txt").exists(), "the answered call is not run again");
    assert_eq!(user_texts(&llm.requests()[0].body), ["Append a line", "Also add tests."]);
    s.finish().await;
}

/// The gate's time budget counts from when the run was accepted: a run accepted two hours
/// ago and resumed now has used up a one-hour `maxDurationMs`, whatever the restart did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_keeps_the_termination_gate_time_budget_it_used() {
    let llm = FakeLlm::start([Turn::text("fresh"), Turn::text("never")]).await.unwrap();
    let s = Setup::new(StoreKind::Postgres, &llm).await;
    // A second handle on the same database whose clock says the run began two hours ago.
    let past = chrono::Utc::now() - chrono::Duration::hours(2);
    let url = s.schema.as_ref().unwrap().url();
    let old = open_store(StoreKind::Postgres, s.dir.path(), Some(&url), Arc::new(polpo_store::ManualClock::new(past))).await.unwrap();
    let session = old.sessions.create_session(polpo_store::NewSession { agent: "gated".into(), ..Default::default() }).await.unwrap();
    let spec = RunSpec { agent: "gated".into(), session_id: session.id.clone(), messages: vec![Message::user("Hi")], ..Default::default() };
    let run = old.runs.create_run(NewRun { id: Some(format!("chat-{}", uuid_like())), agent: "gated".into(), session_id: Some(session.id) }).await.unwrap();
    old.runs.append_event(&run.id, "run.accepted", json!({"spec": spec})).await.unwrap();

    // The same agent, started now, is within budget.
    let fresh = s.runs.start(ChatInput::new("gated", vec![Message::user("Hi")])).await.unwrap().run_id;
    assert_eq!(s.journal(&fresh).await.last().unwrap().event_type, "run.completed");

    assert_eq!(s.runs.recover().await.unwrap(), std::slice::from_ref(&run.id));
    let journal = s.journal(&run.id).await;
    let last = journal.last().unwrap();
    assert_eq!((last.event_type.as_str(), last.data["code"].as_str()), ("run.failed", Some("termination_gate_time_exhausted")), "{last:?}");
    assert_eq!(llm.requests().len(), 1, "no model call is paid for after the budget ran out");
    drop(old);
    s.finish().await;
}

macro_rules! on_backends {
    ($($name:ident),* $(,)?) => {
        mod file {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(polpo_store::StoreKind::File).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(polpo_store::StoreKind::Postgres).await })*
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::$name(polpo_store::StoreKind::Sqlite).await })*
        }
    };
}

on_backends!(
    steer_reaches_the_next_model_call_without_interrupting_the_tool,
    follow_up_starts_another_turn_after_the_answer_and_duplicates_are_ignored,
    abort_stops_a_running_tool_within_a_second,
    a_follower_resumes_after_any_sequence_number,
    a_recovered_run_returns_a_recorded_effect_instead_of_running_it_again,
    a_write_with_intent_but_no_result_pauses_the_run,
    pending_steering_survives_a_crash,
    a_person_reconciles_a_paused_run_and_it_finishes,
);
