//! Benchmark (ignored; run with `--ignored --nocapture`): 10,000 memory items on each backend,
//! then the time of a page of 50 (the first, and one deep in the listing) and of a lexical
//! search. Figures go to the README/report, not into assertions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use polpo_store::{MemoryFilter, MemoryScope, NewMemoryItem, PageRequest, ScopeKind, StoreKind};
use support::TestStore;

const ITEMS: usize = 10_000;
const READS: u32 = 200;
const WORDS: [&str; 12] =
    ["dark", "mode", "cargo", "build", "lunch", "garden", "coffee", "deploy", "review", "release", "python", "rust"];

async fn fill(t: &TestStore) {
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let m = t.store.memory.clone();
            tokio::spawn(async move {
                for i in (w..ITEMS).step_by(16) {
                    let content = format!("item {i} about {} and {}", WORDS[i % 12], WORDS[(i / 12) % 12]);
                    let scope = if i % 2 == 0 {
                        MemoryScope::project()
                    } else {
                        MemoryScope::of(ScopeKind::User, format!("u{}", i % 50))
                    };
                    let new = NewMemoryItem { id: None, scope, kind: "fact".into(), content, source: "bench".into() };
                    m.create_memory_item(new).await.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
}

async fn timed<F, Fut>(mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f().await; // warm: the file store reads its items on first use
    let start = Instant::now();
    for _ in 0..READS {
        f().await;
    }
    start.elapsed() / READS
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn bench_memory_pages_of_50_over_10000_items() {
    for kind in [StoreKind::File, StoreKind::Sqlite, StoreKind::Postgres] {
        let t = TestStore::new(kind).await;
        let started = Instant::now();
        fill(&t).await;
        let fill_time = started.elapsed();
        let t = t.reopen().await;
        let m = t.store.memory.clone();
        let all = MemoryFilter::default();
        let first = timed(|| {
            let (m, all) = (m.clone(), all.clone());
            async move {
                assert_eq!(m.list_memory_items_page(&all, &PageRequest::first(50)).await.unwrap().items.len(), 50);
            }
        })
        .await;
        // A cursor half-way down the listing.
        let mut page = PageRequest::first(1000);
        for _ in 0..5 {
            page = PageRequest::after(m.list_memory_items_page(&all, &page).await.unwrap().next.unwrap(), 1000);
        }
        let deep_cursor = page.after.clone().unwrap();
        let deep = timed(|| {
            let (m, all, c) = (m.clone(), all.clone(), deep_cursor.clone());
            async move {
                assert_eq!(m.list_memory_items_page(&all, &PageRequest::after(c, 50)).await.unwrap().items.len(), 50);
            }
        })
        .await;
        let user = MemoryFilter { scopes: vec![MemoryScope::of(ScopeKind::User, "u7")], kinds: vec![] };
        let scoped = timed(|| {
            let (m, user) = (m.clone(), user.clone());
            async move {
                assert!(!m.list_memory_items_page(&user, &PageRequest::first(50)).await.unwrap().items.is_empty());
            }
        })
        .await;
        let search = timed(|| {
            let (m, all) = (m.clone(), all.clone());
            async move {
                assert_eq!(m.search_memory_lexical(&all, "garden coffee", 50).await.unwrap().len(), 50);
            }
        })
        .await;
        println!(
            "memory bench {:>8}: {ITEMS} items written in {:.1} s; page of 50: first {:.3} ms, deep {:.3} ms, one user {:.3} ms; lexical search top 50: {:.3} ms",
            kind.as_str(),
            fill_time.as_secs_f64(),
            first.as_secs_f64() * 1e3,
            deep.as_secs_f64() * 1e3,
            scoped.as_secs_f64() * 1e3,
            search.as_secs_f64() * 1e3,
        );
        t.finish().await;
    }
}
