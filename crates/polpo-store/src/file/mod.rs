//! The default backend: JSON and JSONL files under `.polpo/`.
//!
//! ```text
//! .polpo/sessions/<id>/session.json + messages.jsonl
//! .polpo/.index/sessions.sorted + sessions.log     (listing order of sessions, see order.rs)
//! .polpo/.index/runs.sorted + runs.log             (listing order of runs, see order.rs)
//! .polpo/.index/runs.open                          (the unfinished runs, see open_runs.rs)
//! .polpo/runs/<id>/run.json + events.jsonl + checkpoint.json + lease.json
//! .polpo/effects/<sha256(key)>.json
//! .polpo/records/<collection>/<id>.json + <log>.jsonl   (record logs, see records.rs)
//! .polpo/records/<collection>/.order.sorted + .order.log (listing order of its records)
//! .polpo/tasks/<id>.json, .polpo/missions/<id>.json
//! .polpo/.runtime/store.lock
//! ```
//!
//! The journals are the truth for what was appended: an append fsyncs only its journal line,
//! and a header (`session.json`, `run.json`) that lags behind is brought up to date at close
//! (sessions) or reconciled from the journal when it is next read (counts, title, times; a
//! session's revision moves by one per reconciled message, so it never goes back). The other
//! files are the truth for the rest. Opening the store reads nothing per stored session, run,
//! effect, record, task or mission: it reads the listing journals (kept short by compaction)
//! and the unfinished runs named in `.index/runs.open` (those a crash may have left behind,
//! reconciled with their journals and kept in memory with their leases, so the takeover
//! queries look at them only). Sessions and runs are read when first used: caches keep the ones
//! in use (header, journal offsets, lock), at most [`SESSION_CACHE`] idle sessions and a
//! bounded number of finished runs (least recently used dropped first, a lagging session
//! header written durably as it goes), and the orders under `.index/` (see `order.rs`) list
//! them a page at a time. Effects are read by key when asked for. Records are read by id when
//! first asked for (a bounded cache keeps the ones used lately) and listed a page at a time
//! through their collection's own order; tasks and missions on the first use of either.
//! Journals are read from disk. The index mutex is held only to look up and update entries: session writes hold
//! a per-session lock across their fsyncs, so one session's writes stay ordered and different
//! sessions write in parallel. The `flock` keeps a second process out.

mod effects;
mod fsio;
mod journal;
mod lock;
mod memory;
mod open_runs;
mod order;
mod ordered;
mod recency;
mod records;
mod runs;
mod sessions;
mod work;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::clock::{Clock, IdGen, Seams, now_ms};
use crate::error::StoreError;
use crate::model::{Lease, Run, Session, StoredMessage};
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
    ids: Arc<dyn IdGen>,
    /// How many sessions the cache keeps before dropping idle ones (see [`SESSION_CACHE`]).
    session_cache: usize,
    index: Mutex<Index>,
    /// The listing order of sessions; its own lock, so a create's fsync of its key holds up
    /// no other operation. Never taken while holding `index`.
    order: Mutex<order::KeyOrder<sessions::SessionFields>>,
    /// The fsync of `sessions/`, shared by the sessions created or deleted at the same time.
    sessions_sync: fsio::SharedSync,
    /// Typed memory items, read on their first use (see `memory.rs`).
    memory: memory::MemoryFiles,
    _lock: lock::StoreLock,
}

#[derive(Debug)]
struct Index {
    /// The sessions in the cache (see [`Inner::load_session`]).
    sessions: HashMap<String, Session>,
    /// When each cached session was last used, for dropping the least recent.
    recency: recency::Recency,
    /// The runs in the cache: every unfinished run, and recently used finished ones.
    runs: HashMap<String, Run>,
    /// When each cached run was last used, for dropping the least recent finished ones.
    run_recency: recency::Recency,
    /// The unfinished runs (`.index/runs.open`).
    open_runs: open_runs::OpenRuns,
    /// The listing order of runs (`.index/runs.*`).
    run_order: order::KeyOrder<runs::RunFields>,
    /// Leases of cached runs.
    leases: HashMap<String, Lease>,
    /// Every effect key, once a list has read them (see effects.rs).
    effect_keys: Option<BTreeSet<String>>,
    /// Offsets of each session's `messages.jsonl`.
    messages: HashMap<String, Journal>,
    /// One write lock per session (and per session being created), held across that session's
    /// file I/O so its writes stay ordered while other sessions write in parallel.
    session_locks: HashMap<String, SessionLock>,
    /// Sessions whose `session.json` lags their journal (appends write only the journal, the
    /// truth); rewritten when the store closes, and reconciled when next read after a crash.
    stale_headers: HashSet<String>,
    /// Offsets of each run's `events.jsonl`.
    events: HashMap<String, Journal>,
    /// One append lock per run (made on its first append), held across its journal fsync.
    run_locks: HashMap<String, SessionLock>,
    /// The records and record collections in use (see `records.rs`): nothing read at open.
    records: records::Records,
    /// Whether tasks and missions have been read (on the first use of either).
    work_loaded: bool,
    /// Tasks by id, with what claims look at instead of every task.
    tasks: work::TaskIndex,
    /// Missions by id.
    missions: ordered::Ordered<crate::work::StoredMission>,
}

