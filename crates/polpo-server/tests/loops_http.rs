//! `/api/v1/loops` over real HTTP: a loop is created, read, replaced with its revision, run by
//! a chat with the new definition, refused deletion while an agent assigns it, and refused
//! whole (nothing written) when invalid; `.ts` loops are read-only and client keys cannot edit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_core::config::ApiKeyEntry;
use polpo_server::auth::ApiKeys;
use polpo_testkit::FakeLlm;
use serde_json::{Value, json};
use support::{Server, default_project};

/// A one-step loop that writes `file` with the write tool.
fn notes_loop(file: &str) -> Value {
    json!({
        "name": "notes",
        "start": "save",
        "steps": {"save": {"type": "tool", "tool": "write", "input": {"path": file, "content": "saved"}, "next": "end"}}
    })
}

#[tokio::test]
async fn a_loop_is_created_read_replaced_by_revision_run_and_kept_while_assigned() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start(&llm).await;
    let file = s.dir.path().join(".polpo/loops/notes.json");

    let r = s.post("/api/v1/loops", &[], notes_loop("first.txt")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let first = r.json()["data"]["revision"].as_str().unwrap().to_owned();
    assert!(file.exists());
    let r = s.post("/api/v1/loops", &[], notes_loop("other.txt")).await;
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("already_exists")), "{}", r.text);

    let r = s.get("/api/v1/loops/notes", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got = r.json()["data"].clone();
    assert_eq!(got["revision"], first.as_str());
    assert_eq!(got["source"], "json");
    assert_eq!(got["config"]["steps"]["save"]["input"]["path"], "first.txt");
    let r = s.get("/api/v1/loops", &[]).await;
    let rows = r.json()["data"].clone();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!((rows[0]["id"].clone(), rows[0]["source"].clone()), (json!("notes"), json!("json")));
    assert_eq!(rows[0]["revision"], first.as_str());

    let r = s.patch("/api/v1/agents/coder", &[], json!({"assignedLoops": ["notes"]})).await;
    assert_eq!(r.status, 200, "{}", r.text);

    let mut stale = notes_loop("second.txt");
    stale["expectedRevision"] = json!("0000");
    let r = s.put("/api/v1/loops/notes", &[], stale).await;
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("conflict")), "{}", r.text);
    assert!(std::fs::read_to_string(&file).unwrap().contains("first.txt"), "a stale update writes nothing");

    // `bash` is outside the allowedTools of coder, which runs this loop: the project no longer
    // loads, so the file keeps its old bytes and the old definition stays served.
    let mut widen = notes_loop("second.txt");
    widen["steps"]["save"]["tool"] = json!("bash");
    widen["steps"]["save"]["input"] = json!({"command": "touch second.txt"});
    let before = std::fs::read(&file).unwrap();
    let r = s.put("/api/v1/loops/notes", &[], widen).await;
    assert_eq!((r.status, r.json()["code"].clone()), (400, json!("invalid_project")), "{}", r.text);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    assert_eq!(s.get("/api/v1/loops/notes", &[]).await.json()["data"]["revision"], first.as_str());

    let mut update = notes_loop("second.txt");
    update["expectedRevision"] = json!(first);
    let r = s.put("/api/v1/loops/notes", &[], update).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_ne!(r.json()["data"]["revision"], first.as_str());

    let chat = json!({"agent": "coder", "loop": "notes", "messages": [{"role": "user", "content": "save"}]});
    let r = s.post("/v1/chat/completions", &[], chat).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(s.dir.path().join("second.txt").exists(), "the chat ran the updated loop");
    assert!(!s.dir.path().join("first.txt").exists(), "not the old one");

    let r = s.delete("/api/v1/loops/notes", &[]).await;
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("loop_in_use")), "{}", r.text);
    assert!(file.exists());
    let r = s.patch("/api/v1/agents/coder", &[], json!({"assignedLoops": null})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s.delete("/api/v1/loops/notes", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!file.exists());
    assert_eq!(s.get("/api/v1/loops/notes", &[]).await.status, 404);
}

