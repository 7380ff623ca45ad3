//! A runtime hook's `ask` on a tool call, through the real `polpo serve`: a durable chat pauses
//! `awaiting_approval` with an approval request holding the proposed call; approved over REST
//! (also after a server restart) the run resumes and the call runs once; rejected, the model is
//! told and the run goes on. Inline chat answers `409 approval_required` with the request's id,
//! and once it is approved the same request retried with its `Idempotency-Key` runs the call —
//! a different request cannot use that approval. An `ask` with a timeout nobody answers is
//! rejected by the server, also when the deadline passed while no server ran. A decision that
//! finds the paused run still leased to a server that died resumes it once the lease lapses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_store::{StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::ServerProcess;

/// A run stream frame: (sequence, RunStreamEvent).
type Frame = (u64, Value);

/// Agent `builder` (bash) whose `bash` calls a command hook answers `ask` about.
fn project(dir: &Path) {
    project_asking(dir, r#"{"decision":"ask","reason":"shell commands need a person"}"#);
}

/// Agent `builder` whose `bash` calls a command hook answers with `decision` (one JSON line).
fn project_asking(dir: &Path, decision: &str) {
    ProjectFixture::new(dir, json!({}))
        .unwrap()
        .agent(
            "builder",
            json!({"model": "openai/fake-model", "allowedTools": ["bash"], "maxTurns": 6, "hooks": ["review"]}),
            "You build things.",
        )
        .unwrap()
        .hook_pack(
            "review",
            json!({"version": 1, "hooks": {"tool:before": [{
                "id": "ask-shell",
                "matcher": {"tools": ["bash"]},
                "handler": {"type": "command", "command": "sh .polpo/hooks/ask.sh", "timeoutMs": 5000}
            }]}}),
        )
        .unwrap();
    std::fs::write(dir.join(".polpo/hooks/ask.sh"), format!("cat > /dev/null\necho '{decision}'\n")).unwrap();
}

fn append(line: &str) -> Turn {
    Turn::tool_calls(vec![("bash", json!({"command": format!("echo {line} >> log.txt")}))])
}

fn env(llm: &FakeLlm) -> Vec<(&'static str, String)> {
    vec![("OPENAI_BASE_URL", llm.base_url()), ("OPENAI_API_KEY", "sk-upstream".into())]
}

fn start(dir: &Path, env: &[(&'static str, String)]) -> ServerProcess {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    ServerProcess::start("serve", dir, &[], &env)
}

fn log(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("log.txt")).ok()
}

/// `POST /v1/chat/completions`: (status, body, run id).
async fn chat(url: &str, body: &Value, idempotency_key: Option<&str>) -> (u16, Value, String) {
    let mut req = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(body);
    if let Some(key) = idempotency_key {
        req = req.header("idempotency-key", key);
    }
    let response = req.send().await.unwrap();
    let status = response.status().as_u16();
    let run = response.headers().get("x-polpo-run-id").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, response.json().await.unwrap(), run)
}

/// `POST /api/v1/approvals/{id}/{decision}` with `body`: the REST answer.
async fn decide(url: &str, id: &str, decision: &str, body: Value) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{url}/api/v1/approvals/{id}/{decision}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{decision} {id}");
    response.json().await.unwrap()
}

/// The run's journal (`GET /v1/runs/{id}/events`) from the start until its terminal event.
async fn journal(url: &str, run: &str) -> Vec<Frame> {
    let mut response = reqwest::get(format!("{url}/v1/runs/{run}/events")).await.unwrap();
    assert_eq!(response.status(), 200);
    let (mut buffer, mut seen) = (String::new(), Vec::new());
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let Some(end) = buffer.find("\n\n") else {
                let chunk = response.chunk().await.unwrap().expect("the stream goes on until the run ends");
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                continue;
            };
            let raw: String = buffer.drain(..end + 2).collect();
            let id = raw.lines().find_map(|l| l.strip_prefix("id:")).and_then(|v| v.trim().parse().ok());
            let data = raw.lines().find_map(|l| l.strip_prefix("data:")).map(str::trim);
            let (Some(id), Some(data)) = (id, data) else { continue };
            let frame: Value = serde_json::from_str(data).unwrap();
            let done = ["run.completed", "run.failed", "run.cancelled"].contains(&frame["type"].as_str().unwrap());
            seen.push((id, frame));
            if done {
                return;
            }
        }
    })
    .await
    .expect("the run ends");
    seen
}

