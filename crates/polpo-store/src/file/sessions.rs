//! Sessions and their message journals in the file backend.

use async_trait::async_trait;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::{Deserialize, Serialize};

use super::order::{Key, LogSync};
use super::{FileStore, Inner, Journal, SessionGuard, SessionLock, fsio, owned};
use crate::error::StoreError;
use crate::model::{
    self, ImportOutcome, Lease, MessagesAppended, NewMessage, NewSession, Session, SessionFilter, SessionPatch,
    StoredMessage,
};
use crate::page::{Cursor, Page, PageRequest};
use crate::traits::SessionStore;

/// What a session list filters on, kept in the session order (`.index/sessions.*`) so
/// filtering opens no session file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SessionFields {
    agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

impl SessionFields {
    fn of(session: &Session) -> Self {
        SessionFields { agent: session.agent.clone(), user: session.user.clone(), owner: session.owner.clone() }
    }

    fn matches(&self, filter: &SessionFilter) -> bool {
        filter.agent.as_ref().is_none_or(|a| *a == self.agent)
            && (filter.user.is_none() || filter.user == self.user)
            && (filter.owner.is_none() || filter.owner == self.owner)
    }
}

fn key_of(session: &Session) -> Key {
    (session.created_at.timestamp_millis(), session.id.clone())
}

/// New sessions waiting to be written. Concurrent creates are written a batch at a time by one
/// blocking thread (the first create that finds no batch being written starts it): a batch
/// writes its listing keys with one write and is made durable by two syncs of the file system
/// whatever its size (see `Inner::write_new_sessions`), and no thread waits on another's
/// fsync. Each create used to take a blocking thread of its own, fsync its journal, header
/// and directory, and sleep twice on the fsyncs it shared with the others (issue 22).
#[derive(Debug, Default)]
pub(super) struct CreateQueue {
    waiting: Vec<QueuedCreate>,
    /// Whether a blocking thread is writing batches (and will take `waiting` next).
    writing: bool,
}

/// One create waiting in the [`CreateQueue`], answered through `reply`.
#[derive(Debug)]
struct QueuedCreate {
    new: NewSession,
    messages: Vec<NewMessage>,
    reply: Reply,
}

/// Where a queued create is answered.
type Reply = tokio::sync::oneshot::Sender<Result<MessagesAppended, StoreError>>;

/// Write the queued new sessions a batch at a time until none is left (on a blocking thread):
/// the sessions that arrive while a batch is written make the next one. The store is held
/// only while a batch is written (someone waiting for it holds it too), never while answering
/// or after the last answer.
fn write_queued_sessions(queue: &Mutex<CreateQueue>, inner: &Weak<Inner>) {
    /// Lets the next create start a writer if this one panics.
    struct Stopped<'a>(&'a Mutex<CreateQueue>);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.lock().unwrap_or_else(PoisonError::into_inner).writing = false;
            }
        }
    }
    let _stopped = Stopped(queue);
    loop {
        let batch = {
            let mut queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.waiting.is_empty() {
                queue.writing = false;
                return;
            }
            std::mem::take(&mut queue.waiting)
        };
        // Whoever queued the batch still holds the store; were it gone, dropping the batch
        // answers each create that the writer stopped.
        let Some(store) = inner.upgrade() else { continue };
        let answers = store.create_sessions(batch);
        drop(store);
        for (reply, answer) in answers {
            let _ = reply.send(answer);
        }
    }
}

/// A new session whose id is reserved (`guard`), to be written with its first messages.
struct NewEntry<'a> {
    guard: SessionGuard,
    session: &'a Session,
    messages: &'a [StoredMessage],
}

/// The same failure for each of the sessions of a batch that shared the failed write.
fn again(e: &StoreError) -> StoreError {
    match e {
        StoreError::Io { path, source } => {
            StoreError::Io { path: path.clone(), source: std::io::Error::new(source.kind(), source.to_string()) }
        }
        other => StoreError::Io { path: std::path::PathBuf::new(), source: std::io::Error::other(other.to_string()) },
    }
}

/// Every session's key, read from the session directories: builds the session order once
/// for a store that predates it.
pub(super) fn session_keys(sessions_dir: &Path) -> Result<BTreeMap<Key, SessionFields>, StoreError> {
    let mut keys = BTreeMap::new();
    for entry in std::fs::read_dir(sessions_dir).map_err(|e| StoreError::io(sessions_dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(sessions_dir, e))?;
        if let Some(session) = fsio::read_json::<Session>(&entry.path().join("session.json"))? {
            keys.insert(key_of(&session), SessionFields::of(&session));
        }
    }
    Ok(keys)
}

