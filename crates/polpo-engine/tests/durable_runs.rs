//! Durable runs below HTTP, on the file store, SQLite and PostgreSQL: steering at the next safe
//! boundary, follow-ups after the run would finish, duplicate steering ids, abort of a running
//! tool, journal replay from any position, and resuming a crashed run from its checkpoint
//! with the effect ledger deciding whether a `write` call runs again. A termination gate's
//! state survives the crash too: budgets, recorded decisions, an accepted answer, and
//! operations it cannot confirm.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

use futures::StreamExt;
use polpo_core::hooks::{GateBudget, GateLimits};
use polpo_core::message::{Message, Role, ToolCall};
use polpo_engine::hooks::{GateCheckpoint, GateDecision, GateValidation};
use polpo_engine::runs::{
    CheckpointState, Queued, RunManager, RunOptions, RunSpec, SteerMessage, SteerMode, effect_key,
};
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

/// The `repairer` agent's termination gate validator: appends its envelope to
/// `validations.log` each time it runs, accepts candidates starting with `FINAL`, and sends
/// every other one back.
const FINAL_VALIDATOR: &str = r#"input=$(cat); printf '%s\n' "$input" >> validations.log; case "$input" in *'"candidate":"FINAL'*) echo '{"decision":"accept"}' ;; *) echo '{"decision":"continue","diagnostics":{"missing":"FINAL"}}' ;; esac"#;

struct Setup {
    dir: TempDir,
    runs: Arc<RunManager>,
    schema: Option<PgSchema>,
}

impl Setup {
    async fn new(kind: StoreKind, llm: &FakeLlm) -> Self {
        Self::with_clock(kind, llm, Arc::new(SystemClock)).await
    }

    /// [`Setup::new`] on a store that tells time by `clock` (lease expiry included).
    async fn with_clock(kind: StoreKind, llm: &FakeLlm, clock: Arc<dyn polpo_store::Clock>) -> Self {
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
            .unwrap()
            .hook_pack("checked", json!({"version": 1, "hooks": {"turn:stop": [{"id": "has-final", "terminationGate": {
                "validator": {"type": "command", "command": FINAL_VALIDATOR, "timeoutMs": 3000},
                "maxCycles": 5, "maxDurationMs": 3_600_000
            }}]}}))
            .unwrap()
            .agent("repairer", json!({"model": "openai/fake-model", "allowedTools": ["read", "bash"], "hooks": ["checked"], "maxTurns": 8}), "You repair.")
            .unwrap();
        let project = polpo_project::load_project(dir.path()).unwrap();
        let env: polpo_llm::EnvLookup = llm.openai_env();
        let schema = match kind {
            StoreKind::Postgres => Some(PgSchema::create().await.unwrap()),
            _ => None,
        };
        let url = schema.as_ref().map(PgSchema::url);
        let store = open_store(kind, dir.path(), url.as_deref(), clock).await.unwrap();
        let runtime =
            Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), env), store));
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

    /// Events from `after` until the first of type `until` (included), or the stream's end.
    async fn read_until(&self, run: &str, after: u64, until: &str) -> Vec<RunEvent> {
        self.read_until_within(run, after, until, EVENTUALLY).await
    }

    /// [`Setup::read_until`], failing only after `limit`.
    async fn read_until_within(&self, run: &str, after: u64, until: &str, limit: Duration) -> Vec<RunEvent> {
        let mut stream = Box::pin(self.runs.events(run, after));
        let mut out = Vec::new();
        tokio::time::timeout(limit, async {
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
        .unwrap_or_else(|_| {
            panic!("no `{until}` event; got {:?}", out.iter().map(|e| &e.event_type).collect::<Vec<_>>())
        });
        out
    }

    /// The whole journal until the run's stream ends, or until the run pauses (a paused
    /// run's stream stays open for its reconciliation).
    async fn journal(&self, run: &str) -> Vec<RunEvent> {
        self.read_until(run, 0, "run.paused").await
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
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn types(events: &[RunEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

fn assert_gap_free(events: &[RunEvent]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "sequence numbers are 1..n without gaps or duplicates"
    );
}

async fn steer_reaches_the_next_model_call_without_interrupting_the_tool(kind: StoreKind) {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", gated_append("go", "tool-finished"))]),
        Turn::text("Using PostgreSQL."),
    ])
    .await
    .unwrap();
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
    let second: Vec<&str> =
        requests[1].body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
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
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", gated_append("go", "one"))]),
        Turn::text("First answer."),
        Turn::text("Second answer."),
    ])
    .await
    .unwrap();
    let s = Setup::new(kind, &llm).await;
    let run = s.start("Do it").await;
    s.read_until(&run, 0, "tool.started").await;

    assert_eq!(s.runs.steer(&run, steer("f1", SteerMode::FollowUp, "Now add tests.")).await.unwrap(), Queued::Accepted);
    assert_eq!(
        s.runs.steer(&run, steer("f1", SteerMode::FollowUp, "Now add tests.")).await.unwrap(),
        Queued::Duplicate
    );
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
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": "sleep 60"}))]), Turn::text("never")])
        .await
        .unwrap();
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
    let llm = FakeLlm::start([Turn::tool_calls(vec![("read", json!({"path": "missing.txt"}))]), Turn::text("Done.")])
        .await
        .unwrap();
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
    let call =
        ToolCall { id: "call_1".into(), name: "bash".into(), arguments: json!({"command": command}).to_string() };
    let assistant =
        Message { role: Role::Assistant, content: None, tool_calls: vec![call], tool_call_id: None, name: None };
    let run = crashed_checkpoint(s, "coder", "Append a line", vec![assistant], None).await;
    let key = effect_key(&run, 1, 0, &json!({"command": command}));
    (run, key)
}

