//! Open-to-ready and one page of 20 sessions with 100,000 sessions stored, per backend, then the
//! same with 100,000 finished runs (each with its event journal) stored beside them — open, the
//! start-up takeover query (`claim_next_run`, which finds nothing), one run and a page of runs —
//! and for the file store 100,000 records too (a collection's listing order built once, then
//! open, one record, a page and the next): the figures behind "start-up and listing do not
//! grow with the store" (README, Performance).
//! A benchmark, not a test: it asserts the page's contents, nothing about speed. Run it with
//! `cargo test --release -p polpo-store --test bench_open -- --ignored --nocapture`
//! (`POLPO_BENCH_STORES=sqlite,postgres` for only some backends).
//!
//! The sessions are copies of one session made through the public API (a user message and an
//! answer), written straight into the backend's storage — files with the bytes the file store
//! writes, rows cloned from the real row — because 100,000 durable creates one by one would
//! take minutes. Each copy has its own id and creation time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use polpo_core::message::Message;
use polpo_store::{
    Cursor, NewMessage, NewRun, NewRunEvent, NewSession, PageRequest, Record, Run, RunEvent, RunFilter, RunStatus,
    Session, SessionFilter, StoreKind, StoredMessage,
};
use sqlx::{AssertSqlSafe, Connection};
use support::{Location, TestStore};

const SESSIONS: i64 = 100_000;
/// Runs and records the file store holds beside its sessions in the second measure.
const RUNS_AND_RECORDS: i64 = 100_000;
const COLLECTION: &str = "bench";
const PAGE: u32 = 20;

fn copy_id(i: i64) -> String {
    format!("bench-{i:06}")
}

/// One session made by the store itself: the template every copy is cloned from.
async fn template(t: &TestStore) -> Session {
    let new = NewSession { agent: "bench".into(), ..Default::default() };
    let id = t.store.sessions.create_session(new).await.unwrap().id;
    let turn = vec![
        NewMessage::new(Message::user("plan a trip to Lisbon")),
        NewMessage::new(Message::assistant(format!("Here is a plan: {}", "lorem ipsum ".repeat(20)))),
    ];
    t.store.sessions.append_messages(&id, turn, None).await.unwrap().session
}

/// File store: a directory per copy, `session.json` and `messages.jsonl` as the store writes
/// them. The session index is not written here: the next open builds it (the upgrade path).
fn copy_files(polpo: &Path, template: &Session) {
    let sessions = polpo.join("sessions");
    let journal = std::fs::read_to_string(sessions.join(&template.id).join("messages.jsonl")).unwrap();
    let messages: Vec<StoredMessage> = journal.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for i in 1..=SESSIONS {
        let id = copy_id(i);
        let at = template.created_at + chrono::Duration::milliseconds(i);
        let session = Session { id: id.clone(), created_at: at, updated_at: at, ..template.clone() };
        let dir = sessions.join(&id);
        std::fs::create_dir(&dir).unwrap();
        let mut header = serde_json::to_vec_pretty(&session).unwrap();
        header.push(b'\n');
        std::fs::write(dir.join("session.json"), header).unwrap();
        let mut lines = Vec::new();
        for m in &messages {
            serde_json::to_writer(&mut lines, &StoredMessage { session_id: id.clone(), ..m.clone() }).unwrap();
            lines.push(b'\n');
        }
        std::fs::write(dir.join("messages.jsonl"), lines).unwrap();
    }
    std::fs::remove_dir_all(polpo.join(".index")).unwrap();
}

