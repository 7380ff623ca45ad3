//! The default backend: JSON and JSONL files under `.polpo/`.
//!
//! ```text
//! .polpo/sessions/<id>/session.json + messages.jsonl
//! .polpo/runs/<id>/run.json + events.jsonl + checkpoint.json + lease.json
//! .polpo/effects/<sha256(key)>.json
//! .polpo/records/<collection>/<id>.json
//! .polpo/.runtime/store.lock
//! ```
//!
//! The files are the truth. An in-memory index of sessions, runs, leases and effects (loaded
//! at open, reconciled with the journals) makes lookups and listings cheap; journals are read
//! from disk. All writes in one process are serialised by one mutex, and the `flock` keeps a
//! second process out.

mod fsio;
mod journal;
mod lock;

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::clock::{Clock, now_ms};
use crate::error::StoreError;
use crate::model::{
    self, Checkpoint, Effect, EffectClaim, EffectStatus, ImportOutcome, Lease, MessagesAppended, NewMessage, NewRun, NewRunEvent, NewSession, Record, Run,
    RunEvent, RunFilter, RunStatus, Session, SessionFilter, SessionPatch, StoredMessage,
};
use crate::page::{Cursor, Page, PageRequest};
use crate::traits::{EffectLedger, RecordStore, RunStore, SessionStore};
use journal::Journal;

/// The file backend. Cheap to clone; all clones share one index and one lock.
#[derive(Debug, Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    index: Mutex<Index>,
    _lock: lock::StoreLock,
}

#[derive(Debug, Default)]
struct Index {
    sessions: HashMap<String, Session>,
    runs: HashMap<String, Run>,
    leases: HashMap<String, Lease>,
    effects: HashMap<String, Effect>,
    /// Offsets of each session's `messages.jsonl`.
    messages: HashMap<String, Journal>,
    /// Offsets of each run's `events.jsonl`.
    events: HashMap<String, Journal>,
    /// Records by collection, then id.
    records: BTreeMap<String, HashMap<String, Record>>,
}

impl FileStore {
    /// Open (creating if needed) the store in `data_dir` (a project's `.polpo/`), taking the
    /// process lock and repairing journals torn by a crash.
    pub async fn open(data_dir: &Path, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        let dir = data_dir.to_owned();
        let inner = tokio::task::spawn_blocking(move || Inner::open(dir, clock)).await.map_err(join_error)??;
        Ok(FileStore { inner: Arc::new(inner) })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner)).await.map_err(join_error)?
    }
}

fn join_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Io { path: PathBuf::new(), source: std::io::Error::other(e.to_string()) }
}

const SESSIONS: &str = "sessions";
const RUNS: &str = "runs";
const EFFECTS: &str = "effects";
const RECORDS: &str = "records";

