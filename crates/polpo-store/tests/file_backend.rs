//! What only the file backend has: its on-disk layout, its process lock, and its recovery
//! from journals torn by a crash.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use polpo_core::message::Message;
use polpo_store::{
    Cursor, FileStore, NewMessage, NewRun, NewSession, PageRequest, RunFilter, RunStatus, SessionFilter, StoreKind,
    SystemClock, open_store,
};
use serde_json::{Value, json};

async fn open(dir: &Path) -> polpo_store::Store {
    open_store(StoreKind::File, dir, None, Arc::new(SystemClock)).await.unwrap()
}

/// The text of each message of session `id` (first page), in order.
async fn texts(store: &polpo_store::Store, id: &str) -> Vec<String> {
    let page = store.sessions.list_messages(id, &PageRequest::default()).await.unwrap();
    page.items.iter().map(|m| m.message.text_content()).collect()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn state_is_plain_json_files_under_dot_polpo() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path()).await;
    let s = store.sessions.create_session(NewSession { agent: "coder".into(), ..Default::default() }).await.unwrap();
    store
        .sessions
        .append_messages(
            &s.id,
            vec![NewMessage::new(Message::user("hi")), NewMessage::new(Message::assistant("hello"))],
            None,
        )
        .await
        .unwrap();
    let r = store.runs.create_run(NewRun { agent: "coder".into(), ..Default::default() }).await.unwrap();
    store.runs.append_event(&r.id, "run.started", json!({})).await.unwrap();
    store.runs.put_checkpoint(&r.id, 1, json!({"turn": 0})).await.unwrap();
    store.runs.claim_run(&r.id, "me", std::time::Duration::from_secs(60)).await.unwrap();
    store.effects.record_effect_intent("k").await.unwrap();
    // Appends write only the journal; closing the store brings session.json up to date.
    drop(store);

    let polpo = root.path().join(".polpo");
    let session: Value = serde_json::from_str(
        &std::fs::read_to_string(polpo.join("sessions").join(&s.id).join("session.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (session["agent"].clone(), session["messageCount"].clone(), session["title"].clone()),
        (json!("coder"), json!(2), json!("hi"))
    );
    let messages = lines(&polpo.join("sessions").join(&s.id).join("messages.jsonl"));
    assert_eq!(messages.iter().map(|m| m["role"].clone()).collect::<Vec<_>>(), vec![json!("user"), json!("assistant")]);
    let run_dir = polpo.join("runs").join(&r.id);
    for file in ["run.json", "events.jsonl", "checkpoint.json", "lease.json"] {
        assert!(run_dir.join(file).is_file(), "{file}");
    }
    assert_eq!(lines(&run_dir.join("events.jsonl"))[0]["type"], json!("run.started"));
    assert_eq!(std::fs::read_dir(polpo.join("effects")).unwrap().count(), 1);
    assert!(polpo.join(".runtime/store.lock").is_file());
}

#[tokio::test]
async fn a_second_opener_gets_store_locked_until_the_first_closes() {
    let root = tempfile::tempdir().unwrap();
    let first = open(root.path()).await;
    let err = open_store(StoreKind::File, root.path(), None, Arc::new(SystemClock)).await.unwrap_err();
    assert_eq!(err.code(), "store_locked");
    assert!(err.to_string().contains("locked by another polpo process"), "{err}");
    drop(first);
    open(root.path()).await;
}

#[tokio::test]
async fn journals_torn_by_a_crash_are_cut_and_headers_reconciled() {
    let root = tempfile::tempdir().unwrap();
    let polpo = root.path().join(".polpo");
    let (sid, rid, old_header) = {
        let store = open(root.path()).await;
        let s = store.sessions.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap();
        store.sessions.append_messages(&s.id, vec![NewMessage::new(Message::user("one"))], None).await.unwrap();
        let header = std::fs::read(polpo.join("sessions").join(&s.id).join("session.json")).unwrap();
        store.sessions.append_messages(&s.id, vec![NewMessage::new(Message::user("two"))], None).await.unwrap();
        let r = store.runs.create_run(NewRun { agent: "a".into(), ..Default::default() }).await.unwrap();
        store.runs.append_event(&r.id, "run.started", json!({})).await.unwrap();
        store.runs.append_event(&r.id, "response.chunk", json!({"t": "x"})).await.unwrap();
        (s.id, r.id, header)
    };
    // A crash between the journal append and the header rewrite, and two half-written lines.
    let session_dir = polpo.join("sessions").join(&sid);
    std::fs::write(session_dir.join("session.json"), old_header).unwrap();
    std::fs::write(session_dir.join(".session.json.tmp-1-1"), b"{\"half").unwrap();
    let tear = |p: &Path| std::fs::OpenOptions::new().append(true).open(p).unwrap().write_all(b"{\"torn\":").unwrap();
    tear(&session_dir.join("messages.jsonl"));
    tear(&polpo.join("runs").join(&rid).join("events.jsonl"));

    let store = open(root.path()).await;
    let session = store.sessions.get_session(&sid).await.unwrap().unwrap();
    assert_eq!((session.message_count, session.revision), (2, 3), "the journal is the truth");
    assert!(!session_dir.join(".session.json.tmp-1-1").exists(), "a temp file left by a crash is cleared");
    assert_eq!(store.runs.events_after(&rid, 0, 10).await.unwrap().len(), 2);
    assert_eq!(store.runs.append_event(&rid, "run.completed", json!({})).await.unwrap(), 3);
    store.sessions.append_messages(&sid, vec![NewMessage::new(Message::user("three"))], Some(3)).await.unwrap();
    assert_eq!(texts(&store, &sid).await, ["one", "two", "three"]);
    assert_eq!(lines(&polpo.join("runs").join(&rid).join("events.jsonl")).len(), 3, "every line on disk parses again");
}

#[tokio::test]
async fn after_a_crash_the_session_header_catches_up_with_the_journal() {
    let root = tempfile::tempdir().unwrap();
    let head = |sid: &str| root.path().join(".polpo/sessions").join(sid).join("session.json");
    let (sid, acknowledged) = {
        let store = open(root.path()).await;
        let s = store.sessions.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap();
        let header_at_create = std::fs::read(head(&s.id)).unwrap();
        let turn = vec![NewMessage::new(Message::assistant("welcome")), NewMessage::new(Message::user("plan a trip"))];
        store.sessions.append_messages(&s.id, turn, None).await.unwrap();
        let last = store
            .sessions
            .append_messages(&s.id, vec![NewMessage::new(Message::assistant("sure"))], None)
            .await
            .unwrap();
        drop(store);
        // A crash before any header rewrite: only the journal knows about the appends.
        std::fs::write(head(&s.id), header_at_create).unwrap();
        (s.id, last.session)
    };
    let store = open(root.path()).await;
    let session = store.sessions.get_session(&sid).await.unwrap().unwrap();
    assert_eq!((session.message_count, session.title.as_str()), (3, "plan a trip"));
    assert_eq!(session.updated_at, acknowledged.updated_at);
    assert!(session.revision >= acknowledged.revision, "a revision never goes back: {session:?}");
    let stale = store.sessions.append_messages(&sid, vec![NewMessage::new(Message::user("x"))], Some(1)).await;
    assert_eq!(stale.unwrap_err().code(), "conflict", "a write conditional on the create-time revision");
    let appended = store.sessions.append_messages(&sid, vec![NewMessage::new(Message::user("y"))], None).await.unwrap();
    assert_eq!(appended.messages[0].seq, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_to_one_session_stay_gap_free_while_other_sessions_write() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path()).await;
    let shared = store.sessions.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let (sessions, shared) = (store.sessions.clone(), shared.id.clone());
            tokio::spawn(async move {
                let own =
                    sessions.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap();
                for i in 0..5 {
                    let m = |s: String| vec![NewMessage::new(Message::user(s))];
                    sessions.append_messages(&shared, m(format!("{t}.{i}")), None).await.unwrap();
                    sessions.append_messages(&own.id, m(format!("{i}")), None).await.unwrap();
                }
                own.id
            })
        })
        .collect();
    let mut own = Vec::new();
    for t in tasks {
        own.push(t.await.unwrap());
    }
    drop(store);
    let store = open(root.path()).await;
    let all = store.sessions.list_messages(&shared.id, &PageRequest::first(100)).await.unwrap().items;
    assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=80).collect::<Vec<u64>>());
    let session = store.sessions.get_session(&shared.id).await.unwrap().unwrap();
    assert_eq!((session.message_count, session.revision), (80, 81), "a clean close leaves exact headers");
    for id in own {
        assert_eq!(texts(&store, &id).await, ["0", "1", "2", "3", "4"]);
    }
}