/// A run of `agent` asked `task`, as a crashed process leaves it: created, checkpointed with
/// `produced` (and `gate`), no lease.
async fn crashed_checkpoint(
    s: &Setup,
    agent: &str,
    task: &str,
    produced: Vec<Message>,
    gate: Option<GateCheckpoint>,
) -> String {
    let store = s.runs_store();
    let session = store
        .sessions
        .create_session(polpo_store::NewSession { agent: agent.into(), ..Default::default() })
        .await
        .unwrap();
    let run = store
        .runs
        .create_run(NewRun {
            id: Some(format!("chat-{}", uuid_like())),
            agent: agent.into(),
            session_id: Some(session.id.clone()),
        })
        .await
        .unwrap();
    let seq = store.runs.append_event(&run.id, "run.accepted", json!({})).await.unwrap();
    let spec = RunSpec {
        agent: agent.into(),
        session_id: session.id,
        messages: vec![Message::user(task)],
        ..Default::default()
    };
    let state = CheckpointState { spec, produced, gate, ..Default::default() };
    store.runs.put_checkpoint(&run.id, seq, serde_json::to_value(state).unwrap()).await.unwrap();
    run.id
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
    assert_eq!(
        sent.as_array().unwrap().last().unwrap()["content"],
        "(no output)",
        "the model sees the recorded result"
    );
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

    assert_eq!(
        s.runs.reconcile(&run, "run/other/turn/1", polpo_engine::runs::Reconcile::NotApplied).await.unwrap_err().code(),
        "invalid_request"
    );
    s.runs
        .reconcile(&run, &key, polpo_engine::runs::Reconcile::Applied { result: Some("line appended".into()) })
        .await
        .unwrap();
    let rest = s.read_until(&run, paused.last().unwrap().seq, "run.completed").await;
    assert_eq!(rest[0].event_type, "run.reconciled");
    assert!(!s.path("log.txt").exists(), "reconciling never performs the effect");
    let sent = &llm.requests()[0].body["messages"];
    assert_eq!(sent.as_array().unwrap().last().unwrap()["content"], "line appended");
    s.finish().await;
}

