//! Revisioned records in the file backend, one JSON file each, read by id when first asked
//! for and listed through their collection's listing order (`records/<collection>/.order.*`,
//! see `order.rs`), so neither opening the store nor a list nor memory grows with the records
//! stored; and record logs, one JSONL file each beside the collection's records
//! (`records/<collection>/<log>.jsonl`), appended to and read without the index.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

use super::order::{Key, KeyOrder};
use super::recency::Recency;
use super::{FileStore, Inner, RECORDS, fsio, owned};
use crate::error::StoreError;
use crate::json_text::JsonText;
use crate::model::{self, ImportOutcome, Record};
use crate::page::{Cursor, Page, PageRequest};
use crate::record_log::check_log;
use crate::traits::RecordStore;

/// A record as the index keeps it. Read from its file or written from a value: the record.
/// Written from text ([`RecordStore::put_record_text`], a loop run's checkpoint): the text as
/// written, `record.value` left `Null`, and read into a tree only when the record is read — a
/// run's checkpoints are written far more often than they are read.
#[derive(Debug, Clone)]
pub(super) struct Held {
    record: Record,
    text: Option<String>,
    /// The size of its file: what it counts against [`HELD_BYTES`].
    size: usize,
}

impl Held {
    /// The whole record, its value read from the text it was written as.
    fn record(&self) -> Result<Record, StoreError> {
        let mut record = self.record.clone();
        if let Some(text) = &self.text {
            record.value = serde_json::from_str(text).map_err(|e| StoreError::Invalid(e.to_string()))?;
        }
        Ok(record)
    }
}

/// The file of `record` whose value is `text`: [`Record`]'s members around the text as it is,
/// compact, one line.
fn record_file(record: &Record, text: &str) -> Result<Vec<u8>, StoreError> {
    let invalid = |e: serde_json::Error| StoreError::Invalid(e.to_string());
    let mut bytes = Vec::with_capacity(text.len() + 160);
    bytes.extend_from_slice(b"{\"collection\":");
    serde_json::to_writer(&mut bytes, &record.collection).map_err(invalid)?;
    bytes.extend_from_slice(b",\"id\":");
    serde_json::to_writer(&mut bytes, &record.id).map_err(invalid)?;
    bytes.extend_from_slice(format!(",\"revision\":{},\"value\":", record.revision).as_bytes());
    bytes.extend_from_slice(text.as_bytes());
    bytes.extend_from_slice(b",\"createdAt\":");
    serde_json::to_writer(&mut bytes, &record.created_at).map_err(invalid)?;
    bytes.extend_from_slice(b",\"updatedAt\":");
    serde_json::to_writer(&mut bytes, &record.updated_at).map_err(invalid)?;
    bytes.extend_from_slice(b"}\n");
    Ok(bytes)
}

/// How many bytes of records (counted as their files' sizes) the file store keeps in memory at
/// most, whatever their number: a record may be up to [`model::MAX_RECORD_BYTES`], so a bound
/// on their number alone would not bound memory. The record in use is kept even when larger.
const HELD_BYTES: usize = 32 << 20;

/// How many collections keep their listing order open (a journal handle and the keys it
/// added since its last compaction); the least recently used is closed past that.
const ORDERS_OPEN: usize = 64;

/// The name of a collection's listing order, its files in the collection's folder (`.order.sorted`,
/// `.order.log`: ids never start with '.', so no record or log is named so).
const ORDER: &str = ".order";

/// What a collection's listing order keeps beside each key: nothing, since a record list does
/// not filter (an empty object, not `()`, which would be written as a removal's `null`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Unfiltered {}

/// The record collections in use: the records read or written lately and the listing orders
/// opened (at most [`ORDERS_OPEN`]). Nothing is read at open: a record is read from its file
/// when first asked for, a list reads its collection's order and then only the records of its
/// page.
#[derive(Debug)]
pub(super) struct Records {
    /// How many records are kept in memory, across collections (the store's cache size, see
    /// [`crate::FileStore::open_with_cache`]): the ones written or read lately, a running
    /// loop's record among them (written after every step). Every other record stays on disk
    /// until asked for, so memory does not grow with the records stored.
    held_max: usize,
    held: HashMap<String, HashMap<String, Held>>,
    /// The sizes of the held records, summed (at most [`HELD_BYTES`] beyond the latest).
    held_bytes: usize,
    /// `collection/id` of every held record, by last use.
    held_recency: Recency,
    orders: HashMap<String, KeyOrder<Unfiltered>>,
    /// Collections with an open order, by last use.
    order_recency: Recency,
}