impl Inner {
    fn open(dir: PathBuf, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        fsio::create_dir_durable(&dir)?;
        let lock = lock::StoreLock::acquire(&dir)?;
        for sub in [SESSIONS, RUNS, EFFECTS, RECORDS] {
            fsio::create_dir_durable(&dir.join(sub))?;
        }
        let index = Index::load(&dir)?;
        Ok(Inner { dir, clock, index: Mutex::new(index), _lock: lock })
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now(&self) -> DateTime<Utc> {
        now_ms(self.clock.as_ref())
    }

    fn session_dir(&self, id: &str) -> PathBuf {
        self.dir.join(SESSIONS).join(id)
    }

    fn run_dir(&self, id: &str) -> PathBuf {
        self.dir.join(RUNS).join(id)
    }

    fn effect_path(&self, key: &str) -> PathBuf {
        self.dir.join(EFFECTS).join(format!("{}.json", hex::encode(Sha256::digest(key.as_bytes()))))
    }

    // ---- sessions ----

    fn create_session(&self, new: NewSession) -> Result<Session, StoreError> {
        let session = model::session_from_new(new, self.now())?;
        let mut idx = self.index();
        if idx.sessions.contains_key(&session.id) {
            return Err(StoreError::Conflict(format!("session `{}` already exists", session.id)));
        }
        let dir = self.session_dir(&session.id);
        fsio::create_dir_durable(&dir)?;
        // Empty even if a crash mid-delete left an old journal under this id.
        fsio::write_atomic(&dir.join("messages.jsonl"), b"")?;
        fsio::write_json(&dir.join("session.json"), &session)?;
        idx.messages.insert(session.id.clone(), Journal::default());
        idx.sessions.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    fn update_session(&self, id: &str, patch: SessionPatch, expected: Option<u64>) -> Result<Session, StoreError> {
        let now = self.now();
        let mut idx = self.index();
        let mut session = idx.sessions.get(id).cloned().ok_or_else(|| StoreError::not_found("session", id))?;
        model::check_revision("session", id, expected, session.revision)?;
        model::apply_patch(&mut session, patch, now)?;
        fsio::write_json(&self.session_dir(id).join("session.json"), &session)?;
        idx.sessions.insert(id.to_owned(), session.clone());
        Ok(session)
    }

    fn append_messages(&self, id: &str, messages: Vec<NewMessage>, expected: Option<u64>) -> Result<MessagesAppended, StoreError> {
        let now = self.now();
        let mut idx = self.index();
        let mut session = idx.sessions.get(id).cloned().ok_or_else(|| StoreError::not_found("session", id))?;
        model::check_revision("session", id, expected, session.revision)?;
        let stored = model::apply_append(&mut session, messages, now)?;
        let dir = self.session_dir(id);
        // The journal line is the truth; session.json is reconciled from it after a crash.
        idx.messages.entry(id.to_owned()).or_default().append(&dir.join("messages.jsonl"), &stored)?;
        fsio::write_json(&dir.join("session.json"), &session)?;
        idx.sessions.insert(id.to_owned(), session.clone());
        Ok(MessagesAppended { session, messages: stored })
    }

    fn list_messages(&self, id: &str, page: &PageRequest) -> Result<Page<StoredMessage>, StoreError> {
        let after = page.after.as_ref().map(Cursor::seq).transpose()?.unwrap_or(0);
        let size = page.size();
        let window = {
            let idx = self.index();
            if !idx.sessions.contains_key(id) {
                return Err(StoreError::not_found("session", id));
            }
            idx.messages.get(id).and_then(|j| j.window(after, size + 1))
        };
        let items: Vec<StoredMessage> = match window {
            Some(w) => w.read(&self.session_dir(id).join("messages.jsonl"))?,
            None => Vec::new(),
        };
        Ok(Page::from_overfetch(items, size, |m| Cursor::at_seq(m.seq)))
    }

    fn recent_messages(&self, id: &str, limit: u32) -> Result<Vec<StoredMessage>, StoreError> {
        let size = PageRequest::first(limit).size();
        let window = {
            let idx = self.index();
            let journal = idx.messages.get(id).filter(|_| idx.sessions.contains_key(id));
            let journal = journal.ok_or_else(|| StoreError::not_found("session", id))?;
            journal.window(journal.count().saturating_sub(size as u64), size)
        };
        match window {
            Some(w) => w.read(&self.session_dir(id).join("messages.jsonl")),
            None => Ok(Vec::new()),
        }
    }

    fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        model::validate_id("session", id)?;
        let mut idx = self.index();
        if idx.sessions.remove(id).is_none() {
            return Ok(false);
        }
        idx.messages.remove(id);
        let dir = self.session_dir(id);
        // Without session.json the directory is ignored at load, so a crash mid-delete is safe.
        let head = dir.join("session.json");
        std::fs::remove_file(&head).map_err(|e| StoreError::io(&head, e))?;
        fsio::sync_dir(&dir)?;
        std::fs::remove_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        fsio::sync_dir(&self.dir.join(SESSIONS))?;
        Ok(true)
    }

    fn import_session(&self, session: &Session, messages: &[StoredMessage]) -> Result<ImportOutcome, StoreError> {
        model::check_session_import(session, messages)?;
        let mut idx = self.index();
        let dir = self.session_dir(&session.id);
        let journal_path = dir.join("messages.jsonl");
        if let Some(existing) = idx.sessions.get(&session.id) {
            model::same_import("session", &session.id, existing, session)?;
            let stored: Vec<StoredMessage> = match idx.messages.get(&session.id).and_then(|j| j.window(0, messages.len())) {
                Some(w) => w.read(&journal_path)?,
                None => Vec::new(),
            };
            return model::same_import("session", &session.id, &stored.as_slice(), &messages);
        }
        fsio::create_dir_durable(&dir)?;
        fsio::write_atomic(&journal_path, b"")?;
        let mut journal = Journal::default();
        if !messages.is_empty() {
            journal.append(&journal_path, messages)?;
        }
        // The header goes last: without it a half-imported directory is ignored at load.
        fsio::write_json(&dir.join("session.json"), session)?;
        idx.messages.insert(session.id.clone(), journal);
        idx.sessions.insert(session.id.clone(), session.clone());
        Ok(ImportOutcome::Imported)
    }

    // ---- runs ----

    fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
        let now = self.now();
        let id = model::id_or_new("run", new.id)?;
        let run = Run {
            id,
            agent: new.agent,
            session_id: new.session_id,
            status: RunStatus::Running,
            created_at: now,
            updated_at: now,
            error: None,
            revision: 1,
            last_seq: 0,
        };
        let mut idx = self.index();
        if idx.runs.contains_key(&run.id) {
            return Err(StoreError::Conflict(format!("run `{}` already exists", run.id)));
        }
        let dir = self.run_dir(&run.id);
        fsio::create_dir_durable(&dir)?;
        fsio::write_atomic(&dir.join("events.jsonl"), b"")?;
        fsio::write_json(&dir.join("run.json"), &run)?;
        idx.events.insert(run.id.clone(), Journal::default());
        idx.runs.insert(run.id.clone(), run.clone());
        Ok(run)
    }