impl Inner {
    /// Claim a new session id: its lock goes into the index (so a second create or an import of
    /// the same id conflicts) and is held while the files are written outside the index lock;
    /// `None` when the session exists (on disk or being created).
    fn reserve_session(&self, id: &str) -> Result<Option<SessionGuard>, StoreError> {
        let mut idx = self.index();
        if idx.session_locks.contains_key(id) || self.load_session(&mut idx, id)? {
            return Ok(None);
        }
        let lock = SessionLock::default();
        idx.session_locks.insert(id.to_owned(), Arc::clone(&lock));
        // Fresh and only reachable through the index, which we hold: this never waits.
        Ok(Some(lock.blocking_lock_owned()))
    }

    /// Write the new sessions reserved in `entries` and make them visible, each answered on
    /// its own: a session whose files could not be written has its reservation given back, so
    /// its id can be created again. Shared by create (a batch of the sessions waiting, see
    /// [`CreateQueue`]) and import (one). Their listing keys are written with one write and
    /// made durable first, so a crash never leaves a session that lists cannot find.
    fn add_new_sessions(&self, entries: Vec<NewEntry<'_>>) -> Vec<Result<(), StoreError>> {
        // The keys are written under the order's lock and synced after it (see `write_new_sessions`).
        let keys = self.order().add(entries.iter().map(|e| (key_of(e.session), SessionFields::of(e.session))));
        let written = match keys {
            Ok(keys) => self.write_new_sessions(&entries, keys),
            Err(e) => entries.iter().map(|_| Err(again(&e))).collect(),
        };
        let mut results = Vec::with_capacity(entries.len());
        let mut idx = self.index();
        for (entry, written) in entries.into_iter().zip(written) {
            let id = &entry.session.id;
            match written {
                Ok(journal) => {
                    idx.messages.insert(id.clone(), journal);
                    idx.sessions.insert(id.clone(), entry.session.clone());
                    self.cached(&mut idx, id);
                    results.push(Ok(()));
                }
                Err(e) => {
                    idx.unreserve_session(id);
                    results.push(Err(e));
                }
            }
            drop(entry.guard);
        }
        results
    }

