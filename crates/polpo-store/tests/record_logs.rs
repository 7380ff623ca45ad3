//! Record logs (`RecordStore::append_log`), on every backend: entries come back in the order
//! appended, per log, across a reopen, synced or not; a cleared log starts empty; bad names are
//! refused. On the file store, a log ends at a line torn or never written by a crash.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_store::{JsonText, StoreKind};
use serde_json::{Value, json};
use support::{Location, TestStore};

fn entry(value: Value) -> JsonText {
    JsonText::of(&value).unwrap()
}

async fn a_log_reads_back_in_order_until_cleared(kind: StoreKind) {
    let t = TestStore::new(kind).await;
    let r = t.store.records.clone();
    assert_eq!(r.read_log("loop_deltas.run-1", "000000000001").await.unwrap(), Vec::<Value>::new(), "no log yet");
    for seq in 1..=12 {
        r.append_log("loop_deltas.run-1", "000000000001", seq, &entry(json!({"seq": seq, "text": "a\nb"})))
            .await
            .unwrap();
    }
    r.append_log("loop_deltas.run-1", "000000000002", 1, &entry(json!({"other": true}))).await.unwrap();
    r.append_log("loop_deltas.run-2", "000000000001", 1, &entry(json!({"run": 2}))).await.unwrap();

    // The file store is locked while a handle is open.
    drop(r);
    let t = t.reopen().await;
    let r = t.store.records.clone();
    let read = r.read_log("loop_deltas.run-1", "000000000001").await.unwrap();
    let numbers: Vec<u64> = read.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (1..=12).collect::<Vec<_>>(), "{kind:?}: in the order appended, after a reopen");
    assert_eq!(read[0]["text"], json!("a\nb"), "{kind:?}: a newline inside a value is kept");
    assert_eq!(r.read_log("loop_deltas.run-1", "000000000002").await.unwrap(), vec![json!({"other": true})]);
    assert_eq!(r.read_log("loop_deltas.run-2", "000000000001").await.unwrap(), vec![json!({"run": 2})]);

    r.clear_log("loop_deltas.run-1", "000000000001").await.unwrap();
    r.clear_log("loop_deltas.run-1", "never-written").await.unwrap();
    assert_eq!(r.read_log("loop_deltas.run-1", "000000000001").await.unwrap(), Vec::<Value>::new(), "{kind:?}");
    assert_eq!(r.read_log("loop_deltas.run-1", "000000000002").await.unwrap().len(), 1, "{kind:?}: only that log");
    r.append_log("loop_deltas.run-1", "000000000001", 13, &entry(json!({"seq": 13}))).await.unwrap();
    drop(r);
    let t = t.reopen().await;
    let read = t.store.records.read_log("loop_deltas.run-1", "000000000001").await.unwrap();
    assert_eq!(read, vec![json!({"seq": 13})], "{kind:?}: appends after a clear start the log again");

    for (collection, log) in [("../x", "1"), ("c", "../x"), ("c", ""), (".hidden", "1")] {
        let refused = t.store.records.append_log(collection, log, 1, &entry(json!({}))).await;
        assert_eq!(refused.unwrap_err().code(), "invalid_input", "{kind:?}: {collection}/{log}");
        assert_eq!(t.store.records.read_log(collection, log).await.unwrap_err().code(), "invalid_input");
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_logs_read_back_in_order_until_cleared() {
    a_log_reads_back_in_order_until_cleared(StoreKind::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_logs_read_back_in_order_until_cleared() {
    a_log_reads_back_in_order_until_cleared(StoreKind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_logs_read_back_in_order_until_cleared() {
    a_log_reads_back_in_order_until_cleared(StoreKind::Postgres).await;
}

/// A crash in the middle of an append leaves part of a line without its newline: never
/// acknowledged, so the entries before it are the log. A machine's crash after appends not
/// synced (`append_log_unsynced`) may leave a stretch the disk never got (zeros) before lines it
/// did: the log ends at the first line that is not an entry, as a write-ahead log's replay does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_log_ends_at_a_torn_or_unwritten_line() {
    let t = TestStore::new(StoreKind::File).await;
    let Location::Path(dir) = &t.location else { unreachable!("a file store lives in a folder") };
    let path = dir.join("records/loop_deltas.run-1/000000000001.jsonl");
    for seq in 1..=2 {
        t.store
            .records
            .append_log("loop_deltas.run-1", "000000000001", seq, &entry(json!({"seq": seq})))
            .await
            .unwrap();
    }
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, [whole.as_slice(), b"{\"seq\":3,\"te"].concat()).unwrap();
    let read = t.store.records.read_log("loop_deltas.run-1", "000000000001").await.unwrap();
    assert_eq!(read, vec![json!({"seq": 1}), json!({"seq": 2})], "the torn line is not an entry");

    let unwritten = [0u8; 40];
    let after = b"{\"seq\":4}\n";
    std::fs::write(&path, [whole.as_slice(), &unwritten, b"\n", after].concat()).unwrap();
    let read = t.store.records.read_log("loop_deltas.run-1", "000000000001").await.unwrap();
    assert_eq!(read, vec![json!({"seq": 1}), json!({"seq": 2})], "nothing past a line the disk never got");
    t.finish().await;
}

/// Entries appended without an fdatasync read back as the others do, in order with them and
/// after a reopen (the process that wrote them ended), on every backend.
async fn unsynced_entries_read_back_in_order(kind: StoreKind) {
    let t = TestStore::new(kind).await;
    let r = t.store.records.clone();
    for seq in 1..=6 {
        let e = entry(json!({"seq": seq}));
        if seq % 3 == 0 {
            r.append_log("loop_deltas", "run-1.000000000001", seq, &e).await.unwrap();
        } else {
            r.append_log_unsynced("loop_deltas", "run-1.000000000001", seq, &e).await.unwrap();
        }
    }
    let refused = r.append_log_unsynced("../x", "1", 1, &entry(json!({}))).await;
    assert_eq!(refused.unwrap_err().code(), "invalid_input", "{kind:?}: a bad name is refused");
    drop(r);
    let t = t.reopen().await;
    let read = t.store.records.read_log("loop_deltas", "run-1.000000000001").await.unwrap();
    let numbers: Vec<u64> = read.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (1..=6).collect::<Vec<_>>(), "{kind:?}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_unsynced_entries_read_back_in_order() {
    unsynced_entries_read_back_in_order(StoreKind::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_unsynced_entries_read_back_in_order() {
    unsynced_entries_read_back_in_order(StoreKind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unsynced_entries_read_back_in_order() {
    unsynced_entries_read_back_in_order(StoreKind::Postgres).await;
}