/// Concurrent creates share their fsyncs, yet each is answered on its own: a session whose
/// directory cannot be made, or whose id is taken (on disk, or by a create at the same time),
/// fails alone, and its id can be created again once nothing stands in the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_succeed_or_fail_each_on_its_own() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path()).await;
    let new = |id: &str| NewSession { id: Some(id.into()), agent: "a".into(), ..Default::default() };
    store.sessions.create_session(new("taken")).await.unwrap();
    // A file where the session's directory must go: its files cannot be written.
    let blocked = root.path().join(".polpo/sessions/blocked");
    std::fs::write(&blocked, b"in the way").unwrap();

    let fresh: Vec<String> = (0..60).map(|i| format!("s-{i:02}")).collect();
    let mut ids = fresh.clone();
    ids.extend(["dup", "dup", "taken", "blocked"].map(String::from));
    let creates: Vec<_> = ids
        .iter()
        .map(|id| {
            let (sessions, new) = (store.sessions.clone(), new(id));
            let first = vec![NewMessage::new(Message::user(format!("first of {id}")))];
            tokio::spawn(async move { sessions.create_session_with_messages(new, first).await })
        })
        .collect();
    let mut answers = Vec::new();
    for (id, create) in ids.iter().zip(creates) {
        answers
            .push((id.clone(), create.await.unwrap().map(|c| (c.session.id, c.messages.len())).map_err(|e| e.code())));
    }
    let fresh_answers = &answers[..fresh.len()];
    assert!(fresh_answers.iter().all(|(id, a)| *a == Ok((id.clone(), 1))), "{answers:?}");
    let of = |wanted: &str| answers.iter().filter(|(id, _)| id == wanted).map(|(_, a)| a.clone()).collect::<Vec<_>>();
    let mut dup = of("dup");
    dup.sort();
    assert_eq!(dup, [Ok(("dup".into(), 1)), Err("conflict")]);
    assert_eq!(of("taken"), [Err("conflict")]);
    assert_eq!(of("blocked"), [Err("io_error")]);

    std::fs::remove_file(&blocked).unwrap();
    let retried = store.sessions.create_session(new("blocked")).await.unwrap();
    assert_eq!(retried.id, "blocked", "a failed create gave its id back");
    drop(store);

    let store = open(root.path()).await;
    let mut listed = listed(&store, 100, &SessionFilter::default()).await;
    listed.sort();
    let mut expected = fresh.clone();
    expected.extend(["blocked", "dup", "taken"].map(String::from));
    expected.sort();
    assert_eq!(listed, expected);
    for id in fresh.iter().chain([&"dup".to_owned()]) {
        assert_eq!(texts(&store, id).await, [format!("first of {id}")]);
    }
}