    fn update_run_status(&self, id: &str, status: RunStatus, error: Option<String>, expected: Option<u64>) -> Result<Run, StoreError> {
        let now = self.now();
        let mut idx = self.index();
        let mut run = idx.runs.get(id).cloned().ok_or_else(|| StoreError::not_found("run", id))?;
        model::check_revision("run", id, expected, run.revision)?;
        run.status.check_transition(status)?;
        run.status = status;
        run.error = error;
        run.revision += 1;
        run.updated_at = now;
        fsio::write_json(&self.run_dir(id).join("run.json"), &run)?;
        idx.runs.insert(id.to_owned(), run.clone());
        Ok(run)
    }

    fn append_events(&self, run_id: &str, new: Vec<NewRunEvent>) -> Result<RangeInclusive<u64>, StoreError> {
        model::encode_event_batch(&new)?;
        let now = self.now();
        let mut idx = self.index();
        let Index { runs, events, .. } = &mut *idx;
        let run = runs.get_mut(run_id).ok_or_else(|| StoreError::not_found("run", run_id))?;
        let first = run.last_seq + 1;
        let batch: Vec<RunEvent> = new
            .into_iter()
            .zip(first..)
            .map(|(e, seq)| RunEvent { run_id: run_id.to_owned(), seq, event_type: e.event_type, data: e.data, created_at: now })
            .collect();
        let last = first + batch.len() as u64 - 1;
        events.entry(run_id.to_owned()).or_default().append(&self.run_dir(run_id).join("events.jsonl"), &batch)?;
        run.last_seq = last;
        run.updated_at = now;
        Ok(first..=last)
    }

    fn events_after(&self, run_id: &str, after: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
        let size = PageRequest::first(limit).size();
        let window = {
            let idx = self.index();
            if !idx.runs.contains_key(run_id) {
                return Err(StoreError::not_found("run", run_id));
            }
            idx.events.get(run_id).and_then(|j| j.window(after, size))
        };
        match window {
            Some(w) => w.read(&self.run_dir(run_id).join("events.jsonl")),
            None => Ok(Vec::new()),
        }
    }