/// How many sessions the file store keeps in memory by default: enough for every chat a
/// server is serving at once, few enough that memory stays flat however many chats it has
/// served. Sessions in use are never dropped, so the cache may run over while they are.
pub const SESSION_CACHE: usize = 4096;

impl FileStore {
    /// Open (creating if needed) the store in `data_dir` (a project's `.polpo/`), taking the
    /// process lock and repairing journals torn by a crash. Times and new ids come from `seams`
    /// (a plain clock: UUID v7 ids).
    pub async fn open(data_dir: &Path, seams: impl Into<Seams>) -> Result<Self, StoreError> {
        Self::open_with_cache(data_dir, seams, SESSION_CACHE).await
    }

    /// [`FileStore::open`] keeping at most `session_cache` idle sessions in memory (at least
    /// one), and as many records, for hosts that want a smaller or larger cache than
    /// [`SESSION_CACHE`].
    pub async fn open_with_cache(
        data_dir: &Path,
        seams: impl Into<Seams>,
        session_cache: usize,
    ) -> Result<Self, StoreError> {
        let dir = data_dir.to_owned();
        let seams = seams.into();
        let cache = session_cache.max(1);
        let inner = tokio::task::spawn_blocking(move || Inner::open(dir, seams, cache)).await.map_err(join_error)??;
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
    fn open(dir: PathBuf, Seams { clock, ids }: Seams, session_cache: usize) -> Result<Self, StoreError> {
        fsio::create_dir_durable(&dir)?;
        let lock = lock::StoreLock::acquire(&dir)?;
        fsio::create_subdirs_durable(
            &dir,
            &[SESSIONS, RUNS, EFFECTS, RECORDS, work::TASKS, work::MISSIONS, order::INDEX_DIR],
        )?;
        let sessions_dir = dir.join(SESSIONS);
        let index_dir = dir.join(order::INDEX_DIR);
        fsio::remove_stale_temps(&index_dir)?;
        let order = order::KeyOrder::open(&index_dir, SESSIONS, || sessions::session_keys(&sessions_dir))?;
        let index = Index::load(&dir, session_cache)?;
        Ok(Inner {
            dir,
            clock,
            ids,
            session_cache,
            index: Mutex::new(index),
            order: Mutex::new(order),
            sessions_sync: fsio::SharedSync::new(sessions_dir),
            memory: memory::MemoryFiles::default(),
            _lock: lock,
        })
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn order(&self) -> MutexGuard<'_, order::KeyOrder<sessions::SessionFields>> {
        self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Make sure session `id` is in the cache, reading its files on first use and reconciling
    /// a header that a crash left behind its journal; `false` when there is no such session
    /// (or it is still being created). Reading under the index lock is safe: nobody writes a
    /// session that is not in the cache.
    fn load_session(&self, idx: &mut Index, id: &str) -> Result<bool, StoreError> {
        if idx.sessions.contains_key(id) {
            idx.recency.touch(id);
            return Ok(true);
        }
        if idx.session_locks.contains_key(id) || crate::model::validate_id("session", id).is_err() {
            return Ok(false);
        }
        let dir = self.session_dir(id);
        let Some(mut session) = fsio::read_json::<Session>(&dir.join("session.json"))? else { return Ok(false) };
        fsio::remove_stale_temps(&dir)?;
        let journal_path = dir.join("messages.jsonl");
        let (journal, _) = Journal::open::<serde_json::Value>(&journal_path)?;
        let count = journal.count();
        if count > session.message_count {
            // Appends rewrite only the journal; the header catches up here (or at close).
            let tail: Vec<StoredMessage> = match journal.window(session.message_count, usize::MAX) {
                Some(w) => w.read(&journal_path)?,
                None => Vec::new(),
            };
            crate::model::reconcile_appended(&mut session, &tail);
            idx.stale_headers.insert(id.to_owned());
        } else if count < session.message_count {
            session.revision += session.message_count - count;
            session.message_count = count;
            idx.stale_headers.insert(id.to_owned());
        }
        idx.messages.insert(id.to_owned(), journal);
        idx.session_locks.insert(id.to_owned(), SessionLock::default());
        idx.sessions.insert(id.to_owned(), session);
        self.cached(idx, id);
        Ok(true)
    }

    /// Note that session `id` just entered the cache, and drop the least recently used idle
    /// sessions beyond [`Inner::session_cache`]. A session is idle when nobody holds or waits
    /// for its write lock: its only handle is the cache's, and taking another needs the index
    /// lock we hold, so nobody can start writing it while it goes. A dropped session whose
    /// header lags its journal gets the header written first (atomically, fsynced), so its next
    /// read sees the same counts and revision; if that write fails the session stays cached.
    fn cached(&self, idx: &mut Index, id: &str) {
        idx.recency.touch(id);
        let excess = idx.sessions.len().saturating_sub(self.session_cache);
        if excess == 0 {
            return;
        }
        let idle = |id: &str| idx.session_locks.get(id).is_some_and(|l| Arc::strong_count(l) == 1);
        let victims: Vec<String> = idx.recency.oldest_first().filter(|id| idle(id)).take(excess).map(owned).collect();
        for victim in victims {
            if idx.stale_headers.contains(&victim)
                && let Some(session) = idx.sessions.get(&victim)
            {
                if let Err(e) = fsio::write_json(&self.session_dir(&victim).join("session.json"), session) {
                    tracing::warn!(session = %victim, error = %e, "could not write a session header; kept in the cache");
                    continue;
                }
                idx.stale_headers.remove(&victim);
            }
            idx.forget_session(&victim);
        }
    }

    /// Session `id`'s header, read on first use (see [`Inner::load_session`]).
    fn session(&self, id: &str) -> Result<Option<Session>, StoreError> {
        let mut idx = self.index();
        Ok(if self.load_session(&mut idx, id)? { idx.sessions.get(id).cloned() } else { None })
    }

    /// Take the write lock of an existing session (held across its file I/O); `None` when the
    /// session does not exist, or was deleted while we waited.
    fn lock_session(&self, id: &str) -> Result<Option<SessionGuard>, StoreError> {
        let lock = {
            let mut idx = self.index();
            if !self.load_session(&mut idx, id)? {
                return Ok(None);
            }
            match idx.session_locks.get(id) {
                Some(lock) => Arc::clone(lock),
                None => return Ok(None),
            }
        };
        let guard = Arc::clone(&lock).blocking_lock_owned();
        let idx = self.index();
        let current = idx.session_locks.get(id).is_some_and(|l| Arc::ptr_eq(l, &lock));
        Ok((current && idx.sessions.contains_key(id)).then_some(guard))
    }

    fn now(&self) -> DateTime<Utc> {
        now_ms(self.clock.as_ref())
    }

    fn ids(&self) -> &dyn IdGen {
        self.ids.as_ref()
    }

    fn session_dir(&self, id: &str) -> PathBuf {
        path_under(&self.dir, &[SESSIONS, id], "")
    }

    fn run_dir(&self, id: &str) -> PathBuf {
        path_under(&self.dir, &[RUNS, id], "")
    }

    fn effect_path(&self, key: &str) -> PathBuf {
        self.dir.join(EFFECTS).join(format!("{}.json", hex::encode(Sha256::digest(key.as_bytes()))))
    }
}

impl Drop for Inner {
    /// Bring the headers that appends left behind up to date, so a cleanly closed store's
    /// `session.json` files show the right counts and titles to anyone reading them.
    fn drop(&mut self) {
        let idx = self.index.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in std::mem::take(&mut idx.stale_headers) {
            if let Some(session) = idx.sessions.get(&id) {
                let path = self.dir.join(SESSIONS).join(&id).join("session.json");
                if let Err(e) = fsio::write_json(&path, session) {
                    tracing::warn!(session = %id, error = %e, "could not refresh a session header at close");
                }
            }
        }
        idx.records.close();
        if let Err(e) = idx.run_order.close() {
            tracing::warn!(error = %e, "could not compact the run index at close");
        }
        let order = self.order.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = order.close() {
            tracing::warn!(error = %e, "could not compact the session index at close");
        }
    }
}

/// One session's (or run's) write lock: a tokio mutex so a blocking-pool thread can own its guard.
type SessionLock = Arc<tokio::sync::Mutex<()>>;

/// A held per-session write lock, released on drop.
type SessionGuard = tokio::sync::OwnedMutexGuard<()>;

impl Index {
    /// Drop session `id` from the cache (its files stay as they are).
    fn forget_session(&mut self, id: &str) -> Option<Session> {
        self.recency.forget(id);
        self.messages.remove(id);
        self.session_locks.remove(id);
        self.stale_headers.remove(id);
        self.sessions.remove(id)
    }

    /// Open the store's indexes: the run order, the unfinished runs (read, reconciled with
    /// their journals after a possible crash, and cached; ids found missing or finished are
    /// dropped). Nothing else is read. `cache`: how many records are kept in memory.
    fn load(dir: &Path, cache: usize) -> Result<Index, StoreError> {
        let runs_dir = dir.join(RUNS);
        let run_order = order::KeyOrder::open(&dir.join(order::INDEX_DIR), RUNS, || runs::run_keys(&runs_dir))?;
        let open_runs = open_runs::OpenRuns::open(dir, || runs::unfinished_runs(&runs_dir))?;
        let mut index = Index {
            sessions: HashMap::new(),
            recency: recency::Recency::default(),
            runs: HashMap::new(),
            run_recency: recency::Recency::default(),
            open_runs,
            run_order,
            leases: HashMap::new(),
            effect_keys: None,
            messages: HashMap::new(),
            session_locks: HashMap::new(),
            stale_headers: HashSet::new(),
            events: HashMap::new(),
            run_locks: HashMap::new(),
            records: records::Records::new(cache),
            work_loaded: false,
            tasks: work::TaskIndex::default(),
            missions: ordered::Ordered::default(),
        };
        let mut gone = Vec::new();
        let ids: Vec<String> = index.open_runs.ids().cloned().collect();
        for id in ids {
            match crate::model::validate_id("run", &id)
                .ok()
                .map(|()| runs::read_run(&runs_dir.join(&id)))
                .transpose()?
            {
                Some(Some((run, journal, lease))) if !run.status.is_terminal() => index.cache_run(run, journal, lease),
                _ => gone.push(id),
            }
        }
        index.open_runs.drop_all(&gone)?;
        Ok(index)
    }
}

/// `dir/<parts, joined by '/'><suffix>` in one allocation: such a path is made for every
/// write, and `Path::join` copies and parses the whole path again for each part. The parts are
/// folder names and validated ids (no `/`, never `.` or `..`).
fn path_under(dir: &Path, parts: &[&str], suffix: &str) -> PathBuf {
    let dir = dir.as_os_str();
    let len = dir.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>() + suffix.len();
    let mut path = std::ffi::OsString::with_capacity(len);
    path.push(dir);
    for part in parts {
        if !path.is_empty() && !path.as_encoded_bytes().ends_with(b"/") {
            path.push("/");
        }
        path.push(part);
    }
    path.push(suffix);
    PathBuf::from(path)
}

/// The `*.json` files of a directory, after clearing crash leftovers.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    fsio::remove_stale_temps(dir)?;
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let path = entry.map_err(|e| StoreError::io(dir, e))?.path();
        if path.extension().is_some_and(|x| x == "json") {
            out.push(path);
        }
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::path_under;
    use std::path::Path;

    /// The path made in one piece is the one `Path::join` makes, whatever the folder's form.
    #[test]
    fn paths_under_the_store_are_the_joined_ones() {
        for dir in ["/data/.polpo", "/data/.polpo/", "rel", "/", ""] {
            let dir = Path::new(dir);
            assert_eq!(path_under(dir, &["runs", "r-1"], ""), dir.join("runs").join("r-1"));
            assert_eq!(
                path_under(dir, &["records", "loop_runs", "looprun-7"], ".json"),
                dir.join("records").join("loop_runs").join("looprun-7.json")
            );
            assert_eq!(path_under(dir, &["a"], ".x"), dir.join("a.x"));
        }
    }
}
