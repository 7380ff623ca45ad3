//! Agent Skills through `/v1/chat/completions` and `/api/v1/skills`, over real HTTP with the
//! strict fake model: what the model is shown and what it can read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::path::Path;
use support::Server;

const SKILL_BODY: &str = "Use a 4px grid and the brand palette.";

/// The default project plus `designer` (allowed `read` only, chat narrowed to `read`, skill
/// `frontend-design` assigned) and the installed bundle, with a reference file.
fn project(dir: &Path) {
    support::default_project(dir)
        .agent(
            "designer",
            json!({"model": "openai/fake-model", "allowedTools": ["read"], "chat": {"allowedTools": ["read"]},
                   "skills": ["frontend-design"], "maxTurns": 4}),
            "You design pages.",
        )
        .unwrap();
    let skill = dir.join(".polpo/skills/frontend-design");
    std::fs::create_dir_all(skill.join("references")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!("---\nname: frontend-design\ndescription: Build polished pages.\n---\n{SKILL_BODY}\n"),
    )
    .unwrap();
    std::fs::write(skill.join("references/colors.md"), "Primary: #0a84ff").unwrap();
}

fn ask(agent: &str, text: &str) -> Value {
    json!({"agent": agent, "messages": [{"role": "user", "content": text}]})
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn assigned_skills_bring_their_tools_without_naming_them_and_a_request_can_narrow_them_away() {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("skill_read", json!({"name": "frontend-design"}))]),
        Turn::tool_calls(vec![("read", json!({"path": ".polpo/skills/frontend-design/SKILL.md"}))]),
        Turn::text("Done."),
        Turn::text("Narrowed."),
    ])
    .await
    .unwrap();
    let s = Server::start_with(&llm, None, project).await;
    let r = s.post("/v1/chat/completions", &[], ask("designer", "build the settings page")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sent = llm.requests();
    assert_eq!(tool_names(&sent[0].body), ["read", "skill_list", "skill_read"]);
    let result = |i: usize| sent[i].body["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
    // skill_read: SKILL.md with the references assembled into one result.
    assert!(result(1).contains(SKILL_BODY) && result(1).contains("Primary: #0a84ff"), "{}", result(1));
    // The workspace file tools never reach the bundle.
    assert!(result(2).contains("path_outside_sandbox") && !result(2).contains(SKILL_BODY), "{}", result(2));
    // A request restriction still narrows them away.
    let mut narrowed = ask("designer", "again");
    narrowed["polpo"] = json!({"execution": {"allowedTools": ["read"]}});
    let r = s.post("/v1/chat/completions", &[], narrowed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(tool_names(&llm.requests()[3].body), ["read"]);
    // An agent without skills never sees them.
    let llm2 = FakeLlm::start([Turn::text("Hi.")]).await.unwrap();
    let s2 = Server::start_with(&llm2, None, project).await;
    assert_eq!(s2.post("/v1/chat/completions", &[], ask("coder", "hi")).await.status, 200);
    assert!(!tool_names(&llm2.requests()[0].body).iter().any(|n| n.starts_with("skill_")));
}

#[tokio::test]
async fn polpo_skills_puts_skill_md_in_the_prompt_of_that_request_only() {
    let llm = FakeLlm::start([Turn::text("With the skill."), Turn::text("Without.")]).await.unwrap();
    let s = Server::start_with(&llm, None, project).await;
    let mut activated = ask("designer", "build the settings page");
    activated["polpo"] = json!({"skills": ["frontend-design"]});
    let r = s.post("/v1/chat/completions", &[], activated).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.header("x-session-id").unwrap().to_owned();
    let r =
        s.post("/v1/chat/completions", &[("x-session-id", &session)], ask("designer", "and the profile page")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sent = llm.requests();
    assert!(system_prompt(&sent[0].body).contains(SKILL_BODY), "{}", system_prompt(&sent[0].body));
    assert!(!system_prompt(&sent[1].body).contains(SKILL_BODY), "the next request of the session has no activation");
    let agent = std::fs::read_to_string(s.dir.path().join(".polpo/agents/designer/agent.json")).unwrap();
    assert!(!agent.contains("activ"), "no configuration changed: {agent}");
    // Unknown or unassigned: refused before any model call.
    for name in ["frontend-design", "no-such-skill"] {
        let mut body = ask("coder", "hi");
        body["polpo"] = json!({"skills": [name]});
        let r = s.post("/v1/chat/completions", &[], body).await;
        assert_eq!((r.status, r.json()["error"]["code"].as_str().unwrap()), (400, "skill_not_assigned"), "{name}");
    }
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn the_skills_api_lists_reads_assigns_and_unassigns() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start_with(&llm, None, project).await;
    let list = s.get("/api/v1/skills", &[]).await.json();
    assert_eq!(list["data"][0]["name"], "frontend-design");
    assert_eq!(list["data"][0]["description"], "Build polished pages.");
    assert_eq!(list["data"][0]["assignedTo"], json!(["designer"]));
    let one = s.get("/api/v1/skills/frontend-design", &[]).await.json();
    assert!(one["data"]["content"].as_str().unwrap().contains(SKILL_BODY));
    assert_eq!(one["data"]["files"], json!(["SKILL.md", "references/colors.md"]));
    assert_eq!(s.get("/api/v1/skills/nope", &[]).await.status, 404);

    let r = s.post("/api/v1/skills/frontend-design/assign", &[], json!({"agent": "coder"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"]["changed"], true);
    let coder = s.get("/api/v1/agents/coder", &[]).await.json();
    assert_eq!(coder["data"]["config"]["skills"], json!(["frontend-design"]));
    let r = s.post("/api/v1/skills/frontend-design/unassign", &[], json!({"agent": "designer"})).await;
    assert_eq!(r.json()["data"]["changed"], true);
    let list = s.get("/api/v1/skills", &[]).await.json();
    assert_eq!(list["data"][0]["assignedTo"], json!(["coder"]));
    let r = s.post("/api/v1/skills/no-such-skill/assign", &[], json!({"agent": "coder"})).await;
    assert_eq!((r.status, r.json()["code"].as_str().unwrap()), (404, "skill_not_found"), "{}", r.text);
}