/// A crashed run paused on `command`'s unconfirmed effect, once its status is stored:
/// (run, effect key, the `run.paused` event).
async fn paused_on_an_unconfirmed_write(s: &Setup, command: &str) -> (String, String, RunEvent) {
    let (run, key) = crashed_run(s, command).await;
    s.runs_store().effects.record_effect_intent(&key).await.unwrap();
    s.runs.recover().await.unwrap();
    let paused = s.journal(&run).await.pop().unwrap();
    assert_eq!(paused.event_type, "run.paused");
    tokio::time::timeout(EVENTUALLY, async {
        while s.runs.get(&run).await.unwrap().unwrap().status != RunStatus::Paused {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    (run, key, paused)
}

async fn a_call_reconciled_not_applied_runs_once_under_its_key(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("Appended after the crash.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let (run, key, paused) = paused_on_an_unconfirmed_write(&s, "echo line >> log.txt").await;
    let detail = &paused.data["detail"];
    assert_eq!(detail["tool"], "bash");
    assert_eq!(detail["arguments"], json!({"command": "echo line >> log.txt"}), "the pause shows the call");
    assert!(detail["startedAt"].is_string(), "{detail}");
    let latest = s.runs.latest_pause(&run, paused.seq).await.unwrap().unwrap();
    assert_eq!(latest.detail, *detail);

    s.runs.reconcile(&run, &key, polpo_engine::runs::Reconcile::NotApplied).await.unwrap();
    let rest = s.read_until(&run, paused.seq, "run.completed").await;
    assert_eq!(rest[0].event_type, "run.reconciled");
    assert_eq!(rest[0].data["outcome"], "not_applied");
    assert_eq!(std::fs::read_to_string(s.path("log.txt")).unwrap(), "line\n", "the call ran once");
    let effect = s.runs_store().effects.get_effect(&key).await.unwrap().unwrap();
    assert_eq!(effect.status, polpo_store::EffectStatus::Done, "its result is recorded under the same key");
    assert_eq!(llm.requests().len(), 1);
    let reconciled_again = s.runs.reconcile(&run, &key, polpo_engine::runs::Reconcile::NotApplied).await;
    assert_eq!(reconciled_again.unwrap_err().code(), "run_not_active", "a finished run is never reconciled again");
    assert_eq!(std::fs::read_to_string(s.path("log.txt")).unwrap(), "line\n");
    s.finish().await;
}

async fn a_skipped_call_never_runs_and_the_model_is_told(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("Left it out.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let (run, key, paused) = paused_on_an_unconfirmed_write(&s, "echo line >> log.txt").await;
    s.runs.reconcile(&run, &key, polpo_engine::runs::Reconcile::Skip).await.unwrap();
    let rest = s.read_until(&run, paused.seq, "run.completed").await;
    assert_eq!(rest[0].data["outcome"], "skip");
    assert!(!s.path("log.txt").exists(), "a skipped call never runs");
    let sent = &llm.requests()[0].body["messages"];
    let told = sent.as_array().unwrap().last().unwrap()["content"].as_str().unwrap_or_default().to_owned();
    assert!(told.contains("not run"), "{told}");
    s.finish().await;
}

async fn pending_steering_survives_a_crash(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("Done, with tests.")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let (run, _) = crashed_run(&s, "echo a >> other.txt").await;
    // The crashed process had accepted a steer and ran the tool; its checkpoint says so.
    let store = s.runs_store();
    let mut state: CheckpointState =
        serde_json::from_value(store.runs.latest_checkpoint(&run).await.unwrap().unwrap().state).unwrap();
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
    let old = open_store(StoreKind::Postgres, s.dir.path(), Some(&url), Arc::new(polpo_store::ManualClock::new(past)))
        .await
        .unwrap();
    let session = old
        .sessions
        .create_session(polpo_store::NewSession { agent: "gated".into(), ..Default::default() })
        .await
        .unwrap();
    let spec = RunSpec {
        agent: "gated".into(),
        session_id: session.id.clone(),
        messages: vec![Message::user("Hi")],
        ..Default::default()
    };
    let run = old
        .runs
        .create_run(NewRun {
            id: Some(format!("chat-{}", uuid_like())),
            agent: "gated".into(),
            session_id: Some(session.id),
        })
        .await
        .unwrap();
    old.runs.append_event(&run.id, "run.accepted", json!({"spec": spec})).await.unwrap();

    // The same agent, started now, is within budget.
    let fresh = s.runs.start(ChatInput::new("gated", vec![Message::user("Hi")])).await.unwrap().run_id;
    assert_eq!(s.journal(&fresh).await.last().unwrap().event_type, "run.completed");

    assert_eq!(s.runs.recover().await.unwrap(), std::slice::from_ref(&run.id));
    let journal = s.journal(&run.id).await;
    let last = journal.last().unwrap();
    assert_eq!(
        (last.event_type.as_str(), last.data["code"].as_str()),
        ("run.failed", Some("termination_gate_time_exhausted")),
        "{last:?}"
    );
    assert_eq!(llm.requests().len(), 1, "no model call is paid for after the budget ran out");
    drop(old);
    s.finish().await;
}

/// The `repairer`'s validations so far: one envelope per validator run.
fn validations(s: &Setup) -> Vec<serde_json::Value> {
    let log = std::fs::read_to_string(s.path("validations.log")).unwrap_or_default();
    log.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Gate state as a crashed process checkpoints it: `cycles` repairs and `attempts`
/// validations used of a 3-cycle budget, and the latest validation.
fn gate_state(cycles: u32, attempts: u32, validation: Option<GateValidation>) -> GateCheckpoint {
    let limits = GateLimits { max_cycles: 3, max_duration_ms: 3_600_000, max_tokens: None };
    GateCheckpoint {
        budget: GateBudget { limits, cycles_used: cycles, tokens_used: 0, termination_attempts: attempts },
        validation,
        model_call_in_flight: false,
    }
}

/// The validation of the candidate of model call `turn`.
fn validation(turn: u32, attempt: u32, decision: Option<GateDecision>) -> GateValidation {
    GateValidation { gate_execution_id: format!("hx_attempt_{attempt}"), turn, termination_attempt: attempt, decision }
}

fn sent_back(feedback: &str, cycle: u32) -> Option<GateDecision> {
    Some(GateDecision::Continue { feedback: feedback.into(), correction_cycle: cycle })
}

/// A `repairer` run as a crashed process leaves it: checkpointed with `produced` and `gate`,
/// no lease.
async fn crashed_gate_run(s: &Setup, produced: Vec<Message>, gate: GateCheckpoint) -> String {
    crashed_checkpoint(s, "repairer", "Write the report", produced, Some(gate)).await
}

fn answer(text: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: Some(polpo_core::message::Content::Text(text.into())),
        tool_calls: Vec::new(),
        tool_call_id: None,
        name: None,
    }
}

fn last_user_text(body: &serde_json::Value) -> String {
    user_texts(body).pop().unwrap_or_default()
}

/// The run's terminal event as (type, code).
fn ending(journal: &[RunEvent]) -> (String, Option<String>) {
    let last = journal.last().unwrap();
    (last.event_type.clone(), last.data["code"].as_str().map(str::to_owned))
}

async fn a_resumed_gate_keeps_the_correction_cycles_it_used(kind: StoreKind) {
    let llm = FakeLlm::start([
        Turn::text("draft 3"),
        Turn::text("draft 4"),
        Turn::text("draft 5"),
        Turn::text("FINAL never"),
    ])
    .await
    .unwrap();
    let s = Setup::new(kind, &llm).await;
    // Two of three repairs were used before the crash; the pack now even allows five.
    let produced = vec![answer("draft 1"), Message::user("fix 1"), answer("draft 2"), Message::user("fix 2")];
    let run = crashed_gate_run(&s, produced, gate_state(2, 2, Some(validation(2, 2, sent_back("fix 2", 2))))).await;

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    assert_eq!(
        ending(&journal),
        ("run.failed".into(), Some("termination_gate_cycles_exhausted".into())),
        "{:?}",
        types(&journal)
    );
    assert_eq!(llm.requests().len(), 2, "one repair was left: draft 3 used it, draft 4 exhausted the budget");
    let seen: Vec<(u64, u64)> = validations(&s)
        .iter()
        .map(|e| (e["data"]["terminationAttempt"].as_u64().unwrap(), e["data"]["correctionCycle"].as_u64().unwrap()))
        .collect();
    assert_eq!(seen, [(3, 2), (4, 3)], "attempts and cycles continue from the checkpoint");
    s.finish().await;
}

async fn a_recorded_validation_decision_is_replayed_without_running_the_validator(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("FINAL report")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    // The validator sent "draft 1" back; the crash came before the feedback reached the history.
    let run = crashed_gate_run(
        &s,
        vec![answer("draft 1")],
        gate_state(1, 1, Some(validation(1, 1, sent_back("Recorded: start with FINAL.", 1)))),
    )
    .await;

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    assert_eq!(journal.last().unwrap().data["content"], "FINAL report", "{:?}", types(&journal));
    assert_eq!(
        last_user_text(&llm.requests()[0].body),
        "Recorded: start with FINAL.",
        "the recorded feedback, not a new validation"
    );
    let runs = validations(&s);
    assert_eq!(runs.len(), 1, "the validator ran only for the new candidate");
    assert_eq!(
        (runs[0]["data"]["candidate"].as_str(), runs[0]["data"]["terminationAttempt"].as_u64()),
        (Some("FINAL report"), Some(2))
    );
    s.finish().await;
}

async fn an_undecided_validation_runs_again_under_the_same_key(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("never")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    // The crash came while the validator judged "FINAL draft" (attempt 2, model call 3).
    let produced = vec![answer("draft 1"), Message::user("fix 1"), answer("FINAL draft")];
    let run = crashed_gate_run(&s, produced, gate_state(1, 2, Some(validation(2, 2, None)))).await;

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    assert_eq!(journal.last().unwrap().data["content"], "FINAL draft", "{:?}", types(&journal));
    assert!(llm.requests().is_empty(), "the candidate was judged, not asked for again");
    let runs = validations(&s);
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0]["turn"].as_u64(), runs[0]["data"]["terminationAttempt"].as_u64()),
        (Some(2), Some(2)),
        "same turn and attempt, hence the same idempotency key"
    );
    s.finish().await;
}

async fn an_accepted_checkpoint_returns_its_result_without_a_model_call(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("never")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let run = crashed_gate_run(
        &s,
        vec![answer("FINAL accepted report")],
        gate_state(0, 1, Some(validation(1, 1, Some(GateDecision::Accept)))),
    )
    .await;

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    let last = journal.last().unwrap();
    assert_eq!(
        (last.event_type.as_str(), last.data["content"].as_str()),
        ("run.completed", Some("FINAL accepted report")),
        "{:?}",
        types(&journal)
    );
    assert_eq!(
        last.data["usage"]["input_tokens"].as_u64().unwrap_or_default()
            + last.data["usage"]["output_tokens"].as_u64().unwrap_or_default(),
        0,
        "nothing billed again"
    );
    assert!(llm.requests().is_empty(), "no model call");
    assert!(validations(&s).is_empty(), "no validator run");
    s.finish().await;
}

async fn an_interrupted_model_call_in_a_correction_cycle_is_not_repeated(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("FINAL never")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let mut gate = gate_state(1, 1, Some(validation(1, 1, sent_back("fix 1", 1))));
    gate.model_call_in_flight = true;
    let run = crashed_gate_run(&s, vec![answer("draft 1"), Message::user("fix 1")], gate).await;

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    assert_eq!(
        ending(&journal),
        ("run.failed".into(), Some("termination_gate_effect_unconfirmed".into())),
        "{:?}",
        types(&journal)
    );
    assert!(llm.requests().is_empty(), "the uncertain model call is not repeated");
    s.finish().await;
}

async fn an_unconfirmed_write_in_a_correction_cycle_pauses_with_the_gate_code(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("FINAL never")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let args = json!({"command": "echo line >> log.txt"});
    let call = ToolCall { id: "call_1".into(), name: "bash".into(), arguments: args.to_string() };
    let repair =
        Message { role: Role::Assistant, content: None, tool_calls: vec![call], tool_call_id: None, name: None };
    let run = crashed_gate_run(
        &s,
        vec![answer("draft 1"), Message::user("fix 1"), repair],
        gate_state(1, 1, Some(validation(1, 1, sent_back("fix 1", 1)))),
    )
    .await;
    // The crashed process recorded the write's intent, not its result.
    assert_eq!(
        s.runs_store().effects.record_effect_intent(&effect_key(&run, 2, 0, &args)).await.unwrap(),
        EffectClaim::Fresh
    );

    s.runs.recover().await.unwrap();
    let journal = s.journal(&run).await;
    assert_eq!(
        ending(&journal),
        ("run.paused".into(), Some("termination_gate_effect_unconfirmed".into())),
        "{:?}",
        types(&journal)
    );
    assert!(!s.path("log.txt").exists(), "the uncertain write was not repeated");
    assert!(llm.requests().is_empty());
    s.finish().await;
}

/// The state the crash tests start from is what a real gated run checkpoints.
async fn a_gated_run_checkpoints_its_budget_and_decision(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("draft 1"), Turn::text("FINAL report")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let run = s.runs.start(ChatInput::new("repairer", vec![Message::user("Write the report")])).await.unwrap().run_id;
    let journal = s.journal(&run).await;
    assert_eq!(journal.last().unwrap().data["content"], "FINAL report");

    let checkpoint: CheckpointState =
        serde_json::from_value(s.runs_store().runs.latest_checkpoint(&run).await.unwrap().unwrap().state).unwrap();
    let gate = checkpoint.gate.expect("the gate's state is checkpointed");
    assert_eq!((gate.budget.cycles_used, gate.budget.termination_attempts, gate.budget.limits.max_cycles), (1, 2, 5));
    assert!(!gate.model_call_in_flight);
    let v = gate.validation.unwrap();
    assert_eq!((v.turn, v.termination_attempt, v.decision), (2, 2, Some(GateDecision::Accept)));
    let accepted =
        journal.iter().find(|e| e.event_type == "termination_gate" && e.data["state"] == "accepted").unwrap();
    assert_eq!(
        accepted.data["gate_execution_id"],
        v.gate_execution_id.as_str(),
        "keyed by the gate's stable execution id"
    );
    s.finish().await;
}

async fn a_gate_in_a_parallel_branch_is_refused_before_the_run_exists(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::text("FINAL never")]).await.unwrap();
    let s = Setup::new(kind, &llm).await;
    let mut input = ChatInput::new("repairer", vec![Message::user("Write the report")]);
    input.parallel_branch = true;
    let err = s.runs.start(input).await.unwrap_err();
    assert_eq!(err.code(), "termination_gate_parallel_unsupported");
    assert!(llm.requests().is_empty(), "refused before inference");
    assert!(
        s.runs_store().runs.claim_next_run("probe", Duration::from_secs(1)).await.unwrap().is_none(),
        "no run was created"
    );
    // The same branch without a gate runs.
    let mut plain = ChatInput::new("coder", vec![Message::user("Hi")]);
    plain.parallel_branch = true;
    let run = s.runs.start(plain).await.unwrap().run_id;
    assert_eq!(s.journal(&run).await.last().unwrap().event_type, "run.completed");
    s.finish().await;
}

