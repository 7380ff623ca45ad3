//! One conformance suite, run against every backend: each `async fn` below takes a fresh
//! store and checks behaviour a caller relies on; `conformance!` stamps out one `#[tokio::test]`
//! per backend and test.

// Test helpers outside `#[test]` functions may panic: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod learning_suite;
mod memory_suite;
mod support;
mod work_suite;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Duration as Span;
use learning_suite::*;
use memory_suite::*;
use polpo_core::message::{Message, Role, ToolCall, Usage};
use polpo_store::{
    EffectClaim, EffectStatus, JsonText, MAX_REASONING_BYTES, NewMessage, NewRun, NewRunEvent, NewSession, PageRequest,
    RunFilter, RunStatus, SessionFilter, SessionPatch, StoreError,
};
use serde_json::json;
use support::TestStore;
use work_suite::*;

fn code<T: std::fmt::Debug>(r: Result<T, StoreError>) -> &'static str {
    r.unwrap_err().code()
}

fn session(agent: &str) -> NewSession {
    NewSession { agent: agent.into(), ..Default::default() }
}

fn run(agent: &str) -> NewRun {
    NewRun { agent: agent.into(), ..Default::default() }
}

async fn sessions_round_trip(t: &TestStore) {
    let s = &t.store.sessions;
    let created = s
        .create_session(NewSession {
            agent: "coder".into(),
            user: Some("u1".into()),
            metadata: json!({"channel": "web"}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((created.title.as_str(), created.message_count, created.revision), ("", 0, 1));
    assert_eq!(created.metadata, json!({"channel": "web"}));
    assert_eq!(s.get_session(&created.id).await.unwrap(), Some(created.clone()));

    let long = "x".repeat(50) + &"é".repeat(30);
    let appended = s
        .append_messages(
            &created.id,
            vec![NewMessage::new(Message::system("be brief")), NewMessage::new(Message::user(long.clone()))],
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        appended.session.title,
        long.chars().take(60).collect::<String>(),
        "title = first 60 chars of the first user message"
    );
    assert_eq!((appended.session.message_count, appended.session.revision), (2, 2));
    let later = s.append_messages(&created.id, vec![NewMessage::new(Message::user("another"))], None).await.unwrap();
    assert_eq!(later.session.title, appended.session.title, "the title does not change with later messages");

    let renamed = s
        .update_session(
            &created.id,
            SessionPatch { title: Some("Renamed".into()), metadata: Some(json!({"k": 1})) },
            Some(3),
        )
        .await
        .unwrap();
    assert_eq!((renamed.title.as_str(), renamed.revision), ("Renamed", 4));
    assert_eq!(s.get_session(&created.id).await.unwrap(), Some(renamed));

    assert!(s.delete_session(&created.id).await.unwrap());
    assert!(!s.delete_session(&created.id).await.unwrap());
    assert_eq!(s.get_session(&created.id).await.unwrap(), None);
    assert_eq!(code(s.list_messages(&created.id, &PageRequest::default()).await), "not_found");
    assert_eq!(
        code(s.append_messages(&created.id, vec![NewMessage::new(Message::user("x"))], None).await),
        "not_found"
    );
    assert_eq!(
        code(s.create_session(NewSession { id: Some("../evil".into()), ..session("a") }).await),
        "invalid_input"
    );
    assert_eq!(code(s.create_session(NewSession { metadata: json!([1]), ..session("a") }).await), "invalid_input");
    let huge = json!({"blob": "x".repeat(65 * 1024)});
    assert_eq!(code(s.create_session(NewSession { metadata: huge, ..session("a") }).await), "invalid_input");
    let long_title = "t".repeat(100);
    let titled = s.create_session(NewSession { title: Some(long_title.clone()), ..session("a") }).await.unwrap();
    assert_eq!(titled.title, long_title, "an explicit title is kept whole");
}

async fn sessions_created_and_appended_with_many_messages_read_back_whole(t: &TestStore) {
    let s = &t.store.sessions;
    // More than one insert statement's worth (100), so the first ones go with the session's
    // row and the rest after them.
    let first: Vec<NewMessage> = (0..103)
        .map(|i| match i % 2 {
            0 => NewMessage::new(Message::user(format!("question {i} with a 'quote' and a $1"))),
            _ => NewMessage {
                turn_id: Some(format!("turn-{i}")),
                ..NewMessage::new(Message::assistant(format!("answer {i}")))
            },
        })
        .collect();
    let created = s
        .create_session_with_messages(NewSession { title: Some("t".into()), ..session("coder") }, first)
        .await
        .unwrap();
    assert_eq!(created.session.message_count, 103);
    assert_eq!(s.get_session(&created.session.id).await.unwrap().as_ref(), Some(&created.session));
    let mut read = Vec::new();
    let mut page = PageRequest::first(40);
    loop {
        let got = s.list_messages(&created.session.id, &page).await.unwrap();
        read.extend(got.items);
        match got.next {
            Some(next) => page.after = Some(next),
            None => break,
        }
    }
    assert_eq!(read, created.messages, "every message as the create returned it, in order");
    assert_eq!(read.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=103).collect::<Vec<_>>());

    // An append past one statement's worth too: the header and every message.
    let more: Vec<NewMessage> = (0..101).map(|i| NewMessage::new(Message::user(format!("more {i}")))).collect();
    let appended = s.append_messages(&created.session.id, more, Some(created.session.revision)).await.unwrap();
    assert_eq!(appended.session.message_count, 204);
    assert_eq!(s.get_session(&created.session.id).await.unwrap().as_ref(), Some(&appended.session));
    let all = s.list_messages(&created.session.id, &PageRequest::first(300)).await.unwrap().items;
    assert_eq!(all[103..], appended.messages[..]);

    // A taken id writes nothing: neither a row nor a message.
    let taken = NewSession { id: Some(created.session.id.clone()), ..session("other") };
    let again = s.create_session_with_messages(taken, vec![NewMessage::new(Message::user("late"))]).await;
    assert_eq!(code(again), "conflict");
    assert_eq!(s.get_session(&created.session.id).await.unwrap().as_ref(), Some(&appended.session));
    let after = s.list_messages(&created.session.id, &PageRequest::first(300)).await.unwrap().items;
    assert_eq!(after, all, "nothing of the refused create was written");
    assert_eq!(after[..103], created.messages[..]);
}

async fn messages_keep_order_and_everything_stored_beside_them(t: &TestStore) {
    let s = &t.store.sessions;
    let id = s.create_session(session("coder")).await.unwrap().id;
    let call = Message {
        role: Role::Assistant,
        content: None,
        tool_calls: vec![ToolCall { id: "call_1".into(), name: "read".into(), arguments: "{\"path\":\"a\"".into() }],
        tool_call_id: None,
        name: None,
    };
    let reasoning = "ü".repeat(MAX_REASONING_BYTES);
    let batch = vec![
        NewMessage::new(Message::user("read a")),
        NewMessage {
            message: call.clone(),
            reasoning: Some(reasoning),
            turn_id: Some("turn-1".into()),
            usage: Some(Usage { input_tokens: 10, output_tokens: 5 }),
        },
        NewMessage::new(Message::tool_result("call_1", "contents")),
    ];
    s.append_messages(&id, batch, None).await.unwrap();
    t.clock.advance(Span::seconds(1));
    s.append_messages(&id, vec![NewMessage::new(Message::assistant("done"))], None).await.unwrap();

    let page = s.list_messages(&id, &PageRequest::default()).await.unwrap();
    assert_eq!(page.next, None);
    let m = &page.items;
    assert_eq!(m.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert_eq!(
        m.iter().map(|m| m.message.role).collect::<Vec<_>>(),
        vec![Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(m[1].message, call, "tool calls (even with invalid JSON arguments) come back as written");
    assert!(m[1].reasoning_truncated && m[1].reasoning.as_ref().unwrap().len() <= MAX_REASONING_BYTES);
    assert_eq!((m[1].turn_id.as_deref(), m[1].usage.map(|u| u.total())), (Some("turn-1"), Some(15)));
    assert_eq!(m[2].message.tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(m[3].ts - m[0].ts, Span::seconds(1));
    assert_eq!(m.iter().map(|m| m.id.clone()).collect::<HashSet<_>>().len(), 4, "message ids are unique");
    assert_eq!(code(s.append_messages(&id, vec![], None).await), "invalid_input");
}

async fn pagination_has_no_duplicates_and_no_gaps(t: &TestStore) {
    let s = &t.store.sessions;
    let mut made = Vec::new();
    for i in 0..25 {
        // Pairs share a millisecond, so the id breaks ties.
        if i % 2 == 0 {
            t.clock.advance(Span::milliseconds(1));
        }
        let agent = if i % 3 == 0 { "a" } else { "b" };
        made.push(s.create_session(session(agent)).await.unwrap());
    }
    let mut seen = Vec::new();
    let mut page = PageRequest::first(7);
    loop {
        let got = s.list_sessions(&SessionFilter::default(), &page).await.unwrap();
        assert!(got.items.len() <= 7);
        seen.extend(got.items.iter().map(|x| (x.created_at, x.id.clone())));
        // A session created between two page reads is newer: it never shows up mid-listing.
        t.clock.advance(Span::milliseconds(1));
        s.create_session(session("late")).await.unwrap();
        match got.next {
            Some(c) => page = PageRequest::after(c, 7),
            None => break,
        }
    }
    let mut expected: Vec<_> = made.iter().map(|x| (x.created_at, x.id.clone())).collect();
    expected.sort();
    expected.reverse();
    assert_eq!(seen, expected, "newest first, every session exactly once");

    let only_a = s
        .list_sessions(&SessionFilter { agent: Some("a".into()), ..Default::default() }, &PageRequest::first(100))
        .await
        .unwrap();
    assert_eq!(only_a.items.len(), 9);
    assert!(only_a.items.iter().all(|x| x.agent == "a"));

    let id = &made[0].id;
    for i in 0..10 {
        s.append_messages(id, vec![NewMessage::new(Message::user(format!("m{i}")))], None).await.unwrap();
    }
    let mut texts = Vec::new();
    let mut page = PageRequest::first(3);
    loop {
        let got = s.list_messages(id, &page).await.unwrap();
        texts.extend(got.items.iter().map(|m| m.message.text_content()));
        match got.next {
            Some(c) => page = PageRequest::after(c, 3),
            None => break,
        }
    }
    assert_eq!(texts, (0..10).map(|i| format!("m{i}")).collect::<Vec<_>>());

    let tail = s.recent_messages(id, 4).await.unwrap();
    assert_eq!(tail.iter().map(|m| m.message.text_content()).collect::<Vec<_>>(), vec!["m6", "m7", "m8", "m9"]);
    assert_eq!(s.recent_messages(id, 50).await.unwrap().len(), 10);
    let empty = s.create_session(session("a")).await.unwrap().id;
    assert!(s.recent_messages(&empty, 5).await.unwrap().is_empty());
    assert_eq!(code(s.recent_messages("missing", 5).await), "not_found");

    let bogus = PageRequest::after(polpo_store::Cursor::from_wire("not-a-cursor"), 3);
    assert_eq!(code(s.list_sessions(&SessionFilter::default(), &bogus).await), "invalid_cursor");
    assert_eq!(code(s.list_messages(id, &bogus).await), "invalid_cursor");
}

async fn sessions_keep_their_owner_and_list_by_it(t: &TestStore) {
    let s = &t.store.sessions;
    let mine = s.create_session(NewSession { owner: Some("key_a".into()), ..session("coder") }).await.unwrap();
    s.create_session(NewSession { owner: Some("key_b".into()), ..session("coder") }).await.unwrap();
    let unowned = s.create_session(session("coder")).await.unwrap();
    assert_eq!(s.get_session(&mine.id).await.unwrap().unwrap().owner.as_deref(), Some("key_a"));
    assert_eq!(s.get_session(&unowned.id).await.unwrap().unwrap().owner, None);
    let appended = s.append_messages(&mine.id, vec![NewMessage::new(Message::user("hi"))], None).await.unwrap();
    assert_eq!(appended.session.owner.as_deref(), Some("key_a"), "an append keeps the owner");
    let only_a = SessionFilter { owner: Some("key_a".into()), ..Default::default() };
    let listed = s.list_sessions(&only_a, &PageRequest::first(10)).await.unwrap().items;
    assert_eq!(listed.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(), [mine.id.as_str()]);
    assert_eq!(s.list_sessions(&SessionFilter::default(), &PageRequest::first(10)).await.unwrap().items.len(), 3);
}

async fn stale_revisions_and_taken_ids_conflict(t: &TestStore) {
    let s = &t.store.sessions;
    let created = s.create_session(NewSession { id: Some("ses-1".into()), ..session("a") }).await.unwrap();
    assert_eq!(code(s.create_session(NewSession { id: Some("ses-1".into()), ..session("a") }).await), "conflict");
    let after =
        s.append_messages("ses-1", vec![NewMessage::new(Message::user("hi"))], Some(created.revision)).await.unwrap();
    // A second writer still holding the old revision loses, and nothing of its write lands.
    let stale = s.append_messages("ses-1", vec![NewMessage::new(Message::user("lost"))], Some(created.revision)).await;
    assert_eq!(code(stale), "conflict");
    assert_eq!(
        code(
            s.update_session("ses-1", SessionPatch { title: Some("t".into()), metadata: None }, Some(created.revision))
                .await
        ),
        "conflict"
    );
    assert_eq!(s.get_session("ses-1").await.unwrap().unwrap(), after.session);
    assert_eq!(s.list_messages("ses-1", &PageRequest::default()).await.unwrap().items.len(), 1);

    let r = &t.store.runs;
    let created = r.create_run(NewRun { id: Some("run-1".into()), ..run("a") }).await.unwrap();
    assert_eq!(code(r.create_run(NewRun { id: Some("run-1".into()), ..run("a") }).await), "conflict");
    let paused = r.update_run_status("run-1", RunStatus::Paused, None, Some(created.revision)).await.unwrap();
    assert_eq!(code(r.update_run_status("run-1", RunStatus::Running, None, Some(created.revision)).await), "conflict");
    r.update_run_status("run-1", RunStatus::Running, None, Some(paused.revision)).await.unwrap();
}

async fn runs_follow_their_state_machine_and_list_newest_first(t: &TestStore) {
    let r = &t.store.runs;
    let mut ids = Vec::new();
    for i in 0..5 {
        t.clock.advance(Span::seconds(1));
        let session_id = (i % 2 == 0).then(|| "ses-even".to_owned());
        ids.push(r.create_run(NewRun { session_id, ..run("coder") }).await.unwrap().id);
    }
    let first = r.get_run(&ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (first.status, first.revision, first.last_seq, first.error.as_deref()),
        (RunStatus::Running, 1, 0, None)
    );

    let failed = r.update_run_status(&ids[0], RunStatus::Failed, Some("model timed out".into()), None).await.unwrap();
    assert_eq!((failed.status, failed.error.as_deref()), (RunStatus::Failed, Some("model timed out")));
    assert_eq!(code(r.update_run_status(&ids[0], RunStatus::Running, None, None).await), "invalid_transition");
    r.update_run_status(&ids[1], RunStatus::Completed, None, None).await.unwrap();
    assert_eq!(r.get_run(&ids[0]).await.unwrap().unwrap(), failed);
    assert_eq!(code(r.update_run_status("missing", RunStatus::Completed, None, None).await), "not_found");

    let all = r.list_runs(&RunFilter::default(), &PageRequest::first(2)).await.unwrap();
    assert_eq!(all.items.iter().map(|x| x.id.clone()).collect::<Vec<_>>(), vec![ids[4].clone(), ids[3].clone()]);
    let rest = r.list_runs(&RunFilter::default(), &PageRequest::after(all.next.unwrap(), 10)).await.unwrap();
    assert_eq!(
        rest.items.iter().map(|x| x.id.clone()).collect::<Vec<_>>(),
        vec![ids[2].clone(), ids[1].clone(), ids[0].clone()]
    );
    assert_eq!(rest.next, None);

    let running = r
        .list_runs(&RunFilter { status: Some(RunStatus::Running), ..Default::default() }, &PageRequest::default())
        .await
        .unwrap();
    assert_eq!(running.items.len(), 3);
    let of_session = r
        .list_runs(&RunFilter { session_id: Some("ses-even".into()), ..Default::default() }, &PageRequest::default())
        .await
        .unwrap();
    assert_eq!(of_session.items.len(), 3);
}

async fn run_event_sequence_is_gap_free_under_concurrent_appends(t: &TestStore) {
    let r = t.store.runs.clone();
    let id = r.create_run(run("coder")).await.unwrap().id;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (r, id) = (r.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..25 {
                seqs.push(r.append_event(&id, "output.text.delta", json!({"writer": w, "i": i})).await.unwrap());
            }
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for task in tasks {
        let mine = task.await.unwrap();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "one writer's seqs increase");
        seqs.extend(mine);
    }
    seqs.sort();
    assert_eq!(seqs, (1..=200).collect::<Vec<u64>>(), "every seq handed out once, no gaps");

    let events = r.events_after(&id, 0, 1000).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=200).collect::<Vec<u64>>());
    assert!(events.iter().all(|e| e.event_type == "output.text.delta" && e.run_id == id));
    let tail = r.events_after(&id, 150, 10).await.unwrap();
    assert_eq!(tail.iter().map(|e| e.seq).collect::<Vec<_>>(), (151..=160).collect::<Vec<u64>>());
    assert_eq!(r.get_run(&id).await.unwrap().unwrap().last_seq, 200);
    assert!(r.events_after(&id, 200, 10).await.unwrap().is_empty());

    assert_eq!(code(r.append_event("missing", "run.started", json!({})).await), "not_found");
    assert_eq!(code(r.events_after("missing", 0, 10).await), "not_found");
    let huge = json!({"text": "x".repeat(300 * 1024)});
    assert_eq!(code(r.append_event(&id, "output.text.delta", huge).await), "invalid_input");
}

async fn event_batches_are_atomic_and_numbered_in_order(t: &TestStore) {
    let r = t.store.runs.clone();
    let id = r.create_run(run("coder")).await.unwrap().id;
    assert_eq!(r.append_event(&id, "run.started", json!({})).await.unwrap(), 1);
    let deltas = |n: usize| (0..n).map(|i| NewRunEvent::new("output.text.delta", json!({"i": i}))).collect::<Vec<_>>();
    assert_eq!(r.append_events(&id, deltas(10)).await.unwrap(), 2..=11);
    // Batches racing single appends still leave one gap-free journal.
    let (a, b) = tokio::join!(r.append_events(&id, deltas(100)), r.append_event(&id, "tool.started", json!({})));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.clone().count(), 100);
    assert!(!a.contains(&b));
    let events = r.events_after(&id, 0, 1000).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=112).collect::<Vec<u64>>());
    let batch: Vec<_> = events.iter().filter(|e| a.contains(&e.seq)).map(|e| e.data["i"].as_u64().unwrap()).collect();
    assert_eq!(batch, (0..100).collect::<Vec<u64>>(), "a batch keeps its order");

    let mut bad = deltas(3);
    bad[1].data = json!({"text": "x".repeat(300 * 1024)});
    assert_eq!(code(r.append_events(&id, bad).await), "invalid_input");
    assert_eq!(code(r.append_events(&id, deltas(257)).await), "invalid_input");
    assert_eq!(code(r.append_events(&id, vec![]).await), "invalid_input");
    assert_eq!(r.get_run(&id).await.unwrap().unwrap().last_seq, 112, "a refused batch appends nothing");
}

async fn checkpoints_keep_the_latest(t: &TestStore) {
    let r = &t.store.runs;
    let id = r.create_run(run("coder")).await.unwrap().id;
    assert_eq!(r.latest_checkpoint(&id).await.unwrap(), None);
    r.put_checkpoint(&id, 3, json!({"turn": 1})).await.unwrap();
    t.clock.advance(Span::seconds(1));
    let five = r.put_checkpoint(&id, 5, json!({"turn": 2, "messages": [1, 2]})).await.unwrap();
    assert_eq!(r.latest_checkpoint(&id).await.unwrap(), Some(five.clone()));
    assert_eq!(
        code(r.put_checkpoint(&id, 4, json!({})).await),
        "conflict",
        "an older checkpoint never replaces a newer one"
    );
    assert_eq!(r.latest_checkpoint(&id).await.unwrap(), Some(five));
    assert_eq!(code(r.put_checkpoint("missing", 1, json!({})).await), "not_found");
}

async fn leases_are_exclusive_until_they_expire(t: &TestStore) {
    let r = &t.store.runs;
    let id = r.create_run(run("coder")).await.unwrap().id;
    let ttl = Duration::from_secs(30);
    let a = r.claim_run(&id, "worker-a", ttl).await.unwrap();
    assert_eq!(a.expires_at, support::start_time() + Span::seconds(30));
    match r.claim_run(&id, "worker-b", ttl).await.unwrap_err() {
        StoreError::LeaseHeld { owner, .. } => assert_eq!(owner, "worker-a"),
        other => panic!("expected lease_held, got {other}"),
    }
    t.clock.advance(Span::seconds(20));
    let renewed = r.renew_lease(&id, "worker-a", ttl).await.unwrap();
    assert_eq!(renewed.expires_at, support::start_time() + Span::seconds(50));
    assert!(r.expired_runs(10).await.unwrap().is_empty());

    // worker-a crashes and stops renewing.
    t.clock.advance(Span::seconds(31));
    let expired = r.expired_runs(10).await.unwrap();
    assert_eq!(
        expired.iter().map(|l| (l.run_id.as_str(), l.owner.as_str())).collect::<Vec<_>>(),
        vec![(id.as_str(), "worker-a")]
    );
    let b = r.claim_run(&id, "worker-b", ttl).await.unwrap();
    assert_eq!(b.owner, "worker-b");
    assert_eq!(code(r.renew_lease(&id, "worker-a", ttl).await), "lease_lost");
    r.release_lease(&id, "worker-a").await.unwrap();
    assert_eq!(
        code(r.claim_run(&id, "worker-a", ttl).await),
        "lease_held",
        "releasing someone else's lease does nothing"
    );

    // Finished runs are not offered for recovery even with a lapsed lease.
    t.clock.advance(Span::seconds(31));
    assert_eq!(r.expired_runs(10).await.unwrap().len(), 1);
    r.update_run_status(&id, RunStatus::Completed, None, None).await.unwrap();
    assert!(r.expired_runs(10).await.unwrap().is_empty());
    r.release_lease(&id, "worker-b").await.unwrap();
    r.claim_run(&id, "worker-a", ttl).await.unwrap();
    assert_eq!(code(r.claim_run("missing", "worker-a", ttl).await), "not_found");
    assert_eq!(code(r.claim_run(&id, "worker-a", Duration::ZERO).await), "invalid_input");
}

async fn workers_claim_each_run_once_until_its_lease_lapses(t: &TestStore) {
    let r = t.store.runs.clone();
    let ttl = Duration::from_secs(60);
    let mut ids = Vec::new();
    for _ in 0..4 {
        t.clock.advance(Span::milliseconds(1));
        ids.push(r.create_run(run("coder")).await.unwrap().id);
    }
    r.update_run_status(&ids[0], RunStatus::Completed, None, None).await.unwrap();
    r.claim_run(&ids[2], "other", ttl).await.unwrap();
    let first = r.claim_next_run("w1", ttl).await.unwrap().unwrap();
    assert_eq!(
        (first.run_id.as_str(), first.owner.as_str()),
        (ids[1].as_str(), "w1"),
        "oldest unleased running run first"
    );
    assert_eq!(r.claim_next_run("w2", ttl).await.unwrap().unwrap().run_id, ids[3]);
    assert_eq!(r.claim_next_run("w2", ttl).await.unwrap(), None);
    t.clock.advance(Span::seconds(61));
    let mut recovered = vec![
        r.claim_next_run("w3", ttl).await.unwrap().unwrap().run_id,
        r.claim_next_run("w3", ttl).await.unwrap().unwrap().run_id,
        r.claim_next_run("w3", ttl).await.unwrap().unwrap().run_id,
    ];
    recovered.sort();
    let mut expected = vec![ids[1].clone(), ids[2].clone(), ids[3].clone()];
    expected.sort();
    assert_eq!(recovered, expected, "lapsed leases are claimable again");
    assert_eq!(r.claim_next_run("w3", ttl).await.unwrap(), None);

    // Concurrent claimers never share a run.
    let mut fresh = HashSet::new();
    for _ in 0..40 {
        fresh.insert(r.create_run(run("coder")).await.unwrap().id);
    }
    let mut tasks = Vec::new();
    for w in 0..4 {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(l) = r.claim_next_run(&format!("w{w}"), ttl).await.unwrap() {
                mine.push(l.run_id);
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.unwrap());
    }
    // A claimer racing another may see "nothing" early; a final sweep picks up any leftovers.
    while let Some(l) = r.claim_next_run("sweeper", ttl).await.unwrap() {
        claimed.push(l.run_id);
    }
    let unique: HashSet<_> = claimed.iter().cloned().collect();
    assert_eq!(unique.len(), claimed.len(), "no run claimed twice");
    assert_eq!(unique, fresh, "every run claimed");
}

/// A durable start creates its run and takes its first lease in one write, so another
/// server's takeover pass (`claim_next_run`) running at the same time never takes a run
/// between its creation and its lease (the start would then fail `lease_held`).
async fn a_run_created_leased_is_never_claimable_before_its_lease_lapses(t: &TestStore) {
    let r = t.store.runs.clone();
    let ttl = Duration::from_secs(60);
    let (created, lease) = r.create_leased_run(run("coder"), "starter", ttl).await.unwrap();
    assert_eq!(
        (lease.run_id.as_str(), lease.owner.as_str(), lease.expires_at, lease.generation),
        (created.id.as_str(), "starter", support::start_time() + Span::seconds(60), 1)
    );
    assert_eq!(r.get_run(&created.id).await.unwrap().unwrap().status, RunStatus::Running);
    assert_eq!(code(r.claim_run(&created.id, "other", ttl).await), "lease_held");
    let seq = r.append_events_fenced(&created.id, Some(&lease), vec![NewRunEvent::new("run.accepted", json!({}))]);
    assert_eq!(seq.await.unwrap(), 1..=1, "the first lease fences the journal");
    let taken = NewRun { id: Some(created.id.clone()), ..run("coder") };
    assert_eq!(code(r.create_leased_run(taken, "starter", ttl).await), "conflict");
    assert_eq!(code(r.create_leased_run(run("coder"), "starter", Duration::ZERO).await), "invalid_input");

    // Takeover passes race 30 starts: none of them ever gets a just-created run.
    let done = Arc::new(AtomicBool::new(false));
    let mut passes = Vec::new();
    for w in 0..2 {
        let (r, done) = (r.clone(), done.clone());
        passes.push(tokio::spawn(async move {
            let mut taken = Vec::new();
            while !done.load(Ordering::SeqCst) {
                if let Some(l) = r.claim_next_run(&format!("pass-{w}"), ttl).await.unwrap() {
                    taken.push(l.run_id);
                }
            }
            taken
        }));
    }
    let mut started = HashSet::from([created.id.clone()]);
    for _ in 0..30 {
        let (new, lease) = r.create_leased_run(run("coder"), "starter", ttl).await.unwrap();
        assert_eq!((lease.owner.as_str(), lease.generation), ("starter", 1));
        started.insert(new.id);
    }
    done.store(true, Ordering::SeqCst);
    for pass in passes {
        assert_eq!(pass.await.unwrap(), Vec::<String>::new(), "a takeover pass took a run being started");
    }

    // Once the starter is gone past its lease, the runs are taken over with the next fence.
    t.clock.advance(Span::seconds(61));
    let mut recovered = HashSet::new();
    while let Some(l) = r.claim_next_run("rescuer", ttl).await.unwrap() {
        assert_eq!(l.generation, 2);
        recovered.insert(l.run_id);
    }
    assert_eq!(recovered, started);
    assert_eq!(code(r.renew_lease(&created.id, "starter", ttl).await), "lease_lost");
}

/// A durable run's turn is appended to its session only while the run's lease holds: a server
/// that lost the run while paused cannot add its late answer to the conversation the new
/// holder continues.
async fn a_runs_messages_are_appended_only_while_its_lease_holds(t: &TestStore) {
    let (r, s) = (t.store.runs.clone(), &t.store.sessions);
    let ttl = Duration::from_secs(60);
    let session = s.create_session(session("coder")).await.unwrap();
    let (created, first) = r.create_leased_run(run("coder"), "a", ttl).await.unwrap();
    let say = |text: &str| vec![NewMessage::new(Message::user(text))];
    s.append_messages_fenced(&session.id, say("asked"), None, Some(&first)).await.unwrap();

    t.clock.advance(Span::seconds(61));
    let second = r.claim_next_run("b", ttl).await.unwrap().unwrap();
    assert_eq!((second.run_id.as_str(), second.generation), (created.id.as_str(), 2));
    let late = s.append_messages_fenced(&session.id, say("late answer from a"), None, Some(&first)).await;
    assert_eq!(code(late), "lease_lost");
    s.append_messages_fenced(&session.id, say("answer from b"), None, Some(&second)).await.unwrap();
    let stored = s.list_messages(&session.id, &PageRequest::first(10)).await.unwrap().items;
    let texts: Vec<_> = stored.iter().map(|m| m.message.text_content()).collect();
    assert_eq!(texts, ["asked", "answer from b"]);
}

async fn the_effect_ledger_lets_an_effect_happen_once(t: &TestStore) {
    let e = &t.store.effects;
    let key = "run-1/call_7:write_file";
    assert_eq!(e.get_effect(key).await.unwrap(), None);
    assert_eq!(e.record_effect_intent(key).await.unwrap(), EffectClaim::Fresh);
    match e.record_effect_intent(key).await.unwrap() {
        EffectClaim::Pending(p) => assert_eq!((p.status, p.result), (EffectStatus::Pending, None)),
        other => panic!("expected pending, got {other:?}"),
    }
    t.clock.advance(Span::seconds(2));
    let done = e.record_effect_result(key, json!({"bytes": 12})).await.unwrap();
    assert_eq!(
        (done.status, done.completed_at.map(|c| c - done.created_at)),
        (EffectStatus::Done, Some(Span::seconds(2)))
    );
    assert_eq!(e.record_effect_intent(key).await.unwrap(), EffectClaim::Done(done.clone()));
    assert_eq!(e.record_effect_result(key, json!({"bytes": 12})).await.unwrap(), done, "same result again is fine");
    assert_eq!(code(e.record_effect_result(key, json!({"bytes": 13})).await), "conflict");
    assert_eq!(e.get_effect(key).await.unwrap(), Some(done));
    assert_eq!(code(e.record_effect_result("never-intended", json!(1)).await), "not_found");
    assert_eq!(code(e.record_effect_intent("").await), "invalid_input");
}

async fn records_are_revisioned_documents_per_collection(t: &TestStore) {
    let r = t.store.records.clone();
    let created = r.put_record("tasks", "t1", json!({"status": "pending"}), Some(0)).await.unwrap();
    assert_eq!((created.revision, created.created_at), (1, support::start_time()));
    assert_eq!(code(r.put_record("tasks", "t1", json!({}), Some(0)).await), "conflict", "Some(0) only creates");
    t.clock.advance(Span::seconds(1));
    let updated = r.put_record("tasks", "t1", json!({"status": "running"}), Some(1)).await.unwrap();
    assert_eq!(
        (updated.revision, updated.created_at, updated.updated_at - updated.created_at),
        (2, created.created_at, Span::seconds(1))
    );
    assert_eq!(code(r.put_record("tasks", "t1", json!({"status": "lost"}), Some(1)).await), "conflict");
    assert_eq!(r.get_record("tasks", "t1").await.unwrap(), Some(updated.clone()));
    assert_eq!(r.get_record("missions", "t1").await.unwrap(), None, "collections are separate");
    assert_eq!(r.put_record("tasks", "t1", json!({"status": "done"}), None).await.unwrap().revision, 3);

    // Two writers holding the same revision: exactly one wins.
    let (a, b) = tokio::join!(
        r.put_record("tasks", "t1", json!({"by": "a"}), Some(3)),
        r.put_record("tasks", "t1", json!({"by": "b"}), Some(3))
    );
    assert_eq!([a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(), 1);
    assert_eq!(code(if a.is_ok() { b } else { a }), "conflict");
    assert_eq!(r.get_record("tasks", "t1").await.unwrap().unwrap().revision, 4);

    // A write that asks only for the new revision stores the same record.
    assert_eq!(r.put_record_revision("tasks", "t1", json!({"by": "c"}), Some(4)).await.unwrap(), 5);
    let read = r.get_record("tasks", "t1").await.unwrap().unwrap();
    assert_eq!((read.revision, read.value), (5, json!({"by": "c"})));
    assert_eq!(code(r.put_record_revision("tasks", "t1", json!({}), Some(4)).await), "conflict");
    let written = r.put_record("tasks", "t1", json!({"by": "a"}), Some(5)).await.unwrap();
    assert_eq!(r.get_record("tasks", "t1").await.unwrap(), Some(written));

    for i in 0..7 {
        t.clock.advance(Span::milliseconds(1));
        r.put_record("missions", &format!("m{i}"), json!({"i": i}), None).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut page = PageRequest::first(3);
    loop {
        let got = r.list_records("missions", &page).await.unwrap();
        seen.extend(got.items.iter().map(|x| x.id.clone()));
        match got.next {
            Some(c) => page = PageRequest::after(c, 3),
            None => break,
        }
    }
    assert_eq!(seen, (0..7).rev().map(|i| format!("m{i}")).collect::<Vec<_>>());
    assert_eq!(r.collections().await.unwrap(), vec!["missions".to_owned(), "tasks".to_owned()]);

    assert_eq!(code(r.delete_record("tasks", "t1", Some(1)).await), "conflict");
    assert!(r.delete_record("tasks", "t1", Some(6)).await.unwrap());
    assert!(!r.delete_record("tasks", "t1", None).await.unwrap());
    assert_eq!(r.collections().await.unwrap(), vec!["missions".to_owned()]);
    assert_eq!(code(r.put_record("tasks", "../x", json!({}), None).await), "invalid_input");

    // A value whose JSON passes the bound is refused whatever the write expects (a stale
    // revision too: its size is what the writer must fix); one just under it is stored.
    let over = json!("x".repeat(polpo_store::MAX_RECORD_BYTES));
    let m0 = r.get_record("missions", "m0").await.unwrap();
    for expected in [None, Some(0), Some(1), Some(9)] {
        assert_eq!(code(r.put_record("missions", "m0", over.clone(), expected).await), "invalid_input", "{expected:?}");
        assert_eq!(
            code(r.put_record("missions", "big", over.clone(), expected).await),
            "invalid_input",
            "{expected:?}"
        );
    }
    assert_eq!(r.get_record("missions", "m0").await.unwrap(), m0, "unchanged");
    assert_eq!(r.get_record("missions", "big").await.unwrap(), None, "not created");
    let under = json!("x".repeat(polpo_store::MAX_RECORD_BYTES - 2));
    let stored = r.put_record("missions", "big", under.clone(), Some(0)).await.unwrap();
    assert_eq!(
        r.get_record("missions", "big").await.unwrap().map(|b| (b.revision, b.value)),
        Some((stored.revision, under))
    );
}

/// A record written from JSON text ([`RecordStore::put_record_text`], a loop run's checkpoint)
/// is the record its value would have made: read, listed, revisioned, written over either way.
async fn records_written_as_text_are_the_records_their_values_make(t: &TestStore) {
    let r = t.store.records.clone();
    let value = json!({"status": "running", "n": 1.5, "text": "é \"quoted\" \u{1}", "trace": [{"kind": "loop:start"}]});
    let text = |v: &serde_json::Value| JsonText::of(v).unwrap();
    assert_eq!(r.put_record_text("runs", "r1", text(&value), Some(0)).await.unwrap(), 1);
    assert_eq!(
        code(r.put_record_text("runs", "r1", text(&json!({})), Some(0)).await),
        "conflict",
        "Some(0) only creates"
    );
    let read = r.get_record("runs", "r1").await.unwrap().unwrap();
    assert_eq!((read.revision, &read.value, read.created_at), (1, &value, support::start_time()));
    // The members' order is the text's.
    let keys: Vec<&String> = read.value.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["status", "n", "text", "trace"]);

    t.clock.advance(Span::seconds(1));
    let next = json!({"status": "done"});
    assert_eq!(code(r.put_record_text("runs", "r1", text(&next), Some(5)).await), "conflict", "a stale revision");
    assert_eq!(r.put_record_text("runs", "r1", text(&next), Some(1)).await.unwrap(), 2);
    let read = r.get_record("runs", "r1").await.unwrap().unwrap();
    assert_eq!((read.revision, &read.value, read.updated_at - read.created_at), (2, &next, Span::seconds(1)));
    let listed = r.list_records("runs", &PageRequest::first(10)).await.unwrap();
    assert_eq!(listed.items, vec![read.clone()]);

    // Written over by a value, and by text again.
    let by_value = r.put_record("runs", "r1", json!({"status": "again"}), Some(2)).await.unwrap();
    assert_eq!(r.get_record("runs", "r1").await.unwrap(), Some(by_value));
    assert_eq!(r.put_record_text("runs", "r1", text(&value), None).await.unwrap(), 4);
    assert_eq!(r.get_record("runs", "r1").await.unwrap().unwrap().value, value);
    assert_eq!(code(r.put_record_text("runs", "../x", text(&value), None).await), "invalid_input");
    assert_eq!(code(r.delete_record("runs", "r1", Some(3)).await), "conflict");
    assert!(r.delete_record("runs", "r1", Some(4)).await.unwrap());
    assert_eq!(r.get_record("runs", "r1").await.unwrap(), None);
}

async fn everything_survives_a_reopen(t: TestStore) -> TestStore {
    let sid = t
        .store
        .sessions
        .create_session(NewSession { owner: Some("key_a".into()), ..session("coder") })
        .await
        .unwrap()
        .id;
    t.store.sessions.append_messages(&sid, vec![NewMessage::new(Message::user("remember me"))], None).await.unwrap();
    let rid = t.store.runs.create_run(NewRun { session_id: Some(sid.clone()), ..run("coder") }).await.unwrap().id;
    for i in 0..3 {
        t.store.runs.append_event(&rid, "response.chunk", json!({"i": i})).await.unwrap();
    }
    t.store.runs.put_checkpoint(&rid, 3, json!({"state": "s"})).await.unwrap();
    t.store.runs.claim_run(&rid, "w", Duration::from_secs(60)).await.unwrap();
    t.store.effects.record_effect_intent("k").await.unwrap();
    t.store.records.put_record("tasks", "t1", json!({"a": 1}), None).await.unwrap();
    let record = t.store.records.get_record("tasks", "t1").await.unwrap();
    let text = JsonText::of(&json!({"b": [1, "two"], "a": null})).unwrap();
    t.store.records.put_record_text("tasks", "t2", text, None).await.unwrap();
    let from_text = t.store.records.get_record("tasks", "t2").await.unwrap();
    let mission = work_suite::a_mission_with_a_claimed_task(&t).await;
    let before = (
        t.store.sessions.get_session(&sid).await.unwrap(),
        t.store.runs.get_run(&rid).await.unwrap(),
        t.store.runs.events_after(&rid, 0, 100).await.unwrap(),
        t.store.runs.latest_checkpoint(&rid).await.unwrap(),
        t.store.effects.get_effect("k").await.unwrap(),
        t.store.sessions.list_messages(&sid, &PageRequest::default()).await.unwrap().items,
    );
    let t = t.reopen().await;
    // Not read since the reopen: taking its id must still find it, and leave it as it was.
    let taken = NewSession { id: Some(sid.clone()), ..session("other") };
    let again = t.store.sessions.create_session_with_messages(taken, vec![NewMessage::new(Message::user("x"))]).await;
    assert_eq!(code(again), "conflict", "a create never overwrites a stored session it has not read yet");
    let after = (
        t.store.sessions.get_session(&sid).await.unwrap(),
        t.store.runs.get_run(&rid).await.unwrap(),
        t.store.runs.events_after(&rid, 0, 100).await.unwrap(),
        t.store.runs.latest_checkpoint(&rid).await.unwrap(),
        t.store.effects.get_effect("k").await.unwrap(),
        t.store.sessions.list_messages(&sid, &PageRequest::default()).await.unwrap().items,
    );
    assert_eq!(before, after);
    assert_eq!(t.store.records.get_record("tasks", "t1").await.unwrap(), record);
    assert_eq!(t.store.records.get_record("tasks", "t2").await.unwrap(), from_text, "a record written as text too");
    assert_eq!(work_suite::a_mission_with_a_claimed_task_reread(&t, &mission.0).await, mission);
    assert_eq!(
        code(t.store.runs.claim_run(&rid, "other", Duration::from_secs(60)).await),
        "lease_held",
        "leases survive too"
    );
    assert_eq!(t.store.runs.append_event(&rid, "run.completed", json!({})).await.unwrap(), 4);
    t
}

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        conformance!(@backend file, polpo_store::StoreKind::File, $($test),*);
        conformance!(@backend sqlite, polpo_store::StoreKind::Sqlite, $($test),*);
        conformance!(@backend postgres, polpo_store::StoreKind::Postgres, $($test),*);
    };
    (@backend $backend:ident, $kind:expr, $($test:ident),*) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let t = crate::support::TestStore::new($kind).await;
                    super::$test(&t).await;
                    t.finish().await;
                }
            )*

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn everything_survives_a_reopen() {
                let t = crate::support::TestStore::new($kind).await;
                super::everything_survives_a_reopen(t).await.finish().await;
            }
        }
    };
}

