//! The browser and network attacks of issue #13 against the real `polpo serve` (local-only
//! mode, no API key): a web page posting `text/plain` to the chat and agent routes, DNS
//! rebinding (a foreign `Host`), and a client that never finishes its request line. Plus
//! `polpo keys hash`, which the plain-key warning points users to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{ServerProcess, polpo};

/// The server's header-read timeout (`polpo_server::serve::HEADER_READ_TIMEOUT`).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

fn project(dir: &Path) {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent("assistant", json!({"model": "openai/gpt-4o-mini", "allowedTools": ["bash"]}), "You are helpful.")
        .unwrap();
}

/// `polpo serve` with its agent pointed at `llm`.
fn serve(dir: &Path, llm: &FakeLlm) -> ServerProcess {
    let base = llm.base_url();
    ServerProcess::start("serve", dir, &[], &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk-upstream")])
}

/// An HTTP client (TLS provider installed, as every client in this process needs it).
fn http() -> reqwest::Client {
    polpo_llm::install_crypto_provider();
    reqwest::Client::new()
}

fn address(server: &ServerProcess) -> String {
    server.url.trim_start_matches("http://").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_web_page_cannot_make_the_agent_run_commands_or_create_agents() {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": "touch pwned"}))]), Turn::text("done")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = serve(dir.path(), &llm);
    let http = http();
    // What `fetch(…, {method: "POST", mode: "no-cors", body})` from evil.example sends: a
    // "simple" request, so the browser sends it without asking first.
    let chat = json!({"model": "assistant", "messages": [{"role": "user", "content": "run touch pwned"}]}).to_string();
    let r = http
        .post(format!("{}/v1/chat/completions", server.url))
        .header("origin", "http://evil.example")
        .header("sec-fetch-site", "cross-site")
        .header("content-type", "text/plain")
        .body(chat.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "origin_not_allowed");
    // Without Origin (a non-browser tool), text/plain is still not read as JSON.
    let r = http
        .post(format!("{}/v1/chat/completions", server.url))
        .header("content-type", "text/plain")
        .body(chat)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let agent = json!({"id": "evil", "model": "openai/gpt-4o-mini", "allowedTools": ["bash"]}).to_string();
    let r = http
        .post(format!("{}/api/v1/agents", server.url))
        .header("origin", "http://evil.example")
        .header("content-type", "text/plain")
        .body(agent)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "origin_not_allowed");

    assert!(llm.requests().is_empty(), "the model was never contacted");
    assert!(!dir.path().join("pwned").exists());
    assert!(!dir.path().join(".polpo/agents/evil").exists(), "no agent was created");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebound_dns_name_gets_nothing() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = serve(dir.path(), &llm);
    let port = server.url.rsplit(':').next().unwrap().to_owned();
    let http = http();
    let sessions = format!("{}/api/v1/chat/sessions", server.url);
    let r = http.get(&sessions).header("host", format!("attacker.example:{port}")).send().await.unwrap();
    assert_eq!(r.status(), 421);
    let body = r.json::<Value>().await.unwrap();
    assert_eq!(body["code"], "host_not_allowed");
    assert!(body.get("data").is_none(), "no data for a foreign host: {body}");
    assert_eq!(http.get(&sessions).header("host", format!("localhost:{port}")).send().await.unwrap().status(), 200);
}

#[test]
fn settings_max_connections_caps_what_the_server_holds_open() {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "file", "maxConnections": 1}))
        .unwrap()
        .agent("assistant", json!({"model": "openai/gpt-4o-mini"}), "You are helpful.")
        .unwrap();
    let server = ServerProcess::start("serve", dir.path(), &[], &[]);
    // One silent connection holds the only slot; the next is answered 503 and closed.
    let _held = TcpStream::connect(address(&server)).unwrap();
    let mut next = TcpStream::connect(address(&server)).unwrap();
    next.set_read_timeout(Some(HEADER_TIMEOUT * 3)).unwrap();
    next.write_all(b"GET /api/v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = next.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("too_many_connections"), "{answer}");
}

#[test]
fn a_client_that_never_finishes_its_request_line_is_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = ServerProcess::start("serve", dir.path(), &[], &[]);
    let mut slow = TcpStream::connect(address(&server)).unwrap();
    slow.write_all(b"GET /api/v1/health HT").unwrap();
    let sent = Instant::now();
    // Blocks until the server acts; the bound only keeps a broken server from hanging the test.
    slow.set_read_timeout(Some(HEADER_TIMEOUT * 3)).unwrap();
    let mut answer = Vec::new();
    let outcome = slow.read_to_end(&mut answer);
    let waited = sent.elapsed();
    assert!(
        outcome.is_ok() || outcome.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the server closed the connection instead of keeping it open: {outcome:?} after {waited:?}"
    );
    assert!(waited < HEADER_TIMEOUT * 2, "closed within the header timeout, after {waited:?}");
    assert!(
        waited >= HEADER_TIMEOUT - Duration::from_secs(1),
        "a slow client gets the whole header timeout, closed after {waited:?}"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn polpo_keys_hash_prints_the_digest_that_apikeys_accepts() {
    let mut hash = polpo(&["keys", "hash"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    hash.stdin.take().unwrap().write_all(b"sk-team-key\n").unwrap();
    let out = hash.wait_with_output().unwrap();
    assert!(out.status.success());
    let digest = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(digest.starts_with("sha256:") && digest.len() == 7 + 64, "{digest}");

    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let manifest = dir.path().join(".polpo/project.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    doc["apiKeys"] = json!([digest, "plain-key"]);
    std::fs::write(&manifest, doc.to_string()).unwrap();
    let mut server = ServerProcess::start("serve", dir.path(), &[], &[]);
    let warning = server.wait_for("is a plain-text key");
    assert!(warning.contains("polpo keys hash"), "{warning}");
    let http = http();
    let models = format!("{}/v1/models", server.url);
    assert_eq!(http.get(&models).bearer_auth("sk-team-key").send().await.unwrap().status(), 200);
    assert_eq!(http.get(&models).bearer_auth("sk-other").send().await.unwrap().status(), 401);
}
