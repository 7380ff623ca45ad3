//! MCP end to end: agents using a real stdio MCP server (the testkit's `polpo-mcp-demo`, written
//! with rmcp's server side) through `polpo serve`, `polpo mcp list`, and an rmcp client asking
//! Polpo's agents on `/mcp`. The model is the testkit's strict fake; everything else is real.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use support::ServerProcess;

/// `assistant` may use the demo server's tools; `narrow` lists the same server but its policy
/// excludes `mcp__demo__*`.
fn project(dir: &Path) {
    let demo = polpo_testkit::mcp_demo::demo_bin().unwrap();
    let servers = json!({"demo": {"type": "stdio", "command": demo.to_str().unwrap()}});
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent(
            "assistant",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["read", "mcp__demo__*"], "mcpServers": servers}),
            "You use the demo tools.",
        )
        .unwrap()
        .agent(
            "narrow",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["read"], "mcpServers": servers}),
            "You read files.",
        )
        .unwrap();
}

async fn chat(url: &str, agent: &str, text: &str, session: Option<&str>) -> (Value, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"agent": agent, "messages": [{"role": "user", "content": text}]}));
    if let Some(id) = session {
        request = request.header("x-session-id", id);
    }
    let response = request.send().await.unwrap();
    let session = response.headers()["x-session-id"].to_str().unwrap().to_owned();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    (body, session)
}

fn offered_tools(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The content of the last tool message the model was sent.
fn last_tool_result(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let tool = messages.iter().rev().find(|m| m["role"] == "tool").expect("a tool result");
    tool["content"].as_str().unwrap().to_owned()
}

fn instance_in(result: &str) -> u128 {
    result.rsplit("(instance ").next().unwrap().trim_end_matches(')').parse().unwrap()
}

/// The host pids of the running processes of program `exe` that descend from `root`.
fn descendants_running(root: u32, exe: &Path) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut family = vec![root as i32];
    let mut i = 0;
    while i < family.len() {
        let parent = family[i];
        family.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    family
        .into_iter()
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe) && !dead(*pid))
        .collect()
}

/// True once `pid` no longer runs (gone, or a zombie its parent has not reaped yet).
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_calls_its_stdio_mcp_server_and_a_killed_server_is_restarted_on_the_next_call() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("mcp__demo__echo", json!({"text": "hello"}))]),
        Turn::text("The server said hello."),
        Turn::tool_calls(vec![("mcp__demo__echo", json!({"text": "again"}))]),
        Turn::text("It answered again."),
        Turn::text("I can only read files."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let base = llm.base_url();
    let mut server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk-upstream")],
    );

    let (body, session) = chat(&server.url, "assistant", "Echo hello", None).await;
    assert_eq!(body["choices"][0]["message"]["content"], "The server said hello.");
    let requests = llm.requests();
    let tools = offered_tools(&requests[0].body);
    let offered = tools.contains(&"mcp__demo__echo".to_owned()) && tools.contains(&"mcp__demo__add".to_owned());
    assert!(offered, "{tools:?}; server log:\n{}", server.log());
    let first = last_tool_result(&requests[1].body);
    assert!(first.starts_with("echo: hello (instance "), "{first}; server log:\n{}", server.log());

    // The server dies between two turns of the session: the next call starts it again.
    let demo = std::fs::canonicalize(polpo_testkit::mcp_demo::demo_bin().unwrap()).unwrap();
    let running = descendants_running(server.child.id(), &demo);
    assert_eq!(running.len(), 1, "one shared demo server runs: {running:?}");
    nix_kill(running[0]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dead(running[0]) {
        assert!(Instant::now() < deadline, "pid {} survived SIGKILL", running[0]);
        std::thread::yield_now();
    }
    let (body, _) = chat(&server.url, "assistant", "Echo again", Some(&session)).await;
    assert_eq!(body["choices"][0]["message"]["content"], "It answered again.");
    let second = last_tool_result(&llm.requests()[3].body);
    assert!(second.starts_with("echo: again (instance "), "{second}");
    assert_ne!(instance_in(&second), instance_in(&first), "a new server process answered");
    assert_eq!(descendants_running(server.child.id(), &demo).len(), 1, "the dead one was replaced, not duplicated");

    // Same server, but a policy without `mcp__demo__*`: the model is never offered its tools.
    let (body, _) = chat(&server.url, "narrow", "Echo something", None).await;
    assert_eq!(body["choices"][0]["message"]["content"], "I can only read files.");
    let tools = offered_tools(&llm.requests()[4].body);
    assert!(!tools.iter().any(|t| t.starts_with("mcp__")), "{tools:?}");
}

fn nix_kill(pid: i32) {
    let status = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(status.success());
}

