//! Revisioned records in the file backend, one JSON file each, a collection read on first use;
//! and record logs, one JSONL file each beside the collection's records
//! (`records/<collection>/<log>.jsonl`), appended to and read without the index.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde_json::Value;

use super::ordered::{Listed, Ordered};
use super::{FileStore, Index, Inner, RECORDS, fsio, owned};
use crate::error::StoreError;
use crate::json_text::JsonText;
use crate::model::{self, ImportOutcome, Record};
use crate::page::{Page, PageRequest};
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

impl Listed for Held {
    fn list_key(&self) -> (i64, String) {
        self.record.list_key()
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

impl Inner {
    fn record_path(&self, collection: &str, id: &str) -> PathBuf {
        super::path_under(&self.dir, &[RECORDS, collection, id], ".json")
    }

    fn log_path(&self, collection: &str, log: &str) -> PathBuf {
        super::path_under(&self.dir, &[RECORDS, collection, log], ".jsonl")
    }

    /// Read `collection`'s records on its first use (collections are not read at open); a name
    /// not found on disk at open is never read, so no untrusted name reaches the file system.
    fn load_collection(&self, idx: &mut Index, collection: &str) -> Result<(), StoreError> {
        if !idx.unread_collections.contains(collection) {
            return Ok(());
        }
        let mut loaded = Ordered::default();
        for path in super::json_files(&self.dir.join(RECORDS).join(collection))? {
            if let Some(record) = fsio::read_json::<Record>(&path)? {
                loaded.insert(record.id.clone(), Held { record, text: None });
            }
        }
        idx.unread_collections.remove(collection);
        if !loaded.is_empty() {
            idx.records.insert(collection.to_owned(), loaded);
        }
        Ok(())
    }

    /// Write `held` and keep it in the index.
    fn write_record(&self, idx: &mut Index, held: Held) -> Result<(), StoreError> {
        let record = &held.record;
        let path = self.record_path(&record.collection, &record.id);
        // A collection holding a record has its folder already: an update (a loop run's
        // checkpoint) costs the file's write, not a folder's creation and fsync as well.
        if !idx.records.contains_key(&record.collection)
            && let Some(dir) = path.parent()
        {
            fsio::create_dir_durable(dir)?;
        }
        let bytes = match &held.text {
            // Bounded when it was made.
            Some(text) => record_file(record, text)?,
            None => {
                let bytes = fsio::json_bytes(record)?;
                // The value's compact JSON is no longer than the whole record written pretty:
                // only a record written longer than the bound may hold a value past it.
                if bytes.len() > model::MAX_RECORD_BYTES {
                    model::check_size("record", &record.value, model::MAX_RECORD_BYTES)?;
                }
                bytes
            }
        };
        fsio::write_atomic(&path, &bytes)?;
        let (collection, id) = (record.collection.clone(), record.id.clone());
        idx.records.entry(collection).or_default().insert(id, held);
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
        self.load_collection(&mut idx, collection)?;
        let current = idx.records.get(collection).and_then(|c| c.get(id)).map(|held| &held.record);
        if expected.is_some_and(|e| e != current.map_or(0, |r| r.revision)) {
            // A refused write says first that its value is too large, as on every store.
            model::check_size("record", &value, model::MAX_RECORD_BYTES)?;
        }
        let next = model::next_record(current, collection, id, value, expected, now)?;
        let answer = answer(&next);
        self.write_record(&mut idx, Held { record: next, text })?;
        Ok(answer)
    }

    fn delete_record(&self, collection: &str, id: &str, expected: Option<u64>) -> Result<bool, StoreError> {
        let mut idx = self.index();
        self.load_collection(&mut idx, collection)?;
        let Some(current) = idx.records.get(collection).and_then(|c| c.get(id)) else { return Ok(false) };
        model::check_revision("record", &format!("{collection}/{id}"), expected, current.record.revision)?;
        let path = self.record_path(collection, id);
        std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        fsio::sync_dir(&self.dir.join(RECORDS).join(collection))?;
        if let Some(c) = idx.records.get_mut(collection) {
            c.remove(id);
            if c.is_empty() {
                idx.records.remove(collection);
            }
        }
        Ok(true)
    }

    fn import_record(&self, record: &Record) -> Result<ImportOutcome, StoreError> {
        model::check_record_write(&record.collection, &record.id, &record.value)?;
        let mut idx = self.index();
        self.load_collection(&mut idx, &record.collection)?;
        if let Some(existing) = idx.records.get(&record.collection).and_then(|c| c.get(&record.id)) {
            return model::same_import("record", &record.id, &existing.record()?, record);
        }
        self.write_record(&mut idx, Held { record: record.clone(), text: None })?;
        Ok(ImportOutcome::Imported)
    }
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
        self.blocking(move |s| {
            let mut idx = s.index();
            s.load_collection(&mut idx, &collection)?;
            idx.records.get(&collection).and_then(|c| c.get(&id)).map(Held::record).transpose()
        })
        .await
    }

    async fn list_records(&self, collection: &str, page: &PageRequest) -> Result<Page<Record>, StoreError> {
        let (collection, page) = (owned(collection), page.clone());
        self.blocking(move |s| {
            let mut idx = s.index();
            s.load_collection(&mut idx, &collection)?;
            let page = idx.records.get(&collection).unwrap_or(&Ordered::default()).page(&page, |_| true)?;
            let items = page.items.iter().map(Held::record).collect::<Result<_, _>>()?;
            Ok(Page { items, next: page.next })
        })
        .await
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
        self.blocking(|s| {
            let mut idx = s.index();
            let unread: Vec<String> = idx.unread_collections.iter().cloned().collect();
            for collection in unread {
                s.load_collection(&mut idx, &collection)?;
            }
            Ok(idx.records.keys().cloned().collect())
        })
        .await
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
        self.blocking(move |_| append_line(&path, &entry)).await
    }

    async fn read_log(&self, collection: &str, log: &str) -> Result<Vec<Value>, StoreError> {
        check_log(collection, log)?;
        let path = self.inner.log_path(collection, log);
        self.blocking(move |_| match fsio::read_bounded(&path)? {
            Some(bytes) => fsio::parse_lines(&path, &bytes),
            None => Ok(Vec::new()),
        })
        .await
    }

    async fn clear_log(&self, collection: &str, log: &str) -> Result<(), StoreError> {
        check_log(collection, log)?;
        let path = self.inner.log_path(collection, log);
        self.blocking(move |_| clear_file(&path)).await
    }
}

/// Append `entry` as one line to the log at `path`: one write, then an fdatasync; a log new (or
/// emptied) before the write also has its directory entry fsynced, its folder made on first
/// use. A write that fails is cut off again, so a later append never continues a torn line.
/// Holds no lock: a log has one writer.
fn append_line(path: &Path, entry: &JsonText) -> Result<(), StoreError> {
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
    if let Err(e) = file.write_all(&line).and_then(|()| file.sync_data()) {
        // Best effort: the append failed either way.
        let _ = file.set_len(before);
        return Err(io(e));
    }
    if before == 0 {
        fsio::sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

/// Empty the log at `path` if it exists (see [`RecordStore::clear_log`]: not fsynced).
fn clear_file(path: &Path) -> Result<(), StoreError> {
    match File::options().write(true).open(path) {
        Ok(file) => file.set_len(0).map_err(|e| StoreError::io(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(path, e)),
    }
}
