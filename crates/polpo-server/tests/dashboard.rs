//! The web dashboard over real HTTP: what a browser receives at `/`, the headers that keep the
//! page from running anything but its own script, that it opens without a key while the API it
//! calls still wants one, and that every API path its script calls is a route the server has.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_server::routes::dashboard::{PAGE, SCRIPTS, STYLE};
use polpo_server::routes::openapi::ROUTES;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;
use std::collections::BTreeSet;
use support::{Reply, Server};

/// String literals in `script` that start with an API prefix (`'/v1/…'`, `"/api/v1/…"`, …).
fn api_paths(script: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for quote in ['\'', '"', '`'] {
        for prefix in ["/v1/", "/api/v1/"] {
            for (i, _) in script.match_indices(&format!("{quote}{prefix}")) {
                let literal = &script[i + 1..];
                out.insert(literal[..literal.find(quote).unwrap_or(literal.len())].to_owned());
            }
        }
    }
    out
}

/// Every script of the page, in load order, as one text (what the page runs).
fn all_scripts() -> String {
    SCRIPTS.iter().map(|(_, body)| *body).collect::<Vec<_>>().join("\n")
}

fn assert_hardened(r: &Reply, content_type: &str) {
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("content-type").unwrap().starts_with(content_type), "{:?}", r.header("content-type"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let csp = r.header("content-security-policy").expect("a Content-Security-Policy");
    for directive in
        ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"]
    {
        assert!(csp.contains(directive), "CSP lacks {directive}: {csp}");
    }
    assert!(!csp.contains("unsafe"), "CSP allows unsafe sources: {csp}");
}

#[tokio::test]
async fn the_page_is_served_at_the_root_with_a_strict_content_security_policy() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    for path in ["/", "/dashboard"] {
        let r = s.get(path, &[]).await;
        assert_hardened(&r, "text/html");
        assert_eq!(r.text, PAGE);
    }
    // The policy forbids inline code, so the page must not depend on any; it loads every
    // script, in order (app.js, the router, last).
    let loaded: Vec<&str> =
        PAGE.split(r#"<script src="/dashboard/"#).skip(1).map(|rest| &rest[..rest.find('"').unwrap()]).collect();
    let names: Vec<&str> = SCRIPTS.iter().map(|(name, _)| *name).collect();
    assert_eq!(loaded, names);
    assert_eq!(names.last(), Some(&"app.js"));
    assert_eq!(
        PAGE.matches("<script").count(),
        PAGE.matches("<script src=").count(),
        "inline <script> would be blocked by the CSP"
    );
    let inline_handler = PAGE.split_whitespace().any(|w| w.starts_with("on") && w.contains('='));
    assert!(
        !PAGE.contains("<style") && !PAGE.contains(" style=") && !inline_handler,
        "inline style or handlers would be blocked by the CSP"
    );
}

#[tokio::test]
async fn the_script_and_style_the_page_links_are_served_with_their_content_types() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    for (name, body) in SCRIPTS {
        let js = s.get(&format!("/dashboard/{name}"), &[]).await;
        assert_hardened(&js, "text/javascript");
        assert_eq!(js.text, body);
    }
    let missing = s.get("/dashboard/other.js", &[]).await;
    assert_eq!((missing.status, missing.json()["code"].as_str()), (404, Some("not_found")));
    let css = s.get("/dashboard/app.css", &[]).await;
    assert_hardened(&css, "text/css");
    assert_eq!(css.text, STYLE);
    // Every local asset the page references resolves.
    let linked: Vec<&str> = PAGE.split(['"']).filter(|v| v.starts_with("/dashboard/")).collect();
    let mut expected = vec!["/dashboard/app.css".to_owned()];
    expected.extend(SCRIPTS.iter().map(|(name, _)| format!("/dashboard/{name}")));
    assert_eq!(linked, expected);
    for asset in linked {
        assert_eq!(s.get(asset, &[]).await.status, 200, "{asset}");
    }
}

