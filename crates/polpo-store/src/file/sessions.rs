//! Sessions and their message journals in the file backend.

use async_trait::async_trait;

use super::{FileStore, Inner, Journal, SESSIONS, fsio, owned, page_newest_first};
use crate::error::StoreError;
use crate::model::{
    self, ImportOutcome, MessagesAppended, NewMessage, NewSession, Session, SessionFilter, SessionPatch, StoredMessage,
};
use crate::page::{Cursor, Page, PageRequest};
use crate::traits::SessionStore;

impl Inner {
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

    fn append_messages(
        &self,
        id: &str,
        messages: Vec<NewMessage>,
        expected: Option<u64>,
    ) -> Result<MessagesAppended, StoreError> {
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
            let stored: Vec<StoredMessage> =
                match idx.messages.get(&session.id).and_then(|j| j.window(0, messages.len())) {
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

    async fn update_session(
        &self,
        id: &str,
        patch: SessionPatch,
        expected_revision: Option<u64>,
    ) -> Result<Session, StoreError> {
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
