//! Typed memory over real stores (a file store and a SQLite file): hybrid search fused by
//! reciprocal rank, falling back to lexical when the embedder fails, stopping when it is
//! aborted, reindexing, and the tools offered only to agents whose `allowedTools` name them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use polpo_core::config::agent::AgentConfig;
use polpo_core::config::parse::Location;
use polpo_core::config::project::Agent;
use polpo_embed::{EmbedError, Embedder, EmbeddingIdentity, HashingEmbedder};
use polpo_memory::{EmbeddingFailureMode, MEMORY_ITEM_TOOLS, Memory, MemoryToolSource, SearchRequest};
use polpo_store::{MemoryFilter, MemoryScope, NewMemoryItem, ScopeKind, Store, StoreKind, SystemClock, open_store};
use polpo_tools::{ToolContext, ToolSource};
use serde_json::json;

async fn stores() -> Vec<(Store, tempfile::TempDir)> {
    let mut out = Vec::new();
    for kind in [StoreKind::File, StoreKind::Sqlite] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(kind, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
        out.push((store, dir));
    }
    out
}

fn new_item(content: &str) -> NewMemoryItem {
    NewMemoryItem {
        id: None,
        scope: MemoryScope::of(ScopeKind::User, "ada"),
        kind: "fact".into(),
        content: content.into(),
        source: "test".into(),
    }
}

fn search(query: &str) -> SearchRequest {
    SearchRequest { query: query.into(), filter: MemoryFilter::default(), max_results: Some(10) }
}

/// The hashing embedder with a few words mapped onto one another, standing in for a model
/// that knows synonyms, so a semantic-only match can be told from a lexical one.
struct Synonyms {
    inner: HashingEmbedder,
    down: AtomicBool,
    abort: bool,
}

impl Synonyms {
    fn new() -> Self {
        Synonyms { inner: HashingEmbedder::new(64), down: AtomicBool::new(false), abort: false }
    }
}

#[async_trait::async_trait]
impl Embedder for Synonyms {
    fn identity(&self) -> &EmbeddingIdentity {
        self.inner.identity()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.abort {
            return Err(EmbedError::Aborted);
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(EmbedError::Unavailable("connection refused".into()));
        }
        let mapped: Vec<String> =
            texts.iter().map(|t| t.to_lowercase().replace("automobile", "car").replace("vehicle", "car")).collect();
        self.inner.embed(&mapped).await
    }
}

