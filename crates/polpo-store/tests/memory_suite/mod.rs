//! The typed-memory part of the conformance suite: each `async fn` takes a fresh store of one
//! backend (stamped out per backend by `conformance!` in `conformance.rs`; the reopen test by
//! `memory_reopen!` below).

use std::collections::HashSet;

use chrono::Duration as Span;
use polpo_core::embedding::EmbeddingIdentity;
use polpo_store::{
    MemoryFilter, MemoryItem, MemoryItemPatch, MemoryScope, NewMemoryItem, PageRequest, ScopeKind, StoreError,
};

use crate::support::TestStore;

fn code<T: std::fmt::Debug>(r: Result<T, StoreError>) -> &'static str {
    r.unwrap_err().code()
}

fn new_item(scope: MemoryScope, kind: &str, content: &str) -> NewMemoryItem {
    NewMemoryItem { id: None, scope, kind: kind.into(), content: content.into(), source: "test".into() }
}

fn user(id: &str) -> MemoryScope {
    MemoryScope::of(ScopeKind::User, id)
}

fn identity(model: &str, dimensions: usize) -> EmbeddingIdentity {
    EmbeddingIdentity { provider: "test".into(), model: model.into(), dimensions, revision: "1".into() }
}

fn ids(items: &[polpo_store::ScoredItem]) -> Vec<&str> {
    items.iter().map(|s| s.item.id.as_str()).collect()
}

pub async fn memory_items_round_trip_with_revisions(t: &TestStore) {
    let m = &t.store.memory;
    let mut given = new_item(user("ada"), "preference", "Ada prefers dark mode");
    given.id = Some("pref-1".into());
    let created = m.create_memory_item(given.clone()).await.unwrap();
    assert_eq!((created.id.as_str(), created.revision, created.scope.clone()), ("pref-1", 1, user("ada")));
    assert_eq!(created.created_at, created.updated_at);
    assert_eq!(m.get_memory_item("pref-1").await.unwrap(), Some(created.clone()));
    assert_eq!(code(m.create_memory_item(given).await), "conflict", "a taken id");
    let fresh = m.create_memory_item(new_item(MemoryScope::project(), "fact", "The repo uses Rust")).await.unwrap();
    assert_ne!(fresh.id, "pref-1");

    t.clock.advance(Span::seconds(5));
    let patch = MemoryItemPatch { content: Some("Ada prefers light mode".into()), ..Default::default() };
    let updated = m.update_memory_item("pref-1", patch.clone(), Some(1)).await.unwrap();
    assert_eq!((updated.revision, updated.content.as_str()), (2, "Ada prefers light mode"));
    assert_eq!(updated.created_at, created.created_at);
    assert!(updated.updated_at > created.updated_at);
    assert_eq!(code(m.update_memory_item("pref-1", patch.clone(), Some(1)).await), "conflict", "stale revision");
    assert_eq!(code(m.update_memory_item("nope", patch, None).await), "not_found");
    let kind_only = MemoryItemPatch { kind: Some("style".into()), ..Default::default() };
    assert_eq!(m.update_memory_item("pref-1", kind_only, None).await.unwrap().revision, 3);

    // Bad input is refused with a stable code and stores nothing.
    let bad = [
        new_item(user("ada"), "opinion", "unknown kind"),
        new_item(MemoryScope { kind: ScopeKind::Agent, subject_id: None }, "fact", "agent scope without agent"),
        new_item(
            MemoryScope { kind: ScopeKind::Project, subject_id: Some("x".into()) },
            "fact",
            "project with subject",
        ),
        new_item(user("ada"), "fact", "   "),
        new_item(user("ada"), "fact", &"x".repeat(polpo_store::memory::MAX_MEMORY_CONTENT + 1)),
        NewMemoryItem { id: Some("../escape".into()), ..new_item(user("ada"), "fact", "bad id") },
    ];
    for item in bad {
        assert_eq!(code(m.create_memory_item(item).await), "invalid_input");
    }
    let wrong = MemoryItemPatch { kind: Some("bogus".into()), ..Default::default() };
    assert_eq!(code(m.update_memory_item("pref-1", wrong, None).await), "invalid_input");
    assert_eq!(m.list_memory_items(&MemoryFilter::default(), 100).await.unwrap().len(), 2);

    assert_eq!(code(m.delete_memory_item("pref-1", Some(1)).await), "conflict");
    assert!(m.delete_memory_item("pref-1", Some(3)).await.unwrap());
    assert!(!m.delete_memory_item("pref-1", None).await.unwrap());
    assert_eq!(m.get_memory_item("pref-1").await.unwrap(), None);
}