    /// Write new sessions' directories: for each the journal and a staged header; once those
    /// and the listing `keys` are durable (one sync of the file systems for the batch), the
    /// headers by rename, made durable by a second sync. A directory left by a crash
    /// mid-create or mid-delete (no header, so never read as a session) is cleared first, so
    /// no old journal leaks in. A session is acknowledged only after both syncs: its header,
    /// journal, directory and key are on disk, and a crash before leaves no header, so nothing
    /// half-written is ever read. Writing them one after another with an fsync each, in one
    /// thread, halved the throughput on a disk, where concurrent fsyncs share a journal commit.
    fn write_new_sessions(&self, entries: &[NewEntry<'_>], keys: LogSync) -> Vec<Result<Journal, StoreError>> {
        let staged: Vec<_> = entries.iter().map(|e| self.stage_new_session(e.session, e.messages)).collect();
        // The headers go last, after the keys: without one a half-written directory is never
        // read as a session, and a session is never found that lists cannot find. One sync of
        // the file system makes the keys, `sessions/<id>`, the journals and the staged headers
        // durable at once.
        if let Err(e) = keys.synced_with(|| self.file_systems.sync()) {
            return staged.iter().map(|_| Err(again(&e))).collect();
        }
        let mut published: Vec<_> = staged
            .into_iter()
            .map(|staged| {
                let (journal, header) = staged?;
                header.publish()?;
                Ok(journal)
            })
            .collect();
        // And a second one the renames.
        if published.iter().any(Result::is_ok)
            && let Err(e) = self.file_systems.sync()
        {
            published = published.into_iter().map(|p| p.and(Err(again(&e)))).collect();
        }
        published
    }

    /// A new session's journal, written, and its header staged (not yet visible), in a fresh
    /// directory; nothing fsynced (the batch syncs the file system once).
    fn stage_new_session(
        &self,
        session: &Session,
        messages: &[StoredMessage],
    ) -> Result<(Journal, fsio::Staged), StoreError> {
        let dir = self.session_dir(&session.id);
        fsio::fresh_dir(&dir)?;
        let journal = Journal::create_unsynced(&dir.join("messages.jsonl"), messages)?;
        let header = fsio::Staged::write_unsynced(&dir.join("session.json"), &fsio::json_bytes(session)?)?;
        Ok((journal, header))
    }

    /// Create a batch of new sessions with their first messages, each written with its
    /// journal and header (so the header is never stale and the journal needs no second
    /// fsync). Returns each answer with where to send it: the caller sends them once it holds
    /// the store no more, so a client that drops the store on its answer closes it at once.
    fn create_sessions(&self, batch: Vec<QueuedCreate>) -> Vec<(Reply, Result<MessagesAppended, StoreError>)> {
        let now = self.now();
        let mut answers = Vec::with_capacity(batch.len());
        let (mut guards, mut created, mut replies) = (Vec::new(), Vec::new(), Vec::new());
        for QueuedCreate { new, messages, reply } in batch {
            match self.reserve_new_session(new, messages, now) {
                Ok((guard, made)) => {
                    guards.push(guard);
                    created.push(made);
                    replies.push(reply);
                }
                Err(e) => answers.push((reply, Err(e))),
            }
        }
        let entries = guards
            .into_iter()
            .zip(&created)
            .map(|(guard, made)| NewEntry { guard, session: &made.session, messages: &made.messages })
            .collect();
        let results = self.add_new_sessions(entries);
        let written = created.into_iter().zip(results).map(|(made, result)| result.map(|()| made));
        answers.extend(replies.into_iter().zip(written));
        answers
    }

    /// A new session made from `new` and its first `messages`, its id reserved.
    fn reserve_new_session(
        &self,
        new: NewSession,
        messages: Vec<NewMessage>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(SessionGuard, MessagesAppended), StoreError> {
        let mut session = model::session_from_new(new, now, self.ids())?;
        let stored = if messages.is_empty() {
            Vec::new()
        } else {
            model::apply_append(&mut session, messages, now, self.ids())?
        };
        let exists = || StoreError::Conflict(format!("session `{}` already exists", session.id));
        let guard = self.reserve_session(&session.id)?.ok_or_else(exists)?;
        Ok((guard, MessagesAppended { session, messages: stored }))
    }

    fn update_session(&self, id: &str, patch: SessionPatch, expected: Option<u64>) -> Result<Session, StoreError> {
        let now = self.now();
        let _guard = self.lock_session(id)?.ok_or_else(|| StoreError::not_found("session", id))?;
        let mut session = self.index().sessions.get(id).cloned().ok_or_else(|| StoreError::not_found("session", id))?;
        model::check_revision("session", id, expected, session.revision)?;
        model::apply_patch(&mut session, patch, now)?;
        fsio::write_json(&self.session_dir(id).join("session.json"), &session)?;
        let mut idx = self.index();
        idx.sessions.insert(id.to_owned(), session.clone());
        idx.stale_headers.remove(id);
        Ok(session)
    }

    fn append_messages(
        &self,
        id: &str,
        messages: Vec<NewMessage>,
        expected: Option<u64>,
    ) -> Result<MessagesAppended, StoreError> {
        let now = self.now();
        let _guard = self.lock_session(id)?.ok_or_else(|| StoreError::not_found("session", id))?;
        let mut session = self.index().sessions.get(id).cloned().ok_or_else(|| StoreError::not_found("session", id))?;
        model::check_revision("session", id, expected, session.revision)?;
        let stored = model::apply_append(&mut session, messages, now, self.ids())?;
        let dir = self.session_dir(id);
        // The journal line is the truth; session.json is reconciled from it after a crash.
        let written = Journal::write(&dir.join("messages.jsonl"), &stored);
        // Only the journal is written (one fsync): session.json catches up at close, or at the
        // next open after a crash (see `Index::load`).
        let mut idx = self.index();
        idx.messages.entry(id.to_owned()).or_default().record(written)?;
        idx.sessions.insert(id.to_owned(), session.clone());
        idx.stale_headers.insert(id.to_owned());
        Ok(MessagesAppended { session, messages: stored })
    }

    /// A page of sessions newest first: keys from the session log, then only those sessions
    /// read (a key whose session is missing, or was created at another time, is a crash's
    /// leftover and skipped).
    fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>, StoreError> {
        let mut before = page.after.as_ref().map(Cursor::time_key).transpose()?;
        let size = page.size();
        let mut items = Vec::with_capacity(size + 1);
        while items.len() <= size {
            let keys = self.order().before(before.as_ref(), |f| f.matches(filter), size + 1 - items.len())?;
            let Some(last) = keys.last().cloned() else { break };
            for (ms, id) in keys {
                if let Some(session) = self.session(&id)?.filter(|s| s.created_at.timestamp_millis() == ms) {
                    items.push(session);
                }
            }
            before = Some(last);
        }
        Ok(Page::from_overfetch(items, size, |s| Cursor::at_time(s.created_at.timestamp_millis(), &s.id)))
    }

    fn list_messages(&self, id: &str, page: &PageRequest) -> Result<Page<StoredMessage>, StoreError> {
        let after = page.after.as_ref().map(Cursor::seq).transpose()?.unwrap_or(0);
        let size = page.size();
        let window = {
            let mut idx = self.index();
            if !self.load_session(&mut idx, id)? {
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
            let mut idx = self.index();
            let exists = self.load_session(&mut idx, id)?;
            let journal = idx.messages.get(id).filter(|_| exists);
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
        let Some(_guard) = self.lock_session(id)? else { return Ok(false) };
        let dir = self.session_dir(id);
        // Without session.json the directory is never read as a session, so a crash mid-delete is safe.
        let head = dir.join("session.json");
        std::fs::remove_file(&head).map_err(|e| StoreError::io(&head, e))?;
        let removed = self.index().forget_session(id);
        fsio::sync_dir(&dir)?;
        if let Some(session) = removed {
            let key = self.order().remove(key_of(&session));
            key?.sync()?;
        }
        std::fs::remove_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        self.sessions_sync.sync()?;
        Ok(true)
    }

    fn import_session(&self, session: &Session, messages: &[StoredMessage]) -> Result<ImportOutcome, StoreError> {
        model::check_session_import(session, messages)?;
        if let Some(guard) = self.reserve_session(&session.id)? {
            let entry = NewEntry { guard, session, messages };
            self.add_new_sessions(vec![entry]).into_iter().try_for_each(|written| written)?;
            return Ok(ImportOutcome::Imported);
        }
        let _guard = self.lock_session(&session.id)?.ok_or_else(|| {
            StoreError::Conflict(format!("session `{}` is being created or deleted concurrently", session.id))
        })?;
        let (existing, window) = {
            let idx = self.index();
            let existing = idx.sessions.get(&session.id).cloned();
            (existing, idx.messages.get(&session.id).and_then(|j| j.window(0, messages.len())))
        };
        let existing = existing.ok_or_else(|| StoreError::not_found("session", &session.id))?;
        model::same_import("session", &session.id, &existing, session)?;
        let stored: Vec<StoredMessage> = match window {
            Some(w) => w.read(&self.session_dir(&session.id).join("messages.jsonl"))?,
            None => Vec::new(),
        };
        model::same_import("session", &session.id, &stored.as_slice(), &messages)
    }
}

#[async_trait]
impl SessionStore for FileStore {
    async fn create_session(&self, new: NewSession) -> Result<Session, StoreError> {
        self.create_session_with_messages(new, Vec::new()).await.map(|created| created.session)
    }

    /// Queued and written in a batch with the sessions created at the same time (see
    /// [`CreateQueue`]): one blocking thread writes them all and syncs them together.
    async fn create_session_with_messages(
        &self,
        new: NewSession,
        messages: Vec<NewMessage>,
    ) -> Result<MessagesAppended, StoreError> {
        let (reply, created) = tokio::sync::oneshot::channel();
        let queued = QueuedCreate { new, messages, reply };
        let start = {
            let mut queue = self.inner.creates.lock().unwrap_or_else(PoisonError::into_inner);
            queue.waiting.push(queued);
            !std::mem::replace(&mut queue.writing, true)
        };
        if start {
            let (queue, inner) = (Arc::clone(&self.inner.creates), Arc::downgrade(&self.inner));
            tokio::task::spawn_blocking(move || write_queued_sessions(&queue, &inner));
        }
        created.await.map_err(|_| StoreError::Io {
            path: self.inner.dir.join(super::SESSIONS),
            source: std::io::Error::other("the writer of new sessions stopped"),
        })?
    }

    async fn get_session(&self, id: &str) -> Result<Option<Session>, StoreError> {
        let id = owned(id);
        self.blocking(move |s| s.session(&id)).await
    }

    async fn list_sessions(&self, filter: &SessionFilter, page: &PageRequest) -> Result<Page<Session>, StoreError> {
        let (filter, page) = (filter.clone(), page.clone());
        self.blocking(move |s| s.list_sessions(&filter, &page)).await
    }

    async fn update_session(
        &self,
        id: &str,
        patch: SessionPatch,
        expected_revision: Option<u64>,
    ) -> Result<Session, StoreError> {
        let id = owned(id);
        self.blocking(move |s| s.update_session(&id, patch, expected_revision)).await
    }

    async fn append_messages_fenced(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        expected_revision: Option<u64>,
        fence: Option<&Lease>,
    ) -> Result<MessagesAppended, StoreError> {
        let (id, fence) = (owned(session_id), fence.cloned());
        self.blocking(move |s| {
            if let Some(f) = &fence {
                s.check_fence(&f.run_id, fence.as_ref())?;
            }
            s.append_messages(&id, messages, expected_revision)
        })
        .await
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
