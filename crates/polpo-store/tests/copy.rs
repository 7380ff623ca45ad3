//! `polpo db copy` between every pair of backends: everything arrives, counts and checksums
//! agree, a re-run is a no-op, and a record that changed since is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chrono::Duration as Span;
use polpo_core::message::Message;
use polpo_core::tasks::{Mission, Task};
use polpo_store::{
    CopyReport, NewMessage, NewRun, NewRunEvent, NewSession, PageRequest, RunStatus, SessionPatch, StoreKind,
    copy_store,
};
use serde_json::json;
use support::{TestStore, start_time};

async fn fill(t: &TestStore) {
    for i in 0..3 {
        t.clock.advance(Span::seconds(1));
        let s = t
            .store
            .sessions
            .create_session(NewSession { agent: "coder".into(), metadata: json!({"i": i}), ..Default::default() })
            .await
            .unwrap();
        for j in 0..(5 * i) {
            let m = NewMessage {
                reasoning: Some(format!("thinking {j}")),
                ..NewMessage::new(Message::user(format!("s{i} m{j}")))
            };
            t.store.sessions.append_messages(&s.id, vec![m], None).await.unwrap();
        }
        let r = t
            .store
            .runs
            .create_run(NewRun { agent: "coder".into(), session_id: Some(s.id.clone()), ..Default::default() })
            .await
            .unwrap();
        let events = (0..(40 * i)).map(|k| NewRunEvent::new("output.text.delta", json!({"k": k}))).collect::<Vec<_>>();
        if !events.is_empty() {
            t.store.runs.append_events(&r.id, events).await.unwrap();
            t.store.runs.put_checkpoint(&r.id, 7, json!({"turn": i})).await.unwrap();
        }
        if i == 2 {
            t.store.runs.update_run_status(&r.id, RunStatus::Failed, Some("boom".into()), None).await.unwrap();
        }
        t.store.effects.record_effect_intent(&format!("effect-{i}")).await.unwrap();
    }
    t.store.effects.record_effect_result("effect-1", json!({"ok": true})).await.unwrap();
    t.store
        .records
        .put_record("tasks", "t1", json!({"title": "write docs", "status": "pending"}), Some(0))
        .await
        .unwrap();
    t.store.records.put_record("tasks", "t1", json!({"title": "write docs", "status": "done"}), Some(1)).await.unwrap();
    t.store.records.put_record("missions", "m1", json!({"name": "launch"}), None).await.unwrap();

    let mission: Mission = serde_json::from_value(json!({
        "id": "", "name": "launch", "status": "active", "delays": [{"name": "soak", "duration": "PT1H"}],
        "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"
    }))
    .unwrap();
    let mission = t.store.missions.create_mission(mission).await.unwrap().mission.id;
    // Created in the same millisecond, the dependent task sorts before its dependency.
    let build =
        Task { id: "a-build".into(), mission_id: Some(mission.clone()), ..Task::new("", "build", "", start_time()) };
    let build = t.store.tasks.create_task(build).await.unwrap();
    let ship = Task {
        id: "b-ship".into(),
        depends_on: vec![build.task.id.clone()],
        ..Task::new("", "ship", "", start_time())
    };
    t.store.tasks.create_task(ship).await.unwrap();
    t.store.tasks.claim_ready("w", std::time::Duration::from_secs(60), 10, &Default::default()).await.unwrap();
}

fn counts(r: &CopyReport) -> (u64, u64, u64, u64, u64, u64, u64, u64) {
    (
        r.sessions.0 + r.sessions.1,
        r.messages,
        r.runs.0 + r.runs.1,
        r.events,
        r.effects.0 + r.effects.1,
        r.records.0 + r.records.1,
        r.missions.0 + r.missions.1,
        r.tasks.0 + r.tasks.1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_between_every_backend_verify_and_rerun_safely() {
    let file = TestStore::new(StoreKind::File).await;
    fill(&file).await;
    let sqlite = TestStore::new(StoreKind::Sqlite).await;
    let postgres = TestStore::new(StoreKind::Postgres).await;
    let back_to_file = TestStore::new(StoreKind::File).await;

    let first = copy_store(&file.store, &sqlite.store).await.unwrap();
    assert_eq!(counts(&first), (3, 15, 3, 120, 3, 2, 1, 2));
    assert_eq!((first.sessions.0, first.runs.0, first.effects.0), (3, 3, 3), "all written the first time");
    let second = copy_store(&sqlite.store, &postgres.store).await.unwrap();
    let third = copy_store(&postgres.store, &back_to_file.store).await.unwrap();
    assert_eq!(first, second, "same records, same checksum, whatever the backends");
    assert_eq!(first, third);

    let again = copy_store(&file.store, &sqlite.store).await.unwrap();
    assert_eq!(
        (again.sessions, again.runs, again.effects, again.records, again.missions, again.tasks),
        ((0, 3), (0, 3), (0, 3), (0, 2), (0, 1), (0, 2)),
        "a re-run writes nothing"
    );
    assert_eq!(again.checksum, first.checksum);

    // The round trip is faithful down to the message.
    let s =
        file.store.sessions.list_sessions(&Default::default(), &PageRequest::first(1)).await.unwrap().items.remove(0);
    let original = file.store.sessions.list_messages(&s.id, &PageRequest::default()).await.unwrap();
    let copied = back_to_file.store.sessions.list_messages(&s.id, &PageRequest::default()).await.unwrap();
    assert_eq!(original.items, copied.items);

    // A source that changed since the last copy is refused, not silently merged.
    file.store
        .sessions
        .update_session(&s.id, SessionPatch { title: Some("changed".into()), metadata: None }, None)
        .await
        .unwrap();
    assert_eq!(copy_store(&file.store, &sqlite.store).await.unwrap_err().code(), "conflict");

    for t in [file, sqlite, postgres, back_to_file] {
        t.finish().await;
    }
}