pub async fn memory_pages_are_stable_while_items_are_added(t: &TestStore) {
    let m = t.store.memory.clone();
    let mut made = Vec::new();
    for i in 0..30 {
        // Pairs share a millisecond, so the id breaks ties.
        if i % 2 == 0 {
            t.clock.advance(Span::milliseconds(1));
        }
        let scope = if i % 3 == 0 { user("ada") } else { MemoryScope::of(ScopeKind::Agent, "coder") };
        made.push(m.create_memory_item(new_item(scope, "fact", &format!("fact number {i}"))).await.unwrap());
    }
    // Writers keep adding items while a reader pages through.
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let m = m.clone();
            tokio::spawn(async move {
                for i in 0..10 {
                    m.create_memory_item(new_item(user("late"), "fact", &format!("late {w} {i}"))).await.unwrap();
                }
            })
        })
        .collect();
    let mut seen = Vec::new();
    let mut page = PageRequest::first(7);
    loop {
        let got = m.list_memory_items_page(&MemoryFilter::default(), &page).await.unwrap();
        assert!(got.items.len() <= 7);
        seen.extend(got.items.iter().map(|x| x.id.clone()));
        match got.next {
            Some(c) => page = PageRequest::after(c, 7),
            None => break,
        }
    }
    for w in writers {
        w.await.unwrap();
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no item twice");
    let mut expected: Vec<&MemoryItem> = made.iter().collect();
    expected.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    let original: Vec<&String> = seen.iter().filter(|id| made.iter().any(|x| &x.id == *id)).collect();
    assert_eq!(original, expected.iter().map(|x| &x.id).collect::<Vec<_>>(), "every item once, newest first");

    let ada = MemoryFilter { scopes: vec![user("ada")], kinds: vec![] };
    let page = m.list_memory_items_page(&ada, &PageRequest::first(100)).await.unwrap();
    assert_eq!(page.items.len(), 10);
    assert!(page.next.is_none());
    let any_agent =
        MemoryFilter { scopes: vec![MemoryScope { kind: ScopeKind::Agent, subject_id: None }], kinds: vec![] };
    assert_eq!(m.list_memory_items(&any_agent, 1000).await.unwrap().len(), 20);
    let styles = MemoryFilter { scopes: vec![], kinds: vec!["style".into()] };
    assert!(m.list_memory_items(&styles, 10).await.unwrap().is_empty());
    let first = m.list_memory_items(&MemoryFilter::default(), 5).await.unwrap();
    assert_eq!(first, m.list_memory_items_page(&MemoryFilter::default(), &PageRequest::first(5)).await.unwrap().items);

    let bogus = PageRequest::after(polpo_store::Cursor::from_wire("not-a-cursor"), 3);
    assert_eq!(code(m.list_memory_items_page(&MemoryFilter::default(), &bogus).await), "invalid_cursor");
}