impl Records {
    /// No record held yet, at most `held_max` later.
    pub(super) fn new(held_max: usize) -> Self {
        Records {
            held_max,
            held: HashMap::new(),
            held_bytes: 0,
            held_recency: Recency::default(),
            orders: HashMap::new(),
            order_recency: Recency::default(),
        }
    }

    fn get(&self, collection: &str, id: &str) -> Option<&Held> {
        self.held.get(collection)?.get(id)
    }

    /// Keep `held` in memory as the latest used, dropping the least recently used records
    /// past `held_max` records or [`HELD_BYTES`] (their files are up to date: every write is
    /// written through).
    fn hold(&mut self, held: Held) {
        let (collection, id, size) = (held.record.collection.clone(), held.record.id.clone(), held.size);
        self.drop_held(&collection, &id);
        self.held_recency.touch(&held_key(&collection, &id));
        self.held_bytes += size;
        self.held.entry(collection).or_default().insert(id, held);
        while self.held_recency.len() > 1
            && (self.held_recency.len() > self.held_max || self.held_bytes - size > HELD_BYTES)
        {
            let Some(victim) = self.held_recency.oldest_first().next().map(str::to_owned) else { break };
            match victim.split_once('/') {
                Some((collection, id)) => self.drop_held(collection, id),
                None => self.held_recency.forget(&victim),
            }
        }
    }

    /// Stop holding `collection/id` (evicted, written over or deleted).
    fn drop_held(&mut self, collection: &str, id: &str) {
        self.held_recency.forget(&held_key(collection, id));
        if let Some(records) = self.held.get_mut(collection) {
            if let Some(dropped) = records.remove(id) {
                self.held_bytes -= dropped.size;
            }
            if records.is_empty() {
                self.held.remove(collection);
            }
        }
    }

    /// Compact the open orders whose journals grew (a clean close).
    pub(super) fn close(&mut self) {
        for (collection, order) in &mut self.orders {
            if let Err(e) = order.close() {
                tracing::warn!(collection, error = %e, "could not compact a record collection's index at close");
            }
        }
    }
}

/// The recency key of record `collection/id` (neither holds a '/').
fn held_key(collection: &str, id: &str) -> String {
    format!("{collection}/{id}")
}

impl Inner {
    fn record_path(&self, collection: &str, id: &str) -> PathBuf {
        super::path_under(&self.dir, &[RECORDS, collection, id], ".json")
    }

    fn log_path(&self, collection: &str, log: &str) -> PathBuf {
        super::path_under(&self.dir, &[RECORDS, collection, log], ".jsonl")
    }

    fn collection_dir(&self, collection: &str) -> PathBuf {
        super::path_under(&self.dir, &[RECORDS, collection], "")
    }

