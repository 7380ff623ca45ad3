//! Durable file primitives for the file backend: atomic replace (temp, fsync, rename, fsync
//! dir), fsynced journal appends, journal reads that survive a torn last line, and shared
//! fsyncs ([`SharedSync`]) of the files and directories every new session writes to.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::StoreError;

/// Largest JSON document or journal the store will read into memory (guards against a file
/// that is not ours).
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Buffer of [`write_atomic_with`]: its content goes to the file this many bytes at a time.
pub(crate) const WRITE_BUFFER: usize = 64 * 1024;

/// Replace `path` with `bytes` so that a crash leaves either the old or the new content:
/// temp file, fsync ([`Staged`]), rename, fsync of the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    publish_durably(Staged::write(path, bytes)?, path)
}

/// [`write_atomic`] for content too large to build in memory first (an index rewritten whole):
/// `fill` writes it through a buffer straight into the temp file.
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let buffered = |f: &mut File| {
        let mut out = std::io::BufWriter::with_capacity(WRITE_BUFFER, f);
        fill(&mut out)?;
        out.flush().map_err(|e| StoreError::io(path, e))
    };
    publish_durably(Staged::write_with(path, buffered)?, path)
}

/// The second half of an atomic replace of `path`: rename, then fsync of the directory.
fn publish_durably(staged: Staged, path: &Path) -> Result<(), StoreError> {
    staged.publish()?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Delete temp files that a crash left between create and rename in `dir` (only while holding
/// the store lock: nobody else is mid-write).
pub(crate) fn remove_stale_temps(dir: &Path) -> Result<(), StoreError> {
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp-") {
            fs::remove_file(entry.path()).map_err(|e| StoreError::io(entry.path(), e))?;
        }
    }
    Ok(())
}

/// Pretty JSON (2 spaces, trailing newline, as every `.polpo/` file), written atomically.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    write_atomic(path, &json_bytes(value)?)
}

/// A JSON document as the store writes it: pretty (2 spaces), with a trailing newline.
pub(crate) fn json_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| StoreError::Invalid(e.to_string()))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Read a JSON document; `None` when the file does not exist.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    Ok(read_json_sized(path)?.map(|(value, _)| value))
}

/// [`read_json`] with the file's size in bytes (what a cache counts it as).
pub(crate) fn read_json_sized<T: DeserializeOwned>(path: &Path) -> Result<Option<(T, usize)>, StoreError> {
    let Some(bytes) = read_bounded(path)? else { return Ok(None) };
    serde_json::from_slice(&bytes)
        .map(|value| Some((value, bytes.len())))
        .map_err(|e| StoreError::Corrupt { path: path.to_owned(), message: e.to_string() })
}

/// Make a directory (and parents) and persist its entry in the parent directory.
pub(crate) fn create_dir_durable(dir: &Path) -> Result<(), StoreError> {
    fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
    match dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Make the directories `names` under `parent` (which exists) and persist their entries with
/// one fsync of `parent`: opening the store costs one directory fsync, not one per folder.
pub(crate) fn create_subdirs_durable(parent: &Path, names: &[&str]) -> Result<(), StoreError> {
    for name in names {
        let dir = parent.join(name);
        fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
    }
    sync_dir(parent)
}

/// Make a new entry directory, clearing a directory of the same name that a crash left behind
/// (one without its header, so ignored at load). Nothing is fsynced: the caller's header write
/// (an atomic rename, which fsyncs `dir`) and an fsync of `dir`'s parent make it durable.
pub(crate) fn fresh_dir(dir: &Path) -> Result<(), StoreError> {
    claim_dir(dir, None).map(drop)
}

/// [`fresh_dir`] for an entry that may exist already: when `dir` is there and holds `header`,
/// nothing is touched and the answer is `false`. The `mkdir` is the existence check, so a new
/// entry costs no lookup of its own.
pub(crate) fn claim_dir(dir: &Path, header: Option<&Path>) -> Result<bool, StoreError> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if let Some(header) = header
                && header.try_exists().map_err(|e| StoreError::io(header, e))?
            {
                return Ok(false);
            }
            fs::remove_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
            fs::create_dir(dir).map_err(|e| StoreError::io(dir, e))?;
            Ok(true)
        }
        other => other.map(|()| true).map_err(|e| StoreError::io(dir, e)),
    }
}

/// [`fresh_dir`] holding an empty `file`.
pub(crate) fn fresh_dir_with_empty_file(dir: &Path, file: &Path) -> Result<(), StoreError> {
    fresh_dir(dir)?;
    create_empty(file)
}

