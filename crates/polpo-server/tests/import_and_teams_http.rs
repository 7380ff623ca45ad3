//! Over real HTTP: importing a conversation as a session that a later chat continues, and the
//! team routes under `/agents` writing `.polpo/teams/<id>.json` and serving the change at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_server::routes::sessions::MAX_IMPORT_MESSAGES;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use support::Server;

fn team_file(s: &Server, id: &str) -> std::path::PathBuf {
    s.dir.path().join(".polpo/teams").join(format!("{id}.json"))
}

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn session_count(v: &Value) -> usize {
    v["data"]["sessions"].as_array().unwrap().len()
}

#[tokio::test]
async fn an_imported_conversation_is_stored_whole_and_a_chat_continues_from_it() {
    let llm = FakeLlm::start([Turn::text("It is 6.")]).await.unwrap();
    let s = Server::start(&llm).await;
    let conversation = json!([
        {"role": "user", "content": "What is in a.txt?"},
        {"role": "assistant", "content": null, "toolCalls": [{"id": "call_1", "name": "read", "arguments": {"path": "a.txt"}}]},
        {"role": "tool", "toolCallId": "call_1", "content": "2+2"},
        {"role": "assistant", "content": "It says 2+2, which is 4."},
    ]);
    let r = s
        .post(
            "/api/v1/chat/sessions/import",
            &[],
            json!({"title": "From elsewhere", "agent": "coder", "messages": conversation}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let data = r.json()["data"].clone();
    assert_eq!(data["imported"], 4);
    let id = data["sessionId"].as_str().unwrap().to_owned();

    let got = s.get(&format!("/api/v1/chat/sessions/{id}/messages"), &[]).await.json();
    assert_eq!(got["data"]["session"]["title"], "From elsewhere");
    assert_eq!(got["data"]["session"]["agent"], "coder");
    assert_eq!(got["data"]["session"]["messageCount"], 4);
    let roles: Vec<&str> =
        got["data"]["messages"].as_array().unwrap().iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);

    // The next chat in that session sends the imported history to the model, then the new turn.
    let r = s
        .post(
            "/v1/chat/completions",
            &[("x-session-id", &id)],
            json!({"agent": "coder", "messages": [{"role": "user", "content": "And 3+3?"}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-session-id"), Some(id.as_str()));
    let sent = llm.requests()[0].body["messages"].as_array().unwrap().clone();
    let turns: Vec<Value> = sent.iter().filter(|m| m["role"] != "system").cloned().collect();
    assert_eq!(turns.len(), 5, "{sent:?}");
    assert_eq!(turns[0]["content"], "What is in a.txt?");
    assert_eq!(turns[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(turns[1]["tool_calls"][0]["function"]["name"], "read");
    assert_eq!(
        serde_json::from_str::<Value>(turns[1]["tool_calls"][0]["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"path": "a.txt"})
    );
    assert_eq!(turns[2]["tool_call_id"], "call_1");
    assert_eq!(turns[3]["content"], "It says 2+2, which is 4.");
    assert_eq!(turns[4]["content"], "And 3+3?");
    let after = s.get(&format!("/v1/sessions/{id}"), &[]).await.json();
    assert_eq!(after["data"]["session"]["messageCount"], 6);

    // Without a title, the first user message names the session.
    let r = s.post("/v1/sessions/import", &[], json!({"agent": "writer", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Draft a note"}]})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let untitled = r.json()["data"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(
        s.get(&format!("/api/v1/sessions/{untitled}"), &[]).await.json()["data"]["session"]["title"],
        "Draft a note"
    );
}

#[tokio::test]
async fn a_bad_import_is_refused_with_a_stable_code_and_stores_nothing() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let user = json!({"role": "user", "content": "hi"});
    let cases = [
        (json!({"agent": "nobody", "messages": [user]}), 404, "agent_not_found", "nobody"),
        (json!({"agent": "coder", "messages": []}), 400, "invalid_request", "1..="),
        (
            json!({"agent": "coder", "messages": vec![user.clone(); MAX_IMPORT_MESSAGES + 1]}),
            400,
            "invalid_request",
            "1..=",
        ),
        (
            json!({"agent": "coder", "messages": [{"role": "developer", "content": "x"}]}),
            400,
            "invalid_request",
            "messages[0]: role `developer`",
        ),
        (
            json!({"agent": "coder", "messages": [user, {"role": "user", "content": "x", "toolCalls": [{"id": "c", "name": "read"}]}]}),
            400,
            "invalid_request",
            "messages[1]: only assistant",
        ),
        (
            json!({"agent": "coder", "messages": [{"role": "assistant", "toolCalls": [{"id": "c", "name": "read", "arguments": 7}]}]}),
            400,
            "invalid_request",
            "arguments",
        ),
        (
            json!({"agent": "coder", "messages": [{"role": "assistant", "toolCalls": [{"id": "", "name": "read"}]}]}),
            400,
            "invalid_request",
            "non-empty",
        ),
        (
            json!({"agent": "coder", "messages": [{"role": "assistant", "toolCalls": [{"name": "read"}]}]}),
            400,
            "invalid_request",
            "id",
        ),
        (
            json!({"agent": "coder", "messages": [{"role": "tool", "content": "orphan"}]}),
            400,
            "invalid_request",
            "toolCallId",
        ),
        (json!({"agent": "coder", "messages": [{"role": "user"}]}), 400, "invalid_request", "content"),
        (json!({"agent": "coder", "title": "  ", "messages": [user]}), 400, "invalid_request", "title"),
        (json!({"messages": [user]}), 400, "invalid_request", "agent"),
    ];
    for (body, status, code, says) in cases {
        let r = s.post("/api/v1/chat/sessions/import", &[], body.clone()).await;
        assert_eq!(r.status, status, "{body}: {}", r.text);
        let reply = r.json();
        assert_eq!((reply["ok"].clone(), reply["code"].clone()), (json!(false), json!(code)), "{body}: {}", r.text);
        assert!(reply["error"].as_str().unwrap().contains(says), "{body}: {}", r.text);
    }
    assert_eq!(session_count(&s.get("/api/v1/chat/sessions", &[]).await.json()), 0);
}

#[tokio::test]
async fn teams_are_created_read_renamed_with_their_members_and_deleted_on_disk() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    assert_eq!(s.get("/api/v1/agents/teams", &[]).await.json()["data"], json!([]));

    let r = s.post("/api/v1/agents/teams", &[], json!({"name": "research", "description": "Finds things out."})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.json()["data"],
        json!({"name": "research", "description": "Finds things out.", "members": [], "file": ".polpo/teams/research.json"})
    );
    assert_eq!(read_json(&team_file(&s, "research")), json!({"description": "Finds things out."}));
    assert!(s.state.runtime.loaded().project.teams.contains_key("research"), "served at once");

    // Taken (also when it differs only in case), and checked against the team schema.
    let r = s.post("/v1/agents/teams", &[], json!({"name": "Research"})).await;
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("already_exists")), "{}", r.text);
    let r = s.post("/v1/agents/teams", &[], json!({"name": "ops", "colour": "red"})).await;
    assert_eq!((r.status, r.json()["code"].clone()), (400, json!("invalid_config")), "{}", r.text);
    assert_eq!(r.json()["problems"][0]["file"], ".polpo/teams/ops.json");
    assert!(!team_file(&s, "ops").exists());
    let r = s.post("/v1/agents/teams", &[], json!({"name": "../ops"})).await;
    assert_eq!((r.status, r.json()["code"].clone()), (400, json!("invalid_value")), "{}", r.text);

    // Members are the agents naming the team.
    let r = s.patch("/api/v1/agents/writer", &[], json!({"team": "research"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let team = s.get("/api/v1/agents/team?name=research", &[]).await.json();
    assert_eq!(team["data"]["members"], json!(["writer"]));

    // A rename never overwrites another team.
    let r = s.post("/api/v1/agents/teams", &[], json!({"name": "ops", "description": "Keeps things running."})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.patch("/api/v1/agents/team", &[], json!({"oldName": "research", "name": "ops"})).await;
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("already_exists")), "{}", r.text);
    assert_eq!(read_json(&team_file(&s, "ops")), json!({"description": "Keeps things running."}));
    assert!(team_file(&s, "research").exists());

    // A rename that cannot move every member (one was removed by hand, unseen by the runtime)
    // changes nothing.
    let r = s
        .post(
            "/api/v1/agents",
            &[],
            json!({"id": "zeta", "config": {"model": "openai/fake-model", "team": "research"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    std::fs::remove_dir_all(s.dir.path().join(".polpo/agents/zeta")).unwrap();
    let r = s.patch("/api/v1/agents/team", &[], json!({"oldName": "research", "name": "science"})).await;
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!("agent_not_found")), "{}", r.text);
    assert_eq!(
        read_json(&s.dir.path().join(".polpo/agents/writer/agent.json"))["team"],
        "research",
        "the member moved first is put back"
    );
    assert!(team_file(&s, "research").exists() && !team_file(&s, "science").exists());
    let r = s.delete("/api/v1/agents/zeta", &[]).await;
    assert_eq!(r.status, 404, "the agent is gone from disk: {}", r.text);
    // The runtime picks up the hand removal (as on any later write).
    s.state.runtime.reload(polpo_engine::Loaded::new(polpo_project::load_project(s.dir.path()).unwrap()).unwrap());

    // A rename moves the file and the members follow.
    let r = s.patch("/v1/agents/team", &[], json!({"oldName": "research", "name": "science"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"]["members"], json!(["writer"]));
    assert!(!team_file(&s, "research").exists());
    assert_eq!(read_json(&team_file(&s, "science")), json!({"description": "Finds things out."}));
    assert_eq!(read_json(&s.dir.path().join(".polpo/agents/writer/agent.json"))["team"], "science");
    let r = s.get("/api/v1/agents/team?name=research", &[]).await;
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!("team_not_found")), "{}", r.text);
    let r = s.patch("/api/v1/agents/team", &[], json!({"oldName": "nobody", "name": "x"})).await;
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!("team_not_found")), "{}", r.text);

    // A team with members is not deleted: they would be left naming nothing.
    let r = s.delete("/v1/agents/teams/science", &[]).await;
    assert_eq!((r.status, r.json()["code"].clone()), (409, json!("team_not_empty")), "{}", r.text);
    assert!(r.json()["error"].as_str().unwrap_or_default().contains("writer"), "{}", r.text);
    assert!(team_file(&s, "science").exists());
    let r = s.patch("/api/v1/agents/writer", &[], json!({"team": "ops"})).await;
    assert_eq!(r.status, 200, "{}", r.text);

    // Delete: the file is gone, the listing follows, a second delete is a 404.
    let r = s.delete("/v1/agents/teams/science", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"]["removed"], true);
    assert!(!team_file(&s, "science").exists());
    let names: Vec<Value> = s.get("/api/v1/agents/teams", &[]).await.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, [json!("ops")]);
    let r = s.delete("/api/v1/agents/teams/science", &[]).await;
    assert_eq!((r.status, r.json()["code"].clone()), (404, json!("team_not_found")), "{}", r.text);
    assert_eq!(s.get("/api/v1/agents/team", &[]).await.status, 400);
}
