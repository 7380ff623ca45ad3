//! Throughput of session appends and run-event appends, written and read back, per backend.
//! A benchmark, not a test: it asserts nothing about speed. Run it with
//! `cargo test -p polpo-store --test bench -- --ignored --nocapture` (add `--release` for
//! shipped figures).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Instant;

use polpo_core::message::Message;
use polpo_store::{NewMessage, NewRun, NewRunEvent, NewSession, PageRequest, StoreKind};
use serde_json::json;
use support::TestStore;

const MESSAGES: usize = 500;
const EVENTS: usize = 2000;
/// Concurrent clients in the chat-shaped case, as the server bench's 32 concurrent clients.
const TASKS: usize = 32;
/// Chat-shaped units of work per client: create a session, append a user and an assistant message.
const CHATS_PER_TASK: usize = 40;

fn rate(n: usize, started: Instant) -> String {
    let secs = started.elapsed().as_secs_f64();
    format!("{:>9.0}/s ({n} in {:.2}s)", n as f64 / secs, secs)
}

async fn measure(kind: StoreKind) {
    let t = TestStore::new(kind).await;
    let sid =
        t.store.sessions.create_session(NewSession { agent: "bench".into(), ..Default::default() }).await.unwrap().id;
    let started = Instant::now();
    for i in 0..MESSAGES {
        let m = NewMessage::new(Message::assistant(format!("message {i}: {}", "lorem ipsum ".repeat(20))));
        t.store.sessions.append_messages(&sid, vec![m], None).await.unwrap();
    }
    let append_messages = rate(MESSAGES, started);
    let started = Instant::now();
    let mut read = 0;
    let mut page = PageRequest::first(100);
    loop {
        let got = t.store.sessions.list_messages(&sid, &page).await.unwrap();
        read += got.items.len();
        match got.next {
            Some(c) => page = PageRequest::after(c, 100),
            None => break,
        }
    }
    let read_messages = rate(read, started);

    let rid = t.store.runs.create_run(NewRun { agent: "bench".into(), ..Default::default() }).await.unwrap().id;
    let started = Instant::now();
    for i in 0..EVENTS {
        t.store.runs.append_event(&rid, "output.text.delta", json!({"delta": format!("token {i} ")})).await.unwrap();
    }
    let append_events = rate(EVENTS, started);
    let started = Instant::now();
    for b in 0..EVENTS / 50 {
        let batch = (0..50)
            .map(|i| NewRunEvent::new("output.text.delta", json!({"delta": format!("token {b}.{i} ")})))
            .collect();
        t.store.runs.append_events(&rid, batch).await.unwrap();
    }
    let append_batches = rate(EVENTS, started);
    let started = Instant::now();
    let mut after = 0;
    loop {
        let got = t.store.runs.events_after(&rid, after, 100).await.unwrap();
        match got.last() {
            Some(e) => after = e.seq,
            None => break,
        }
    }
    let read_events = rate(after as usize, started);
    let concurrent_chats = concurrent_chats(&t.store).await;
    println!("{kind:?}");
    println!("  session append (1 message, durable)  {append_messages}");
    println!("  session read (pages of 100)          {read_messages}");
    println!("  run-event append (durable)           {append_events}");
    println!("  run-event append, batches of 50      {append_batches}");
    println!("  run-event read (pages of 100)        {read_events}");
    println!("  create + append, {TASKS} concurrent     {concurrent_chats}");
    t.finish().await;
}

/// What one chat completion writes (a new session, then the user message and the answer),
/// from `TASKS` clients at once: the shape of the server under concurrent load.
async fn concurrent_chats(store: &polpo_store::Store) -> String {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let sessions = store.sessions.clone();
            tokio::spawn(async move {
                for i in 0..CHATS_PER_TASK {
                    let new = NewSession { agent: "bench".into(), ..Default::default() };
                    let id = sessions.create_session(new).await.unwrap().id;
                    let turn = vec![
                        NewMessage::new(Message::user(format!("question {i}"))),
                        NewMessage::new(Message::assistant(format!("answer {i}: {}", "lorem ipsum ".repeat(20)))),
                    ];
                    sessions.append_messages(&id, turn, None).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    rate(TASKS * CHATS_PER_TASK, started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn throughput_per_backend() {
    for kind in [StoreKind::File, StoreKind::Sqlite, StoreKind::Postgres] {
        measure(kind).await;
    }
}