    /// Record `collection/id`, held in memory once read: `false` when it does not exist, as
    /// for ids no record can have (checked first, so no other name reaches the file system).
    fn load_record(&self, records: &mut Records, collection: &str, id: &str) -> Result<bool, StoreError> {
        if model::check_record_ids(collection, id).is_err() {
            return Ok(false);
        }
        if records.get(collection, id).is_some() {
            records.held_recency.touch(&held_key(collection, id));
            return Ok(true);
        }
        match self.read_record(collection, id)? {
            Some((record, size)) => {
                records.hold(Held { record, text: None, size });
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Record `collection/id` (valid ids) as its file holds it, and the file's size.
    fn read_record(&self, collection: &str, id: &str) -> Result<Option<(Record, usize)>, StoreError> {
        fsio::read_json_sized(&self.record_path(collection, id))
    }

    /// `collection`'s listing order, opened on first use (and built from its records' files
    /// once, for a collection written before it had one, sweeping the temp files a crash left
    /// there; later ones stay, never read: a collection's folder is not listed again); its
    /// folder is made if `create`, else `None` when the collection has no folder (nothing was
    /// ever written to it).
    fn record_order<'r>(
        &self,
        records: &'r mut Records,
        collection: &str,
        create: bool,
    ) -> Result<Option<&'r mut KeyOrder<Unfiltered>>, StoreError> {
        if !records.orders.contains_key(collection) {
            let dir = self.collection_dir(collection);
            match create {
                true => fsio::create_dir_durable(&dir)?,
                false if !dir.is_dir() => return Ok(None),
                false => {}
            }
            let order = KeyOrder::open(&dir, ORDER, || record_keys(&dir))?;
            records.orders.insert(collection.to_owned(), order);
        }
        records.order_recency.touch(collection);
        let excess = records.order_recency.len().saturating_sub(ORDERS_OPEN);
        let victims: Vec<String> = records.order_recency.oldest_first().take(excess).map(str::to_owned).collect();
        for victim in victims {
            records.order_recency.forget(&victim);
            records.orders.remove(&victim);
        }
        Ok(records.orders.get_mut(collection))
    }

    /// Write `record` (its value `text` when given, see [`Held`]) through to its file and hold
    /// it. A record new to its collection has its listing key made durable first, so a crash
    /// never leaves a record that lists cannot find (a key whose record is missing, or was
    /// created at another time, is skipped by lists).
    fn write_record(
        &self,
        records: &mut Records,
        (record, text): (Record, Option<String>),
        new: bool,
    ) -> Result<(), StoreError> {
        if new {
            let key = (record.created_at.timestamp_millis(), record.id.clone());
            if let Some(order) = self.record_order(records, &record.collection, true)? {
                order.add(key, Unfiltered {})?.sync()?;
            }
        }
        let bytes = match &text {
            // Bounded when it was made.
            Some(text) => record_file(&record, text)?,
            None => {
                let bytes = fsio::json_bytes(&record)?;
                // The value's compact JSON is no longer than the whole record written pretty:
                // only a record written longer than the bound may hold a value past it.
                if bytes.len() > model::MAX_RECORD_BYTES {
                    model::check_size("record", &record.value, model::MAX_RECORD_BYTES)?;
                }
                bytes
            }
        };
        fsio::write_atomic(&self.record_path(&record.collection, &record.id), &bytes)?;
        records.hold(Held { record, text, size: bytes.len() });
        Ok(())
    }

    /// Write `value` over `collection/id` (see [`RecordStore::put_record`]), or `text` when
    /// given (`value` is then `Null`: see [`Held`]): what `answer` takes of the new record
    /// before the index keeps it (a copy, or only its revision).
    fn put_record<T>(
        &self,
        (collection, id): (&str, &str),
        (value, text): (Value, Option<String>),
        expected: Option<u64>,
        answer: impl FnOnce(&Record) -> T,
    ) -> Result<T, StoreError> {
        // The value's size is checked as it is written (see `write_record`).
        model::check_record_ids(collection, id)?;
        let now = self.now();
        let mut idx = self.index();
        let records = &mut idx.records;
        let exists = self.load_record(records, collection, id)?;
        let current = records.get(collection, id).map(|held| &held.record);
        if expected.is_some_and(|e| e != current.map_or(0, |r| r.revision)) {
            // A refused write says first that its value is too large, as on every store.
            model::check_size("record", &value, model::MAX_RECORD_BYTES)?;
        }
        let next = model::next_record(current, collection, id, value, expected, now)?;
        let answer = answer(&next);
        self.write_record(records, (next, text), !exists)?;
        Ok(answer)
    }

    fn get_record(&self, collection: &str, id: &str) -> Result<Option<Record>, StoreError> {
        let mut idx = self.index();
        if !self.load_record(&mut idx.records, collection, id)? {
            return Ok(None);
        }
        idx.records.get(collection, id).map(Held::record).transpose()
    }

    /// A page of `collection` newest first: keys from its order, then only those records read
    /// (from memory when held; from their files otherwise, not held for it: a walk through a
    /// whole collection does not push out the records in use).
    fn list_records(&self, collection: &str, page: &PageRequest) -> Result<Page<Record>, StoreError> {
        let mut before = page.after.as_ref().map(Cursor::time_key).transpose()?;
        let size = page.size();
        let mut items = Vec::with_capacity(size + 1);
        // A name no collection can have lists nothing, and reaches no file system call.
        let valid = model::validate_id("collection", collection).is_ok();
        let mut idx = self.index();
        let records = &mut idx.records;
        while valid && items.len() <= size {
            let Some(order) = self.record_order(records, collection, false)? else { break };
            let keys = order.before(before.as_ref(), |_| true, size + 1 - items.len())?;
            let Some(last) = keys.last().cloned() else { break };
            for (ms, id) in keys {
                let record = match records.get(collection, &id) {
                    Some(held) => Some(held.record()?),
                    // An id no record can have (an order file edited by hand) names no file.
                    None if model::check_record_ids(collection, &id).is_err() => None,
                    None => self.read_record(collection, &id)?.map(|(record, _)| record),
                };
                items.extend(record.filter(|r| r.created_at.timestamp_millis() == ms));
            }
            before = Some(last);
        }
        Ok(Page::from_overfetch(items, size, |r| Cursor::at_time(r.created_at.timestamp_millis(), &r.id)))
    }

    fn delete_record(&self, collection: &str, id: &str, expected: Option<u64>) -> Result<bool, StoreError> {
        let mut idx = self.index();
        let records = &mut idx.records;
        if !self.load_record(records, collection, id)? {
            return Ok(false);
        }
        let Some(current) = records.get(collection, id).map(|held| &held.record) else { return Ok(false) };
        model::check_revision("record", &format!("{collection}/{id}"), expected, current.revision)?;
        let key = (current.created_at.timestamp_millis(), id.to_owned());
        let path = self.record_path(collection, id);
        std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        records.drop_held(collection, id);
        fsio::sync_dir(&self.collection_dir(collection))?;
        // After the file: until the removal is durable, lists skip the key of a missing record.
        if let Some(order) = self.record_order(records, collection, false)? {
            order.remove(key)?.sync()?;
        }
        Ok(true)
    }

    fn import_record(&self, record: &Record) -> Result<ImportOutcome, StoreError> {
        model::check_record_write(&record.collection, &record.id, &record.value)?;
        let mut idx = self.index();
        let records = &mut idx.records;
        if self.load_record(records, &record.collection, &record.id)?
            && let Some(existing) = records.get(&record.collection, &record.id)
        {
            return model::same_import("record", &record.id, &existing.record()?, record);
        }
        self.write_record(records, (record.clone(), None), true)?;
        Ok(ImportOutcome::Imported)
    }

    /// The collections holding a record: the folders under `records/` with a record file.
    fn collections(&self) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        for dir in super::subdirs(&self.dir.join(RECORDS))? {
            let holds_one = std::fs::read_dir(&dir)
                .map_err(|e| StoreError::io(&dir, e))?
                .filter_map(Result::ok)
                .any(|entry| is_record_file(&entry.path()));
            if let Some(name) = dir.file_name().and_then(|n| n.to_str()).filter(|_| holds_one) {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Whether `path` is a record's file (`<id>.json`; not a temp file, a log or the order).
fn is_record_file(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "json")
}

/// Every key of the collection in `dir`, read from its records' files: builds its listing order
/// once, for a collection written before it had one (temp files a crash left are swept too).
fn record_keys(dir: &Path) -> Result<BTreeMap<Key, Unfiltered>, StoreError> {
    let mut keys = BTreeMap::new();
    for path in super::json_files(dir)? {
        if let Some(record) = fsio::read_json::<Record>(&path)? {
            keys.insert((record.created_at.timestamp_millis(), record.id), Unfiltered {});
        }
    }
    Ok(keys)
}

#[async_trait]
impl RecordStore for FileStore {
    async fn put_record(
        &self,
        collection: &str,
        id: &str,
        value: Value,
        expected_revision: Option<u64>,
    ) -> Result<Record, StoreError> {
        let (collection, id) = (owned(collection), owned(id));
        self.blocking(move |s| s.put_record((&collection, &id), (value, None), expected_revision, Record::clone)).await
    }

    /// The record moves into the index as it is, no copy made.
    async fn put_record_revision(
        &self,
        collection: &str,
        id: &str,
        value: Value,
        expected_revision: Option<u64>,
    ) -> Result<u64, StoreError> {
        let (collection, id) = (owned(collection), owned(id));
        self.blocking(move |s| s.put_record((&collection, &id), (value, None), expected_revision, |r| r.revision)).await
    }

    /// Written as it is and kept as text (see [`Held`]).
    async fn put_record_text(
        &self,
        collection: &str,
        id: &str,
        text: JsonText,
        expected_revision: Option<u64>,
    ) -> Result<u64, StoreError> {
        let (collection, id, text) = (owned(collection), owned(id), text.into_string());
        self.blocking(move |s| {
            s.put_record((&collection, &id), (Value::Null, Some(text)), expected_revision, |r| r.revision)
        })
        .await
    }

    async fn get_record(&self, collection: &str, id: &str) -> Result<Option<Record>, StoreError> {
        let (collection, id) = (owned(collection), owned(id));
        self.blocking(move |s| s.get_record(&collection, &id)).await
    }

    async fn list_records(&self, collection: &str, page: &PageRequest) -> Result<Page<Record>, StoreError> {
        let (collection, page) = (owned(collection), page.clone());
        self.blocking(move |s| s.list_records(&collection, &page)).await
    }

    async fn delete_record(
        &self,
        collection: &str,
        id: &str,
        expected_revision: Option<u64>,
    ) -> Result<bool, StoreError> {
        let (collection, id) = (owned(collection), owned(id));
        self.blocking(move |s| s.delete_record(&collection, &id, expected_revision)).await
    }

    async fn collections(&self) -> Result<Vec<String>, StoreError> {
        self.blocking(|s| s.collections()).await
    }

    async fn import_record(&self, record: &Record) -> Result<ImportOutcome, StoreError> {
        let record = record.clone();
        self.blocking(move |s| s.import_record(&record)).await
    }

    /// One line appended and fdatasynced (see [`append_line`]); the lines' order is the
    /// entries' (its one writer appends them in order), so `_seq` is not stored.
    async fn append_log(&self, collection: &str, log: &str, _seq: u64, entry: &JsonText) -> Result<(), StoreError> {
        check_log(collection, log)?;
        let (path, entry) = (self.inner.log_path(collection, log), entry.clone());
        self.blocking(move |_| append_line(&path, &entry, Synced::Yes)).await
    }

    /// One line written to the page cache here, on the caller's thread (see [`append_line`]).
    async fn append_log_unsynced(
        &self,
        collection: &str,
        log: &str,
        _seq: u64,
        entry: &JsonText,
    ) -> Result<(), StoreError> {
        check_log(collection, log)?;
        append_line(&self.inner.log_path(collection, log), entry, Synced::No)
    }

    /// The lines up to the first that is not a JSON entry: what a machine's crash can leave of
    /// lines appended without an fdatasync (a torn line, or a stretch the disk never got) ends
    /// the log, as a write-ahead log's replay ends at its first bad record.
    async fn read_log(&self, collection: &str, log: &str) -> Result<Vec<Value>, StoreError> {
        check_log(collection, log)?;
        let path = self.inner.log_path(collection, log);
        self.blocking(move |_| match fsio::read_bounded(&path)? {
            Some(bytes) => Ok(log_entries(&path, &bytes)),
            None => Ok(Vec::new()),
        })
        .await
    }

    /// The log's file removed on the caller's thread, as an unsynced append is written: a
    /// removal is not fsynced either (see [`clear_file`]).
    async fn clear_log(&self, collection: &str, log: &str) -> Result<(), StoreError> {
        check_log(collection, log)?;
        clear_file(&self.inner.log_path(collection, log))
    }
}

/// Whether [`append_line`] waits for the disk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Synced {
    /// An fdatasync after the write (and a directory fsync for a new file).
    Yes,
    /// The write only: lost by a machine's crash, not by the process's.
    No,
}

/// Append `entry` as one line to the log at `path`: one write, then (`Synced::Yes`) an
/// fdatasync, a log new (or emptied) before the write also having its directory entry fsynced;
/// its folder made on first use. A write that fails is cut off again, so a later append never
/// continues a torn line. Holds no lock: a log has one writer.
fn append_line(path: &Path, entry: &JsonText, synced: Synced) -> Result<(), StoreError> {
    let io = |e| StoreError::io(path, e);
    let open = |path: &Path| OpenOptions::new().append(true).create(true).open(path);
    let mut file = match open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fsio::create_dir_durable(path.parent().unwrap_or(Path::new(".")))?;
            open(path).map_err(io)?
        }
        opened => opened.map_err(io)?,
    };
    let before = file.metadata().map_err(io)?.len();
    let mut line = Vec::with_capacity(entry.as_str().len() + 1);
    line.extend_from_slice(entry.as_str().as_bytes());
    line.push(b'\n');
    let written = file.write_all(&line).and_then(|()| if synced == Synced::Yes { file.sync_data() } else { Ok(()) });
    if let Err(e) = written {
        // Best effort: the append failed either way.
        let _ = file.set_len(before);
        return Err(io(e));
    }
    if before == 0 && synced == Synced::Yes {
        fsio::sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

/// A log's entries, from its bytes: its complete lines up to the first that is not JSON (see
/// [`RecordStore::read_log`] on the file store), the rest dropped with a warning.
fn log_entries(path: &Path, bytes: &[u8]) -> Vec<Value> {
    let mut entries = Vec::new();
    for line in fsio::complete_lines(bytes) {
        match serde_json::from_slice(line) {
            Ok(entry) => entries.push(entry),
            Err(e) => {
                tracing::warn!(path = %path.display(), "log read up to a line that is not an entry ({e}): the rest is dropped");
                break;
            }
        }
    }
    entries
}

/// Empty the log at `path` by removing its file, if it exists (see [`RecordStore::clear_log`]:
/// not fsynced): a log read without its file is empty, and one emptied for good (a loop run's
/// deltas once it ended) leaves no file behind.
fn clear_file(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(collection: &str, id: &str, size: usize) -> Held {
        let now = chrono::Utc::now();
        let record = model::next_record(None, collection, id, Value::Null, None, now).unwrap();
        Held { record, text: None, size }
    }

    fn ids(records: &Records) -> Vec<String> {
        records.held_recency.oldest_first().map(str::to_owned).collect()
    }

    /// Memory holds at most `held_max` records and [`HELD_BYTES`] beyond the latest, the least
    /// recently used dropped first; a record written over counts once.
    #[test]
    fn held_records_are_bounded_by_number_and_by_bytes() {
        let mut records = Records::new(3);
        for id in ["a", "b", "c", "d"] {
            records.hold(held("notes", id, 10));
        }
        assert_eq!(ids(&records), ["notes/b", "notes/c", "notes/d"]);
        records.hold(held("notes", "b", 20));
        assert_eq!(ids(&records), ["notes/c", "notes/d", "notes/b"]);
        assert_eq!(records.held_bytes, 40, "b counted at its new size only");
        assert!(records.get("notes", "a").is_none() && records.get("notes", "b").is_some());

        let mut records = Records::new(100);
        let big = HELD_BYTES / 2 + 1;
        for id in ["a", "b", "c"] {
            records.hold(held("runs", id, big));
        }
        assert_eq!(ids(&records), ["runs/b", "runs/c"], "two halves and a byte are past the bound");
        records.hold(held("runs", "huge", 2 * HELD_BYTES));
        assert_eq!(ids(&records), ["runs/c", "runs/huge"], "the record in use is kept whatever its size");
        for id in ["c", "huge"] {
            records.drop_held("runs", id);
        }
        assert_eq!((records.held_bytes, records.held.len()), (0, 0));
    }
}
