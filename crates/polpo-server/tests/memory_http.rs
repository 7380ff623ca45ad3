//! Typed memory over real HTTP (`/api/v1/agents/{agent}/memory/…`) on a real file store: CRUD
//! with `expectedRevision`, cursor pages, hybrid search, bad input, and in keyed mode who
//! reaches which item.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use polpo_core::config::ApiKeyEntry;
use polpo_embed::{OpenAiEmbedder, OpenAiSettings};
use polpo_memory::Memory;
use polpo_server::auth::ApiKeys;
use polpo_testkit::{EmbeddingsReply, FAKE_EMBEDDINGS_KEY, FakeEmbeddings, FakeLlm, Turn};
use serde_json::{Value, json};
use support::{Server, default_project};

const EVENTUALLY: Duration = Duration::from_secs(20);
const ITEMS: &str = "/api/v1/agents/coder/memory/items";

fn item(scope: Value, kind: &str, content: &str) -> Value {
    json!({"scope": scope, "kind": kind, "content": content})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_items_crud_pages_and_search_through_the_router() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;

    let r = s.post(ITEMS, &[], json!({"id": "pref-1", "scope": {"kind": "user", "subjectId": "ada"}, "kind": "preference", "content": "Ada prefers dark mode"})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let created = &r.json()["data"]["item"];
    assert_eq!((created["id"].as_str(), created["revision"].as_u64()), (Some("pref-1"), Some(1)));
    assert_eq!(created["scope"], json!({"kind": "user", "subjectId": "ada"}));

    let again =
        s.post(ITEMS, &[], json!({"id": "pref-1", "scope": {"kind": "project"}, "kind": "fact", "content": "x"})).await;
    assert_eq!((again.status, again.json()["code"].as_str()), (409, Some("conflict")));
    for bad in [
        item(json!({"kind": "user", "subjectId": "ada"}), "opinion", "unknown kind"),
        item(json!({"kind": "team"}), "fact", "unknown scope"),
        item(json!({"kind": "agent", "subjectId": "writer"}), "fact", "another agent's memory on coder's path"),
        json!({"scope": {"kind": "project"}, "kind": "fact", "content": "x", "owner": "me"}),
        json!(["not", "an", "object"]),
    ] {
        let r = s.post(ITEMS, &[], bad.clone()).await;
        assert_eq!(r.status, 400, "{bad} → {}", r.text);
    }
    let r = s.post("/api/v1/agents/ghost/memory/items", &[], item(json!({"kind": "project"}), "fact", "x")).await;
    assert_eq!((r.status, r.json()["code"].as_str()), (404, Some("agent_not_found")));

    // An agent-scope item without a subject is the path's agent's.
    let r = s
        .post("/v1/agents/coder/memory/items", &[], item(json!({"kind": "agent"}), "fact", "The build uses cargo"))
        .await;
    assert_eq!(r.json()["data"]["item"]["scope"], json!({"kind": "agent", "subjectId": "coder"}));
    for i in 0..5 {
        let r = s.post(ITEMS, &[], item(json!({"kind": "project"}), "fact", &format!("project fact {i}"))).await;
        assert_eq!(r.status, 201);
    }

    // Pages of 3 until nextCursor is null: every item once.
    let mut seen = Vec::new();
    let mut url = format!("{ITEMS}?limit=3");
    loop {
        let r = s.get(&url, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let data = &r.json()["data"];
        assert!(data["items"].as_array().unwrap().len() <= 3);
        seen.extend(data["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()));
        match data["nextCursor"].as_str() {
            Some(c) => url = format!("{ITEMS}?limit=3&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 7);
    let users = s.get(&format!("{ITEMS}?scopeKind=user&scopeSubjectId=ada&kinds=preference,style"), &[]).await.json();
    assert_eq!(users["data"]["items"].as_array().unwrap().len(), 1);
    for bad in ["?status=active", "?limit=0", "?scopeKind=team", "?scopeSubjectId=ada", "?cursor=zz"] {
        let r = s.get(&format!("{ITEMS}{bad}"), &[]).await;
        assert_eq!(r.status, 400, "{bad} → {}", r.text);
    }

    // Change with the revision read; a stale one is 409.
    let r = s
        .patch(
            &format!("{ITEMS}/pref-1"),
            &[],
            json!({"content": "Ada prefers dark mode everywhere", "expectedRevision": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["data"]["item"]["revision"], 2);
    let stale =
        s.patch(&format!("{ITEMS}/pref-1"), &[], json!({"content": "lost update", "expectedRevision": 1})).await;
    assert_eq!((stale.status, stale.json()["code"].as_str()), (409, Some("conflict")));
    assert_eq!(
        s.get(&format!("{ITEMS}/pref-1"), &[]).await.json()["data"]["item"]["content"],
        "Ada prefers dark mode everywhere"
    );

    let found = s.post("/api/v1/agents/coder/memory/search", &[], json!({"query": "dark mode", "maxResults": 3})).await;
    assert_eq!(found.status, 200, "{}", found.text);
    let results = found.json()["data"]["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["item"]["id"], "pref-1");
    assert_eq!(results[0]["lexicalRank"], 1);
    let r = s.post("/api/v1/agents/coder/memory/search", &[], json!({"query": ""})).await;
    assert_eq!(r.status, 400, "{}", r.text);

    let r = s.delete(&format!("{ITEMS}/pref-1?expectedRevision=1"), &[]).await;
    assert_eq!(r.status, 409);
    let r = s.delete(&format!("{ITEMS}/pref-1?expectedRevision=2"), &[]).await;
    assert_eq!(r.json()["data"], json!({"forgotten": true, "itemId": "pref-1"}));
    assert_eq!(s.get(&format!("{ITEMS}/pref-1"), &[]).await.status, 404);
    assert_eq!(s.delete(&format!("{ITEMS}/pref-1"), &[]).await.status, 404);
}

fn bearer(key: &str) -> [(&'static str, String); 1] {
    [("authorization", format!("Bearer {key}"))]
}

fn auth<'a>(h: &'a [(&'static str, String); 1]) -> [(&'static str, &'a str); 1] {
    [(h[0].0, h[0].1.as_str())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_keyed_mode_user_memory_is_the_callers_own() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start_tweaked(
        &llm,
        Some("root"),
        |d| drop(default_project(d)),
        |state| {
            let entries = [ApiKeyEntry::Plain("key-a".into()), ApiKeyEntry::Plain("key-b".into())];
            state.keys = ApiKeys::load(Some("root"), &entries).0;
        },
    )
    .await;
    let (a, b, root) = (bearer("key-a"), bearer("key-b"), bearer("root"));

    let r = s.post(ITEMS, &auth(&a), item(json!({"kind": "user"}), "preference", "I like short answers")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mine = r.json()["data"]["item"].clone();
    let id = mine["id"].as_str().unwrap();
    assert!(mine["scope"]["subjectId"].as_str().is_some_and(|s| !s.is_empty()), "the key's own user");

    // Key b neither sees nor touches it; naming a's subject is refused.
    let listed = s.get(ITEMS, &auth(&b)).await.json();
    assert!(listed["data"]["items"].as_array().unwrap().is_empty());
    assert_eq!(s.get(&format!("{ITEMS}/{id}"), &auth(&b)).await.status, 404);
    assert_eq!(s.patch(&format!("{ITEMS}/{id}"), &auth(&b), json!({"content": "x"})).await.status, 404);
    assert_eq!(s.delete(&format!("{ITEMS}/{id}"), &auth(&b)).await.status, 404);
    let subject = mine["scope"]["subjectId"].as_str().unwrap();
    let r = s.get(&format!("{ITEMS}?scopeKind=user&scopeSubjectId={subject}"), &auth(&b)).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = s.post("/api/v1/agents/coder/memory/search", &auth(&b), json!({"query": "short answers"})).await;
    assert!(r.json()["data"]["results"].as_array().unwrap().is_empty(), "{}", r.text);

    // Project memory is written by admins and read by everyone.
    let r = s.post(ITEMS, &auth(&a), item(json!({"kind": "project"}), "fact", "short answers are house style")).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r =
        s.post(ITEMS, &auth(&root), item(json!({"kind": "project"}), "fact", "short answers are house style")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.post("/api/v1/agents/coder/memory/search", &auth(&a), json!({"query": "short answers"})).await;
    assert_eq!(r.json()["data"]["results"].as_array().unwrap().len(), 2, "{}", r.text);
    let r = s.post("/api/v1/agents/coder/memory/search", &auth(&b), json!({"query": "short answers"})).await;
    assert_eq!(r.json()["data"]["results"].as_array().unwrap().len(), 1, "{}", r.text);
    // The admin reaches every user's items; the owner deletes its own.
    assert_eq!(s.get(&format!("{ITEMS}/{id}"), &auth(&root)).await.status, 200);
    assert_eq!(s.delete(&format!("{ITEMS}/{id}"), &auth(&a)).await.status, 200);
    // Agent edits still need an admin key: the memory exemption covers only memory paths.
    let r = s.patch("/api/v1/agents/coder", &auth(&a), json!({"maxTurns": 2})).await;
    assert_eq!(r.status, 403, "{}", r.text);
}

/// With the embedding provider down (it answers 503), a stored item and a search still work on
/// lexical retrieval alone: the answers carry the warning, and `/api/v1/events` publishes it as
/// `memory:warning`, so whoever operates the server sees the outage too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_embedding_provider_down_search_is_lexical_and_the_warning_is_an_event() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let embeddings = FakeEmbeddings::start().await.unwrap();
    for _ in 0..2 {
        embeddings.push(EmbeddingsReply::Status(503, "the embedding service is overloaded".into()));
    }
    let mut settings = OpenAiSettings::new(embeddings.base_url(), "text-embedding-3-small", 64);
    settings.api_key = Some(FAKE_EMBEDDINGS_KEY.into());
    let embedder = Arc::new(OpenAiEmbedder::new(settings).unwrap());
    let s = Server::start_tweaked(
        &llm,
        None,
        |d| {
            default_project(d);
        },
        |state| state.memory = Memory::new(state.runtime.store().memory.clone(), Some(embedder)),
    )
    .await;
    let mut events = s.stream("/api/v1/events?filter=memory:*", &[]).await;

    let r = s.post(ITEMS, &[], item(json!({"kind": "project"}), "fact", "The deploy runs on Fridays")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["data"]["warnings"][0]["code"], "embedding_unavailable", "{}", r.text);
    let found = s.post("/api/v1/agents/coder/memory/search", &[], json!({"query": "deploy Fridays"})).await;
    assert_eq!(found.status, 200, "{}", found.text);
    let data = &found.json()["data"];
    assert_eq!(data["results"][0]["item"]["content"], "The deploy runs on Fridays", "{data}");
    assert_eq!(data["warnings"][0]["code"], "embedding_unavailable", "{data}");

    let mut frames = events.until(EVENTUALLY, |_| true).await;
    frames.extend(events.until(EVENTUALLY, |_| true).await);
    assert_eq!(frames.len(), 2, "one event per warning");
    // The write's warning (stored without a vector), then the search's (lexical only).
    for (frame, instead) in frames.iter().zip(["without a vector", "lexical"]) {
        assert_eq!(frame.name(), "memory:warning");
        let event = frame.json();
        assert_eq!((event["agent"].as_str(), event["code"].as_str()), (Some("coder"), Some("embedding_unavailable")));
        assert!(event["message"].as_str().unwrap().contains(instead), "{event}");
    }
}