/// One run with two events and one record, made by the store itself: the templates the file
/// copies are cloned from.
async fn run_and_record_templates(t: &TestStore) -> (Run, Record) {
    let new = NewRun { agent: "bench".into(), ..Default::default() };
    let run = t.store.runs.create_run(new).await.unwrap();
    let events = vec![
        NewRunEvent::new("run.started", serde_json::json!({"agent": "bench"})),
        NewRunEvent::new("run.completed", serde_json::json!({"text": "lorem ipsum ".repeat(10)})),
    ];
    t.store.runs.append_events(&run.id, events).await.unwrap();
    t.store.runs.update_run_status(&run.id, RunStatus::Completed, None, None).await.unwrap();
    let value = serde_json::json!({"title": "review the trip plan", "status": "open"});
    let record = t.store.records.put_record(COLLECTION, "template", value, None).await.unwrap();
    (t.store.runs.get_run(&run.id).await.unwrap().unwrap(), record)
}

/// File store: `RUNS_AND_RECORDS` finished run directories (`run.json` + `events.jsonl`) and as
/// many record files, with the bytes the store writes, each copy with its own id and creation
/// time. Neither the run index nor the collection's listing order is written here: the next
/// open, and the collection's first list, build them (the upgrade path).
fn copy_run_and_record_files(polpo: &Path, run: &Run, record: &Record) {
    let runs = polpo.join("runs");
    let journal = std::fs::read_to_string(runs.join(&run.id).join("events.jsonl")).unwrap();
    let events: Vec<RunEvent> = journal.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let records = polpo.join("records").join(COLLECTION);
    for i in 1..=RUNS_AND_RECORDS {
        let id = copy_id(i);
        let at = run.created_at + chrono::Duration::milliseconds(i);
        let dir = runs.join(&id);
        std::fs::create_dir(&dir).unwrap();
        let copy = Run { id: id.clone(), created_at: at, updated_at: at, ..run.clone() };
        std::fs::write(dir.join("run.json"), pretty(&copy)).unwrap();
        let mut lines = Vec::new();
        for e in &events {
            serde_json::to_writer(&mut lines, &RunEvent { run_id: id.clone(), ..e.clone() }).unwrap();
            lines.push(b'\n');
        }
        std::fs::write(dir.join("events.jsonl"), lines).unwrap();
        let copy = Record { id: id.clone(), created_at: at, updated_at: at, ..record.clone() };
        std::fs::write(records.join(format!("{id}.json")), pretty(&copy)).unwrap();
    }
    for file in ["runs.sorted", "runs.log", "runs.open"] {
        std::fs::remove_file(polpo.join(".index").join(file)).unwrap();
    }
    for file in [".order.sorted", ".order.log"] {
        std::fs::remove_file(records.join(file)).unwrap();
    }
}

/// SQL stores: clone the finished template run `RUNS_AND_RECORDS` times (`$1` is its id).
fn copy_runs_statement(kind: StoreKind) -> String {
    let series = series(kind, RUNS_AND_RECORDS);
    format!(
        "INSERT INTO runs (id, agent, session_id, status, error, created_at, updated_at, revision, last_seq) \
         SELECT 'bench-' || lpad_i, agent, session_id, status, error, created_at + i, created_at + i, revision, \
                last_seq \
         FROM runs, ({series}) AS n WHERE id = $1"
    )
}

fn pretty<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap();
    bytes.push(b'\n');
    bytes
}

/// SQL stores: the statements that clone the template's rows `SESSIONS` times (`$1` is the
/// template's id), one per table.
fn copy_statements(kind: StoreKind) -> [String; 2] {
    let series = series(kind, SESSIONS);
    [
        format!(
            "INSERT INTO sessions (id, agent, title, user_id, metadata, created_at, updated_at, message_count, \
                                   revision, owner) \
             SELECT 'bench-' || lpad_i, agent, title, user_id, metadata, created_at + i, created_at + i, \
                    message_count, revision, owner \
             FROM sessions, ({series}) AS n WHERE id = $1"
        ),
        format!(
            "INSERT INTO messages (session_id, seq, body) \
             SELECT 'bench-' || lpad_i, seq, replace(body, $1, 'bench-' || lpad_i) \
             FROM messages, ({series}) AS n WHERE session_id = $1"
        ),
    ]
}