#[tokio::test]
async fn open_store_picks_the_backend_from_settings() {
    let root = tempfile::tempdir().unwrap();
    let sqlite =
        open_store(StoreKind::parse("sqlite").unwrap(), root.path(), None, Arc::new(SystemClock)).await.unwrap();
    sqlite.sessions.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap();
    assert!(root.path().join(".polpo/polpo.db").is_file());
    let err = open_store(StoreKind::Postgres, root.path(), None, Arc::new(SystemClock)).await.unwrap_err();
    assert_eq!(err.code(), "store_config");
    assert_eq!(StoreKind::parse("mongo").unwrap_err().code(), "store_config");
    FileStore::open(&root.path().join(".polpo"), Arc::new(SystemClock)).await.unwrap();
}

/// Every item `list` returns, paging `n` at a time by cursor (no page longer than `n`).
async fn every_page<T, Fut>(n: u32, list: impl Fn(PageRequest) -> Fut) -> Vec<T>
where
    Fut: std::future::Future<Output = polpo_store::Page<T>>,
{
    let (mut items, mut page) = (Vec::new(), PageRequest::first(n));
    loop {
        let found = list(page).await;
        assert!(found.items.len() <= n as usize);
        items.extend(found.items);
        match found.next {
            Some(cursor) => page = PageRequest::after(cursor, n),
            None => return items,
        }
    }
}

/// Ids of every session a listing returns, paging `n` at a time by cursor.
async fn listed(store: &polpo_store::Store, n: u32, filter: &SessionFilter) -> Vec<String> {
    let sessions = every_page(n, |page| async move { store.sessions.list_sessions(filter, &page).await.unwrap() });
    sessions.await.into_iter().map(|s| s.id).collect()
}

