//! `polpo dev`, `polpo serve` and `polpo run` as a user runs them: the real binary, a real
//! project folder, the fake LLM over HTTP, and the official OpenAI Python client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use support::ServerProcess;

fn project(dir: &Path) {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        // Client tools obey the agent's allowedTools like its own tools: `get_weather` is listed.
        .agent(
            "assistant",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["read", "ls", "get_weather"]}),
            "You are a helpful assistant.",
        )
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_openai_python_client_works_against_polpo_dev() {
    let llm = FakeLlm::start([
        Turn::text("Hello, I am the assistant."),
        Turn::text("Streaming works."),
        Turn::tool_calls(vec![("get_weather", json!({"city": "Paris"}))]),
        Turn::text("It is sunny in Paris."),
        // Structured output: the agent answers with its tools on offer (so unconstrained: the
        // strict fake answers prose), then one tool-free call carries the client's schema.
        Turn::text("Ada Lovelace was 36."),
        Turn::json(json!({"name": "Ada", "age": 36})),
        Turn::text("Grace Hopper was 85."),
        Turn::json(json!({"name": "Grace", "age": 85})),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let base = llm.base_url();
    let server = ServerProcess::start(
        "dev",
        dir.path(),
        &[],
        &[("POLPO_API_KEY", "sk-polpo-e2e"), ("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk-upstream")],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/openai_client.py");
    let url = server.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3").arg(script).arg(&url).arg("sk-polpo-e2e").output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "python client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all ok"), "{stdout}");
    // The upstream key, never the caller's Polpo key, reached the model provider.
    assert_eq!(llm.requests()[0].header("authorization"), Some("Bearer sk-upstream"));
    let requests = llm.requests();
    assert_eq!(requests.len(), 8, "unknown agent and wrong key cost no model call");
    let schema = &requests[5].body["response_format"]["json_schema"];
    assert_eq!(
        (schema["name"].as_str(), schema["strict"].as_bool()),
        (Some("Person"), Some(true)),
        "the client's schema reached the provider as sent"
    );
}

#[test]
fn without_an_api_key_the_server_listens_on_localhost_only() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let mut server = ServerProcess::start("serve", dir.path(), &["--host", "0.0.0.0"], &[]);
    assert!(server.url.starts_with("http://127.0.0.1:"), "{}", server.url);
    server.wait_for("127.0.0.1 only");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_prints_the_dashboard_address_and_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let mut server = ServerProcess::start("serve", dir.path(), &[], &[]);
    let line = server.wait_for("dashboard: ");
    let url = line.split("dashboard: ").nth(1).unwrap().trim().to_owned();
    assert_eq!(url, format!("{}/", server.url));
    let page = reqwest::get(&url).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"), "the dashboard page");
}

#[tokio::test(flavor = "multi_thread")]
async fn health_reports_the_worker_id_given_to_serve_and_the_store_it_reaches() {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "sqlite"}))
        .unwrap()
        .agent("assistant", json!({"model": "openai/gpt-4o-mini"}), "You are a helpful assistant.")
        .unwrap();
    let server = ServerProcess::start("serve", dir.path(), &["--worker-id", "web-1"], &[]);
    polpo_llm::install_crypto_provider();
    let health: serde_json::Value =
        reqwest::get(format!("{}/api/v1/health", server.url)).await.unwrap().json().await.unwrap();
    let data = &health["data"];
    assert_eq!(data["status"], "ok", "{health}");
    assert_eq!(data["store"], json!({"kind": "sqlite", "ok": true}), "{health}");
    assert_eq!(data["worker"], json!({"id": "web-1", "leases": 0}), "{health}");
    assert!(data["version"].is_string() && data["uptime"].is_u64(), "the reference fields stay: {health}");

    // A worker id that would not read back unchanged is refused before anything starts.
    let refused = support::polpo(&["serve", "--worker-id", "web 1"]).current_dir(dir.path()).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--worker-id"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_list_shows_the_server_holding_a_running_run() {
    let gate = "while [ ! -f go ]; do sleep 0.02; done; echo done";
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": gate}))]), Turn::text("Done.")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "sqlite"}))
        .unwrap()
        .agent("coder", json!({"model": "openai/gpt-4o-mini", "allowedTools": ["bash"]}), "You write code.")
        .unwrap();
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk")];
    let server = ServerProcess::start("serve", dir.path(), &["--worker-id", "web-1"], &env);
    polpo_llm::install_crypto_provider();
    let body = json!({"agent": "coder", "stream": true, "messages": [{"role": "user", "content": "Build"}],
        "polpo": {"delivery": {"onDisconnect": "continue"}}});
    let mut chat =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", server.url)).json(&body).send().await.unwrap();
    let mut seen = String::new();
    while !seen.contains("\"calling\"") {
        let chunk = chat.chunk().await.unwrap().expect("the stream goes on until the tool runs");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }

    let url = server.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        support::polpo(&["workers", "list", "--json", "--url", &url]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!((listed[0]["id"].as_str(), listed[0]["runs"].as_u64()), (Some("web-1"), Some(1)), "{listed}");

    std::fs::write(dir.path().join("go"), "").unwrap();
    while chat.chunk().await.unwrap().is_some() {}
}