/// Numbers 1..=n as `i` with their zero-padded text as `lpad_i`, in each dialect.
fn series(kind: StoreKind, n: i64) -> String {
    match kind {
        StoreKind::Postgres => {
            format!("SELECT i, lpad(i::text, 6, '0') AS lpad_i FROM generate_series(1, {n}) AS i")
        }
        _ => format!(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) \
             SELECT i, printf('%06d', i) AS lpad_i FROM s"
        ),
    }
}

/// Run `statements` (each binding `id` as `$1`) straight on a SQL store's database.
async fn run_sql(t: &TestStore, statements: &[String], id: &str) {
    match &t.location {
        Location::Path(p) => {
            let url = format!("sqlite://{}", p.display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            for sql in statements {
                sqlx::query(AssertSqlSafe(sql.clone())).bind(id).execute(&mut conn).await.unwrap();
            }
        }
        Location::Schema(schema) => {
            let options = sqlx::postgres::PgConnectOptions::from_str(&support::database_url())
                .unwrap()
                .options([("search_path", schema.as_str())]);
            let mut conn = sqlx::PgConnection::connect_with(&options).await.unwrap();
            for sql in statements {
                sqlx::query(AssertSqlSafe(sql.clone())).bind(id).execute(&mut conn).await.unwrap();
            }
        }
    }
}

async fn fill(t: &TestStore, template: &Session) {
    match &t.location {
        Location::Path(p) if t.kind == StoreKind::File => copy_files(p, template),
        _ => run_sql(t, &copy_statements(t.kind), &template.id).await,
    }
}

fn ms(d: Duration) -> String {
    format!("{:>8.1} ms", d.as_secs_f64() * 1000.0)
}

/// The wire cursor a client holds after reading down to copy `i` (newest first).
fn cursor_at(template: &Session, i: i64) -> Cursor {
    let at = template.created_at.timestamp_millis() + i;
    Cursor::from_wire(hex::encode(format!("t{at}:{}", copy_id(i))))
}

async fn measure(kind: StoreKind) {
    let t = TestStore::new(kind).await;
    let template = template(&t).await;
    let started = Instant::now();
    fill(&t, &template).await;
    let filled = started.elapsed();
    // The first open after the fill (the file store builds its session index here, once).
    let (t, first_open) = t.reopen_timed().await;
    let (t, open) = t.reopen_timed().await;

    let middle = SESSIONS / 2;
    let page = |i| PageRequest::after(cursor_at(&template, i), PAGE);
    let started = Instant::now();
    let first_page = t.store.sessions.list_sessions(&SessionFilter::default(), &page(middle)).await.unwrap();
    let first = started.elapsed();
    let started = Instant::now();
    let next = PageRequest::after(first_page.next.clone().unwrap(), PAGE);
    let second_page = t.store.sessions.list_sessions(&SessionFilter::default(), &next).await.unwrap();
    let second = started.elapsed();
    let started = Instant::now();
    t.store.sessions.get_session(&copy_id(middle / 3)).await.unwrap().unwrap();
    let get = started.elapsed();
    let ids: Vec<String> = first_page.items.iter().chain(&second_page.items).map(|s| s.id.clone()).collect();
    let expected: Vec<String> = (middle - 2 * i64::from(PAGE)..middle).rev().map(copy_id).collect();
    assert_eq!(ids, expected, "{kind:?}: two pages from the middle, newest first");
    assert!(first_page.items.iter().all(|s| s.message_count == 2 && s.title == template.title));

    println!("{kind:?} ({SESSIONS} sessions, filled in {:.1} s)", filled.as_secs_f64());
    println!("  first open after the fill          {}", ms(first_open));
    println!("  open to ready                      {}", ms(open));
    println!("  page of {PAGE} from the middle, first  {}", ms(first));
    println!("  next page of {PAGE} (by cursor)       {}", ms(second));
    println!("  get one session                    {}", ms(get));
    measure_runs(t).await;
}

/// The same store again with `RUNS_AND_RECORDS` finished runs added beside its sessions (and
/// as many records in the file store).
async fn measure_runs(t: TestStore) {
    let (run, record) = run_and_record_templates(&t).await;
    let started = Instant::now();
    match &t.location {
        Location::Path(polpo) if t.kind == StoreKind::File => copy_run_and_record_files(polpo, &run, &record),
        _ => run_sql(&t, &[copy_runs_statement(t.kind)], &run.id).await,
    }
    let filled = started.elapsed();
    let (t, first_open) = t.reopen_timed().await;
    let (t, open) = t.reopen_timed().await;
    let started = Instant::now();
    let taken = t.store.runs.claim_next_run("bench", Duration::from_secs(60)).await.unwrap();
    let takeover = started.elapsed();
    assert_eq!(taken, None, "every stored run is finished");
    let middle = copy_id(RUNS_AND_RECORDS / 2);
    let started = Instant::now();
    let got = t.store.runs.get_run(&middle).await.unwrap().unwrap();
    let get_run = started.elapsed();
    assert_eq!((got.last_seq, got.agent.as_str()), (2, "bench"));
    let started = Instant::now();
    let runs = t.store.runs.list_runs(&RunFilter::default(), &PageRequest::first(PAGE)).await.unwrap();
    let runs_page = started.elapsed();
    assert_eq!(runs.items.first().map(|r| r.id.clone()), Some(copy_id(RUNS_AND_RECORDS)), "newest run first");
    let kind = t.kind;
    println!("{kind:?} + {RUNS_AND_RECORDS} finished runs (filled in {:.1} s)", filled.as_secs_f64());
    println!("  first open after the fill          {}", ms(first_open));
    println!("  open to ready                      {}", ms(open));
    println!("  start-up takeover query            {}", ms(takeover));
    println!("  get one run                        {}", ms(get_run));
    println!("  first page of {PAGE} runs             {}", ms(runs_page));
    let mut t = t;
    if kind == StoreKind::File {
        // The records were copied without their collection's listing order: the first list
        // builds it, once (the upgrade path).
        let started = Instant::now();
        let page = t.store.records.list_records(COLLECTION, &PageRequest::first(PAGE)).await.unwrap();
        let built = started.elapsed();
        assert_eq!(page.items.first().map(|r| r.id.clone()), Some(copy_id(RUNS_AND_RECORDS)), "newest record first");
        let open;
        (t, open) = t.reopen_timed().await;
        let started = Instant::now();
        let got = t.store.records.get_record(COLLECTION, &middle).await.unwrap().unwrap();
        let get_record = started.elapsed();
        assert_eq!(got.value, record.value);
        let started = Instant::now();
        let page = t.store.records.list_records(COLLECTION, &PageRequest::first(PAGE)).await.unwrap();
        let records_page = started.elapsed();
        let started = Instant::now();
        let next = PageRequest::after(page.next.unwrap(), PAGE);
        let next = t.store.records.list_records(COLLECTION, &next).await.unwrap();
        let next_page = started.elapsed();
        assert_eq!(next.items.first().map(|r| r.id.clone()), Some(copy_id(RUNS_AND_RECORDS - i64::from(PAGE))));
        println!("  first list of {RUNS_AND_RECORDS} records (order built) {}", ms(built));
        println!("  open to ready, with them           {}", ms(open));
        println!("  get one record                     {}", ms(get_record));
        println!("  first page of {PAGE} records          {}", ms(records_page));
        println!("  next page of {PAGE} records           {}", ms(next_page));
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
async fn open_and_page_with_100k_sessions() {
    // POLPO_BENCH_STORES=sqlite,postgres measures only those backends.
    let only = std::env::var("POLPO_BENCH_STORES").unwrap_or_default();
    for kind in [StoreKind::File, StoreKind::Sqlite, StoreKind::Postgres] {
        if only.is_empty() || only.split(',').any(|k| k.trim().eq_ignore_ascii_case(&format!("{kind:?}"))) {
            measure(kind).await;
        }
    }
}
