//! The live event bus shared by several servers through PostgreSQL (issue 21, item 5): each
//! bus stands for one server's, all on one real database. Every bus shows every event, in
//! one order with the same ids, so a client resumes on any server with the id it last saw —
//! also on a server that joined later.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_engine::{Delivery, EventBus, Subscription};
use polpo_store::{PgStore, SystemClock};
use polpo_testkit::pg::PgSchema;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A bus shared through its own connection to the schema, as a separate server has.
async fn server_bus(schema: &PgSchema) -> EventBus {
    let store = PgStore::connect(&schema.url(), Arc::new(SystemClock)).await.unwrap();
    let shared = store.shared();
    let bus = EventBus::new(256);
    bus.share(shared.feed.clone(), &shared.signals).await.unwrap();
    // The bus keeps listening through `shared.signals`' task; the store handles can go.
    bus
}

/// The next `n` events of `sub`, as (id, data).
async fn take(sub: &mut Subscription, n: usize) -> Vec<(u64, serde_json::Value)> {
    let mut got = Vec::new();
    while got.len() < n {
        let delivery = tokio::time::timeout(Duration::from_secs(20), sub.recv()).await.expect("an event").expect("bus");
        match delivery {
            Delivery::Event(e) => got.push((e.id, e.payload())),
            Delivery::Lost(l) => panic!("nothing may be lost here: {l:?}"),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_shows_every_event_in_one_order_and_resumes_by_id() {
    let schema = PgSchema::create().await.unwrap();
    let a = server_bus(&schema).await;
    let b = server_bus(&schema).await;
    let (_, mut on_a) = a.subscribe_after(None);
    let (_, mut on_b) = b.subscribe_after(None);

    for i in 0..30 {
        assert_eq!(a.publish("tick", json!({"from": "a", "i": i})), None, "a shared bus leaves ids to the feed");
        b.publish("tick", json!({"from": "b", "i": i}));
    }
    let seen_a = take(&mut on_a, 60).await;
    let seen_b = take(&mut on_b, 60).await;
    assert_eq!(seen_a, seen_b, "one order, the same ids, on both servers");
    let ids: Vec<u64> = seen_a.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (ids[0]..ids[0] + 60).collect::<Vec<_>>(), "contiguous ids");
    for from in ["a", "b"] {
        let order: Vec<i64> =
            seen_a.iter().filter(|(_, d)| d["from"] == from).map(|(_, d)| d["i"].as_i64().unwrap()).collect();
        assert_eq!(order, (0..30).collect::<Vec<_>>(), "each server's events keep their order");
    }

    // A client that last saw the 20th event on A resumes on B with exactly the rest.
    let (backlog, _) = b.subscribe_after(Some(seen_a[19].0));
    let resumed: Vec<(u64, serde_json::Value)> = backlog
        .into_iter()
        .map(|d| match d {
            Delivery::Event(e) => (e.id, e.payload()),
            Delivery::Lost(l) => panic!("lost {l:?}"),
        })
        .collect();
    assert_eq!(resumed, seen_a[20..].to_vec());

    // A server that starts now has the feed's recent events for clients that resume there.
    let c = server_bus(&schema).await;
    let (backlog, mut on_c) = c.subscribe_after(Some(seen_a[9].0));
    assert_eq!(backlog.len(), 50);
    assert!(matches!(&backlog[0], Delivery::Event(e) if e.id == seen_a[10].0));
    a.publish("tick", json!({"from": "a", "i": 30}));
    let next = take(&mut on_c, 1).await;
    assert_eq!(next[0].0, seen_a[59].0 + 1, "and then follows the feed live");

    schema.drop_schema().await.unwrap();
}