/// A gate whose checkpoint cannot be written fails closed: the validator does not run and the
/// candidate is never the answer. (File store: `checkpoint.json` replaced by a directory
/// while a tool runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_fails_closed_when_its_checkpoint_cannot_be_written() {
    let llm =
        FakeLlm::start([Turn::tool_calls(vec![("bash", gated_append("go", "worked"))]), Turn::text("FINAL report")])
            .await
            .unwrap();
    let s = Setup::new(StoreKind::File, &llm).await;
    let run = s.runs.start(ChatInput::new("repairer", vec![Message::user("Write the report")])).await.unwrap().run_id;
    // The ledger records the call's intent only once the checkpoint before it is durable.
    let key = effect_key(&run, 1, 0, &gated_append("go", "worked"));
    tokio::time::timeout(EVENTUALLY, async {
        while s.runs_store().effects.get_effect(&key).await.unwrap().is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    let checkpoint = s.path(&format!(".polpo/runs/{run}/checkpoint.json"));
    std::fs::remove_file(&checkpoint).unwrap();
    std::fs::create_dir(&checkpoint).unwrap();
    std::fs::write(s.path("go"), "").unwrap();

    let journal = s.journal(&run).await;
    assert_eq!(
        ending(&journal),
        ("run.failed".into(), Some("termination_gate_checkpoint_invalid".into())),
        "{:?}",
        types(&journal)
    );
    assert!(validations(&s).is_empty(), "the validator never judged a candidate whose validation could not be kept");
    assert!(!journal.iter().any(|e| e.event_type == "output.text.delta"), "the candidate was never shown");
    s.finish().await;
}

/// A gate whose state would push the checkpoint over the store's size limit fails closed with
/// its own code, before the validator runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_fails_closed_when_its_checkpoint_is_too_large() {
    let llm = FakeLlm::start([Turn::text("never")]).await.unwrap();
    let s = Setup::new(StoreKind::File, &llm).await;
    let store = s.runs_store();
    let session = store
        .sessions
        .create_session(polpo_store::NewSession { agent: "repairer".into(), ..Default::default() })
        .await
        .unwrap();
    let run = store
        .runs
        .create_run(NewRun {
            id: Some(format!("chat-{}", uuid_like())),
            agent: "repairer".into(),
            session_id: Some(session.id.clone()),
        })
        .await
        .unwrap();
    let seq = store.runs.append_event(&run.id, "run.accepted", json!({})).await.unwrap();
    let spec = RunSpec {
        agent: "repairer".into(),
        session_id: session.id,
        messages: vec![Message::user("Write the report")],
        ..Default::default()
    };
    // A candidate that leaves the checkpoint just below the limit, without gate state yet.
    let state = |text: String| CheckpointState {
        spec: spec.clone(),
        produced: vec![answer(&format!("FINAL {text}"))],
        ..Default::default()
    };
    let base = serde_json::to_vec(&state(String::new())).unwrap().len();
    let state = serde_json::to_value(state("x".repeat(polpo_store::MAX_CHECKPOINT_BYTES - base - 16))).unwrap();
    store.runs.put_checkpoint(&run.id, seq, state).await.unwrap();

    s.runs.recover().await.unwrap();
    // The resume reads and measures a 64 MiB checkpoint: ≈ 10 s of CPU in a debug build alone,
    // so a loaded CI machine gets more than the usual bound (seen failing at 20 s).
    let journal = s.read_until_within(&run.id, 0, "run.paused", Duration::from_secs(180)).await;
    assert_eq!(
        ending(&journal),
        ("run.failed".into(), Some("termination_gate_checkpoint_too_large".into())),
        "{:?}",
        types(&journal)
    );
    assert!(validations(&s).is_empty(), "the validator did not run");
    assert!(llm.requests().is_empty());
    s.finish().await;
}