    fn put_checkpoint(&self, run_id: &str, seq: u64, state: Value) -> Result<Checkpoint, StoreError> {
        model::check_size("checkpoint", &state, model::MAX_CHECKPOINT_BYTES)?;
        let now = self.now();
        let idx = self.index();
        if !idx.runs.contains_key(run_id) {
            return Err(StoreError::not_found("run", run_id));
        }
        let path = self.run_dir(run_id).join("checkpoint.json");
        if let Some(old) = fsio::read_json::<Checkpoint>(&path)?
            && old.seq > seq
        {
            return Err(StoreError::Conflict(format!("run `{run_id}` has a newer checkpoint (seq {})", old.seq)));
        }
        let checkpoint = Checkpoint { run_id: run_id.to_owned(), seq, state, created_at: now };
        fsio::write_json(&path, &checkpoint)?;
        Ok(checkpoint)
    }

    fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        model::validate_id("run", run_id)?;
        fsio::read_json(&self.run_dir(run_id).join("checkpoint.json"))
    }

    fn import_run(&self, run: &Run, events: &[RunEvent], checkpoint: Option<&Checkpoint>) -> Result<ImportOutcome, StoreError> {
        model::check_run_import(run, events, checkpoint)?;
        let mut idx = self.index();
        let dir = self.run_dir(&run.id);
        let journal_path = dir.join("events.jsonl");
        if let Some(existing) = idx.runs.get(&run.id) {
            model::same_import("run", &run.id, existing, run)?;
            let stored: Vec<RunEvent> = match idx.events.get(&run.id).and_then(|j| j.window(0, events.len())) {
                Some(w) => w.read(&journal_path)?,
                None => Vec::new(),
            };
            model::same_import("run", &run.id, &stored.as_slice(), &events)?;
            let stored_checkpoint = fsio::read_json::<Checkpoint>(&dir.join("checkpoint.json"))?;
            return model::same_import("run", &run.id, &stored_checkpoint.as_ref(), &checkpoint);
        }
        fsio::create_dir_durable(&dir)?;
        fsio::write_atomic(&journal_path, b"")?;
        let mut journal = Journal::default();
        if !events.is_empty() {
            journal.append(&journal_path, events)?;
        }
        if let Some(c) = checkpoint {
            fsio::write_json(&dir.join("checkpoint.json"), c)?;
        }
        fsio::write_json(&dir.join("run.json"), run)?;
        idx.events.insert(run.id.clone(), journal);
        idx.runs.insert(run.id.clone(), run.clone());
        Ok(ImportOutcome::Imported)
    }

    fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        if !idx.runs.contains_key(run_id) {
            return Err(StoreError::not_found("run", run_id));
        }
        model::lease_grantable(idx.leases.get(run_id), owner, now)?;
        let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: now + ttl };
        fsio::write_json(&self.run_dir(run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id.to_owned(), lease.clone());
        Ok(lease)
    }

    fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        let next = idx
            .runs
            .values()
            .filter(|r| r.status == RunStatus::Running)
            .filter(|r| idx.leases.get(&r.id).is_none_or(|l| l.expires_at <= now))
            .min_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
            .map(|r| r.id.clone());
        let Some(run_id) = next else { return Ok(None) };
        let lease = Lease { run_id: run_id.clone(), owner: owner.to_owned(), expires_at: now + ttl };
        fsio::write_json(&self.run_dir(&run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id, lease.clone());
        Ok(Some(lease))
    }

    fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let ttl = model::lease_ttl(ttl)?;
        let now = self.now();
        let mut idx = self.index();
        match idx.leases.get(run_id) {
            Some(l) if l.owner == owner => {}
            _ => return Err(StoreError::LeaseLost { run_id: run_id.to_owned(), owner: owner.to_owned() }),
        }
        let lease = Lease { run_id: run_id.to_owned(), owner: owner.to_owned(), expires_at: now + ttl };
        fsio::write_json(&self.run_dir(run_id).join("lease.json"), &lease)?;
        idx.leases.insert(run_id.to_owned(), lease.clone());
        Ok(lease)
    }

    fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        let mut idx = self.index();
        if idx.leases.get(run_id).is_some_and(|l| l.owner == owner) {
            let path = self.run_dir(run_id).join("lease.json");
            std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
            fsio::sync_dir(&self.run_dir(run_id))?;
            idx.leases.remove(run_id);
        }
        Ok(())
    }

    fn expired_runs(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
        let now = self.now();
        let idx = self.index();
        let mut expired: Vec<Lease> = idx
            .leases
            .values()
            .filter(|l| l.expires_at <= now)
            .filter(|l| idx.runs.get(&l.run_id).is_some_and(|r| matches!(r.status, RunStatus::Running | RunStatus::Paused)))
            .cloned()
            .collect();
        expired.sort_by(|a, b| (a.expires_at, &a.run_id).cmp(&(b.expires_at, &b.run_id)));
        expired.truncate(PageRequest::first(limit).size());
        Ok(expired)
    }

    // ---- records ----

    fn record_path(&self, collection: &str, id: &str) -> PathBuf {
        self.dir.join(RECORDS).join(collection).join(format!("{id}.json"))
    }

    fn write_record(&self, idx: &mut Index, record: Record) -> Result<Record, StoreError> {
        let path = self.record_path(&record.collection, &record.id);
        if let Some(dir) = path.parent() {
            fsio::create_dir_durable(dir)?;
        }
        fsio::write_json(&path, &record)?;
        idx.records.entry(record.collection.clone()).or_default().insert(record.id.clone(), record.clone());
        Ok(record)
    }

    fn put_record(&self, collection: &str, id: &str, value: Value, expected: Option<u64>) -> Result<Record, StoreError> {
        model::check_record_write(collection, id, &value)?;
        let now = self.now();
        let mut idx = self.index();
        let current = idx.records.get(collection).and_then(|c| c.get(id));
        let next = model::next_record(current, collection, id, value, expected, now)?;
        self.write_record(&mut idx, next)
    }

    fn delete_record(&self, collection: &str, id: &str, expected: Option<u64>) -> Result<bool, StoreError> {
        let mut idx = self.index();
        let Some(current) = idx.records.get(collection).and_then(|c| c.get(id)) else { return Ok(false) };
        model::check_revision("record", &format!("{collection}/{id}"), expected, current.revision)?;
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
        if let Some(existing) = idx.records.get(&record.collection).and_then(|c| c.get(&record.id)) {
            return model::same_import("record", &record.id, existing, record);
        }
        self.write_record(&mut idx, record.clone())?;
        Ok(ImportOutcome::Imported)
    }

    // ---- effects ----

    fn record_effect_intent(&self, key: &str) -> Result<EffectClaim, StoreError> {
        model::validate_effect_key(key)?;
        let now = self.now();
        let mut idx = self.index();
        if let Some(e) = idx.effects.get(key) {
            return Ok(match e.status {
                EffectStatus::Pending => EffectClaim::Pending(e.clone()),
                EffectStatus::Done => EffectClaim::Done(e.clone()),
            });
        }
        let effect = Effect { key: key.to_owned(), status: EffectStatus::Pending, result: None, created_at: now, completed_at: None };
        fsio::write_json(&self.effect_path(key), &effect)?;
        idx.effects.insert(key.to_owned(), effect);
        Ok(EffectClaim::Fresh)
    }

    fn import_effect(&self, effect: &Effect) -> Result<ImportOutcome, StoreError> {
        model::validate_effect_key(&effect.key)?;
        let mut idx = self.index();
        if let Some(existing) = idx.effects.get(&effect.key) {
            return model::same_import("effect", &effect.key, existing, effect);
        }
        fsio::write_json(&self.effect_path(&effect.key), effect)?;
        idx.effects.insert(effect.key.clone(), effect.clone());
        Ok(ImportOutcome::Imported)
    }

    fn record_effect_result(&self, key: &str, result: Value) -> Result<Effect, StoreError> {
        let now = self.now();
        let mut idx = self.index();
        let mut effect = idx.effects.get(key).cloned().ok_or_else(|| StoreError::not_found("effect", key))?;
        if effect.status == EffectStatus::Done {
            return model::same_result(effect, &result);
        }
        effect.status = EffectStatus::Done;
        effect.result = Some(result);
        effect.completed_at = Some(now);
        fsio::write_json(&self.effect_path(key), &effect)?;
        idx.effects.insert(key.to_owned(), effect.clone());
        Ok(effect)
    }
}

