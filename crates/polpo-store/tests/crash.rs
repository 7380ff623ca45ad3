//! Crash tests: a child process (this test binary, re-executed in writer mode) appends run
//! events and session messages and prints each acknowledged write; the parent SIGKILLs it at an
//! arbitrary point, reopens the store and checks that every acknowledged write is there, the
//! journals are gap-free, and writing continues where it stopped. Three rounds per backend, so
//! later rounds recover data that earlier kills left behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use polpo_core::message::Message;
use polpo_store::{NewMessage, NewRun, NewSession, PageRequest, SessionFilter, Store, StoreKind, SystemClock};
use serde_json::json;
use support::Location;

const CHILD_ENV: &str = "POLPO_STORE_CRASH_WRITER";
const RUN: &str = "crash-run";
const SESSION: &str = "crash-session";

fn spec(kind: StoreKind, location: &Location) -> String {
    match (kind, location) {
        (StoreKind::File, Location::Path(p)) => format!("file:{}", p.display()),
        (StoreKind::Sqlite, Location::Path(p)) => format!("sqlite:{}", p.display()),
        (StoreKind::Postgres, Location::Schema(s)) => format!("postgres:{s}"),
        _ => unreachable!(),
    }
}

fn parse_spec(spec: &str) -> (StoreKind, Location) {
    let (kind, rest) = spec.split_once(':').unwrap();
    match kind {
        "file" => (StoreKind::File, Location::Path(rest.into())),
        "sqlite" => (StoreKind::Sqlite, Location::Path(rest.into())),
        _ => (StoreKind::Postgres, Location::Schema(rest.into())),
    }
}

async fn open(kind: StoreKind, location: &Location) -> Store {
    support::open_at(kind, location, Arc::new(SystemClock)).await.unwrap()
}

/// Writer mode: does nothing in a normal test run; in the child, writes until killed.
#[tokio::test]
async fn crash_child_writer() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (kind, location) = parse_spec(&spec);
    let store = open(kind, &location).await;
    let mut out = std::io::stdout();
    for n in 0u64.. {
        let seq =
            store.runs.append_event(RUN, "response.chunk", json!({"n": n, "pad": "x".repeat(512)})).await.unwrap();
        writeln!(out, "ack event {seq}").unwrap();
        out.flush().unwrap();
        let appended = store
            .sessions
            .append_messages(SESSION, vec![NewMessage::new(Message::user(format!("m{n}")))], None)
            .await
            .unwrap();
        writeln!(out, "ack message {}", appended.messages[0].seq).unwrap();
        out.flush().unwrap();
        // A kill can land between a session's listing key and its files; every other new
        // session is written with its first messages in the same write.
        let new = NewSession { agent: "a".into(), ..Default::default() };
        let created = if n % 2 == 0 {
            store.sessions.create_session(new).await.unwrap()
        } else {
            let first =
                vec![NewMessage::new(Message::user(format!("first {n}"))), NewMessage::new(Message::assistant("ok"))];
            store.sessions.create_session_with_messages(new, first).await.unwrap().session
        };
        writeln!(out, "ack session {}", created.id).unwrap();
        out.flush().unwrap();
    }
}

/// Acknowledged event and message sequence numbers of one child's life.
#[derive(Default)]
struct Acks {
    events: Vec<u64>,
    messages: Vec<u64>,
    sessions: Vec<String>,
}

