//! Sessions and their message journals in the file backend.

use async_trait::async_trait;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

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
    /// `None` when the session exists (in memory, being created, or — with `look_on_disk` —
    /// on disk). Without `look_on_disk` a session on disk that is not in memory is found when
    /// its directory is claimed ([`Inner::add_new_session`]): a new id costs no lookup.
    fn reserve_session(&self, id: &str, look_on_disk: bool) -> Result<Option<SessionGuard>, StoreError> {
        let mut idx = self.index();
        let known = match look_on_disk {
            true => self.load_session(&mut idx, id)?,
            false => idx.sessions.contains_key(id),
        };
        if known || idx.session_locks.contains_key(id) {
            return Ok(None);
        }
        let lock = SessionLock::default();
        idx.session_locks.insert(id.to_owned(), Arc::clone(&lock));
        // Fresh and only reachable through the index, which we hold: this never waits.
        Ok(Some(lock.blocking_lock_owned()))
    }

    /// Undo a reservation whose files could not be written.
    fn unreserve_session(&self, id: &str) {
        let mut idx = self.index();
        if !idx.sessions.contains_key(id) {
            idx.session_locks.remove(id);
            idx.stale_headers.remove(id);
        }
    }

    /// Write a session reserved by `guard` and make it visible; on failure the reservation is
    /// given back, so the id can be created again. Shared by create and import. Its directory
    /// is claimed first (a conflict when the session is on disk already, see
    /// [`Inner::reserve_session`]); its listing key is made durable before its header, so a
    /// crash never leaves a session that lists cannot find.
    fn add_new_session(
        &self,
        guard: SessionGuard,
        session: &Session,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        let dir = self.session_dir(&session.id);
        let claimed = fsio::claim_dir(&dir, Some(&dir.join("session.json"))).and_then(|claimed| match claimed {
            true => Ok(()),
            false => Err(StoreError::Conflict(format!("session `{}` already exists", session.id))),
        });
        // The key is written under the order's lock and synced after it (see `write_new_session`).
        let key = claimed.and_then(|()| self.order().add(key_of(session), SessionFields::of(session)));
        let written = key.and_then(|key| self.write_new_session(&dir, session, messages, key));
        let journal = match written {
            Ok(j) => j,
            Err(e) => {
                self.unreserve_session(&session.id);
                return Err(e);
            }
        };
        let mut idx = self.index();
        idx.messages.insert(session.id.clone(), journal);
        idx.sessions.insert(session.id.clone(), session.clone());
        self.cached(&mut idx, &session.id);
        drop(idx);
        drop(guard);
        Ok(())
    }

    /// Write a new session's directory `dir` (claimed, empty): the journal and a staged header
    /// (each fsynced), then, once the listing `key` is durable, the header by rename and the
    /// directory entries. A directory left by a crash mid-create or mid-delete (no header, so
    /// never read as a session) was cleared when claimed, so no old journal leaks in. The
    /// key's fsync and the one of `sessions/` are shared with the sessions created at the same
    /// time ([`fsio::SharedSync`]), so concurrent creates cost three fsyncs of their own each,
    /// not five in a queue.
    fn write_new_session(
        &self,
        dir: &Path,
        session: &Session,
        messages: &[StoredMessage],
        key: LogSync,
    ) -> Result<Journal, StoreError> {
        let journal_path = dir.join("messages.jsonl");
        let journal = Journal::create(&journal_path, messages)?;
        let header = fsio::Staged::write(&dir.join("session.json"), &fsio::json_bytes(session)?)?;
        // The header goes last, after the key: without it a half-written directory is never
        // read as a session, and a session is never found that lists cannot find.
        key.sync()?;
        header.publish()?;
        fsio::sync_dir(dir)?;
        self.sessions_sync.sync()?;
        Ok(journal)
    }

    /// A new session written with its first messages: one directory, journal and header, so
    /// the header is never stale and the journal needs no second fsync.
    fn create_session_with_messages(
        &self,
        new: NewSession,
        messages: Vec<NewMessage>,
    ) -> Result<MessagesAppended, StoreError> {
        let now = self.now();
        let mut session = model::session_from_new(new, now, self.ids())?;
        let stored = if messages.is_empty() {
            Vec::new()
        } else {
            model::apply_append(&mut session, messages, now, self.ids())?
        };
        let exists = || StoreError::Conflict(format!("session `{}` already exists", session.id));
        let guard = self.reserve_session(&session.id, false)?.ok_or_else(exists)?;
        self.add_new_session(guard, &session, &stored)?;
        Ok(MessagesAppended { session, messages: stored })
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
        if let Some(guard) = self.reserve_session(&session.id, true)? {
            self.add_new_session(guard, session, messages)?;
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
        self.blocking(move |s| s.create_session_with_messages(new, Vec::new())).await.map(|created| created.session)
    }

    async fn create_session_with_messages(
        &self,
        new: NewSession,
        messages: Vec<NewMessage>,
    ) -> Result<MessagesAppended, StoreError> {
        self.blocking(move |s| s.create_session_with_messages(new, messages)).await
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