/// Create `file` empty (truncating one that exists); durable once its directory is fsynced.
pub(crate) fn create_empty(file: &Path) -> Result<(), StoreError> {
    File::create(file).map_err(|e| StoreError::io(file, e))?;
    Ok(())
}

/// Persist directory entries (creations, renames, deletions) in `dir`.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    polpo_project::fsx::sync_dir(dir).map_err(|e| StoreError::io(dir, e))
}

/// Append complete lines to a journal and fsync before returning, so an acknowledged append
/// survives a crash. Lines are written with one `write_all` so a crash can tear only the last.
/// Returns each line's length in bytes, newline included.
pub(crate) fn append_lines<T: Serialize>(path: &Path, items: &[T]) -> Result<Vec<u64>, StoreError> {
    let (file, lengths) = write_lines(path, items)?;
    file.sync_data().map_err(|e| StoreError::io(path, e))?;
    Ok(lengths)
}

/// [`append_lines`] without the fsync: the lines are written (so a later fsync of the file,
/// by anyone, makes them durable) but not yet durable. Returns the open file and each line's
/// length.
pub(crate) fn write_lines<T: Serialize>(path: &Path, items: &[T]) -> Result<(File, Vec<u64>), StoreError> {
    let (buf, lengths) = json_lines(items)?;
    let mut f = open_append(path)?;
    f.write_all(&buf).map_err(|e| StoreError::io(path, e))?;
    Ok((f, lengths))
}

/// `items` as JSON lines in one buffer (so one `write_all` can tear only the last), with each
/// line's length in bytes, newline included.
pub(crate) fn json_lines<T: Serialize>(items: &[T]) -> Result<(Vec<u8>, Vec<u64>), StoreError> {
    let mut buf = Vec::new();
    let mut lengths = Vec::with_capacity(items.len());
    for item in items {
        let before = buf.len();
        serde_json::to_writer(&mut buf, item).map_err(|e| StoreError::Invalid(e.to_string()))?;
        buf.push(b'\n');
        lengths.push((buf.len() - before) as u64);
    }
    Ok((buf, lengths))
}

/// Open `path` for appending, creating it if missing.
pub(crate) fn open_append(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new().append(true).create(true).open(path).map_err(|e| StoreError::io(path, e))
}

/// A new file written and fsynced under a temporary name beside `path`, not yet visible: the
/// first half of an atomic replace, for writers that must make something else durable between
/// the content and the rename (the session order's key, before a new session's header).
pub(crate) struct Staged {
    tmp: PathBuf,
    path: PathBuf,
}

impl Staged {
    /// Write `bytes` to a temporary file beside `path` and fsync it (a crash leaves a temp
    /// file that [`remove_stale_temps`] clears).
    pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<Staged, StoreError> {
        Staged::write_with(path, |w| w.write_all(bytes).map_err(|e| StoreError::io(path, e)))
    }

    /// [`Staged::write`] of what `fill` writes to the temp file.
    fn write_with(path: &Path, fill: impl FnOnce(&mut File) -> Result<(), StoreError>) -> Result<Staged, StoreError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        // The process id is asked once: `std::process::id` is a system call every time.
        static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = path.with_file_name(format!(
            ".{name}.tmp-{}-{}",
            PID.get_or_init(std::process::id),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let staged = Staged { tmp, path: path.to_owned() };
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&staged.tmp)
            .map_err(|e| StoreError::io(&staged.tmp, e))?;
        fill(&mut f)?;
        f.sync_all().map_err(|e| StoreError::io(&staged.tmp, e))?;
        Ok(staged)
    }