/// Newest first by (creation time, id), resuming after a cursor.
fn page_newest_first<T: Clone>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> (i64, String),
    page: &PageRequest,
) -> Result<Page<T>, StoreError> {
    let after = page.after.as_ref().map(Cursor::time_key).transpose()?;
    items.sort_by_key(|b| std::cmp::Reverse(key(b)));
    let size = page.size();
    let items: Vec<T> = items.into_iter().filter(|i| after.as_ref().is_none_or(|a| key(i) < *a)).take(size + 1).collect();
    Ok(Page::from_overfetch(items, size, |i| {
        let (ms, id) = key(i);
        Cursor::at_time(ms, &id)
    }))
}

impl Index {
    /// Read every session, run, lease and effect, cutting torn journal tails and reconciling
    /// counts with the journals (a crash between the journal append and the header rewrite
    /// leaves the header behind).
    fn load(dir: &Path) -> Result<Index, StoreError> {
        let mut index = Index::default();
        for entry in subdirs(&dir.join(SESSIONS))? {
            let Some(mut session) = fsio::read_json::<Session>(&entry.join("session.json"))? else { continue };
            let (journal, last) = Journal::open::<StoredMessage>(&entry.join("messages.jsonl"))?;
            let count = journal.count();
            if count != session.message_count {
                session.revision += count.abs_diff(session.message_count);
                session.message_count = count;
                if let Some(last) = last {
                    session.updated_at = session.updated_at.max(last.ts);
                }
            }
            index.messages.insert(session.id.clone(), journal);
            index.sessions.insert(session.id.clone(), session);
        }
        for entry in subdirs(&dir.join(RUNS))? {
            let Some(mut run) = fsio::read_json::<Run>(&entry.join("run.json"))? else { continue };
            let (journal, last) = Journal::open::<RunEvent>(&entry.join("events.jsonl"))?;
            run.last_seq = journal.count();
            if let Some(last) = last {
                run.updated_at = run.updated_at.max(last.created_at);
            }
            index.events.insert(run.id.clone(), journal);
            if let Some(lease) = fsio::read_json::<Lease>(&entry.join("lease.json"))? {
                index.leases.insert(run.id.clone(), lease);
            }
            index.runs.insert(run.id.clone(), run);
        }
        for collection in subdirs(&dir.join(RECORDS))? {
            for entry in std::fs::read_dir(&collection).map_err(|e| StoreError::io(&collection, e))? {
                let path = entry.map_err(|e| StoreError::io(&collection, e))?.path();
                if path.extension().is_some_and(|x| x == "json")
                    && let Some(record) = fsio::read_json::<Record>(&path)?
                {
                    index.records.entry(record.collection.clone()).or_default().insert(record.id.clone(), record);
                }
            }
        }
        let effects = dir.join(EFFECTS);
        for entry in std::fs::read_dir(&effects).map_err(|e| StoreError::io(&effects, e))? {
            let path = entry.map_err(|e| StoreError::io(&effects, e))?.path();
            if path.extension().is_some_and(|x| x == "json")
                && let Some(effect) = fsio::read_json::<Effect>(&path)?
            {
                index.effects.insert(effect.key.clone(), effect);
            }
        }
        Ok(index)
    }
}

fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        if entry.file_type().map_err(|e| StoreError::io(entry.path(), e))?.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

fn owned(s: &str) -> String {
    s.to_owned()
}

#[async_trait]
impl SessionStore for FileStore {
    async fn create_session(&self, new: NewSession) -> Result<Session, StoreError> {
        self.blocking(move |s| s.create_session(new)).await
    }

    async fn get_session(&self, id: &str) -> Result<Option<Session>, StoreError> {
        Ok(self.inner.index().sessions.get(id).cloned())
    }

    async fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>, StoreError> {
        let items: Vec<Session> = self
            .inner
            .index()
            .sessions
            .values()
            .filter(|s| filter.agent.as_ref().is_none_or(|a| *a == s.agent))
            .filter(|s| filter.user.is_none() || filter.user == s.user)
            .cloned()
            .collect();
        page_newest_first(items, |s| (s.created_at.timestamp_millis(), s.id.clone()), page)
    }

    async fn update_session(&self, id: &str, patch: SessionPatch, expected_revision: Option<u64>) -> Result<Session, StoreError> {
        let id = owned(id);
        self.blocking(move |s| s.update_session(&id, patch, expected_revision)).await
    }

    async fn append_messages(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        expected_revision: Option<u64>,
    ) -> Result<MessagesAppended, StoreError> {
        let id = owned(session_id);
        self.blocking(move |s| s.append_messages(&id, messages, expected_revision)).await
    }