#[test]
fn every_api_path_the_script_calls_is_a_documented_route() {
    let documented: BTreeSet<String> = ROUTES.iter().flat_map(|r| r.full_paths()).collect();
    let called = api_paths(&all_scripts());
    let undocumented: Vec<&String> = called.iter().filter(|p| !documented.contains(*p)).collect();
    assert!(undocumented.is_empty(), "the dashboard calls paths the API does not have: {undocumented:?}");
    for expected in [
        "/v1/chat/completions",
        "/api/v1/agents/{id}",
        "/api/v1/chat/sessions/{id}",
        "/api/v1/events",
        "/api/v1/runs/{id}/events",
        "/api/v1/approvals/{id}/approve",
        "/api/v1/approvals/{id}/reject",
        "/api/v1/loop-runs/{id}/resume",
        "/api/v1/schedules",
        "/api/v1/tasks",
        "/api/v1/tasks/{id}",
        "/api/v1/missions",
        "/api/v1/missions/{id}/report",
        "/api/v1/missions/{id}/resume",
        "/api/v1/loop-runs/{id}",
        "/api/v1/loop-runs/{id}/human",
    ] {
        assert!(called.contains(expected), "the scan missed {expected}: found {called:?}");
    }
}

#[test]
fn the_path_scan_reads_every_quote_style() {
    let script = r#"a('/api/v1/agents/{id}'); b("/v1/models"); c(`/api/v1/runs/${id}`); d("it's /v1/ in prose");"#;
    let found: Vec<String> = api_paths(script).into_iter().collect();
    assert_eq!(found, ["/api/v1/agents/{id}", "/api/v1/runs/${id}", "/v1/models"]);
}

#[test]
fn the_script_never_parses_data_as_markup_or_code() {
    let script = all_scripts();
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "setTimeout('",
        "srcdoc",
    ] {
        assert!(!script.contains(sink), "the dashboard script uses {sink}; render data with text nodes instead");
    }
    // The key goes in a header, never into a URL or persistent storage.
    assert!(!script.contains("localStorage"), "the API key must not outlive the tab");
    assert!(script.contains("'Bearer ' + key"));
}

#[tokio::test]
async fn with_api_keys_the_page_opens_without_a_key_but_the_api_still_refuses() {
    let llm = FakeLlm::start([Turn::text("Hello from the dashboard")]).await.unwrap();
    let s = Server::start_with(&llm, Some("sk-dash"), |d| {
        support::default_project(d);
    })
    .await;
    for path in ["/", "/dashboard/core.js", "/dashboard/app.js", "/dashboard/app.css"] {
        assert_eq!(s.get(path, &[]).await.status, 200, "{path} must open without a key");
    }
    // The page is the embedded file, byte for byte: nothing about the project is in it.
    assert_eq!(s.get("/", &[]).await.text, PAGE);
    let r = s.get("/api/v1/agents", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["code"], "unauthorized");
    let chat = json!({"agent": "writer", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    assert_eq!(s.post("/v1/chat/completions", &[], chat.clone()).await.status, 401);
    // With the key the page's calls work.
    let auth = [("authorization", "Bearer sk-dash")];
    let agents = s.get("/api/v1/agents", &auth).await.json();
    let ids: Vec<&str> = agents["data"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["coder", "writer"]);
    let r = s.post("/v1/chat/completions", &auth, chat).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let text: String = r
        .sse_data()
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| {
            serde_json::from_str::<serde_json::Value>(d).unwrap()["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(text, "Hello from the dashboard");
}

/// The task view links a task to its run: `GET /api/v1/tasks/{id}` carries `runId` once a run
/// started, and that id opens the run's record.
#[tokio::test]
async fn a_task_names_the_run_of_its_latest_attempt_once_one_started() {
    let llm = FakeLlm::start([Turn::text("The notes.")]).await.unwrap();
    let s = Server::start(&llm).await;
    let body = json!({"title": "Notes", "description": "Write the notes.", "assignTo": "writer", "draft": true});
    let created = s.post("/api/v1/tasks", &[], body).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json()["data"]["id"].as_str().unwrap().to_owned();
    let draft = s.get(&format!("/api/v1/tasks/{id}"), &[]).await.json();
    assert_eq!(draft["data"]["status"], "draft");
    assert!(draft["data"].get("runId").is_none(), "no run before the first attempt: {draft}");

    assert_eq!(s.post(&format!("/api/v1/tasks/{id}/queue"), &[], json!({})).await.status, 200);
    s.state.orchestrator.run_until_idle().await.unwrap();
    let done = s.get(&format!("/api/v1/tasks/{id}"), &[]).await.json();
    assert_eq!(done["data"]["status"], "done", "{done}");
    let run = done["data"]["runId"].as_str().unwrap();
    assert_eq!(run, format!("task-{id}-r0-f0"));
    let record = s.get(&format!("/api/v1/runs/{run}"), &[]).await;
    assert_eq!(record.status, 200, "{}", record.text);
    assert_eq!(record.json()["data"]["status"], "completed");
}