#[tokio::test]
async fn a_crash_between_the_index_append_and_the_session_files_lists_nothing_half_written() {
    let root = tempfile::tempdir().unwrap();
    let polpo = root.path().join(".polpo");
    let (older, newer) = {
        let store = open(root.path()).await;
        let mk = || store.sessions.create_session(NewSession { agent: "a".into(), ..Default::default() });
        let older = mk().await.unwrap();
        (older, mk().await.unwrap())
    };
    // What a kill leaves after the key of `ghost` was appended: its directory without a header,
    // and a second key torn mid-line.
    let log = polpo.join(".index/sessions.log");
    let ghost_ms = newer.created_at.timestamp_millis() + 1;
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(f, "{}", json!({"t": ghost_ms, "id": "ghost", "add": {"agent": "a"}})).unwrap();
    f.write_all(b"{\"t\":1,\"id\":\"torn").unwrap();
    std::fs::create_dir(polpo.join("sessions/ghost")).unwrap();
    std::fs::write(polpo.join("sessions/ghost/messages.jsonl"), b"").unwrap();

    let store = open(root.path()).await;
    let both = [newer.id.clone(), older.id.clone()];
    assert_eq!(listed(&store, 1, &SessionFilter::default()).await, both, "the half-written session is skipped");
    assert_eq!(store.sessions.get_session("ghost").await.unwrap(), None);
    let ghost = polpo_store::Session { id: "ghost".into(), ..newer.clone() };
    store.sessions.import_session(&ghost, &[]).await.unwrap();
    let third = store.sessions.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap();
    let all = [third.id.clone(), "ghost".to_owned(), newer.id.clone(), older.id.clone()];
    let again = listed(&store, 2, &SessionFilter::default()).await;
    assert_eq!(again, all, "the id is usable again, listed once at its own time");
    drop(store);
    let store = open(root.path()).await;
    assert_eq!(listed(&store, 3, &SessionFilter::default()).await, all);
}

#[tokio::test]
async fn open_reads_no_session_and_a_store_without_the_index_builds_it() {
    let root = tempfile::tempdir().unwrap();
    let polpo = root.path().join(".polpo");
    let (a, b) = {
        let store = open(root.path()).await;
        let mk = |agent: &str| store.sessions.create_session(NewSession { agent: agent.into(), ..Default::default() });
        let a = mk("a").await.unwrap();
        (a, mk("b").await.unwrap())
    };
    std::fs::remove_dir_all(polpo.join(".index")).unwrap();
    let store = open(root.path()).await;
    let rebuilt = listed(&store, 20, &SessionFilter::default()).await;
    assert_eq!(rebuilt, [b.id.clone(), a.id.clone()], "rebuilt from the session directories");
    let only_b = SessionFilter { agent: Some("b".into()), ..Default::default() };
    let page = store.sessions.list_sessions(&only_b, &PageRequest::first(20)).await.unwrap();
    assert_eq!(page.items.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [b.id.as_str()]);
    drop(store);

    // A session file that does not parse no longer stops the store from opening: only reading
    // that session fails.
    std::fs::write(polpo.join("sessions").join(&a.id).join("session.json"), b"{").unwrap();
    let store = open(root.path()).await;
    assert_eq!(store.sessions.get_session(&b.id).await.unwrap().unwrap(), b);
    assert_eq!(store.sessions.get_session(&a.id).await.unwrap_err().code(), "store_corrupt");
}

