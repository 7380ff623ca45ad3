//! Benchmark (ignored by default): what publishing a runtime event costs.
//!
//! `cargo test --release -p polpo-engine --test bench_bus -- --ignored --nocapture`
//!
//! The runtime publishes on every session, message, tool call and run, listened to or not, so
//! the figure that matters most is the cost with nobody subscribed; then with subscribers that
//! keep up (each receives every event).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failed setup should panic loudly

use polpo_engine::{Delivery, EventBus};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

const EVENTS: u64 = 200_000;

/// A payload shaped like `tool:completed`.
fn payload(i: u64) -> serde_json::Value {
    json!({"runId": "chat-0192", "sessionId": "s-1", "agent": "coder", "callId": format!("call_{i}"), "tool": "read", "result": "fn main() {}\n".repeat(8), "isError": false})
}

async fn publish_all(bus: &EventBus) -> f64 {
    let start = Instant::now();
    for i in 0..EVENTS {
        bus.publish("tool:completed", payload(i));
    }
    start.elapsed().as_nanos() as f64 / EVENTS as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn publish_cost() {
    let build = {
        let start = Instant::now();
        for i in 0..EVENTS {
            std::hint::black_box(payload(i));
        }
        start.elapsed().as_nanos() as f64 / EVENTS as f64
    };
    let bus = Arc::new(EventBus::default());
    let alone = publish_all(&bus).await;
    println!("building the payload alone: {build:.0} ns");
    println!("publish, no subscriber:     {alone:.0} ns/event (payload included)");

    for subscribers in [1usize, 10] {
        let mut readers = Vec::new();
        for _ in 0..subscribers {
            let (_, mut sub) = bus.subscribe_after(None);
            readers.push(tokio::spawn(async move {
                let (mut events, mut lost) = (0u64, 0u64);
                while events < EVENTS {
                    match sub.recv().await.unwrap() {
                        Delivery::Event(_) => events += 1,
                        Delivery::Lost(l) => {
                            lost += 1;
                            events += l.missed.unwrap_or(0);
                        }
                    }
                }
                lost
            }));
        }
        let per = publish_all(&bus).await;
        let mut lost = 0;
        for r in readers {
            lost += r.await.unwrap();
        }
        println!("publish, {subscribers:>2} subscriber(s):  {per:.0} ns/event ({lost} events_lost markers)");
    }
}