/// Start a writer, let it acknowledge a few writes, SIGKILL it, and return what it acknowledged.
fn write_then_kill(
    kind: StoreKind,
    location: &Location,
    acks_before_kill: usize,
    rt: &tokio::runtime::Runtime,
) -> Acks {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, spec(kind, location))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut acks = Acks::default();
    let record = |line: String, acks: &mut Acks| {
        // libtest may print "test crash_child_writer ... " on the same line first.
        let mut words = line.split_whitespace().skip_while(|w| *w != "ack");
        if words.next() == Some("ack") {
            let what = words.next().unwrap().to_owned();
            let value = words.next().unwrap();
            match what.as_str() {
                "event" => acks.events.push(value.parse().unwrap()),
                "message" => acks.messages.push(value.parse().unwrap()),
                _ => acks.sessions.push(value.to_owned()),
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut checked_lock = false;
    while acks.events.len() + acks.messages.len() < acks_before_kill {
        let line =
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("writer stopped acknowledging");
        record(line, &mut acks);
        if kind == StoreKind::File && !checked_lock && !acks.events.is_empty() {
            // While the writer lives, this process cannot open the same file store.
            let err = rt.block_on(support::open_at(kind, location, Arc::new(SystemClock))).unwrap_err();
            assert_eq!(err.code(), "store_locked");
            checked_lock = true;
        }
    }
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // Lines already printed before the kill were acknowledged too.
    reader.join().unwrap();
    for line in rx.try_iter() {
        record(line, &mut acks);
    }
    acks
}

/// An arbitrary kill point, different per round and per run.
fn arbitrary(round: u32) -> usize {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
    3 + ((nanos / 1000 + round * 17) % 60) as usize
}

fn crash_and_recover(kind: StoreKind) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let location = match kind {
        StoreKind::File => Location::Path(dir.path().join(".polpo")),
        StoreKind::Sqlite => Location::Path(dir.path().join(".polpo/polpo.db")),
        StoreKind::Postgres => Location::Schema(rt.block_on(support::create_schema())),
    };
    rt.block_on(async {
        let store = open(kind, &location).await;
        store
            .runs
            .create_run(NewRun { id: Some(RUN.into()), agent: "a".into(), session_id: Some(SESSION.into()) })
            .await
            .unwrap();
        store
            .sessions
            .create_session(NewSession { id: Some(SESSION.into()), agent: "a".into(), ..Default::default() })
            .await
            .unwrap();
    });
    let mut all_events = Vec::new();
    let mut all_messages = Vec::new();
    let mut all_sessions = vec![SESSION.to_owned()];
    for round in 0..3 {
        let acks = write_then_kill(kind, &location, arbitrary(round), &rt);
        assert!(!acks.events.is_empty(), "the writer acknowledged something before it was killed");
        all_events.extend(acks.events);
        all_messages.extend(acks.messages);
        all_sessions.extend(acks.sessions);
        rt.block_on(async {
            let store = open(kind, &location).await;
            let mut events = Vec::new();
            loop {
                let page = store.runs.events_after(RUN, events.len() as u64, 1000).await.unwrap();
                if page.is_empty() {
                    break;
                }
                events.extend(page.into_iter().map(|e| e.seq));
            }
            let n = events.len() as u64;
            assert_eq!(events, (1..=n).collect::<Vec<_>>(), "{kind:?}: the journal is gap-free");
            assert!(all_events.iter().all(|s| *s <= n), "{kind:?}: every acknowledged event is present ({n} stored)");
            assert_eq!(store.runs.get_run(RUN).await.unwrap().unwrap().last_seq, n);

            let mut seqs = Vec::new();
            let mut page = PageRequest::first(1000);
            loop {
                let got = store.sessions.list_messages(SESSION, &page).await.unwrap();
                seqs.extend(got.items.iter().map(|m| m.seq));
                match got.next {
                    Some(c) => page = PageRequest::after(c, 1000),
                    None => break,
                }
            }
            let m = seqs.len() as u64;
            assert_eq!(seqs, (1..=m).collect::<Vec<_>>(), "{kind:?}: messages are gap-free");
            assert!(all_messages.iter().all(|s| *s <= m), "{kind:?}: every acknowledged message is present");
            assert_eq!(store.sessions.get_session(SESSION).await.unwrap().unwrap().message_count, m);

            let mut listed = Vec::new();
            let mut page = PageRequest::first(7);
            loop {
                let got = store.sessions.list_sessions(&SessionFilter::default(), &page).await.unwrap();
                for s in &got.items {
                    let got = store.sessions.get_session(&s.id).await.unwrap();
                    assert_eq!(got.as_ref(), Some(s), "{kind:?}: listed whole");
                    if s.id != SESSION {
                        let messages = store.sessions.list_messages(&s.id, &PageRequest::first(10)).await.unwrap();
                        assert_eq!(
                            messages.items.len() as u64,
                            s.message_count,
                            "{kind:?}: the header counts the journal"
                        );
                    }
                }
                listed.extend(got.items.into_iter().map(|s| s.id));
                match got.next {
                    Some(c) => page = PageRequest::after(c, 7),
                    None => break,
                }
            }
            let unique: std::collections::HashSet<&String> = listed.iter().collect();
            assert_eq!(unique.len(), listed.len(), "{kind:?}: each session listed once");
            let lost: Vec<&String> = all_sessions.iter().filter(|id| !unique.contains(id)).collect();
            assert!(lost.is_empty(), "{kind:?}: every acknowledged session is listed, not {lost:?}");
            assert_eq!(
                store.runs.append_event(RUN, "run.resumed", json!({})).await.unwrap(),
                n + 1,
                "writing continues after recovery"
            );
        });
    }
    if let Location::Schema(s) = &location {
        rt.block_on(support::drop_schema(s));
    }
}

#[test]
fn file_store_survives_sigkill() {
    crash_and_recover(StoreKind::File);
}

#[test]
fn sqlite_store_survives_sigkill() {
    crash_and_recover(StoreKind::Sqlite);
}

#[test]
fn postgres_store_survives_sigkill() {
    crash_and_recover(StoreKind::Postgres);
}