#[tokio::test]
async fn lists_page_through_the_sorted_session_index_and_its_journal() {
    let root = tempfile::tempdir().unwrap();
    let index = root.path().join(".polpo/.index");
    let store = open(root.path()).await;
    let mut sessions = Vec::new();
    for i in 0..300 {
        // One key longer than the index's read chunk.
        let user = (i == 150).then(|| "u".repeat(40_000));
        let new = NewSession { agent: ["a", "b"][i % 2].into(), user, ..Default::default() };
        sessions.push(store.sessions.create_session(new).await.unwrap());
    }
    let journal = std::fs::read(index.join("sessions.log")).unwrap();
    drop(store);
    assert_eq!(std::fs::read(index.join("sessions.log")).unwrap(), b"", "a close compacted the journal");
    assert_eq!(lines(&index.join("sessions.sorted")).len(), 300);
    // A crash between writing the sorted file and emptying the journal: replaying the journal
    // over keys that already hold it changes nothing.
    std::fs::write(index.join("sessions.log"), journal).unwrap();

    let store = open(root.path()).await;
    for s in sessions.drain(100..105) {
        assert!(store.sessions.delete_session(&s.id).await.unwrap());
    }
    for _ in 0..5 {
        let new = NewSession { agent: "b".into(), ..Default::default() };
        sessions.push(store.sessions.create_session(new).await.unwrap());
    }
    sessions.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.id.clone())));
    let ids = |agent: Option<&str>| -> Vec<String> {
        sessions.iter().filter(|s| agent.is_none_or(|a| s.agent == a)).map(|s| s.id.clone()).collect()
    };
    let only_b = SessionFilter { agent: Some("b".into()), ..Default::default() };
    assert_eq!(listed(&store, 7, &SessionFilter::default()).await, ids(None));
    assert_eq!(listed(&store, 13, &only_b).await, ids(Some("b")));
    drop(store);
    assert_eq!(lines(&index.join("sessions.sorted")).len(), 300, "compacted again: 300 replayed + 10 lines");
    let store = open(root.path()).await;
    assert_eq!(listed(&store, 7, &SessionFilter::default()).await, ids(None));
    assert_eq!(listed(&store, 13, &only_b).await, ids(Some("b")));
}

