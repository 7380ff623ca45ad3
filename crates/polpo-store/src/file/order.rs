//! The listing order of sessions in the file backend: `.polpo/.index/sessions.log`, an
//! append-only, fsynced journal of (creation time, id) keys with the fields a list filters on
//! (agent, user, owner: fixed at creation), so that opening the store reads no session and a
//! list opens only the sessions of its page.
//!
//! A key is appended (and fsynced) before the session's files are written, and a removal
//! after its header is deleted, so a crash can leave a key without a session but never a
//! session without its key: listing skips a key whose session is missing or was created at
//! another time. The log is read on the first list, not at open; a clean close rewrites it
//! without removed keys once it holds any.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::fsio;
use crate::error::StoreError;
use crate::model::{Session, SessionFilter};

/// The directory of the file backend's listing indexes (ids never start with '.').
pub(super) const INDEX_DIR: &str = ".index";

/// A listing key: creation time in milliseconds, then id.
pub(super) type Key = (i64, String);

/// One line of the log: a key added with its filter fields, or (without them) removed.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    t: i64,
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    add: Option<Fields>,
}

/// What a session list filters on, copied into the log so filtering opens no session file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fields {
    agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

impl Fields {
    fn of(session: &Session) -> Self {
        Fields { agent: session.agent.clone(), user: session.user.clone(), owner: session.owner.clone() }
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

/// The session log: its path, and its keys once a list has read them.
#[derive(Debug)]
pub(super) struct SessionOrder {
    path: PathBuf,
    keys: Option<BTreeMap<Key, Fields>>,
    /// Lines in the file that a rewrite would drop (removals and the keys they remove).
    dead_lines: u64,
}

impl SessionOrder {
    /// Open the log under `data_dir`, building it once from the session directories when the
    /// store predates it (the only time open reads every session).
    pub(super) fn open(data_dir: &Path, sessions_dir: &Path) -> Result<Self, StoreError> {
        let dir = data_dir.join(INDEX_DIR);
        fsio::create_dir_durable(&dir)?;
        fsio::remove_stale_temps(&dir)?;
        let path = dir.join("sessions.log");
        if !path.exists() {
            let mut lines = Vec::new();
            for entry in std::fs::read_dir(sessions_dir).map_err(|e| StoreError::io(sessions_dir, e))? {
                let entry = entry.map_err(|e| StoreError::io(sessions_dir, e))?;
                if let Some(session) = fsio::read_json::<Session>(&entry.path().join("session.json"))? {
                    lines.push(Line { t: key_of(&session).0, id: session.id.clone(), add: Some(Fields::of(&session)) });
                }
            }
            fsio::write_atomic(&path, &render(&lines)?)?;
        }
        Ok(SessionOrder { path, keys: None, dead_lines: 0 })
    }

    /// Durably add a session's key (before its files are written).
    pub(super) fn append_added(&self, session: &Session) -> Result<(), StoreError> {
        let (t, id) = key_of(session);
        fsio::append_lines(&self.path, &[Line { t, id, add: Some(Fields::of(session)) }])?;
        Ok(())
    }

    /// Make an added key visible to lists (after the session's files are written).
    pub(super) fn insert(&mut self, session: &Session) {
        if let Some(keys) = &mut self.keys {
            keys.insert(key_of(session), Fields::of(session));
        }
    }

    /// Durably remove a deleted session's key (after its header is gone).
    pub(super) fn remove(&mut self, session: &Session) -> Result<(), StoreError> {
        let (t, id) = key_of(session);
        fsio::append_lines(&self.path, &[Line { t, id, add: None }])?;
        if let Some(keys) = &mut self.keys {
            keys.remove(&key_of(session));
        }
        self.dead_lines += 2;
        Ok(())
    }

    /// Up to `n` keys matching `filter`, newest first, strictly before `before` (all when
    /// `None`); reads the log on first use.
    pub(super) fn before(
        &mut self,
        before: Option<&Key>,
        filter: &SessionFilter,
        n: usize,
    ) -> Result<Vec<Key>, StoreError> {
        let keys = match &mut self.keys {
            Some(keys) => keys,
            None => {
                let (keys, dead) = read_log(&self.path)?;
                self.dead_lines = dead;
                self.keys.insert(keys)
            }
        };
        let upper = before.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(keys
            .range((Bound::Unbounded, upper))
            .rev()
            .filter(|(_, f)| f.matches(filter))
            .take(n)
            .map(|(k, _)| k.clone())
            .collect())
    }

    /// At a clean close: rewrite the log without removed keys, when it was read and holds any.
    pub(super) fn compact(&self) -> Result<(), StoreError> {
        let Some(keys) = self.keys.as_ref().filter(|_| self.dead_lines > 0) else { return Ok(()) };
        let lines: Vec<Line> =
            keys.iter().map(|((t, id), f)| Line { t: *t, id: id.clone(), add: Some(f.clone()) }).collect();
        fsio::write_atomic(&self.path, &render(&lines)?)
    }
}

fn render(lines: &[Line]) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut out, line).map_err(|e| StoreError::Invalid(e.to_string()))?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Read the log (cutting a line torn by a crash): the live keys and the number of dead lines.
fn read_log(path: &Path) -> Result<(BTreeMap<Key, Fields>, u64), StoreError> {
    fsio::repair_tail(path)?;
    let bytes = fsio::read_bounded(path)?.unwrap_or_default();
    let mut keys = BTreeMap::new();
    let mut dead = 0;
    for line in fsio::parse_lines::<Line>(path, &bytes)? {
        let key = (line.t, line.id);
        let replaced = match line.add {
            Some(fields) => keys.insert(key, fields).is_some(),
            None => {
                dead += 1;
                keys.remove(&key).is_some()
            }
        };
        dead += u64::from(replaced);
    }
    Ok((keys, dead))
}