pub async fn memory_lexical_search_ranks_matches_from_the_index(t: &TestStore) {
    let m = &t.store.memory;
    let both =
        m.create_memory_item(new_item(user("ada"), "preference", "Ada likes dark mode in every editor")).await.unwrap();
    let one = m.create_memory_item(new_item(user("ada"), "fact", "The office is dark after six")).await.unwrap();
    let other_user = m.create_memory_item(new_item(user("bob"), "preference", "Bob likes dark mode")).await.unwrap();
    let none = m.create_memory_item(new_item(user("ada"), "fact", "Lunch is at noon")).await.unwrap();

    let all = MemoryFilter::default();
    let found = m.search_memory_lexical(&all, "DARK mode!", 10).await.unwrap();
    let found_ids = ids(&found);
    assert_eq!(found.len(), 3, "every item with a query term, none without: {found_ids:?}");
    assert!(!found_ids.contains(&none.id.as_str()));
    let rank = |id: &str| found_ids.iter().position(|x| *x == id).unwrap();
    assert!(rank(&both.id) < rank(&one.id), "both terms beat one");
    assert!(found.windows(2).all(|w| w[0].score >= w[1].score));

    let ada = MemoryFilter { scopes: vec![user("ada")], kinds: vec![] };
    let found = m.search_memory_lexical(&ada, "dark mode", 10).await.unwrap();
    assert!(!ids(&found).contains(&other_user.id.as_str()), "another user's item stays out");
    assert_eq!(found.len(), 2);
    let facts = MemoryFilter { scopes: vec![user("ada")], kinds: vec!["fact".into()] };
    assert_eq!(ids(&m.search_memory_lexical(&facts, "dark", 10).await.unwrap()), vec![one.id.as_str()]);
    assert_eq!(m.search_memory_lexical(&all, "dark", 1).await.unwrap().len(), 1, "limit applies");
    assert!(m.search_memory_lexical(&all, " ;!? ", 10).await.unwrap().is_empty(), "no terms, no results");
    assert!(m.search_memory_lexical(&all, "\"dark\" OR NEAR(", 10).await.unwrap().len() == 3, "syntax is just text");

    // The index follows writes.
    let patch = MemoryItemPatch { content: Some("Lunch moved to one".into()), ..Default::default() };
    m.update_memory_item(&one.id, patch, None).await.unwrap();
    assert!(!ids(&m.search_memory_lexical(&all, "office", 10).await.unwrap()).contains(&one.id.as_str()));
    assert_eq!(ids(&m.search_memory_lexical(&all, "moved", 10).await.unwrap()), vec![one.id.as_str()]);
    m.delete_memory_item(&both.id, None).await.unwrap();
    assert!(!ids(&m.search_memory_lexical(&all, "editor", 10).await.unwrap()).contains(&both.id.as_str()));
}