/// A run still executing here whose lease lapsed (its renewal late on a loaded machine) is
/// not taken over by this server's own recovery pass: the claim would fence its executor off,
/// which would stop and be resumed from its checkpoint, redoing its model calls (seen in CI as
/// a scripted model asked once more than scripted). It finishes as if nothing happened.
async fn recovery_leaves_a_run_executing_here_alone_when_its_lease_lapsed(kind: StoreKind) {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", gated_append("go", "once"))]), Turn::text("Done once.")])
        .await
        .unwrap();
    let clock = Arc::new(polpo_store::ManualClock::new(chrono::Utc::now()));
    let s = Setup::with_clock(kind, &llm, clock.clone()).await;
    let run = s.start("Append once").await;
    s.read_until(&run, 0, "tool.started").await;

    // The store's time passes the lease (5 s) while the tool runs: lapsed, as a late renewal
    // leaves it; then this server's recovery pass runs.
    clock.advance(chrono::Duration::seconds(60));
    assert!(s.runs.recover().await.unwrap().is_empty(), "nothing to take over");
    std::fs::write(s.path("go"), "").unwrap();
    let journal = s.journal(&run).await;
    assert_eq!(ending(&journal).0, "run.completed", "{:?}", types(&journal));
    assert_eq!(journal.last().unwrap().data["content"], "Done once.");
    assert!(!types(&journal).contains(&"run.resumed"), "{:?}", types(&journal));
    assert_eq!(std::fs::read_to_string(s.path("log.txt")).unwrap(), "once\n");
    assert_eq!(llm.requests().len(), 2, "each model call once");
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
    a_call_reconciled_not_applied_runs_once_under_its_key,
    a_skipped_call_never_runs_and_the_model_is_told,
    a_resumed_gate_keeps_the_correction_cycles_it_used,
    a_recorded_validation_decision_is_replayed_without_running_the_validator,
    an_undecided_validation_runs_again_under_the_same_key,
    an_accepted_checkpoint_returns_its_result_without_a_model_call,
    an_interrupted_model_call_in_a_correction_cycle_is_not_repeated,
    an_unconfirmed_write_in_a_correction_cycle_pauses_with_the_gate_code,
    a_gated_run_checkpoints_its_budget_and_decision,
    a_gate_in_a_parallel_branch_is_refused_before_the_run_exists,
    recovery_leaves_a_run_executing_here_alone_when_its_lease_lapsed,
);