    async fn list_messages(&self, session_id: &str, page: &PageRequest) -> Result<Page<StoredMessage>, StoreError> {
        let (id, page) = (owned(session_id), page.clone());
        self.blocking(move |s| s.list_messages(&id, &page)).await
    }

    async fn recent_messages(&self, session_id: &str, limit: u32) -> Result<Vec<StoredMessage>, StoreError> {
        let id = owned(session_id);
        self.blocking(move |s| s.recent_messages(&id, limit)).await
    }

    async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        let id = owned(id);
        self.blocking(move |s| s.delete_session(&id)).await
    }

    async fn import_session(&self, session: &Session, messages: &[StoredMessage]) -> Result<ImportOutcome, StoreError> {
        let (session, messages) = (session.clone(), messages.to_vec());
        self.blocking(move |s| s.import_session(&session, &messages)).await
    }
}

#[async_trait]
impl RunStore for FileStore {
    async fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
        self.blocking(move |s| s.create_run(new)).await
    }

    async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
        Ok(self.inner.index().runs.get(id).cloned())
    }

    async fn list_runs(&self, filter: &RunFilter, page: &PageRequest) -> Result<Page<Run>, StoreError> {
        let items: Vec<Run> = self
            .inner
            .index()
            .runs
            .values()
            .filter(|r| filter.agent.as_ref().is_none_or(|a| *a == r.agent))
            .filter(|r| filter.session_id.is_none() || filter.session_id == r.session_id)
            .filter(|r| filter.status.is_none_or(|st| st == r.status))
            .cloned()
            .collect();
        page_newest_first(items, |r| (r.created_at.timestamp_millis(), r.id.clone()), page)
    }

    async fn update_run_status(
        &self,
        id: &str,
        status: RunStatus,
        error: Option<String>,
        expected_revision: Option<u64>,
    ) -> Result<Run, StoreError> {
        let id = owned(id);
        self.blocking(move |s| s.update_run_status(&id, status, error, expected_revision)).await
    }

    async fn append_events(&self, run_id: &str, events: Vec<NewRunEvent>) -> Result<RangeInclusive<u64>, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.append_events(&id, events)).await
    }

    async fn events_after(&self, run_id: &str, after_seq: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.events_after(&id, after_seq, limit)).await
    }

    async fn put_checkpoint(&self, run_id: &str, seq: u64, state: Value) -> Result<Checkpoint, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.put_checkpoint(&id, seq, state)).await
    }

    async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let id = owned(run_id);
        self.blocking(move |s| s.latest_checkpoint(&id)).await
    }

    async fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let (id, owner) = (owned(run_id), owned(owner));
        self.blocking(move |s| s.claim_run(&id, &owner, ttl)).await
    }

    async fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let owner = owned(owner);
        self.blocking(move |s| s.claim_next_run(&owner, ttl)).await
    }

    async fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
        let (id, owner) = (owned(run_id), owned(owner));
        self.blocking(move |s| s.renew_lease(&id, &owner, ttl)).await
    }

    async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
        let (id, owner) = (owned(run_id), owned(owner));
        self.blocking(move |s| s.release_lease(&id, &owner)).await
    }

    async fn expired_runs(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
        self.inner.expired_runs(limit)
    }

    async fn import_run(&self, run: &Run, events: &[RunEvent], checkpoint: Option<&Checkpoint>) -> Result<ImportOutcome, StoreError> {
        let (run, events, checkpoint) = (run.clone(), events.to_vec(), checkpoint.cloned());
        self.blocking(move |s| s.import_run(&run, &events, checkpoint.as_ref())).await
    }
}

