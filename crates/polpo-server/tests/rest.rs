//! The management REST API over real HTTP: agents written to `.polpo/` and served at once,
//! revision conflicts with hand edits, chat sessions, and the OpenAPI document.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use support::Server;

fn agent_dir(s: &Server, id: &str) -> std::path::PathBuf {
    s.dir.path().join(".polpo/agents").join(id)
}

fn ask(agent: &str, text: &str) -> Value {
    json!({"agent": agent, "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn agent_crud_round_trip_writes_the_files_and_the_new_agent_chats_at_once() {
    let llm = FakeLlm::start([Turn::text("A haiku.")]).await.unwrap();
    let s = Server::start(&llm).await;

    let r = s.post("/api/v1/agents", &[], json!({"id": "poet", "instructions": "You write haiku.", "config": {"model": "openai/fake-model", "role": "poet"}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let created = r.json();
    assert_eq!(created["ok"], true);
    let revision = created["data"]["revision"].as_str().unwrap().to_owned();
    assert_eq!(r.header("etag"), Some(format!("\"{revision}\"").as_str()));
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(agent_dir(&s, "poet").join("agent.json")).unwrap()).unwrap();
    assert_eq!(on_disk, json!({"role": "poet", "model": "openai/fake-model"}));
    assert_eq!(std::fs::read_to_string(agent_dir(&s, "poet").join("instructions.md")).unwrap(), "You write haiku.");

    // Usable right away, with its instructions as the system prompt, and listed everywhere.
    let r = s.post("/v1/chat/completions", &[], ask("poet", "a haiku please")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "A haiku.");
    assert_eq!(
        llm.requests()[0].body["messages"][0]["content"].as_str().map(|c| c.contains("You write haiku.")),
        Some(true),
        "{}",
        llm.requests()[0].body
    );
    let listed = s.get("/v1/agents", &[]).await.json();
    let ids: Vec<&str> = listed["data"].as_array().unwrap().iter().filter_map(|a| a["id"].as_str()).collect();
    assert_eq!(ids, ["coder", "poet", "writer"]);
    assert!(s.get("/v1/models", &[]).await.text.contains("agent/poet"));

    // The same id again is a conflict, not an overwrite.
    let r = s.post("/v1/agents", &[], json!({"name": "poet", "model": "openai/fake-model"})).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.json()["code"], "already_exists");

    // Read, patch with the revision read, read again.
    let got = s.get("/api/v1/agents/poet", &[]).await.json();
    assert_eq!(got["data"]["instructions"], "You write haiku.");
    assert_eq!(got["data"]["revision"], revision.as_str());
    let r = s
        .patch(
            "/api/v1/agents/poet",
            &[("if-match", &format!("\"{revision}\""))],
            json!({"config": {"role": null, "maxTurns": 3}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let patched = r.json();
    assert_eq!(patched["data"]["config"], json!({"model": "openai/fake-model", "maxTurns": 3}));
    assert_eq!(patched["data"]["instructions"], "You write haiku.", "instructions are kept when not given");
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(agent_dir(&s, "poet").join("agent.json")).unwrap()).unwrap();
    assert_eq!(on_disk["maxTurns"], 3);
    let revision = patched["data"]["revision"].as_str().unwrap().to_owned();

    // PUT replaces the whole config and the instructions.
    let r = s
        .put(
            "/v1/agents/poet",
            &[],
            json!({"revision": revision, "config": {"model": "openai/fake-model"}, "instructions": "Only limericks."}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(std::fs::read_to_string(agent_dir(&s, "poet").join("instructions.md")).unwrap(), "Only limericks.");
    assert_eq!(s.state.runtime.loaded().agent("poet").unwrap().instructions, "Only limericks.");

    // Delete: the folder is gone and the runtime no longer serves the agent.
    let r = s.delete("/api/v1/agents/poet", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"]["removed"], true);
    assert!(!agent_dir(&s, "poet").exists());
    let r = s.post("/v1/chat/completions", &[], ask("poet", "still there?")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "agent_not_found");
    assert_eq!(s.get("/api/v1/agents/poet", &[]).await.status, 404);
}

#[tokio::test]
async fn a_hand_edit_between_read_and_write_is_a_409_not_an_overwrite() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let read = s.get("/api/v1/agents/writer", &[]).await.json();
    let revision = read["data"]["revision"].as_str().unwrap().to_owned();

    // Someone edits the prompt in their editor meanwhile.
    let prompt = agent_dir(&s, "writer").join("instructions.md");
    std::fs::write(&prompt, "Hand-edited prompt.").unwrap();

    let r = s
        .put(
            "/api/v1/agents/writer",
            &[("if-match", &revision)],
            json!({"config": {"model": "openai/fake-model"}, "instructions": "API prompt."}),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.json()["ok"], false);
    assert_eq!(r.json()["code"], "conflict");
    let r = s.patch("/api/v1/agents/writer", &[], json!({"revision": revision, "role": "x"})).await;
    assert_eq!(r.status, 409, "a stale revision in the body conflicts too: {}", r.text);
    let r = s.delete("/api/v1/agents/writer", &[("if-match", &revision)]).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(std::fs::read_to_string(&prompt).unwrap(), "Hand-edited prompt.", "the hand edit survives");

    // With the fresh revision the edit goes through.
    let fresh = s.get("/api/v1/agents/writer", &[]).await.json()["data"]["revision"].as_str().unwrap().to_owned();
    assert_ne!(fresh, revision);
    let r = s
        .put(
            "/api/v1/agents/writer",
            &[("if-match", &fresh)],
            json!({"config": {"model": "openai/fake-model"}, "instructions": "API prompt."}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(std::fs::read_to_string(&prompt).unwrap(), "API prompt.");
}

#[tokio::test]
async fn invalid_agents_are_refused_and_leave_files_and_runtime_as_they_were() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;

    let r = s
        .post(
            "/api/v1/agents",
            &[],
            json!({"id": "bad", "config": {"model": "openai/fake-model", "maxTurns": "many", "colour": "red"}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let body = r.json();
    assert_eq!(body["code"], "invalid_config");
    let problems = body["problems"].as_array().unwrap();
    assert!(problems.iter().all(|p| p["file"] == ".polpo/agents/bad/agent.json"), "{problems:?}");
    let pointers: Vec<&str> = problems.iter().filter_map(|p| p["pointer"].as_str()).collect();
    assert!(pointers.contains(&"/maxTurns") && pointers.contains(&"/colour"), "{pointers:?}");
    assert!(!agent_dir(&s, "bad").exists());

    // A config that is fine alone but breaks the project (reportsTo nobody): written, found
    // invalid with the whole project, undone; the runtime keeps the version it served.
    let served = s.state.runtime.loaded();
    let r = s
        .post(
            "/api/v1/agents",
            &[],
            json!({"id": "lost", "config": {"model": "openai/fake-model", "reportsTo": "nobody"}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["code"], "invalid_project");
    assert!(!agent_dir(&s, "lost").exists());
    assert!(std::sync::Arc::ptr_eq(&served, &s.state.runtime.loaded()), "a refused edit is never served");

    // Deleting an agent another one reports to would break the project too.
    let r = s
        .post(
            "/api/v1/agents",
            &[],
            json!({"id": "intern", "config": {"model": "openai/fake-model", "reportsTo": "writer"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.delete("/api/v1/agents/writer", &[]).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["code"], "invalid_project");
    assert!(agent_dir(&s, "writer").join("agent.json").exists());

    let r = s.post("/api/v1/agents", &[], json!({"id": "../escape", "config": {}})).await;
    assert_eq!(r.status, 400, "{}", r.text);
}

#[tokio::test]
async fn sessions_list_paginate_read_retitle_and_delete_after_two_chats() {
    let llm = FakeLlm::start([Turn::text("first answer"), Turn::text("second answer")]).await.unwrap();
    let s = Server::start(&llm).await;
    let mut first = ask("coder", "first question");
    first["metadata"] = json!({"team": "blue"});
    let a = s.post("/v1/chat/completions", &[], first).await.header("x-session-id").unwrap().to_owned();
    let b = s
        .post("/v1/chat/completions", &[], ask("writer", "second question"))
        .await
        .header("x-session-id")
        .unwrap()
        .to_owned();

    let all = s.get("/api/v1/chat/sessions", &[]).await.json();
    let ids: Vec<&str> = all["data"]["sessions"].as_array().unwrap().iter().filter_map(|x| x["id"].as_str()).collect();
    assert_eq!(ids, [b.as_str(), a.as_str()], "newest first");
    assert_eq!(all["data"]["nextCursor"], Value::Null);

    // One per page, resuming with the cursor.
    let p1 = s.get("/v1/sessions?limit=1", &[]).await.json();
    assert_eq!(p1["data"]["sessions"][0]["id"], b.as_str());
    let cursor = p1["data"]["nextCursor"].as_str().unwrap().to_owned();
    let p2 = s.get(&format!("/api/v1/sessions?limit=1&cursor={cursor}"), &[]).await.json();
    assert_eq!(p2["data"]["sessions"][0]["id"], a.as_str());
    assert_eq!(p2["data"]["nextCursor"], Value::Null);

    // Filters: agent, metadata.
    let coder = s.get("/v1/chat/sessions?agent=coder", &[]).await.json();
    assert_eq!(coder["data"]["sessions"].as_array().unwrap().len(), 1);
    let blue = s.get("/api/v1/chat/sessions?metadata.team=blue&limit=1", &[]).await.json();
    assert_eq!(blue["data"]["sessions"][0]["id"], a.as_str());
    assert_eq!(blue["data"]["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(s.get("/v1/sessions?cursor=zz", &[]).await.status, 400);

    // Session with messages, in order.
    let got = s.get(&format!("/api/v1/chat/sessions/{a}/messages"), &[]).await.json();
    assert_eq!(got["data"]["session"]["agent"], "coder");
    let contents: Vec<&str> =
        got["data"]["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(contents, ["first question", "first answer"]);
    assert_eq!(s.get(&format!("/v1/sessions/{a}"), &[]).await.json()["data"]["messages"].as_array().unwrap().len(), 2);

    let r = s.patch(&format!("/api/v1/chat/sessions/{a}"), &[], json!({"title": "Renamed"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(s.get(&format!("/v1/chat/sessions/{a}"), &[]).await.json()["data"]["session"]["title"], "Renamed");

    let r = s.delete(&format!("/api/v1/chat/sessions/{a}"), &[]).await;
    assert_eq!(r.json()["data"]["removed"], true);
    let r = s.get(&format!("/api/v1/chat/sessions/{a}"), &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], "session_not_found");
    assert_eq!(s.delete(&format!("/v1/sessions/{a}"), &[]).await.status, 404);
    let left = s.get("/v1/sessions", &[]).await.json();
    assert_eq!(left["data"]["sessions"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn openapi_documents_every_route_and_every_documented_route_is_served() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start_with(&llm, Some("sk-polpo"), |d| {
        support::default_project(d);
    })
    .await;
    let auth = [("authorization", "Bearer sk-polpo")];
    let doc = s.get("/api/v1/openapi.json", &auth).await.json();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["components"]["securitySchemes"]["bearerAuth"]["type"], "http");
    for path in [
        "/v1/chat/completions",
        "/v1/models",
        "/api/v1/health",
        "/v1/hooks/capabilities",
        "/api/v1/agents/{id}",
        "/api/v1/chat/sessions",
        "/v1/sessions/{id}/messages",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    // Each documented operation reaches a handler (with a dummy id and an empty body it may
    // fail, but never as an unknown route or method).
    let paths = doc["paths"].as_object().unwrap();
    let mut checked = 0;
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let concrete = path.replace("{id}", "no-such-id");
            let body = matches!(method.as_str(), "post" | "put" | "patch").then(|| json!({}));
            let mut req = s
                .http
                .request(method.to_uppercase().parse().unwrap(), format!("{}{concrete}", s.url))
                .header(auth[0].0, auth[0].1);
            if let Some(body) = body {
                req = req.json(&body);
            }
            // Event streams never end: only a 404's body is read.
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let text = if status == 404 { r.text().await.unwrap() } else { String::new() };
            let unknown = status == 405 || (status == 404 && text.contains("route_not_found"));
            assert!(!unknown, "{method} {path} is documented but not routed: {status} {text}");
            checked += 1;
        }
    }
    assert!(checked >= 40, "{checked}");
    // Management errors use the REST envelope, also for a wrong key on /v1/chat/sessions.
    let r = s.get("/v1/chat/sessions", &[("authorization", "Bearer wrong")]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["ok"], false);
}

#[tokio::test]
async fn concurrent_edits_are_all_served() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let create =
        |id: &'static str| s.post("/api/v1/agents", &[], json!({"id": id, "config": {"model": "openai/fake-model"}}));
    let team = s.post("/api/v1/agents/teams", &[], json!({"name": "blue"}));
    let (a, b, c, t) = tokio::join!(create("one"), create("two"), create("three"), team);
    for r in [a, b, c, t] {
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // Each edit's reload saw the edits before it: the last one served holds them all.
    let project = &s.state.runtime.loaded().project;
    assert!(["one", "two", "three"].iter().all(|id| project.agents.contains_key(*id)), "{:?}", project.agents.keys());
    assert!(project.teams.contains_key("blue"));
}