#[test]
fn mcp_list_connects_and_shows_each_agents_servers_and_tools() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let out = support::polpo(&["mcp", "list", "--agent", "assistant", "--project", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("assistant  demo  stdio  connected"), "{stdout}");
    assert!(stdout.contains("tools: mcp__demo__echo, mcp__demo__add"), "{stdout}");
    assert!(!stdout.contains("narrow"), "--agent shows one agent: {stdout}");

    // A server that cannot start is reported, and the command fails.
    let agent = dir.path().join(".polpo/agents/narrow/agent.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&agent).unwrap()).unwrap();
    config["mcpServers"] = json!({"gone": {"type": "stdio", "command": "/nonexistent/mcp-server"}});
    std::fs::write(&agent, config.to_string()).unwrap();
    let out = support::polpo(&["mcp", "list", "--json", "--project", dir.path().to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gone = rows.as_array().unwrap().iter().find(|r| r["server"] == "gone").unwrap();
    assert_eq!(gone["status"], "error");
    assert!(
        gone["error"].as_str().unwrap().contains("mcp_server_unavailable")
            || gone["error"].as_str().unwrap().contains("spawn_failed"),
        "{gone}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_rmcp_client_lists_polpos_agents_on_mcp_and_gets_an_answer() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("Hello from the assistant.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let base = llm.base_url();
    let server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("POLPO_API_KEY", "sk-polpo-mcp"), ("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk-upstream")],
    );
    let url = format!("{}/mcp", server.url);

    // Without the key the endpoint refuses, like every other route.
    let refused = ().serve(StreamableHttpClientTransport::from_uri(url.clone())).await;
    assert!(refused.is_err(), "connected without an API key");

    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header("sk-polpo-mcp");
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["ask_assistant", "ask_narrow"]);
    let mut args = serde_json::Map::new();
    args.insert("prompt".into(), json!("Say hello"));
    let result = client.call_tool(CallToolRequestParams::new("ask_assistant").with_arguments(args)).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let answer = result.structured_content.unwrap();
    assert_eq!(answer["answer"], "Hello from the assistant.");
    assert!(answer["sessionId"].as_str().is_some_and(|s| !s.is_empty()), "{answer}");
    assert_eq!(llm.requests()[0].body["messages"].as_array().unwrap().last().unwrap()["content"], "Say hello");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_uses_another_polpos_agents_through_a_streamable_http_mcp_server() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("mcp__peer__ask_assistant", json!({"prompt": "What is 2+2?"}))]),
        Turn::text("4"),
        Turn::text("The peer says 4."),
    ])
    .await
    .unwrap();
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")];
    let peer_dir = tempfile::tempdir().unwrap();
    project(peer_dir.path());
    let mut peer_env = env.to_vec();
    peer_env.push(("POLPO_API_KEY", "sk-peer"));
    let peer = ServerProcess::start("serve", peer_dir.path(), &[], &peer_env);

    // The caller's header names the peer's key in its vault (a project-wide entry).
    let dir = tempfile::tempdir().unwrap();
    let vault_key = "ef".repeat(32);
    store_secret(dir.path(), &vault_key, "*", "peer", "key", "sk-peer");
    let servers = json!({"peer": {"type": "http", "url": format!("{}/mcp", peer.url), "headers": {"Authorization": "Bearer ${vault:peer:key}"}}});
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent(
            "caller",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["mcp__peer__*"], "mcpServers": servers}),
            "You ask your peer.",
        )
        .unwrap();
    let mut caller_env = env.to_vec();
    caller_env.push(("POLPO_VAULT_KEY", &vault_key));
    let server = ServerProcess::start("serve", dir.path(), &[], &caller_env);
    let (body, _) = chat(&server.url, "caller", "Ask the peer", None).await;
    assert_eq!(body["choices"][0]["message"]["content"], "The peer says 4.");
    let requests = llm.requests();
    let tools = offered_tools(&requests[0].body);
    assert_eq!(tools, ["mcp__peer__ask_assistant", "mcp__peer__ask_narrow"]);
    assert_eq!(requests[1].body["messages"].as_array().unwrap().last().unwrap()["content"], "What is 2+2?");
    assert_eq!(last_tool_result(&requests[2].body), "4");
}

/// A value that must reach the demo server's environment and nothing a client of Polpo sees.
const MCP_SECRET: &str = "mcp-secret-5f3a9c1e7b";

/// Agent `keeper` starts the demo server with `DEMO_TOKEN` taken from its vault entry `demo`.
fn vault_project(dir: &Path, key: &str, reference: &str) {
    let demo = polpo_testkit::mcp_demo::demo_bin().unwrap();
    let servers =
        json!({"demo": {"type": "stdio", "command": demo.to_str().unwrap(), "env": {"DEMO_TOKEN": reference}}});
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent(
            "keeper",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["mcp__demo__*"], "mcpServers": servers}),
            "You check the demo server.",
        )
        .unwrap();
    store_secret(dir, key, "keeper", "demo", "token", MCP_SECRET);
}

/// Credential `credential` of vault entry `service` (a `custom` one) for `agent`, set to `value`.
fn store_secret(dir: &Path, key: &str, agent: &str, service: &str, credential: &str, value: &str) {
    let vault = polpo_vault::Vault::open(
        &dir.join(".polpo"),
        polpo_vault::VaultKey::from_hex(key).unwrap(),
        polpo_core::redact::Redactor::new(),
    );
    let credentials = std::collections::BTreeMap::from([(credential.to_owned(), value.to_owned())]);
    let entry = polpo_vault::Entry {
        agent: agent.into(),
        service: service.into(),
        kind: "custom".into(),
        label: None,
        credentials,
    };
    vault.set(entry).unwrap();
}