conformance!(
    sessions_round_trip,
    sessions_keep_their_owner_and_list_by_it,
    sessions_created_and_appended_with_many_messages_read_back_whole,
    messages_keep_order_and_everything_stored_beside_them,
    pagination_has_no_duplicates_and_no_gaps,
    stale_revisions_and_taken_ids_conflict,
    runs_follow_their_state_machine_and_list_newest_first,
    run_event_sequence_is_gap_free_under_concurrent_appends,
    event_batches_are_atomic_and_numbered_in_order,
    checkpoints_keep_the_latest,
    leases_are_exclusive_until_they_expire,
    workers_claim_each_run_once_until_its_lease_lapses,
    a_run_created_leased_is_never_claimable_before_its_lease_lapses,
    a_runs_messages_are_appended_only_while_its_lease_holds,
    the_effect_ledger_lets_an_effect_happen_once,
    records_are_revisioned_documents_per_collection,
    records_written_as_text_are_the_records_their_values_make,
    tasks_round_trip_and_move_only_along_the_table,
    tasks_list_by_mission_and_status_page_by_page,
    a_batch_of_tasks_is_created_whole_or_not_at_all,
    ready_tasks_are_claimed_once_in_priority_order,
    concurrent_claimers_never_get_the_same_task,
    a_running_task_is_held_renewed_and_taken_over_once_its_claim_lapses,
    an_agents_tasks_are_claimed_only_up_to_its_limit_by_every_worker_together,
    concurrent_claimers_never_exceed_an_agents_limit,
    a_task_is_deleted_unless_worked_on_or_depended_on,
    missions_round_trip_and_move_only_along_their_table,
    learning_outbox_is_idempotent_and_candidates_are_proposed_once,
    memory_items_round_trip_with_revisions,
    memory_pages_are_stable_while_items_are_added,
    memory_lexical_search_ranks_matches_from_the_index,
    memory_vectors_are_compared_only_within_their_identity,
);
