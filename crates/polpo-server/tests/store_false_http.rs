//! `store: false` on `/v1/chat/completions` (OpenAI's field): a client that sends the whole
//! conversation every time and asks for no storage gets a turn that runs like any other —
//! policy, runtime hooks, server tools, events on the bus — and leaves nothing behind in the
//! store, on the file store and on SQLite. A request that needs storage is `400 store_required`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_engine::Delivery;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use support::Server;

/// Agent `coder` (read, write) on `storage`, with pack `guard`: `tool:before` on `write` runs a
/// command that always denies.
fn guarded_project(dir: &Path, storage: &str) {
    ProjectFixture::new(dir, json!({"storage": storage}))
        .unwrap()
        .agent(
            "coder",
            json!({"model": "openai/fake-model", "allowedTools": ["read", "write"], "maxTurns": 6, "hooks": ["guard"]}),
            "You write code.",
        )
        .unwrap()
        .hook_pack(
            "guard",
            json!({"version": 1, "hooks": {
                "tool:before": [{"id": "no-write", "matcher": {"tools": ["write"]}, "handler": {"type": "command", "command": "sh .polpo/hooks/deny.sh", "timeoutMs": 5000}}]
            }}),
        )
        .unwrap();
    std::fs::write(
        dir.join(".polpo/hooks/deny.sh"),
        "cat > /dev/null\necho '{\"decision\":\"deny\",\"reason\":\"writes need a review\"}'\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "the notes\n").unwrap();
}

/// Every file under `root` with its bytes: what a request must leave as it found. SQLite's files
/// are left out: their bytes change when SQLite checkpoints its WAL, writes or not (an unstored
/// turn's SQLite store is checked through the sessions it lists).
fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("polpo.db")) {
                continue;
            }
            if path.is_dir() {
                files.insert(format!("{}/", path.display()), Vec::new());
                dirs.push(path);
            } else {
                files.insert(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// The bus events published so far (name and payload).
fn bus_events(s: &Server) -> Vec<(String, Value)> {
    let (replay, _) = s.state.runtime.events().subscribe_after(Some(0));
    replay
        .into_iter()
        .filter_map(|d| match d {
            Delivery::Event(e) => Some((e.event.clone(), e.payload())),
            Delivery::Lost(_) => None,
        })
        .collect()
}

fn unstored(messages: Value) -> Value {
    json!({"agent": "coder", "store": false, "messages": messages})
}

async fn a_turn_runs_whole_and_writes_nothing(storage: &str) {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start_with(&llm, None, |d| guarded_project(d, storage)).await;
    let before = snapshot(s.dir.path());

    // The model reads a file (a server tool), tries to write (the hook denies), then answers.
    llm.push(Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]));
    llm.push(Turn::tool_calls(vec![("write", json!({"path": "out.txt", "content": "unreviewed"}))]));
    llm.push(Turn::text("The notes say: the notes."));
    let r = s.post("/v1/chat/completions", &[], unstored(json!([{"role": "user", "content": "read notes.txt"}]))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "The notes say: the notes.");
    assert_eq!(r.header("x-session-id"), None, "no session exists to continue");
    assert!(r.header("x-polpo-run-id").unwrap().starts_with("chat-"));
    let requests = llm.requests();
    assert!(requests[1].body["messages"].to_string().contains("the notes"), "the read tool ran");
    assert!(requests[2].body["messages"].to_string().contains("writes need a review"), "the hook ran and denied");
    assert!(!s.dir.path().join("out.txt").exists(), "the denied write did not run");

    // The client sends the whole conversation again with its next question: the model sees it all.
    llm.push(Turn::text("You asked about the notes."));
    let conversation = json!([
        {"role": "user", "content": "read notes.txt"},
        {"role": "assistant", "content": "The notes say: the notes."},
        {"role": "user", "content": "what did I ask?"}
    ]);
    let r = s.post("/v1/chat/completions", &[], unstored(conversation)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sent = llm.requests()[3].body["messages"].as_array().unwrap().len();
    assert_eq!(sent, 4, "system prompt and the three messages the client sent");

    assert_eq!(snapshot(s.dir.path()), before, "nothing written under the project folder (store included)");
    let sessions = s.get("/api/v1/chat/sessions", &[]).await;
    assert_eq!(sessions.status, 200, "{}", sessions.text);
    assert_eq!(sessions.json()["data"]["sessions"], json!([]), "{}", sessions.text);

    // The bus still saw both runs and their tools, with no session named.
    let events = bus_events(&s);
    let named = |name: &str| events.iter().filter(|(e, _)| e == name).count();
    assert_eq!(named("run:started"), 2, "{events:?}");
    assert_eq!(named("run:completed"), 2, "{events:?}");
    assert!(named("tool:completed") >= 1, "{events:?}");
    assert_eq!(named("session:created"), 0, "{events:?}");
    assert_eq!(named("message:added"), 0, "{events:?}");
}

#[tokio::test]
async fn file_store_an_unstored_turn_runs_hooks_and_tools_and_writes_nothing() {
    a_turn_runs_whole_and_writes_nothing("file").await;
}

#[tokio::test]
async fn sqlite_an_unstored_turn_runs_hooks_and_tools_and_writes_nothing() {
    a_turn_runs_whole_and_writes_nothing("sqlite").await;
}

#[tokio::test]
async fn a_request_that_needs_storage_is_refused_with_store_required() {
    let llm = FakeLlm::start([Turn::text("stored answer")]).await.unwrap();
    let s = Server::start_with(&llm, None, |d| guarded_project(d, "file")).await;
    let r = s
        .post("/v1/chat/completions", &[], json!({"agent": "coder", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.header("x-session-id").unwrap().to_owned();
    let before = snapshot(s.dir.path());
    let hi = json!([{"role": "user", "content": "hi"}]);

    let refused = [
        ("continuing a stored session", vec![("x-session-id", session.as_str())], unstored(hi.clone())),
        ("an idempotent request", vec![("idempotency-key", "k-1")], unstored(hi.clone())),
        (
            "a run that outlives its caller",
            vec![],
            json!({"agent": "coder", "store": false, "messages": hi, "polpo": {"delivery": {"onDisconnect": "continue"}}}),
        ),
    ];
    for (what, headers, body) in refused {
        let r = s.post("/v1/chat/completions", &headers, body).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text);
        assert_eq!(r.json()["error"]["code"], "store_required", "{what}: {}", r.text);
    }
    let r = s.post("/v1/chat/completions", &[], json!({"agent": "coder", "store": "no", "messages": hi})).await;
    assert_eq!(r.status, 400, "a store that is not a boolean: {}", r.text);
    assert_eq!(snapshot(s.dir.path()), before, "a refused request writes nothing");
    assert_eq!(llm.requests().len(), 1, "no model call for a refused request");
}