pub async fn memory_vectors_are_compared_only_within_their_identity(t: &TestStore) {
    let m = &t.store.memory;
    let a = identity("a", 3);
    let b = identity("b", 3);
    let mut items = Vec::new();
    for (i, v) in [[1.0f32, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0]].iter().enumerate() {
        let item = m.create_memory_item(new_item(user("ada"), "fact", &format!("item {i}"))).await.unwrap();
        m.put_memory_vector(&item.id, item.revision, &a, v).await.unwrap();
        items.push(item);
    }
    let foreign = m.create_memory_item(new_item(user("ada"), "fact", "made by b")).await.unwrap();
    m.put_memory_vector(&foreign.id, 1, &b, &[1.0, 0.0, 0.0]).await.unwrap();

    let all = MemoryFilter::default();
    let near = m.nearest_memory_items(&all, &a, &[1.0, 0.0, 0.0], 10).await.unwrap();
    assert_eq!(ids(&near), vec![items[0].id.as_str(), items[1].id.as_str(), items[2].id.as_str()]);
    assert!((near[0].score - 1.0).abs() < 1e-6 && (near[1].score - 0.6).abs() < 1e-6);
    assert_eq!(ids(&m.nearest_memory_items(&all, &b, &[1.0, 0.0, 0.0], 10).await.unwrap()), vec![foreign.id.as_str()]);
    assert_eq!(m.nearest_memory_items(&all, &a, &[1.0, 0.0, 0.0], 2).await.unwrap().len(), 2);

    assert_eq!(code(m.put_memory_vector(&items[0].id, 1, &a, &[1.0, 0.0]).await), "invalid_input", "wrong size");
    assert_eq!(code(m.put_memory_vector(&items[0].id, 7, &a, &[1.0, 0.0, 0.0]).await), "conflict", "stale revision");
    assert_eq!(code(m.put_memory_vector("gone", 1, &a, &[1.0, 0.0, 0.0]).await), "not_found");
    assert_eq!(code(m.nearest_memory_items(&all, &a, &[1.0], 10).await), "invalid_input");

    // A vector describes content: new content drops it, a kind change keeps it.
    let kind = MemoryItemPatch { kind: Some("style".into()), ..Default::default() };
    m.update_memory_item(&items[1].id, kind, None).await.unwrap();
    let content = MemoryItemPatch { content: Some("changed".into()), ..Default::default() };
    m.update_memory_item(&items[0].id, content, None).await.unwrap();
    let near = m.nearest_memory_items(&all, &a, &[1.0, 0.0, 0.0], 10).await.unwrap();
    assert_eq!(ids(&near), vec![items[1].id.as_str(), items[2].id.as_str()]);
    // Replacing a vector with another identity moves the item to that identity.
    m.put_memory_vector(&items[2].id, 1, &b, &[0.0, 1.0, 0.0]).await.unwrap();
    assert_eq!(m.nearest_memory_items(&all, &a, &[1.0, 0.0, 0.0], 10).await.unwrap().len(), 1);
    m.delete_memory_item(&items[1].id, None).await.unwrap();
    assert!(m.nearest_memory_items(&all, &a, &[1.0, 0.0, 0.0], 10).await.unwrap().is_empty());
}

/// Items, the lexical index and vectors come back after a reopen.
pub async fn memory_survives_a_reopen(t: TestStore) -> TestStore {
    let m = &t.store.memory;
    let kept = m.create_memory_item(new_item(user("ada"), "fact", "Ada keeps a garden")).await.unwrap();
    let changed = m.create_memory_item(new_item(user("ada"), "fact", "old words")).await.unwrap();
    m.put_memory_vector(&kept.id, 1, &identity("a", 2), &[0.0, 1.0]).await.unwrap();
    m.put_memory_vector(&changed.id, 1, &identity("a", 2), &[1.0, 0.0]).await.unwrap();
    let changed = m
        .update_memory_item(
            &changed.id,
            MemoryItemPatch { content: Some("new words".into()), ..Default::default() },
            None,
        )
        .await
        .unwrap();
    let t = t.reopen().await;
    let m = &t.store.memory;
    assert_eq!(m.get_memory_item(&kept.id).await.unwrap(), Some(kept.clone()));
    assert_eq!(m.get_memory_item(&changed.id).await.unwrap(), Some(changed.clone()));
    let all = MemoryFilter::default();
    assert_eq!(ids(&m.search_memory_lexical(&all, "garden", 5).await.unwrap()), vec![kept.id.as_str()]);
    assert!(m.search_memory_lexical(&all, "old", 5).await.unwrap().is_empty());
    let near = m.nearest_memory_items(&all, &identity("a", 2), &[1.0, 0.0], 5).await.unwrap();
    assert_eq!(ids(&near), vec![kept.id.as_str()], "the dropped vector stays dropped");
    t
}

/// Stamp out [`memory_survives_a_reopen`] per backend (it owns its store).
macro_rules! memory_reopen {
    ($($backend:ident => $kind:expr),* $(,)?) => {
        $(
            mod $backend {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory_survives_a_reopen() {
                    let t = crate::support::TestStore::new($kind).await;
                    super::memory_survives_a_reopen(t).await.finish().await;
                }
            }
        )*
    };
}

memory_reopen!(
    file => polpo_store::StoreKind::File,
    sqlite => polpo_store::StoreKind::Sqlite,
    postgres => polpo_store::StoreKind::Postgres,
);