fn ids(outcome: &polpo_memory::SearchOutcome) -> Vec<String> {
    outcome.results.iter().map(|h| h.item.content.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_search_fuses_lexical_and_semantic_candidates() {
    for (store, _dir) in stores().await {
        let memory = Memory::new(store.memory.clone(), Some(Arc::new(Synonyms::new())));
        for text in ["Ada drives an automobile to work", "Ada's car is red", "Lunch is at noon", "red wine is fine"] {
            assert!(memory.create(new_item(text)).await.unwrap().warnings.is_empty());
        }
        let found = memory.search(&search("car")).await.unwrap();
        assert!(found.warnings.is_empty());
        assert_eq!(
            ids(&found),
            vec!["Ada's car is red", "Ada drives an automobile to work"],
            "{:?}: both retrievers find the first, only the semantic one finds the synonym",
            store.kind
        );
        let first = &found.results[0];
        assert_eq!((first.lexical_rank, first.semantic_rank), (Some(1), Some(1)));
        assert_eq!((found.results[1].lexical_rank, found.results[1].semantic_rank), (None, Some(2)));
        assert!((first.score - 2.0 / 61.0).abs() < 1e-12);

        // Without an embedder the same store answers lexically.
        let lexical = Memory::new(store.memory.clone(), None).search(&search("car")).await.unwrap();
        assert_eq!(ids(&lexical), vec!["Ada's car is red"]);
        // The same query twice gives the same order.
        assert_eq!(
            ids(&memory.search(&search("red car")).await.unwrap()),
            ids(&memory.search(&search("red car")).await.unwrap())
        );
        assert_eq!(memory.search(&search("  ")).await.unwrap_err().code(), "invalid_input");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_embedder_falls_back_to_lexical_and_an_aborted_one_stops() {
    for (store, _dir) in stores().await {
        let embedder = Arc::new(Synonyms::new());
        let memory = Memory::new(store.memory.clone(), Some(embedder.clone()));
        memory.create(new_item("Ada's car is red")).await.unwrap();
        memory.create(new_item("Ada drives an automobile")).await.unwrap();

        embedder.down.store(true, Ordering::SeqCst);
        let found = memory.search(&search("car")).await.unwrap();
        assert_eq!(ids(&found), vec!["Ada's car is red"], "lexical only");
        assert_eq!(found.warnings.len(), 1);
        assert_eq!(found.warnings[0].code, "embedding_unavailable");

        let strict = memory.clone().with_failure_mode(EmbeddingFailureMode::Fail);
        assert_eq!(strict.search(&search("car")).await.unwrap_err().code(), "embedding_unavailable");

        // A write while the provider is down stores the item without a vector, and says so.
        let written = memory.create(new_item("The vehicle needs new tyres")).await.unwrap();
        assert_eq!(written.warnings[0].code, "embedding_unavailable");
        assert!(memory.get(&written.item.id).await.unwrap().is_some());
        embedder.down.store(false, Ordering::SeqCst);
        let before = memory.search(&search("car")).await.unwrap();
        assert!(!ids(&before).contains(&"The vehicle needs new tyres".to_owned()), "no vector yet");
        let report = memory.reindex(&MemoryFilter::default()).await.unwrap();
        assert_eq!((report.embedded, report.skipped), (3, 0));
        assert!(ids(&memory.search(&search("car")).await.unwrap()).contains(&"The vehicle needs new tyres".to_owned()));

        let aborting = Memory::new(store.memory.clone(), Some(Arc::new(Synonyms { abort: true, ..Synonyms::new() })));
        assert_eq!(aborting.search(&search("car")).await.unwrap_err().code(), "embedding_aborted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_moves_every_vector_to_the_new_identity() {
    let (store, _dir) = stores().await.remove(1);
    let old = Memory::new(store.memory.clone(), Some(Arc::new(HashingEmbedder::new(16))));
    for text in ["alpha beta", "gamma delta", "epsilon"] {
        old.create(new_item(text)).await.unwrap();
    }
    let new = Memory::new(store.memory.clone(), Some(Arc::new(HashingEmbedder::new(32))));
    let query = new.identity().cloned().unwrap();
    let vector = HashingEmbedder::new(32).embed(&["gamma".to_owned()]).await.unwrap().remove(0);
    let all = MemoryFilter::default();
    assert!(
        store.memory.nearest_memory_items(&all, &query, &vector, 10).await.unwrap().is_empty(),
        "never compared across identities"
    );
    assert_eq!(new.reindex(&all).await.unwrap().embedded, 3);
    let near = store.memory.nearest_memory_items(&all, &query, &vector, 10).await.unwrap();
    assert_eq!(near[0].item.content, "gamma delta");
    let old_identity = old.identity().cloned().unwrap();
    let old_vector = HashingEmbedder::new(16).embed(&["gamma".to_owned()]).await.unwrap().remove(0);
    assert!(store.memory.nearest_memory_items(&all, &old_identity, &old_vector, 10).await.unwrap().is_empty());
}

fn agent(allowed: Option<&[&str]>) -> Agent {
    let config =
        AgentConfig { allowed_tools: allowed.map(|a| a.iter().map(|s| s.to_string()).collect()), ..Default::default() };
    Agent { id: "coder".into(), config, instructions: String::new(), source: Location::file("agent.json") }
}

fn names(tools: &[Arc<dyn polpo_tools::Tool>]) -> Vec<String> {
    tools.iter().map(|t| t.spec().name.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_offered_only_when_allowed_tools_names_them() {
    let (store, dir) = stores().await.remove(0);
    let source = MemoryToolSource::new(&Memory::new(store.memory.clone(), None));
    let ctx = ToolContext::new(dir.path());
    for allowed in [None, Some(&["read", "bash"][..]), Some(&["*"][..]), Some(&[][..])] {
        assert!(names(&source.tools_for(&agent(allowed), &ctx).await).is_empty(), "{allowed:?} grants nothing");
    }
    assert_eq!(
        names(&source.tools_for(&agent(Some(&["read", "memory_item_search"])), &ctx).await),
        vec!["memory_item_search"]
    );
    assert_eq!(names(&source.tools_for(&agent(Some(&["MEMORY_ITEM_*"])), &ctx).await), MEMORY_ITEM_TOOLS.to_vec());
    // Creating the store and the source added nothing to the store either.
    assert!(store.memory.list_memory_items(&MemoryFilter::default(), 10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_reach_only_the_trusted_scopes_of_the_call() {
    let (store, dir) = stores().await.remove(1);
    let memory = Memory::new(store.memory.clone(), Some(Arc::new(HashingEmbedder::new(64))));
    let tools =
        MemoryToolSource::new(&memory).tools_for(&agent(Some(&["memory_item_*"])), &ToolContext::new(dir.path())).await;
    let tool = |name: &str| tools.iter().find(|t| t.spec().name == name).unwrap().clone();
    let mut ctx = ToolContext::new(dir.path());
    ctx.agent = "coder".into();
    ctx.invocation = json!({"user": "ada", "sessionId": "s1"});

    let created = tool("memory_item_create")
        .call(&ctx, json!({"kind": "preference", "content": "Ada likes short answers", "scope": "user"}))
        .await
        .unwrap();
    let id = created.details["item"]["id"].as_str().unwrap().to_owned();
    let stored = memory.get(&id).await.unwrap().unwrap();
    assert_eq!(stored.scope, MemoryScope::of(ScopeKind::User, "ada"), "the subject comes from the invocation");
    assert_eq!(stored.source, "agent:coder");
    let mine = tool("memory_item_create")
        .call(&ctx, json!({"kind": "fact", "content": "The build uses cargo"}))
        .await
        .unwrap();
    assert_eq!(mine.details["item"]["scope"], "agent");

    // Bob's item exists but the call for Ada cannot see or touch it.
    let bobs = memory
        .create(NewMemoryItem { scope: MemoryScope::of(ScopeKind::User, "bob"), ..new_item("Bob likes short answers") })
        .await
        .unwrap()
        .item;
    let found = tool("memory_item_search").call(&ctx, json!({"query": "short answers"})).await.unwrap();
    let found: Vec<&str> =
        found.details["results"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(found, vec![id.as_str()]);
    for (name, args) in
        [("memory_item_update", json!({"id": bobs.id, "content": "x"})), ("memory_item_delete", json!({"id": bobs.id}))]
    {
        assert_eq!(tool(name).call(&ctx, args).await.unwrap_err().code, "not_found");
    }
    assert!(memory.get(&bobs.id).await.unwrap().is_some());

    let stale = tool("memory_item_update")
        .call(&ctx, json!({"id": id, "content": "Ada likes long answers", "expectedRevision": 9}))
        .await;
    assert_eq!(stale.unwrap_err().code, "conflict");
    let listed = tool("memory_item_list").call(&ctx, json!({"scope": "user", "limit": 5})).await.unwrap();
    assert_eq!(listed.details["items"].as_array().unwrap().len(), 1);
    let gone = tool("memory_item_delete").call(&ctx, json!({"id": id})).await.unwrap();
    assert_eq!(gone.details["forgotten"], true);

    let mut anonymous = ctx.clone();
    anonymous.invocation = json!({});
    let err =
        tool("memory_item_create").call(&anonymous, json!({"kind": "fact", "content": "x", "scope": "user"})).await;
    assert_eq!(err.unwrap_err().code, "memory_scope_unavailable");
    let err = tool("memory_item_create").call(&ctx, json!({"kind": "opinion", "content": "x"})).await;
    assert_eq!(err.unwrap_err().code, "invalid_input");
}