#[tokio::test]
async fn an_invalid_loop_is_refused_with_located_problems_and_nothing_is_written() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start(&llm).await;
    let broken =
        json!({"name": "broken", "start": "save", "steps": {"save": {"type": "tool", "tool": "write", "nxt": "end"}}});
    let r = s.post("/api/v1/loops", &[], broken).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let body = r.json();
    assert_eq!(body["code"], "invalid_config");
    let problems = body["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    assert!(
        problems.iter().all(|p| p["file"] == ".polpo/loops/broken.json" && p["pointer"].as_str().is_some()),
        "{problems:?}"
    );
    assert!(problems.iter().any(|p| p["pointer"].as_str().unwrap().starts_with("/steps/save")), "{problems:?}");
    assert!(!s.dir.path().join(".polpo/loops/broken.json").exists());

    // Well-formed, but `start` names no step: the whole-project check refuses it and the file
    // is put back (never created).
    let mut dangling = notes_loop("x.txt");
    dangling["name"] = json!("ghost");
    dangling["start"] = json!("missing");
    let r = s.post("/api/v1/loops", &[], dangling).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["code"], "invalid_project", "{}", r.text);
    let problems = r.json()["problems"].clone();
    assert!(
        problems.as_array().unwrap().iter().any(|p| p["file"] == ".polpo/loops/ghost.json" && p["pointer"] == "/start"),
        "{problems}"
    );
    assert!(!s.dir.path().join(".polpo/loops/ghost.json").exists());
    assert_eq!(s.get("/api/v1/loops", &[]).await.json()["data"], json!([]));
}

#[tokio::test]
async fn a_ts_loop_is_listed_but_read_only() {
    let llm = FakeLlm::start([]).await.unwrap();
    let source = "export default { start: 'a', steps: { a: { systemPrompt: 'hi' } } }";
    let s = Server::start_with(&llm, None, |d| {
        default_project(d);
        std::fs::create_dir_all(d.join(".polpo/loops")).unwrap();
        std::fs::write(d.join(".polpo/loops/flow.ts"), source).unwrap();
    })
    .await;
    let r = s.get("/api/v1/loops/flow", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"]["source"], "ts");
    let revision = r.json()["data"]["revision"].clone();
    let r = s
        .put(
            "/api/v1/loops/flow",
            &[],
            json!({"start": "a", "steps": {"a": {"systemPrompt": "bye"}}, "expectedRevision": revision}),
        )
        .await;
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("loop_read_only")), "{}", r.text);
    let r = s.delete("/api/v1/loops/flow", &[]).await;
    assert_eq!(r.json()["code"], "loop_read_only", "{}", r.text);
    assert_eq!(std::fs::read_to_string(s.dir.path().join(".polpo/loops/flow.ts")).unwrap(), source);
    assert!(!s.dir.path().join(".polpo/loops/flow.json").exists());
}

#[tokio::test]
async fn a_client_key_cannot_edit_loops_but_may_read_them() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start_tweaked(
        &llm,
        Some("root"),
        |d| drop(default_project(d)),
        |state| state.keys = ApiKeys::load(Some("root"), &[ApiKeyEntry::Plain("client".into())]).0,
    )
    .await;
    let client = [("authorization", "Bearer client")];
    let r = s.post("/api/v1/loops", &client, notes_loop("x.txt")).await;
    assert_eq!((r.status, r.json()["code"].clone()), (403, json!("forbidden")), "{}", r.text);
    assert!(!s.dir.path().join(".polpo/loops/notes.json").exists());
    assert_eq!(s.get("/api/v1/loops", &client).await.status, 200);
    let r = s.post("/v1/loops", &[("authorization", "Bearer root")], notes_loop("x.txt")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    for r in
        [s.put("/api/v1/loops/notes", &client, notes_loop("y.txt")).await, s.delete("/v1/loops/notes", &client).await]
    {
        assert_eq!(r.status, 403, "{}", r.text);
    }
    assert!(s.dir.path().join(".polpo/loops/notes.json").exists());
}