    /// Rename the file to its name; the caller fsyncs the directory to make that durable.
    pub(crate) fn publish(mut self) -> Result<(), StoreError> {
        fs::rename(&self.tmp, &self.path).map_err(|e| StoreError::io(&self.path, e))?;
        // Renamed: nothing left to remove on drop. (Forgetting `self` instead leaked its two
        // paths, ≈ 250 bytes per new session: 12 MB after 50,000, issue 22.)
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for Staged {
    /// A staged file never published is removed, so a failed write leaves no temp behind.
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// One file or directory that many concurrent writers need fsynced (the session order's
/// journal, the `sessions/` directory): a group commit. A writer calls [`SharedSync::sync`]
/// after its own write returned; if nobody is syncing it leads, fsyncing once for every
/// writer that joined before it started, otherwise it waits for the fsync in progress to end
/// and joins the next one, which then covers every writer that arrived meanwhile. Each writer
/// returns only once an fsync that began after its write has succeeded, so an acknowledged
/// write is as durable as with its own fsync; with N writers at once it costs about two fsyncs
/// instead of N queued ones. A failed fsync fails every writer of its batch.
///
/// The file stays open between fsyncs (two system calls fewer a batch); a writer that replaces
/// the file by rename calls [`SharedSync::forget`], so later batches open the new one.
#[derive(Debug)]
pub(crate) struct SharedSync {
    path: PathBuf,
    state: Mutex<Batches>,
    done: Condvar,
}

/// Batches of writers waiting on a [`SharedSync`], numbered in order.
#[derive(Debug, Default)]
struct Batches {
    /// The batch new writers join (not started yet).
    open: u64,
    /// Writers in the open batch.
    joined: usize,
    /// Whether the batch before `open` is being fsynced.
    syncing: bool,
    /// Every batch below this has finished.
    finished: u64,
    /// Failed batches: the error, and how many of their writers have yet to collect it.
    failed: HashMap<u64, (std::io::ErrorKind, String, usize)>,
    /// Writers waiting for a batch in progress: a leader with none wakes nobody (a condvar's
    /// `notify_all` is a system call even when no one waits).
    waiting: usize,
    /// The path, opened by an earlier batch's leader.
    file: Option<Arc<File>>,
    /// Counts [`SharedSync::forget`] calls: a leader that opened the path keeps the handle only
    /// if none came since it looked, so a handle on a replaced file is never kept.
    opened_as_of: u64,
}

impl SharedSync {
    /// A group commit for the file or directory at `path`.
    pub(crate) fn new(path: PathBuf) -> Self {
        SharedSync { path, state: Mutex::default(), done: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, Batches> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The path was replaced (renamed over): the next batch opens it again instead of syncing
    /// the handle kept on the file it replaced. Call it before any writer of the new file
    /// joins a batch (for the session order, under its lock, before the next append).
    pub(crate) fn forget(&self) {
        let mut batches = self.lock();
        batches.file = None;
        batches.opened_as_of += 1;
    }

    /// Return once an fsync of the path that began after this call has succeeded (see
    /// [`SharedSync`]). Blocks: call it from a blocking thread, holding no other lock.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        let mut batches = self.lock();
        let mine = batches.open;
        batches.joined += 1;
        loop {
            if batches.finished > mine {
                return match batches.failed.get_mut(&mine) {
                    None => Ok(()),
                    Some((kind, message, left)) => {
                        let error = std::io::Error::new(*kind, message.clone());
                        *left -= 1;
                        if *left == 0 {
                            batches.failed.remove(&mine);
                        }
                        Err(StoreError::io(&self.path, error))
                    }
                };
            }
            if !batches.syncing {
                // Batches start in order and `finished` passes one only when it ends, so the
                // batch nobody is syncing and that has not finished is the open one: ours.
                batches.syncing = true;
                let followers = std::mem::take(&mut batches.joined) - 1;
                batches.open += 1;
                let (kept, as_of) = (batches.file.clone(), batches.opened_as_of);
                drop(batches);
                let (synced, opened) = match kept {
                    Some(file) => (file.sync_all(), None),
                    None => match File::open(&self.path) {
                        Ok(file) => (file.sync_all(), Some(file)),
                        Err(e) => (Err(e), None),
                    },
                };
                let mut batches = self.lock();
                batches.syncing = false;
                batches.finished = mine + 1;
                if let Some(file) = opened
                    && synced.is_ok()
                    && batches.opened_as_of == as_of
                {
                    batches.file = Some(Arc::new(file));
                }
                if let Err(e) = &synced
                    && followers > 0
                {
                    batches.failed.insert(mine, (e.kind(), e.to_string(), followers));
                }
                let wake = batches.waiting > 0;
                drop(batches);
                if wake {
                    self.done.notify_all();
                }
                return synced.map_err(|e| StoreError::io(&self.path, e));
            }
            batches.waiting += 1;
            batches = self.done.wait(batches).unwrap_or_else(PoisonError::into_inner);
            batches.waiting -= 1;
        }
    }
}

/// Parse complete JSON lines (each ending in a newline) from `bytes`; a trailing fragment
/// without its newline is a write torn by a crash, never acknowledged, and is skipped. A bad
/// complete line is corruption.
pub(crate) fn parse_lines<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<Vec<T>, StoreError> {
    complete_lines(bytes).map(|line| parse_line(path, line)).collect()
}

/// The non-empty lines of `bytes` that end in a newline (without it): a trailing fragment is a
/// write torn by a crash.
pub(crate) fn complete_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(&bytes[..0], |last| &bytes[..last]);
    complete.split(|&b| b == b'\n').filter(|line| !line.is_empty())
}

/// Parse one journal line.
pub(crate) fn parse_line<T: DeserializeOwned>(path: &Path, line: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(line).map_err(|e| StoreError::Corrupt { path: path.to_owned(), message: e.to_string() })
}

/// Read bytes `start..end` of a file.
pub(crate) fn read_range(path: &Path, start: u64, end: u64) -> Result<Vec<u8>, StoreError> {
    let mut f = File::open(path).map_err(|e| StoreError::io(path, e))?;
    f.seek(SeekFrom::Start(start)).map_err(|e| StoreError::io(path, e))?;
    let mut buf = vec![0u8; usize::try_from(end.saturating_sub(start)).unwrap_or(0)];
    f.read_exact(&mut buf).map_err(|e| StoreError::io(path, e))?;
    Ok(buf)
}

/// Cut a torn last line off a journal so the next append starts on a fresh line. Only safe
/// while holding the store lock (nobody else is appending).
pub(crate) fn repair_tail(path: &Path) -> Result<(), StoreError> {
    let mut f = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(path, e)),
    };
    let len = f.metadata().map_err(|e| StoreError::io(path, e))?.len();
    if len == 0 {
        return Ok(());
    }
    // Scan backwards in chunks for the last newline.
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    let keep = loop {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        f.seek(SeekFrom::Start(start)).map_err(|e| StoreError::io(path, e))?;
        f.read_exact(chunk).map_err(|e| StoreError::io(path, e))?;
        if let Some(pos) = chunk.iter().rposition(|&b| b == b'\n') {
            break start + pos as u64 + 1;
        }
        if start == 0 {
            break 0;
        }
        end = start;
    };
    if keep < len {
        tracing::warn!(path = %path.display(), dropped = len - keep, "dropping a torn journal line left by a crash");
        f.set_len(keep).map_err(|e| StoreError::io(path, e))?;
        f.sync_all().map_err(|e| StoreError::io(path, e))?;
    }
    Ok(())
}

pub(crate) fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(path, e)),
    };
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| StoreError::io(path, e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(StoreError::Corrupt { path: path.to_owned(), message: "file larger than 1 GiB".into() });
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_skipped_then_cut_and_a_middle_one_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.jsonl");
        append_lines(&p, &[1, 2]).unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"torn").unwrap();
        let read = |p: &Path| parse_lines::<i32>(p, &fs::read(p).unwrap());
        assert_eq!(read(&p).unwrap(), vec![1, 2]);
        repair_tail(&p).unwrap();
        append_lines(&p, &[3]).unwrap();
        assert_eq!(read(&p).unwrap(), vec![1, 2, 3]);
        fs::write(&p, "1\nxx\n3\n").unwrap();
        assert_eq!(read(&p).unwrap_err().code(), "store_corrupt");
    }

    #[test]
    fn concurrent_writers_share_fsyncs_and_all_see_a_failed_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.jsonl");
        let shared = SharedSync::new(p.clone());
        std::thread::scope(|s| {
            for i in 0..16 {
                let (p, shared) = (&p, &shared);
                s.spawn(move || {
                    write_lines(p, &[i]).unwrap();
                    shared.sync().unwrap();
                });
            }
        });
        let mut read = parse_lines::<i32>(&p, &fs::read(&p).unwrap()).unwrap();
        read.sort_unstable();
        assert_eq!(read, (0..16).collect::<Vec<_>>());

        let missing = SharedSync::new(dir.path().join("gone"));
        let failed = std::thread::scope(|s| {
            let waiters: Vec<_> = (0..16).map(|_| s.spawn(|| missing.sync())).collect();
            waiters.into_iter().map(|w| w.join().unwrap()).filter(Result::is_err).count()
        });
        assert_eq!(failed, 16);
        assert!(missing.lock().failed.is_empty(), "every writer collected its batch's error");
    }

    #[test]
    fn a_shared_sync_keeps_its_file_open_until_told_the_file_was_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.jsonl");
        fs::write(&p, "1\n").unwrap();
        let shared = SharedSync::new(p.clone());
        shared.sync().unwrap();
        fs::remove_file(&p).unwrap();
        shared.sync().expect("the handle opened by the first fsync is kept");
        shared.forget();
        assert_eq!(shared.sync().unwrap_err().code(), "io_error", "after forget the path is opened again");
    }

    #[test]
    fn a_staged_file_is_invisible_until_published_and_removed_if_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.json");
        drop(Staged::write(&p, b"1").unwrap());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        let staged = Staged::write(&p, b"2").unwrap();
        assert!(!p.exists());
        staged.publish().unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "2");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn atomic_writes_replace_and_leave_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_json(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json(&p, &serde_json::json!({"a": 2})).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\n  \"a\": 2\n}\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
