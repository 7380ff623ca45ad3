//! Memory learning against the real binary and the strict fake model: an agent in `suggest`
//! mode gets one candidate from a successful chat turn — none from a failed turn or a turn
//! handing a client tool call back —, the turn's job survives `polpo serve` being killed
//! (SIGKILL) while the extraction is in flight and gives exactly one candidate after the
//! restart, and approving the candidate with `polpo memory candidates approve` (through the
//! server's REST route) creates the memory item.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::ServerProcess;

const AGENT: &str = "notes";

fn extraction() -> Value {
    json!({"items": [{"kind": "preference", "content": "Prefers tabs over spaces"}]})
}

async fn chat(url: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap()
}

async fn get(url: &str, path: &str) -> Value {
    let response = reqwest::get(format!("{url}{path}")).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

async fn candidates(url: &str) -> Vec<Value> {
    get(url, &format!("/api/v1/agents/{AGENT}/memory/candidates")).await["data"]["candidates"]
        .as_array()
        .unwrap()
        .clone()
}

/// Wait (up to 30 s) until `done` holds, looking again every 20 ms.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suggest_mode_learns_once_from_a_committed_turn_even_across_a_kill_and_approval_creates_the_item() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        // 1: the model refuses: a failed turn, nothing committed.
        Turn::error(400, r#"{"error": {"message": "bad request", "type": "invalid_request_error"}}"#),
        // 2: the model calls the client's tool: the turn waits on the client.
        Turn::tool_calls(vec![("lookup", json!({"q": "my password is hunter2"}))]),
        // 3: a real answer, then 4: its extraction, which hangs until the server is killed.
        Turn::text("Noted: tabs it is."),
        Turn::json(extraction()).stall_after(0),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    polpo_testkit::ProjectFixture::new(dir.path(), json!({}))
        .unwrap()
        .agent(
            AGENT,
            json!({"model": "openai/fake-model", "memory": {"learning": {"mode": "suggest", "surfaces": ["chat"], "kinds": ["preference", "fact"]}}}),
            "You take notes.",
        )
        .unwrap();
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")];

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let failed =
        chat(&first.url, json!({"agent": AGENT, "messages": [{"role": "user", "content": "I like tabs"}]})).await;
    assert!(!failed.status().is_success(), "the failed turn fails");
    let tool = json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}});
    let handed = chat(
        &first.url,
        json!({"agent": AGENT, "tools": [tool], "messages": [{"role": "user", "content": "Look up my settings"}]}),
    )
    .await;
    let handed: Value = handed.json().await.unwrap();
    assert_eq!(handed["choices"][0]["finish_reason"], "tool_calls", "{handed}");
    let answered = chat(
        &first.url,
        json!({"agent": AGENT, "messages": [{"role": "user", "content": "I prefer tabs over spaces"}]}),
    )
    .await;
    assert_eq!(answered.status(), 200);
    let session = answered.headers()["x-session-id"].to_str().unwrap().to_owned();

    // The extraction is under way (the fourth model call) when the server dies.
    until("the extraction request", || async { llm.requests().len() == 4 }).await;
    let requests = llm.requests();
    for chat_request in &requests[..3] {
        assert!(chat_request.body.get("response_format").is_none(), "only the extraction asks for JSON");
    }
    let asked = &requests[3].body;
    assert_eq!(asked["response_format"]["type"], "json_schema");
    assert_eq!(asked["response_format"]["json_schema"]["name"], "memory_candidates");
    let shown = asked["messages"].to_string();
    assert!(shown.contains("I prefer tabs over spaces") && shown.contains("Noted: tabs it is."), "{shown}");
    assert!(!shown.contains("hunter2") && !shown.contains("Look up my settings"), "only the committed turn: {shown}");
    assert!(candidates(&first.url).await.is_empty());
    drop(first); // SIGKILL, then reaped

    // The restarted server finds the job in the outbox and extracts again: one candidate.
    llm.push(Turn::json(extraction()));
    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    until("the candidate", || async { !candidates(&second.url).await.is_empty() }).await;
    let found = candidates(&second.url).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let candidate = &found[0];
    assert_eq!(candidate["status"], "pending");
    assert_eq!(candidate["kind"], "preference");
    assert_eq!(candidate["content"], "Prefers tabs over spaces");
    assert_eq!(candidate["scope"], json!({"kind": "user", "subjectId": "local"}));
    assert_eq!(candidate["sourceTurn"]["sessionId"], session);
    assert_eq!(llm.requests().len(), 5, "one extraction after the restart, nothing else");
    assert_eq!(llm.remaining(), 0);

    // Approving it with `polpo memory candidates` (through the server) creates the item, in
    // the user's memory.
    let id = candidate["id"].as_str().unwrap();
    let cli = |args: &[&str]| {
        let mut all = vec!["memory", "candidates"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--url", &second.url]);
        support::polpo(&all).current_dir(dir.path()).output().unwrap()
    };
    let listed = cli(&["list", AGENT, "--status", "pending"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["candidates"][0]["id"], id, "{listed}");
    let decided = cli(&["approve", AGENT, id, "--reason", "right"]);
    assert!(decided.status.success(), "{}", String::from_utf8_lossy(&decided.stderr));
    let decided: Value = serde_json::from_slice(&decided.stdout).unwrap();
    let decided = json!({"data": decided});
    assert_eq!(decided["data"]["candidate"]["status"], "applied", "{decided}");
    let memory_id = decided["data"]["memoryId"].as_str().unwrap();
    let item = get(&second.url, &format!("/api/v1/agents/{AGENT}/memory/items/{memory_id}")).await;
    assert_eq!(item["data"]["item"]["content"], "Prefers tabs over spaces");
    assert_eq!(item["data"]["item"]["scope"], json!({"kind": "user", "subjectId": "local"}));
    let audit = get(&second.url, &format!("/api/v1/agents/{AGENT}/memory/candidates/{id}/audit")).await;
    let actions: Vec<&str> =
        audit["data"]["audit"].as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["proposed", "approved", "applied"]);
    assert_eq!(audit["data"]["audit"][1]["actor"], "local", "the reviewer is the caller, not a body field");
    let pending = get(&second.url, &format!("/api/v1/agents/{AGENT}/memory/candidates?statuses=pending")).await;
    assert_eq!(pending["data"]["candidates"], json!([]));
    let applied = get(&second.url, &format!("/api/v1/agents/{AGENT}/memory/candidates?statuses=applied")).await;
    assert_eq!(applied["data"]["candidates"][0]["memoryId"], memory_id);
    // A second decision is refused: the candidate was applied.
    let again = cli(&["reject", AGENT, id]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("conflict"), "{}", String::from_utf8_lossy(&again.stderr));
}
