//! `polpo memory` as a user runs it: a real `polpo` process over a project made by
//! `polpo create`, on the file store and on SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn polpo(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polpo")).current_dir(dir).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn add_list_search_and_forget_on_file_and_sqlite_storage() {
    for storage in ["file", "sqlite"] {
        let tmp = tempfile::tempdir().unwrap();
        stdout(&polpo(tmp.path(), &["create", "demo"]));
        let dir = tmp.path().join("demo");
        let project_json = dir.join(".polpo/project.json");
        let mut project: serde_json::Value = serde_json::from_slice(&std::fs::read(&project_json).unwrap()).unwrap();
        project["settings"]["storage"] = storage.into();
        std::fs::write(&project_json, serde_json::to_vec_pretty(&project).unwrap()).unwrap();

        let pref = stdout(&polpo(
            &dir,
            &["memory", "add", "Ada prefers dark mode", "--kind", "preference", "--scope", "user", "--subject", "ada"],
        ));
        let fact = stdout(&polpo(&dir, &["memory", "add", "The build uses cargo"]));
        let (pref, fact) = (pref.trim(), fact.trim());

        let listed = stdout(&polpo(&dir, &["memory", "list"]));
        let lines: Vec<&str> = listed.lines().collect();
        assert_eq!(lines.len(), 2, "{storage}: {listed}");
        assert!(lines.iter().any(|l| l.starts_with(pref) && l.contains("user:ada\tpreference\tAda prefers dark mode")));
        let page = stdout(&polpo(&dir, &["memory", "list", "--limit", "1", "--json"]));
        let page: serde_json::Value = serde_json::from_str(&page).unwrap();
        let cursor = page["nextCursor"].as_str().unwrap().to_owned();
        let rest = stdout(&polpo(&dir, &["memory", "list", "--limit", "1", "--cursor", &cursor, "--json"]));
        let rest: serde_json::Value = serde_json::from_str(&rest).unwrap();
        assert_ne!(page["items"][0]["id"], rest["items"][0]["id"]);
        assert!(rest["nextCursor"].is_null());

        let found = stdout(&polpo(&dir, &["memory", "search", "DARK", "--scope", "user", "--subject", "ada"]));
        assert!(found.starts_with(pref), "{storage}: {found}");
        assert!(stdout(&polpo(&dir, &["memory", "search", "dark", "--scope", "project"])).is_empty());

        let bad = polpo(&dir, &["memory", "add", "x", "--kind", "opinion"]);
        assert!(!bad.status.success());
        assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid_input"));
        let no_embedder = polpo(&dir, &["memory", "reindex"]);
        assert!(String::from_utf8_lossy(&no_embedder.stderr).contains("feature_unavailable"));

        stdout(&polpo(&dir, &["memory", "rm", fact]));
        let again = polpo(&dir, &["memory", "rm", fact]);
        assert!(String::from_utf8_lossy(&again.stderr).contains("not_found"));
        assert_eq!(stdout(&polpo(&dir, &["memory", "list"])).lines().count(), 1);
    }
}

/// Writes `embedding` as the project's `settings.memory.embedding`.
fn with_embedding(dir: &Path, embedding: serde_json::Value) {
    let project_json = dir.join(".polpo/project.json");
    let mut project: serde_json::Value = serde_json::from_slice(&std::fs::read(&project_json).unwrap()).unwrap();
    project["settings"]["memory"] = serde_json::json!({"embedding": embedding});
    std::fs::write(&project_json, serde_json::to_vec_pretty(&project).unwrap()).unwrap();
}

#[test]
fn a_configured_embedder_gives_memory_vectors_and_a_wrong_one_names_its_field() {
    let tmp = tempfile::tempdir().unwrap();
    stdout(&polpo(tmp.path(), &["create", "demo"]));
    let dir = tmp.path().join("demo");
    with_embedding(&dir, serde_json::json!({"provider": "hashing", "dimensions": 64}));
    stdout(&polpo(&dir, &["memory", "add", "The build uses cargo"]));
    stdout(&polpo(&dir, &["memory", "add", "Deploys happen on Fridays"]));
    let reindexed = stdout(&polpo(&dir, &["memory", "reindex"]));
    assert_eq!(reindexed.trim(), "embedded 2, skipped 0", "both items get a vector of the configured identity");
    assert!(stdout(&polpo(&dir, &["memory", "search", "cargo build"])).contains("The build uses cargo"));

    // A remote embedder without a model cannot be built: every memory command says which field.
    with_embedding(&dir, serde_json::json!({"provider": "openai"}));
    let out = polpo(&dir, &["memory", "list"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("embedding_model_missing") && err.contains("settings.memory.embedding/model"), "{err}");
    // An unknown provider is a config problem `polpo validate` reports with file and pointer.
    with_embedding(&dir, serde_json::json!({"provider": "magic"}));
    let out = polpo(&dir, &["validate"]);
    assert!(!out.status.success());
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(report.contains("/settings/memory/embedding/provider"), "{report}");
}

mod support;

/// Through `polpo serve` and the strict fake model: the agent whose `allowedTools` names the
/// memory tools is offered them and its call stores an item in the invoking user's memory;
/// an agent without `allowedTools` is offered none.
#[tokio::test(flavor = "multi_thread")]
async fn only_an_agent_granted_the_memory_tools_sees_and_uses_them() {
    use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
    use serde_json::json;

    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "sqlite"}))
        .unwrap()
        .agent(
            "keeper",
            json!({"model": "openai/fake-model", "allowedTools": ["memory_item_*"], "maxTurns": 3}),
            "You remember.",
        )
        .unwrap()
        .agent("plain", json!({"model": "openai/fake-model"}), "You answer.")
        .unwrap();
    let create = json!({"kind": "preference", "content": "Ada likes green tea", "scope": "user"});
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("memory_item_create", create)]),
        Turn::text("Noted."),
        Turn::text("Hello."),
    ])
    .await
    .unwrap();
    let base = llm.base_url();
    let server = support::ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk")],
    );
    polpo_llm::install_crypto_provider();
    let http = reqwest::Client::new();
    for (agent, answer) in [("keeper", "Noted."), ("plain", "Hello.")] {
        let body: serde_json::Value = http
            .post(format!("{}/v1/chat/completions", server.url))
            .json(
                &json!({"agent": agent, "user": "ada", "messages": [{"role": "user", "content": "I like green tea"}]}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], answer, "{body}");
    }
    let requests = llm.requests();
    let offered = |i: usize| requests[i].body["tools"].to_string();
    assert!(offered(0).contains("memory_item_create") && offered(0).contains("memory_item_search"), "{}", offered(0));
    assert!(!offered(2).contains("memory_item"), "{}", offered(2));
    let listed: serde_json::Value = http
        .get(format!("{}/api/v1/agents/keeper/memory/items?scopeKind=user&scopeSubjectId=ada", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = listed["data"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(
        (items[0]["content"].as_str(), items[0]["source"].as_str()),
        (Some("Ada likes green tea"), Some("agent:keeper"))
    );
}
