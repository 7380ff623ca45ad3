//! Handler kinds beyond `command`: a real local HTTP hook server, and a tool of the agent as
//! a gate validator.

use super::support::*;
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use polpo_connections::Connections;
use polpo_core::hooks::HookPack;
use polpo_core::redact::Redactor;
use polpo_core::tool::{ToolEffect, ToolSpec};
use polpo_testkit::{FakeLlm, Turn};
use polpo_tools::net::NetworkPolicy;
use polpo_tools::{Tool, ToolContext, ToolError, ToolOutput};
use polpo_vault::{Entry, Vault, VaultError, VaultKey};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

type Received = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

/// A hook endpoint on 127.0.0.1:0 that records (request headers, envelope) and answers `reply`.
async fn hook_server(reply: Value) -> (String, Received) {
    let received: Received = Arc::default();
    let app = Router::new()
        .route(
            "/hook",
            post(|State((rec, reply)): State<(Received, Value)>, headers: HeaderMap, body: axum::Json<Value>| async move {
                rec.lock().unwrap().push((headers, body.0));
                axum::Json(reply)
            }),
        )
        .with_state((received.clone(), reply));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn http_pack(url: &str) -> HookPack {
    pack(
        "remote",
        json!({"version": 1, "hooks": {"tool:before": [{"matcher": {"tools": ["write"]}, "handler": {"type": "http", "url": url, "timeoutMs": 3000}}]}}),
    )
}

#[tokio::test]
async fn an_http_hook_receives_the_envelope_with_its_idempotency_key_and_can_deny() {
    let ws = Workspace::new();
    let (url, received) = hook_server(json!({"decision": "deny", "reason": "remote policy"})).await;
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "a.txt", "content": "x"}))]),
        Turn::text("done"),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[http_pack(&url)]))), "write").await;
    assert!(!ws.file("a.txt").exists());
    assert!(seen.tool_results()[0].0.contains("remote policy"));
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let (headers, envelope) = &got[0];
    assert_eq!(headers.get("idempotency-key").and_then(|v| v.to_str().ok()), envelope["idempotencyKey"].as_str());
    assert_eq!(envelope["data"]["tool"]["name"], "write");
}

const SECRET: &str = "hook-secret-6f1d";

/// Connection `audit` of a project in `ws`: a bearer token read from the vault.
fn audit_connection(ws: &Workspace) -> Arc<Connections> {
    let polpo = ws.file(".polpo");
    std::fs::create_dir_all(polpo.join("connections")).unwrap();
    let vault = Vault::open(&polpo, VaultKey::generate(), Redactor::new());
    let credentials = BTreeMap::from([("key".to_string(), SECRET.to_string())]);
    vault
        .set(Entry { agent: "*".into(), service: "audit".into(), kind: "api_key".into(), label: None, credentials })
        .unwrap();
    let doc = json!({"provider": "audit", "auth": {"type": "bearer", "token": "${vault:audit:key}"}});
    std::fs::write(polpo.join("connections/audit.json"), doc.to_string()).unwrap();
    Arc::new(Connections::new(&polpo, Ok(vault), NetworkPolicy::default()))
}

fn connection_pack(url: &str) -> HookPack {
    pack(
        "remote",
        json!({"version": 1, "hooks": {"tool:before": [{"matcher": {"tools": ["write"]}, "handler": {"type": "http", "url": url, "connection": "audit", "timeoutMs": 3000}}]}}),
    )
}

#[tokio::test]
async fn an_http_hook_with_a_connection_sends_its_vault_bearer_and_never_the_secret_in_the_envelope() {
    let ws = Workspace::new();
    let (url, received) = hook_server(json!({"decision": "allow"})).await;
    let mut h = hooks(&[connection_pack(&url)]);
    h.connections = Some(audit_connection(&ws));
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "a.txt", "content": "x"}))]),
        Turn::text("done"),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(h)), "write").await;
    assert!(ws.file("a.txt").exists(), "the hook allowed the write");
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let (headers, envelope) = &got[0];
    assert_eq!(headers.get("authorization").and_then(|v| v.to_str().ok()), Some(format!("Bearer {SECRET}").as_str()));
    assert!(!envelope.to_string().contains(SECRET), "{envelope}");
    assert!(!format!("{:?}", seen.tool_results()).contains(SECRET));
}