#[async_trait]
impl RecordStore for FileStore {
    async fn put_record(&self, collection: &str, id: &str, value: Value, expected_revision: Option<u64>) -> Result<Record, StoreError> {
        let (collection, id) = (owned(collection), owned(id));
        self.blocking(move |s| s.put_record(&collection, &id, value, expected_revision)).await
    }

    async fn get_record(&self, collection: &str, id: &str) -> Result<Option<Record>, StoreError> {
        Ok(self.inner.index().records.get(collection).and_then(|c| c.get(id)).cloned())
    }

    async fn list_records(&self, collection: &str, page: &PageRequest) -> Result<Page<Record>, StoreError> {
        let items: Vec<Record> =
            self.inner.index().records.get(collection).map(|c| c.values().cloned().collect()).unwrap_or_default();
        page_newest_first(items, |r| (r.created_at.timestamp_millis(), r.id.clone()), page)
    }

    async fn delete_record(&self, collection: &str, id: &str, expected_revision: Option<u64>) -> Result<bool, StoreError> {
        let (collection, id) = (owned(collection), owned(id));
        self.blocking(move |s| s.delete_record(&collection, &id, expected_revision)).await
    }

    async fn collections(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.inner.index().records.keys().cloned().collect())
    }

    async fn import_record(&self, record: &Record) -> Result<ImportOutcome, StoreError> {
        let record = record.clone();
        self.blocking(move |s| s.import_record(&record)).await
    }
}

#[async_trait]
impl EffectLedger for FileStore {
    async fn record_effect_intent(&self, key: &str) -> Result<EffectClaim, StoreError> {
        let key = owned(key);
        self.blocking(move |s| s.record_effect_intent(&key)).await
    }

    async fn record_effect_result(&self, key: &str, result: Value) -> Result<Effect, StoreError> {
        let key = owned(key);
        self.blocking(move |s| s.record_effect_result(&key, result)).await
    }

    async fn get_effect(&self, key: &str) -> Result<Option<Effect>, StoreError> {
        Ok(self.inner.index().effects.get(key).cloned())
    }

    async fn list_effects(&self, page: &PageRequest) -> Result<Page<Effect>, StoreError> {
        let after = page.after.as_ref().map(Cursor::key).transpose()?;
        let size = page.size();
        let mut items: Vec<Effect> = self
            .inner
            .index()
            .effects
            .values()
            .filter(|e| after.as_ref().is_none_or(|a| e.key > *a))
            .cloned()
            .collect();
        items.sort_by(|a, b| a.key.cmp(&b.key));
        items.truncate(size + 1);
        Ok(Page::from_overfetch(items, size, |e| Cursor::at_key(&e.key)))
    }

    async fn import_effect(&self, effect: &Effect) -> Result<ImportOutcome, StoreError> {
        let effect = effect.clone();
        self.blocking(move |s| s.import_effect(&effect)).await
    }
}