fn types(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|(_, e)| e["type"].as_str().unwrap()).collect()
}

fn durable_request() -> Value {
    json!({"agent": "builder", "messages": [{"role": "user", "content": "Append one"}],
           "polpo": {"delivery": {"onDisconnect": "continue"}}})
}

#[tokio::test]
async fn a_durable_chat_waits_for_approval_across_a_restart_and_the_approved_call_runs_once() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([append("one"), Turn::text("Appended.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let env = env(&llm);
    let first = start(dir.path(), &env);

    let (status, body, run) = chat(&first.url, &durable_request(), None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["error"]["code"], "awaiting_approval", "{body}");
    assert_eq!(body["error"]["run_id"], run.as_str());
    let approval = body["error"]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(log(dir.path()), None, "nothing ran before the approval");

    // The reviewer sees the proposed call.
    let pending: Value =
        reqwest::get(format!("{}/api/v1/approvals?status=pending", first.url)).await.unwrap().json().await.unwrap();
    let listed = &pending["data"]["approvals"];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{pending}");
    assert_eq!(listed[0]["id"], approval.as_str());
    assert_eq!(listed[0]["type"], "tool_call");
    assert_eq!(listed[0]["tool"], "bash");
    assert_eq!(listed[0]["arguments"]["command"], "echo one >> log.txt");
    assert_eq!(listed[0]["hook"], "review/ask-shell");
    assert_eq!(listed[0]["message"], "shell commands need a person");
    assert_eq!(listed[0]["runId"], run.as_str());
    let run_json: Value = reqwest::get(format!("{}/v1/runs/{run}", first.url)).await.unwrap().json().await.unwrap();
    assert_eq!(run_json["data"]["status"], "paused", "{run_json}");

    // The server goes away while the run waits; the next one takes the decision.
    drop(first);
    let second = start(dir.path(), &env);
    let resolved = decide(&second.url, &approval, "approve", json!({"note": "fine"})).await;
    assert_eq!(resolved["data"]["status"], "approved", "{resolved}");

    let frames = journal(&second.url, &run).await;
    let seen = types(&frames);
    assert_eq!(frames.last().unwrap().1["data"]["content"], "Appended.", "{seen:?}");
    let at = |t: &str| seen.iter().position(|s| *s == t).unwrap_or_else(|| panic!("no {t} in {seen:?}"));
    assert!(at("approval.requested") < at("run.paused"), "{seen:?}");
    assert!(at("run.paused") < at("approval.resolved") && at("approval.resolved") < at("run.resumed"), "{seen:?}");
    assert_eq!(frames[at("approval.resolved")].1["data"]["approvalId"], approval.as_str());
    assert_eq!(seen.iter().filter(|t| **t == "tool.completed").count(), 1, "{seen:?}");
    assert_eq!(log(dir.path()).as_deref(), Some("one\n"), "the approved call ran exactly once");
    assert_eq!(llm.requests().len(), 2, "the model was not asked again for the call it had made");
}

#[tokio::test]
async fn an_approval_made_while_a_dead_servers_lease_holds_the_paused_run_resumes_it_once_the_lease_lapses() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([append("one"), Turn::text("Appended.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let mut env = env(&llm);
    // Recovery passes every half lease TTL: a lapsed lease is noticed within a second.
    env.push(("POLPO_RUN_LEASE_MS", "2000".into()));
    let first = start(dir.path(), &env);
    let (status, body, run) = chat(&first.url, &durable_request(), None).await;
    assert_eq!(status, 202, "{body}");
    let approval = body["error"]["approval_id"].as_str().unwrap().to_owned();
    paused(&first.url, &run).await;
    drop(first);

    // The window of a server killed after storing the pause and before releasing the lease:
    // the run is paused, and a worker that is gone still holds its lease for a while (long
    // enough for a slow machine to start the second server and approve before it lapses).
    let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    store.runs.claim_run(&run, "dead-worker", Duration::from_secs(20)).await.unwrap();
    drop(store);

    let second = start(dir.path(), &env);
    let resolved = decide(&second.url, &approval, "approve", json!({})).await;
    assert_eq!(resolved["data"]["status"], "approved", "{resolved}");
    let now: Value = reqwest::get(format!("{}/v1/runs/{run}", second.url)).await.unwrap().json().await.unwrap();
    assert_eq!(now["data"]["status"], "paused", "the dead worker's lease keeps the run from resuming yet: {now}");

    let frames = journal(&second.url, &run).await;
    let seen = types(&frames);
    assert_eq!(frames.last().unwrap().1["data"]["content"], "Appended.", "{seen:?}");
    assert_eq!(seen.iter().filter(|t| **t == "approval.resolved").count(), 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|t| **t == "tool.completed").count(), 1, "{seen:?}");
    assert_eq!(log(dir.path()).as_deref(), Some("one\n"), "the approved call ran exactly once");
    assert_eq!(llm.requests().len(), 2, "the model was not asked again for the call it had made");
}

#[tokio::test]
async fn a_rejected_call_is_refused_to_the_model_and_the_run_goes_on() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([append("one"), Turn::text("Not appended, as asked.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let env = env(&llm);
    let server = start(dir.path(), &env);

    let (status, body, run) = chat(&server.url, &durable_request(), None).await;
    assert_eq!(status, 202, "{body}");
    let approval = body["error"]["approval_id"].as_str().unwrap().to_owned();
    let resolved = decide(&server.url, &approval, "reject", json!({"feedback": "no shell today"})).await;
    assert_eq!(resolved["data"]["status"], "rejected", "{resolved}");

    let frames = journal(&server.url, &run).await;
    assert_eq!(frames.last().unwrap().1["data"]["content"], "Not appended, as asked.", "{:?}", types(&frames));
    assert_eq!(log(dir.path()), None, "the rejected call never ran");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let refusal = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .unwrap();
    assert!(refusal.contains("approval_rejected") && refusal.contains("no shell today"), "{refusal}");
}

/// Poll run `run` until it is stored `paused` (bounded).
async fn paused(url: &str, run: &str) {
    let polled = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let run: Value = reqwest::get(format!("{url}/v1/runs/{run}")).await.unwrap().json().await.unwrap();
            if run["data"]["status"] == "paused" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    polled.await.expect("the run is stored paused");
}

/// The tool message the model was sent in its second request.
fn refusal(llm: &FakeLlm) -> String {
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .unwrap()
}

#[tokio::test]
async fn an_unanswered_ask_with_a_timeout_is_rejected_by_the_server_after_a_restart() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([append("one"), Turn::text("Not appended: nobody approved.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project_asking(dir.path(), r#"{"decision":"ask","reason":"shell commands need a person","data":{"timeout":1}}"#);
    let env = env(&llm);
    let first = start(dir.path(), &env);

    let (status, body, run) = chat(&first.url, &durable_request(), None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["error"]["code"], "awaiting_approval", "{body}");
    let approval = body["error"]["approval_id"].as_str().unwrap().to_owned();
    // The server goes away before anyone answers, once the run is stored paused (the reply
    // can come first); the deadline passes while none runs.
    paused(&first.url, &run).await;
    drop(first);

    let second = start(dir.path(), &env);
    let frames = journal(&second.url, &run).await;
    assert_eq!(frames.last().unwrap().1["data"]["content"], "Not appended: nobody approved.", "{:?}", types(&frames));
    assert_eq!(log(dir.path()), None, "the unanswered call never ran");
    let refusal = refusal(&llm);
    assert!(refusal.contains("approval_rejected") && refusal.contains("timed out"), "{refusal}");

    let stored: Value =
        reqwest::get(format!("{}/api/v1/approvals/{approval}", second.url)).await.unwrap().json().await.unwrap();
    let stored = &stored["data"];
    assert_eq!((stored["status"].as_str(), stored["resolvedBy"].as_str()), (Some("rejected"), Some("timeout")));
    assert_eq!((stored["timeout"].as_str(), stored["timeoutAction"].as_str()), (Some("PT1S"), Some("reject")));
    assert!(stored["deadline"].is_string(), "{stored}");

    // A reviewer at a terminal sees the chat run and the tool, not a loop run.
    let out = support::polpo(&["approvals", "--url", second.url.as_str(), "list"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(
        listed.starts_with(&format!("{approval}\trejected\t{run}\ttool bash (hook review/ask-shell)\t")),
        "{listed}"
    );
}

#[tokio::test]
async fn a_timeout_lapsing_while_the_server_runs_decides_its_action_and_an_approved_call_runs_once() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([append("one"), Turn::text("Appended.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ask = r#"{"decision":"ask","reason":"fine unless someone objects","data":{"timeout":"PT1S","timeoutAction":"approve"}}"#;
    project_asking(dir.path(), ask);
    let server = start(dir.path(), &env(&llm));

    let (status, body, run) = chat(&server.url, &durable_request(), None).await;
    assert_eq!(status, 202, "{body}");
    let approval = body["error"]["approval_id"].as_str().unwrap().to_owned();
    let frames = journal(&server.url, &run).await;
    let seen = types(&frames);
    assert_eq!(frames.last().unwrap().1["data"]["content"], "Appended.", "{seen:?}");
    assert_eq!(seen.iter().filter(|t| **t == "tool.completed").count(), 1, "{seen:?}");
    assert_eq!(log(dir.path()).as_deref(), Some("one\n"), "the call approved by its timeout ran once");
    let stored: Value =
        reqwest::get(format!("{}/api/v1/approvals/{approval}", server.url)).await.unwrap().json().await.unwrap();
    assert_eq!(
        (stored["data"]["status"].as_str(), stored["data"]["resolvedBy"].as_str()),
        (Some("approved"), Some("timeout"))
    );
}

#[tokio::test]
async fn an_ask_with_an_invalid_timeout_is_the_hooks_invalid_output() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([append("one"), Turn::text("Refused.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project_asking(dir.path(), r#"{"decision":"ask","reason":"later","data":{"timeout":"forever"}}"#);
    let server = start(dir.path(), &env(&llm));

    let (status, body, _) = chat(&server.url, &durable_request(), None).await;
    assert_eq!(status, 200, "no approval is requested for an invalid answer: {body}");
    let pending: Value = reqwest::get(format!("{}/api/v1/approvals", server.url)).await.unwrap().json().await.unwrap();
    assert_eq!(pending["data"]["approvals"], json!([]), "{pending}");
    assert_eq!(log(dir.path()), None, "a failing hook fails closed");
    let refusal = refusal(&llm);
    assert!(refusal.contains("hook_failed") && refusal.contains("data.timeout"), "{refusal}");
}

#[tokio::test]
async fn inline_chat_answers_approval_required_and_the_approved_request_retried_runs_the_call_once() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([append("one"), append("one"), Turn::text("Appended."), append("one")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let env = env(&llm);
    let server = start(dir.path(), &env);
    let request = json!({"agent": "builder", "messages": [{"role": "user", "content": "Append one"}]});

    let (status, body, _) = chat(&server.url, &request, Some("append-1")).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "approval_required", "{body}");
    let approval = body["error"]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(log(dir.path()), None);

    decide(&server.url, &approval, "approve", json!({})).await;
    let (status, body, _) = chat(&server.url, &request, Some("append-1")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Appended.");
    assert_eq!(log(dir.path()).as_deref(), Some("one\n"));
    let stored: Value =
        reqwest::get(format!("{}/api/v1/approvals/{approval}", server.url)).await.unwrap().json().await.unwrap();
    assert!(stored["data"]["consumedAt"].is_string(), "{stored}");

    // Another request (another key) with the same call cannot use that approval.
    let (status, body, _) = chat(&server.url, &request, Some("append-2")).await;
    assert_eq!(status, 409, "{body}");
    assert_ne!(body["error"]["approval_id"], approval.as_str());
    assert_eq!(log(dir.path()).as_deref(), Some("one\n"), "the call ran once only");
}
