//! The seed's custom tools through `polpo serve`: the model calls `site_publish`, whose
//! headers come from a Connection whose secret is in the vault; a site API that echoes the
//! `Authorization` header it got puts the secret into the tool's result, and the secret then
//! appears nowhere: not in what the model is sent, the session API, the run's events, the
//! server's output or the hook envelopes. `site_context_get` gets its tenant from metadata.
//! An `http` hook authenticating through a Connection is held to the same test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::site::{
    HookEndpoint, SITE_SECRET as SECRET, SITE_TENANT as TENANT, SiteApi, install_custom_tool, site_connection,
};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use support::ServerProcess;

/// `polpo vault set <service>` with `secret` on stdin (never in argv), under vault key `key`.
fn vault_set(dir: &Path, key: &str, service: &str, secret: &str) {
    let mut set = Command::new(env!("CARGO_BIN_EXE_polpo"))
        .arg("--project")
        .arg(dir)
        .args(["vault", "set", service])
        .env("POLPO_VAULT_KEY", key)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    set.stdin.take().unwrap().write_all(secret.as_bytes()).unwrap();
    assert!(set.wait().unwrap().success());
}

/// The live feed from the start (what this runtime emitted: sessions, messages, runs, tool
/// calls), read until `last` shows up or it goes quiet for 10 s.
async fn events_until(http: &reqwest::Client, url: &str, last: &str) -> String {
    let mut feed = http.get(format!("{url}/api/v1/events?after=0")).send().await.unwrap();
    let mut events = String::new();
    while !events.contains(last) {
        match tokio::time::timeout(std::time::Duration::from_secs(10), feed.chunk()).await {
            Ok(Ok(Some(chunk))) => events.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    events
}

/// No text a user or operator can see — `(where, text)` — holds the vault secret.
fn secret_nowhere(places: &[(&str, &String)]) {
    for (what, text) in places {
        assert!(!text.contains(SECRET), "the secret leaked into the {what}: {text}");
    }
}

/// Everything the server printed, once it is stopped.
fn output_after_stop(server: &mut ServerProcess) -> String {
    server.child.kill().unwrap();
    while let Ok(line) = server.lines.recv_timeout(std::time::Duration::from_secs(5)) {
        server.seen.push(line);
    }
    server.seen.join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_secret_reaches_the_site_api_and_nothing_else() {
    let (dir, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let envelopes = outside.path().join("envelopes.jsonl");
    let record = format!("cat >> '{}'; echo '{{\"decision\":\"allow\"}}'", envelopes.display());
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent(
            "publisher",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["site_publish", "site_context_get"], "hooks": ["audit"]}),
            "You publish sites.",
        )
        .unwrap()
        .hook_pack("audit", json!({"version": 1, "hooks": {
            "tool:before": [{"handler": {"type": "command", "command": record}}],
            "tool:after": [{"handler": {"type": "command", "command": record}}]
        }}))
        .unwrap();
    install_custom_tool(dir.path(), "site_publish").unwrap();
    install_custom_tool(dir.path(), "site_context_get").unwrap();
    std::fs::create_dir_all(dir.path().join(".polpo/connections")).unwrap();
    std::fs::write(dir.path().join(".polpo/connections/site.json"), site_connection().to_string()).unwrap();
    let key = "cd".repeat(32);
    vault_set(dir.path(), &key, "site", SECRET);
    let validate = Command::new(env!("CARGO_BIN_EXE_polpo"))
        .arg("--project")
        .arg(dir.path())
        .args(["tools", "validate"])
        .output()
        .unwrap();
    assert!(validate.status.success(), "{}", String::from_utf8_lossy(&validate.stdout));

    let site = SiteApi::start().await.unwrap();
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("site_context_get", json!({})), ("site_publish", json!({"message": "v2"}))]),
        Turn::text("Published."),
    ])
    .await
    .unwrap();
    let base = llm.base_url();
    let mut server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk"), ("POLPO_VAULT_KEY", &key)],
    );
    polpo_llm::install_crypto_provider();
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"agent": "publisher", "user": "ext-42", "metadata": {"tenantId": TENANT, "grant": "site", "siteApi": site.url()},
                      "messages": [{"role": "user", "content": "publish"}]}))
        .send()
        .await
        .unwrap();
    let session_id = r.headers().get("x-session-id").unwrap().to_str().unwrap().to_owned();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "Published.", "{body}");

    let model_saw = llm.requests()[1].body.to_string();
    assert!(
        model_saw.contains(&format!("{{\\\"tenantId\\\":\\\"{TENANT}\\\"}}")),
        "the tenant came from metadata: {model_saw}"
    );
    assert!(model_saw.contains("published by authorization: Bearer [REDACTED]"), "{model_saw}");
    let tools_offered = llm.requests()[0].body["tools"].to_string();
    assert!(tools_offered.contains("site_context_get") && !tools_offered.contains("tenantId"), "{tools_offered}");

    let session = http
        .get(format!("{}/api/v1/sessions/{session_id}/messages", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(session.contains("[REDACTED]"), "{session}");
    let events = events_until(&http, &server.url, "Published.").await;
    assert!(events.contains("site_publish") && events.contains("[REDACTED]"), "{events}");
    let hooks = std::fs::read_to_string(&envelopes).unwrap();
    assert!(hooks.contains("site_publish"), "the hooks saw the call: {hooks}");
    let logs = output_after_stop(&mut server);
    secret_nowhere(&[
        ("model", &model_saw),
        ("session API", &session),
        ("run events", &events),
        ("hook envelopes", &hooks),
        ("server output", &logs),
    ]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_hook_authenticates_through_a_connection_and_its_secret_stays_out_of_sight() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = HookEndpoint::start().await.unwrap();
    let handler = json!({"type": "http", "url": endpoint.url(), "connection": "audit", "timeoutMs": 5000});
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent(
            "auditor",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["read"], "hooks": ["remote"]}),
            "You read notes.",
        )
        .unwrap()
        .hook_pack(
            "remote",
            json!({"version": 1, "hooks": {"tool:before": [{"handler": handler}], "tool:after": [{"handler": handler}]}}),
        )
        .unwrap();
    let audit = json!({"provider": "audit", "auth": {"type": "bearer", "token": "${vault:audit:key}"}});
    std::fs::create_dir_all(dir.path().join(".polpo/connections")).unwrap();
    std::fs::write(dir.path().join(".polpo/connections/audit.json"), audit.to_string()).unwrap();
    let key = "ab".repeat(32);
    vault_set(dir.path(), &key, "audit", SECRET);
    // The file the agent reads holds the secret too, so the tool's result (and the `tool:after`
    // envelope built from it) would carry it if redaction missed it.
    std::fs::write(dir.path().join("notes.txt"), format!("the audit key is {SECRET}\n")).unwrap();

    let llm = FakeLlm::start([Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]), Turn::text("Read.")])
        .await
        .unwrap();
    let base = llm.base_url();
    let mut server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[
            ("OPENAI_BASE_URL", &base),
            ("OPENAI_API_KEY", "sk"),
            ("POLPO_VAULT_KEY", &key),
            ("POLPO_HOOKS_ALLOW_LOOPBACK", "1"),
        ],
    );
    polpo_llm::install_crypto_provider();
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"agent": "auditor", "messages": [{"role": "user", "content": "read the notes"}]}))
        .send()
        .await
        .unwrap();
    let session_id = r.headers().get("x-session-id").unwrap().to_str().unwrap().to_owned();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "Read.", "{body}; server log:\n{}", server.log());

    let received = endpoint.received();
    assert_eq!(received.len(), 2, "tool:before and tool:after: {received:?}");
    assert!(received.iter().all(|(auth, _)| *auth == format!("Bearer {SECRET}")), "the Connection's bearer was sent");
    let hooks = received.iter().map(|(_, envelope)| envelope.as_str()).collect::<Vec<_>>().join("\n");
    assert!(hooks.contains("notes.txt") && hooks.contains("[REDACTED]"), "{hooks}");
    let model_saw = llm.requests()[1].body.to_string();
    assert!(model_saw.contains("the audit key is [REDACTED]"), "{model_saw}");
    let session = http
        .get(format!("{}/api/v1/sessions/{session_id}/messages", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = events_until(&http, &server.url, "Read.").await;
    assert!(events.contains("\"read\"") && events.contains("Read."), "the feed covers the run: {events}");
    let logs = output_after_stop(&mut server);
    secret_nowhere(&[
        ("model", &model_saw),
        ("session API", &session),
        ("run events", &events),
        ("hook envelopes", &hooks),
        ("server output", &logs),
    ]);
}