#[tokio::test(flavor = "multi_thread")]
async fn polpo_run_streams_the_answer_after_using_a_tool() {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]),
        Turn::text("The note says: buy milk."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    std::fs::write(dir.path().join("notes.txt"), "buy milk").unwrap();
    let base = llm.base_url();
    let root = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_polpo"))
            .args(["run", "assistant", "What does my note say?", "--project"])
            .arg(&root)
            .env("OPENAI_BASE_URL", base)
            .env("OPENAI_API_KEY", "sk")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "The note says: buy milk.");
    assert!(stderr.contains("→ read") && stderr.contains("✓ read"), "{stderr}");
    assert!(
        llm.requests()[1].body["messages"].to_string().contains("buy milk"),
        "the tool result went back to the model"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_reloads_an_edited_agent_without_a_restart() {
    let llm = FakeLlm::start([Turn::text("ok")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let base = llm.base_url();
    let mut server =
        ServerProcess::start("dev", dir.path(), &[], &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk")]);
    polpo_llm::install_crypto_provider();
    std::fs::write(dir.path().join(".polpo/agents/assistant/instructions.md"), "You are a pirate.").unwrap();
    server.wait_for("reloaded the project");
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"agent": "assistant", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let system = llm.requests()[0].body["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(system.starts_with("You are a pirate."), "{system}");

    // A broken edit is reported and the last good version keeps serving.
    std::fs::write(dir.path().join(".polpo/agents/assistant/agent.json"), "{ not json").unwrap();
    server.wait_for("still serving the previous version");
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_rebuilds_the_providers_when_the_project_changes_them() {
    let (first, second) = (
        FakeLlm::start([Turn::text("from the first")]).await.unwrap(),
        FakeLlm::start([Turn::text("from the second")]).await.unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let manifest = dir.path().join(".polpo/project.json");
    let point_at = |llm: &FakeLlm| {
        let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
        m["providers"] = json!({"openai": {"baseUrl": llm.base_url()}});
        std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    };
    point_at(&first);
    let mut server = ServerProcess::start("dev", dir.path(), &[], &[("OPENAI_API_KEY", "sk")]);
    polpo_llm::install_crypto_provider();
    let url = format!("{}/v1/chat/completions", server.url);
    let ask = || async {
        let r = reqwest::Client::new()
            .post(&url)
            .json(&json!({"agent": "assistant", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        let body: serde_json::Value = r.json().await.unwrap();
        body["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(ask().await, "from the first");
    point_at(&second);
    server.wait_for("reloaded the project");
    assert_eq!(ask().await, "from the second", "the new baseUrl is used without a restart");
    assert_eq!((first.requests().len(), second.requests().len()), (1, 1));
}