#[tokio::test]
async fn a_bounded_session_cache_drops_idle_sessions_without_changing_what_they_read() {
    use polpo_store::SessionStore;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(".polpo");
    let store = FileStore::open_with_cache(&dir, Arc::new(SystemClock), 2).await.unwrap();
    let mut appended = Vec::new();
    for i in 0..5 {
        let s = store.create_session(NewSession { agent: "coder".into(), ..Default::default() }).await.unwrap();
        let turn =
            vec![NewMessage::new(Message::user(format!("question {i}"))), NewMessage::new(Message::assistant("ok"))];
        appended.push(store.append_messages(&s.id, turn, None).await.unwrap().session);
    }
    // The first session left the cache when the third came in: its header was written then.
    let header: Value = serde_json::from_slice(
        &std::fs::read(dir.join("sessions").join(&appended[0].id).join("session.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(header["messageCount"], json!(2), "{header}");
    for (i, s) in appended.iter().enumerate() {
        let read = store.get_session(&s.id).await.unwrap().unwrap();
        assert_eq!((read.revision, read.message_count, &read.title), (s.revision, 2, &s.title));
        // The revision a client saw before the session was dropped still writes.
        let more = vec![NewMessage::new(Message::user(format!("and {i}?")))];
        let after = store.append_messages(&s.id, more, Some(s.revision)).await.unwrap();
        assert_eq!(after.messages[0].seq, 3);
        let page = store.list_messages(&s.id, &PageRequest::default()).await.unwrap();
        let texts: Vec<String> = page.items.iter().map(|m| m.message.text_content()).collect();
        assert_eq!(texts, [format!("question {i}"), "ok".into(), format!("and {i}?")]);
    }
}

#[tokio::test]
async fn record_collections_read_on_first_use_after_a_reopen_show_every_record() {
    let root = tempfile::tempdir().unwrap();
    let store = open(root.path()).await;
    for (collection, id) in [("notes", "a"), ("notes", "b"), ("approvals", "x"), ("scratch", "gone")] {
        store.records.put_record(collection, id, json!({"id": id}), None).await.unwrap();
    }
    assert!(store.records.delete_record("scratch", "gone", None).await.unwrap());
    drop(store);
    let store = open(root.path()).await;
    let notes = store.records.list_records("notes", &PageRequest::default()).await.unwrap();
    assert_eq!(notes.items.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["b", "a"]);
    let x = store.records.get_record("approvals", "x").await.unwrap().unwrap();
    assert_eq!(x.value, json!({"id": "x"}));
    assert_eq!(store.records.put_record("approvals", "x", json!({"ok": true}), Some(1)).await.unwrap().revision, 2);
    assert_eq!(store.records.collections().await.unwrap(), ["approvals", "notes"]);
    assert!(store.records.get_record("../notes", "a").await.unwrap().is_none());
}

/// Every id of `collection`, newest first, read in pages of `size`.
async fn record_ids(store: &dyn polpo_store::RecordStore, collection: &str, size: u32) -> Vec<String> {
    let records = every_page(size, |page| async move { store.list_records(collection, &page).await.unwrap() });
    records.await.into_iter().map(|r| r.id).collect()
}

#[tokio::test]
async fn records_past_the_cache_and_collections_past_the_open_orders_read_list_and_write_as_before() {
    use polpo_store::RecordStore;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(".polpo");
    let clock = Arc::new(polpo_store::ManualClock::new(chrono::Utc::now()));
    // A cache of two records: every record below is read back from its file at least once.
    let store = FileStore::open_with_cache(&dir, clock.clone(), 2).await.unwrap();
    let notes: Vec<String> = (0..12).map(|i| format!("n{i:02}")).collect();
    for id in &notes {
        clock.advance(chrono::Duration::milliseconds(1));
        store.put_record("notes", id, json!({"id": id}), Some(0)).await.unwrap();
    }
    // More collections than keep their order open at once.
    for c in 0..70 {
        store.put_record(&format!("c{c:02}"), "only", json!({"c": c}), None).await.unwrap();
    }
    let newest_first: Vec<String> = notes.iter().rev().cloned().collect();
    assert_eq!(record_ids(&store, "notes", 5).await, newest_first);
    // A record no longer held is written over its revision on disk, and refused at another.
    assert_eq!(store.put_record("notes", "n00", json!({"v": 2}), Some(1)).await.unwrap().revision, 2);
    assert!(store.put_record("notes", "n01", json!({"v": 2}), Some(2)).await.is_err(), "n01 is at revision 1");
    assert!(store.put_record("notes", "n02", json!({}), Some(0)).await.is_err(), "n02 exists");
    assert!(store.delete_record("notes", "n05", Some(1)).await.unwrap());
    assert!(store.get_record("notes", "n05").await.unwrap().is_none());
    for c in 0..70 {
        let collection = format!("c{c:02}");
        assert_eq!(record_ids(&store, &collection, 20).await, ["only"]);
        assert_eq!(store.get_record(&collection, "only").await.unwrap().unwrap().value, json!({"c": c}));
    }
    drop(store);
    // A key no record can have (its order edited by hand) names no file and is not listed.
    let mut log = std::fs::OpenOptions::new().append(true).open(dir.join("records/notes/.order.log")).unwrap();
    writeln!(log, r#"{{"t":1,"id":"../../escape","add":{{}}}}"#).unwrap();
    drop(log);
    let at = "1970-01-01T00:00:00.001Z";
    let outside = json!({"collection": "notes", "id": "../../escape", "revision": 1, "value": {}, "createdAt": at, "updatedAt": at});
    std::fs::write(dir.join("escape.json"), outside.to_string()).unwrap();

    let store = FileStore::open_with_cache(&dir, clock.clone(), 2).await.unwrap();
    let kept: Vec<String> = newest_first.iter().filter(|id| *id != "n05").cloned().collect();
    assert_eq!(record_ids(&store, "notes", 4).await, kept);
    let n00 = store.get_record("notes", "n00").await.unwrap().unwrap();
    assert_eq!((n00.revision, n00.value), (2, json!({"v": 2})));
    // A record whose file is gone (a crash between its key and its file) is not listed, and
    // can be written again: listed once.
    std::fs::remove_file(dir.join("records/notes/n07.json")).unwrap();
    let kept: Vec<String> = kept.into_iter().filter(|id| id != "n07").collect();
    assert_eq!(record_ids(&store, "notes", 3).await, kept);
    clock.advance(chrono::Duration::milliseconds(1));
    store.put_record("notes", "n07", json!({"again": true}), Some(0)).await.unwrap();
    let again: Vec<String> = std::iter::once("n07".to_owned()).chain(kept.iter().cloned()).collect();
    assert_eq!(record_ids(&store, "notes", 3).await, again);
    drop(store);

    // A store written before collections had their listing order builds it on first use.
    for name in [".order.sorted", ".order.log"] {
        std::fs::remove_file(dir.join("records/notes").join(name)).unwrap();
    }
    let store = FileStore::open_with_cache(&dir, clock, 2).await.unwrap();
    assert_eq!(record_ids(&store, "notes", 5).await, again);
}

/// The ids of a page of runs (newest first).
async fn run_ids(store: &polpo_store::Store, filter: &RunFilter, page: &PageRequest) -> (Vec<String>, Option<Cursor>) {
    let page = store.runs.list_runs(filter, page).await.unwrap();
    (page.items.iter().map(|r| r.id.clone()).collect(), page.next)
}

#[tokio::test]
async fn open_reads_only_unfinished_runs_which_stay_claimable_and_lists_page_through_the_run_index() {
    let root = tempfile::tempdir().unwrap();
    let polpo = root.path().join(".polpo");
    let (done, open_runs, ttl) = {
        let store = open(root.path()).await;
        let mk = |agent: &str| store.runs.create_run(NewRun { agent: agent.into(), ..Default::default() });
        let mut done = Vec::new();
        for i in 0..5 {
            let r = mk(if i % 2 == 0 { "even" } else { "odd" }).await.unwrap();
            store.runs.append_event(&r.id, "run.started", json!({})).await.unwrap();
            store.runs.update_run_status(&r.id, RunStatus::Completed, None, None).await.unwrap();
            done.push(r.id);
        }
        let running = mk("even").await.unwrap();
        let paused = mk("odd").await.unwrap();
        store.runs.update_run_status(&paused.id, RunStatus::Paused, None, None).await.unwrap();
        let ttl = std::time::Duration::from_secs(60);
        store.runs.claim_run(&running.id, "dead-server", ttl).await.unwrap();
        // An event appended after the header was last written: reconciled from the journal.
        store.runs.append_event(&running.id, "model.called", json!({})).await.unwrap();
        (done, vec![running.id, paused.id], ttl)
    };
    // Only the unfinished runs are named in the open-run journal (after compaction at most
    // one line per run that ever opened).
    let named: Vec<String> = lines(&polpo.join(".index").join("runs.open"))
        .iter()
        .filter(|l| l["open"] == json!(true))
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(open_runs.iter().all(|id| named.contains(id)), "{named:?}");
    // A finished run's header that no longer parses does not stop the store from opening:
    // finished runs are not read at open, only when asked for.
    let header = polpo.join("runs").join(&done[0]).join("run.json");
    let intact = std::fs::read(&header).unwrap();
    std::fs::write(&header, b"{").unwrap();
    let store = open(root.path()).await;
    assert_eq!(store.runs.get_run(&done[0]).await.unwrap_err().code(), "store_corrupt");
    std::fs::write(&header, intact).unwrap();
    let running = store.runs.get_run(&open_runs[0]).await.unwrap().unwrap();
    assert_eq!((running.status, running.last_seq), (RunStatus::Running, 1));
    assert_eq!(store.runs.get_run(&done[1]).await.unwrap().unwrap().status, RunStatus::Completed);

    // Unfinished runs by status come from memory; the rest through the run index.
    let by = |status| RunFilter { status: Some(status), ..Default::default() };
    assert_eq!(run_ids(&store, &by(RunStatus::Paused), &PageRequest::first(20)).await.0, [open_runs[1].clone()]);
    assert_eq!(run_ids(&store, &by(RunStatus::Running), &PageRequest::first(20)).await.0, [open_runs[0].clone()]);
    let even = RunFilter { agent: Some("even".into()), ..Default::default() };
    assert_eq!(
        run_ids(&store, &even, &PageRequest::first(20)).await.0,
        [open_runs[0].as_str(), &done[4], &done[2], &done[0]]
    );
    let completed = by(RunStatus::Completed);
    let (first, cursor) = run_ids(&store, &completed, &PageRequest::first(2)).await;
    assert_eq!(first, [done[4].as_str(), &done[3]]);
    let (second, cursor) = run_ids(&store, &completed, &PageRequest::after(cursor.unwrap(), 2)).await;
    assert_eq!(second, [done[2].as_str(), &done[1]]);
    let (last, cursor) = run_ids(&store, &completed, &PageRequest::after(cursor.unwrap(), 2)).await;
    assert_eq!((last, cursor), (vec![done[0].clone()], None));

    // The run the dead server held is taken over once its lease lapses; the paused one is not.
    assert!(store.runs.claim_next_run("me", ttl).await.unwrap().is_none(), "lease still live");
    store.runs.release_lease(&open_runs[0], "dead-server").await.unwrap();
    assert_eq!(store.runs.claim_next_run("me", ttl).await.unwrap().unwrap().run_id, open_runs[0]);
    store.runs.update_run_status(&open_runs[0], RunStatus::Completed, None, None).await.unwrap();
    drop(store);
    let store = open(root.path()).await;
    let running = run_ids(&store, &by(RunStatus::Running), &PageRequest::first(20)).await.0;
    assert!(running.is_empty(), "{running:?}");
}