/// `polpo mcp list --json` for the project with this environment, as its rows.
fn mcp_list_rows(dir: &Path, home: &Path, key: Option<&str>) -> Value {
    let mut cmd = support::polpo(&["mcp", "list", "--json", "--project", dir.to_str().unwrap()]);
    cmd.env("HOME", home).env_remove("POLPO_VAULT_KEY");
    if let Some(key) = key {
        cmd.env("POLPO_VAULT_KEY", key);
    }
    let out = cmd.output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vault_secret_reaches_the_stdio_server_env_and_never_the_session_api() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("mcp__demo__env", json!({"name": "DEMO_TOKEN"}))]),
        Turn::text("The token is there."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let key = "ab".repeat(32);
    vault_project(dir.path(), &key, "${vault:demo:token}");
    let base = llm.base_url();
    let home_dir = home.path().to_str().unwrap();
    let mut server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_VAULT_KEY", &key), ("HOME", home_dir)],
    );
    let (body, session) = chat(&server.url, "keeper", "Is the token set?", None).await;
    assert_eq!(body["choices"][0]["message"]["content"], "The token is there.");
    let result = last_tool_result(&llm.requests()[1].body);
    let expected = format!("DEMO_TOKEN is set ({} bytes)", MCP_SECRET.len());
    assert_eq!(result, expected, "the server got the vault value; server log:\n{}", server.log());

    let http = reqwest::Client::new();
    for path in [format!("/api/v1/sessions/{session}"), format!("/api/v1/sessions/{session}/messages")] {
        let response = http.get(format!("{}{path}", server.url)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let text = response.text().await.unwrap();
        assert!(text.contains("DEMO_TOKEN"), "{path} shows the session: {text}");
        assert!(!text.contains(MCP_SECRET), "{path} leaks the secret: {text}");
    }
    assert!(llm.requests().iter().all(|r| !r.body.to_string().contains(MCP_SECRET)), "the model never saw it");
    drop(server);

    // Without the vault key, or naming a credential the entry lacks, the server reports why.
    let rows = mcp_list_rows(dir.path(), home.path(), None);
    assert_eq!(rows[0]["status"], "error", "{rows}");
    assert!(rows[0]["error"].as_str().unwrap().contains("vault_key_missing"), "{rows}");
    vault_project(dir.path(), &key, "${vault:demo:missing}");
    let rows = mcp_list_rows(dir.path(), home.path(), Some(&key));
    assert!(rows[0]["error"].as_str().unwrap().contains("vault_reference_invalid"), "{rows}");
    assert!(!rows.to_string().contains(MCP_SECRET), "{rows}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_calls_a_legacy_sse_mcp_server_with_its_headers() {
    polpo_llm::install_crypto_provider();
    let legacy = polpo_testkit::mcp_sse::LegacySseMcp::start().await.unwrap();
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("mcp__legacy__echo", json!({"text": "over sse"}))]),
        Turn::text("Echoed over SSE."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let servers =
        json!({"legacy": {"type": "sse", "url": legacy.url(), "headers": {"Authorization": "Bearer team-sse-token"}}});
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent(
            "assistant",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["mcp__legacy__*"], "mcpServers": servers}),
            "You use the legacy tools.",
        )
        .unwrap();

    // `polpo mcp list` connects over the legacy transport and lists the tools.
    let project = dir.path().to_str().unwrap().to_owned();
    let list = tokio::task::spawn_blocking(move || {
        support::polpo(&["mcp", "list", "--json", "--project", &project]).output().unwrap()
    })
    .await
    .unwrap();
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = &rows[0];
    assert_eq!((row["transport"].as_str(), row["status"].as_str()), (Some("sse"), Some("connected")), "{rows}");
    assert!(row["tools"].as_array().unwrap().contains(&json!("mcp__legacy__echo")), "{rows}");

    let base = llm.base_url();
    let mut server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk-upstream")],
    );
    let (body, _) = chat(&server.url, "assistant", "Echo over sse", None).await;
    assert_eq!(body["choices"][0]["message"]["content"], "Echoed over SSE.", "server log:\n{}", server.log());
    let requests = llm.requests();
    let tools = offered_tools(&requests[0].body);
    assert!(tools.contains(&"mcp__legacy__echo".to_owned()), "{tools:?}; server log:\n{}", server.log());
    let result = last_tool_result(&requests[1].body);
    assert!(result.starts_with("echo: over sse (instance "), "{result}; server log:\n{}", server.log());
    // The stream's GET and every POSTed message carried the configured header.
    let seen = legacy.authorization();
    assert!(seen.len() >= 4, "{seen:?}");
    assert!(seen.iter().all(|a| a == "Bearer team-sse-token"), "{seen:?}");
}