#[tokio::test]
async fn an_http_hook_whose_connection_cannot_be_resolved_fails_closed() {
    let ws = Workspace::new();
    let (url, received) = hook_server(json!({"decision": "allow"})).await;
    let mut h = hooks(&[connection_pack(&url)]);
    let polpo = ws.file(".polpo");
    std::fs::create_dir_all(polpo.join("connections")).unwrap();
    let doc = json!({"provider": "audit", "auth": {"type": "bearer", "token": "${vault:audit:key}"}});
    std::fs::write(polpo.join("connections/audit.json"), doc.to_string()).unwrap();
    h.connections = Some(Arc::new(Connections::new(&polpo, Err(VaultError::KeyMissing), NetworkPolicy::default())));
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "a.txt", "content": "x"}))]),
        Turn::text("done"),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(h)), "write").await;
    assert!(received.lock().unwrap().is_empty(), "never called unauthenticated");
    assert!(!ws.file("a.txt").exists(), "a failing hook fails closed");
    assert!(seen.tool_results()[0].0.contains("hook_failed"));
}

#[tokio::test]
async fn loopback_http_needs_the_explicit_test_allowance() {
    let ws = Workspace::new();
    let (url, received) = hook_server(json!({"decision": "allow"})).await;
    let mut h = hooks(&[http_pack(&url)]);
    h.runtime.allow_loopback_http = false;
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "a.txt", "content": "x"}))]),
        Turn::text("done"),
    ])
    .await
    .unwrap();
    let seen = run(&invocation(&llm, &ws, Some(h)), "write").await;
    assert!(received.lock().unwrap().is_empty(), "the request was never sent");
    assert!(!ws.file("a.txt").exists(), "a failing hook fails closed");
    assert!(seen.tool_results()[0].0.contains("hook_failed"));
}

#[tokio::test]
async fn an_http_validator_can_accept() {
    let ws = Workspace::new();
    let (url, received) = hook_server(json!({"decision": "accept"})).await;
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"terminationGate": {
        "validator": {"type": "http", "url": url}, "maxCycles": 1, "maxDurationMs": 60000}}]}}),
    );
    let llm = FakeLlm::start([Turn::text("checked answer")]).await.unwrap();
    let seen = run(&invocation(&llm, &ws, Some(hooks(&[p]))), "task").await;
    assert_eq!(seen.content(), "checked answer");
    assert_eq!(received.lock().unwrap()[0].1["data"]["candidate"], "checked answer");
}

/// A real project tool: accepts answers that contain a total, as a deterministic validator.
struct CheckTotal {
    spec: ToolSpec,
}

impl CheckTotal {
    fn new() -> Self {
        let parameters = json!({"type": "object", "properties": {"hook": {"type": "object"}, "field": {"type": "string"}}, "required": ["hook", "field"], "additionalProperties": false});
        Self { spec: ToolSpec { name: "check_total".into(), description: "Validate an answer".into(), parameters } }
    }
}

#[async_trait::async_trait]
impl Tool for CheckTotal {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }
    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let field = args["field"].as_str().unwrap_or_default();
        let candidate = args["hook"]["data"]["candidate"].as_str().unwrap_or_default();
        let decision = if candidate.contains(field) {
            json!({"decision": "accept"})
        } else {
            json!({"decision": "continue", "diagnostics": {"missing": field}})
        };
        Ok(ToolOutput { text: decision.to_string(), details: Value::Null })
    }
}

#[tokio::test]
async fn a_tool_of_the_agent_validates_through_the_same_policy() {
    let ws = Workspace::new();
    let p = pack(
        "quality",
        json!({"version": 1, "hooks": {"turn:stop": [{"terminationGate": {
        "validator": {"type": "tool", "tool": "check_total", "input": {"field": "total"}}, "maxCycles": 2, "maxDurationMs": 60000}}]}}),
    );
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(CheckTotal::new())];
    let llm = FakeLlm::start([Turn::text("sum is 4"), Turn::text("the total is 4")]).await.unwrap();
    let seen =
        run(&invocation_with(&llm, &ws, Some(hooks(std::slice::from_ref(&p))), tools.clone(), None), "task").await;
    assert_eq!(seen.content(), "the total is 4");
    assert!(request_text(&llm, 1).contains("missing"));

    // Outside the tool policy the validator cannot run, and the gate fails closed.
    let llm = FakeLlm::start([Turn::text("the total is 4")]).await.unwrap();
    let seen = run(&invocation_with(&llm, &ws, Some(hooks(&[p])), tools, Some(&["read"])), "task").await;
    assert_eq!(seen.error_code(), "termination_gate_rejected");
    assert!(seen.error_text().contains("tool_policy_denied"), "{}", seen.error_text());
}
