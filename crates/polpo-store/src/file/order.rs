//! Listing orders in the file backend (sessions and runs under `.polpo/.index/`, each record
//! collection in its own folder), so that opening the store reads no session, run or record
//! and a list reads only its page. Each order `<name>` is:
//!
//! - `<name>.sorted`: (creation time, id) keys in ascending order, one JSON line each with
//!   the fields a list filters on (fixed at creation). Written whole and atomically (at
//!   compaction); a list finds its cursor by binary search over byte offsets and reads lines
//!   backwards from there.
//! - `<name>.log`: an append-only, fsynced journal of keys added and removed since, read
//!   at open (compaction keeps it short) and merged with the sorted file by every list. Lines
//!   are written under the order's lock and fsynced after it, one fsync shared by every writer
//!   waiting at that moment ([`fsio::SharedSync`]); so after a crash its unsynced tail may hold
//!   several lines of unacknowledged writes, and a line the crash left as NUL bytes (written
//!   after, but not flushed before, a later one) is dropped like a torn last line.
//!
//! A key is appended before the entry's files are written, and a removal after its header
//! is deleted, so a crash can leave a key without an entry but never an entry without its
//! key: listing skips a key whose entry is missing, still being created, or was created at
//! another time. Compaction merges the journal into a new sorted file, then empties the
//! journal; a crash between the two replays the journal over keys that already have it,
//! which changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::fsio;
use crate::error::StoreError;

/// The directory of the file backend's listing indexes (ids never start with '.').
pub(super) const INDEX_DIR: &str = ".index";

/// Journal lines after which an append compacts (a clean close compacts from a fraction of
/// that), so reading the journal at open stays small whatever the store's size.
const COMPACT_AT: usize = 8192;

/// How many bytes a backward read of the sorted file takes at a time.
const CHUNK: u64 = 16 * 1024;

/// A listing key: creation time in milliseconds, then id.
pub(super) type Key = (i64, String);

/// One line of either file: a key added with its filter fields, or (without them) removed.
#[derive(Debug, Serialize, Deserialize)]
struct Line<F> {
    t: i64,
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    add: Option<F>,
}

impl<F> Line<F> {
    fn key(&self) -> Key {
        (self.t, self.id.clone())
    }
}

/// One listing order: where its files are, and the journal's keys in memory. `F` is what a
/// list filters on, copied into the index so filtering opens no entry's file.
#[derive(Debug)]
pub(super) struct KeyOrder<F> {
    sorted: PathBuf,
    log: PathBuf,
    /// Keys the journal added since the sorted file was written.
    added: BTreeMap<Key, F>,
    /// Keys the journal removed from the sorted file.
    removed: BTreeSet<Key>,
    /// Lines in the journal.
    log_lines: usize,
    /// The journal's fsync, shared by the writers waiting on it.
    log_sync: Arc<fsio::SharedSync>,
    /// The journal, open for appending since the first append after open or compaction
    /// (an append is then one system call, not three).
    log_file: Option<File>,
}

impl<F: Serialize + DeserializeOwned + Clone> KeyOrder<F> {
    /// Open order `name` with its files in `dir` (which exists), building it once with `build`
    /// (every key there is) when the store predates it (the only time open reads every entry),
    /// and read the journal. Temp files a crash left in `dir` are the caller's to sweep.
    pub(super) fn open(
        dir: &Path,
        name: &str,
        build: impl FnOnce() -> Result<BTreeMap<Key, F>, StoreError>,
    ) -> Result<Self, StoreError> {
        let (sorted, log) = (dir.join(format!("{name}.sorted")), dir.join(format!("{name}.log")));
        if !sorted.exists() {
            fsio::write_atomic(&sorted, &render(build()?)?)?;
            fsio::write_atomic(&log, b"")?;
        }
        fsio::repair_tail(&log)?;
        let lines = parse_log::<F>(&log, &fsio::read_bounded(&log)?.unwrap_or_default())?;
        let log_sync = Arc::new(fsio::SharedSync::new(log.clone()));
        let mut order = KeyOrder {
            sorted,
            log,
            added: BTreeMap::new(),
            removed: BTreeSet::new(),
            log_lines: lines.len(),
            log_sync,
            log_file: None,
        };
        for line in lines {
            order.apply(line);
        }
        Ok(order)
    }

    fn apply(&mut self, line: Line<F>) {
        let key = line.key();
        match line.add {
            Some(fields) => {
                self.removed.remove(&key);
                self.added.insert(key, fields);
            }
            None => {
                self.added.remove(&key);
                self.removed.insert(key);
            }
        }
    }

    /// Write `line` to the journal, not yet durable: the returned [`LogSync`] makes it so.
    fn append(&mut self, line: Line<F>) -> Result<LogSync, StoreError> {
        let (bytes, _) = fsio::json_lines(std::slice::from_ref(&line))?;
        let file = match &mut self.log_file {
            Some(file) => file,
            None => self.log_file.insert(fsio::open_append(&self.log)?),
        };
        if let Err(e) = file.write_all(&bytes) {
            self.log_file = None;
            return Err(StoreError::io(&self.log, e));
        }
        self.log_lines += 1;
        self.apply(line);
        if self.log_lines >= COMPACT_AT {
            self.compact()?;
        }
        Ok(LogSync(Arc::clone(&self.log_sync)))
    }

    /// Add an entry's key, before its files are written (until they are, lists skip it: the
    /// entry is still being created). Durable once the returned [`LogSync`] has synced, which
    /// the caller does after releasing the order's lock and before writing the entry's header.
    pub(super) fn add(&mut self, (t, id): Key, fields: F) -> Result<LogSync, StoreError> {
        self.append(Line { t, id, add: Some(fields) })
    }

    /// Remove a deleted entry's key (after its header is gone); durable once the returned
    /// [`LogSync`] has synced (until then a crash leaves the key, which lists skip).
    pub(super) fn remove(&mut self, (t, id): Key) -> Result<LogSync, StoreError> {
        self.append(Line { t, id, add: None })
    }

    /// Up to `n` keys whose fields `keep` accepts, newest first, strictly before `before` (from the
    /// newest when `None`): the journal's from memory, the sorted file's from around the cursor.
    pub(super) fn before(
        &self,
        before: Option<&Key>,
        keep: impl Fn(&F) -> bool,
        n: usize,
    ) -> Result<Vec<Key>, StoreError> {
        let mut keys: Vec<Key> = self
            .added
            .range::<Key, _>((Bound::Unbounded, before.map_or(Bound::Unbounded, Bound::Excluded)))
            .rev()
            .filter(|(_, f)| keep(f))
            .take(n)
            .map(|(k, _)| k.clone())
            .collect();
        let mut sorted = Sorted::open(&self.sorted)?;
        let mut end = match before {
            Some(key) => sorted.first_at_or_after(key)?,
            None => sorted.len,
        };
        let mut from_file = 0;
        while from_file < n && end > 0 {
            let (start, lines) = sorted.lines_before::<F>(end)?;
            for line in lines.into_iter().rev() {
                let key = line.key();
                let live = !self.removed.contains(&key) && !self.added.contains_key(&key);
                if live && from_file < n && line.add.as_ref().is_some_and(&keep) {
                    keys.push(key);
                    from_file += 1;
                }
            }
            end = start;
        }
        keys.sort_by(|a, b| b.cmp(a));
        keys.truncate(n);
        Ok(keys)
    }

    /// Merge the journal into a new sorted file, then empty the journal: done once every
    /// [`COMPACT_AT`] journal lines, and at a clean close. The sorted file is read a line at a
    /// time and its lines copied as they are, merged in key order with the journal's keys:
    /// parsing it whole into keys made each compaction's peak grow with the number of entries
    /// (tens of thousands of small allocations), and the allocator kept that peak afterwards;
    /// so did it the one buffer of the whole file the merge was then built in (issue 22): the
    /// merge is written to the new file as it goes.
    pub(super) fn compact(&mut self) -> Result<(), StoreError> {
        if self.log_lines == 0 {
            return Ok(());
        }
        fsio::write_atomic_with(&self.sorted, |out| self.merge_into(out))?;
        // The journal is replaced: appends and fsyncs go to the new file from now on (let go
        // of the old one first, so a failure after the rename cannot leave appends on it).
        self.log_file = None;
        self.log_sync.forget();
        fsio::write_atomic(&self.log, b"")?;
        self.added.clear();
        self.removed.clear();
        self.log_lines = 0;
        Ok(())
    }

    /// The sorted file's lines whose keys are not removed, merged with the journal's added
    /// keys (which replace a key both hold), in key order. A last line without its newline is
    /// skipped, like every reader of the file does. Written to `out` line by line.
    fn merge_into(&self, out: &mut dyn Write) -> Result<(), StoreError> {
        let path = &self.sorted;
        let old = match File::open(path) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io(path, e)),
        };
        let add = |out: &mut dyn Write, ((t, id), fields): (&Key, &F)| -> Result<(), StoreError> {
            serde_json::to_writer(&mut *out, &Line { t: *t, id: id.clone(), add: Some(fields) })
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            out.write_all(b"\n").map_err(|e| StoreError::io(path, e))
        };
        let mut added = self.added.iter().peekable();
        if let Some(old) = old {
            use std::io::BufRead;
            let mut old = std::io::BufReader::with_capacity(CHUNK as usize, old);
            let mut line = Vec::new();
            loop {
                line.clear();
                old.read_until(b'\n', &mut line).map_err(|e| StoreError::io(path, e))?;
                let Some((b'\n', content)) = line.split_last() else { break };
                let kept = fsio::parse_line::<Line<serde::de::IgnoredAny>>(path, content)?;
                let key = kept.key();
                while let Some(entry) = added.next_if(|(k, _)| **k < key) {
                    add(out, entry)?;
                }
                if kept.add.is_some() && !self.removed.contains(&key) && !self.added.contains_key(&key) {
                    out.write_all(&line).map_err(|e| StoreError::io(path, e))?;
                }
            }
        }
        added.try_for_each(|entry| add(out, entry))
    }

    /// At a clean close: compact once the journal holds a few lines, so the next open reads
    /// little of it without rewriting the whole index at every close.
    pub(super) fn close(&mut self) -> Result<(), StoreError> {
        if self.log_lines >= COMPACT_AT / 32 { self.compact() } else { Ok(()) }
    }
}

/// What makes an order journal line durable: [`LogSync::sync`] after releasing the order's
/// lock, so writers of other entries append meanwhile and share the fsync.
#[must_use = "the key is not durable until synced"]
pub(super) struct LogSync(Arc<fsio::SharedSync>);

impl LogSync {
    /// Return once the journal line is durable (a shared fsync, see [`fsio::SharedSync`]).
    pub(super) fn sync(self) -> Result<(), StoreError> {
        self.0.sync()
    }
}

/// The journal's lines, without those a crash left as NUL bytes: with lines written before
/// a shared fsync, a crash can persist a later line but not an earlier one. Such a line was
/// never acknowledged (the fsync that would have covered it also covers every line before
/// it), so it is dropped like a torn last line.
fn parse_log<F: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<Vec<Line<F>>, StoreError> {
    if !bytes.contains(&0) {
        return fsio::parse_lines(path, bytes);
    }
    tracing::warn!(path = %path.display(), "dropping journal lines left unflushed by a crash");
    let kept: Vec<u8> =
        bytes.split_inclusive(|&b| b == b'\n').filter(|line| !line.contains(&0)).flatten().copied().collect();
    fsio::parse_lines(path, &kept)
}

fn render<F: Serialize>(keys: BTreeMap<Key, F>) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    for ((t, id), fields) in keys {
        serde_json::to_writer(&mut out, &Line { t, id, add: Some(fields) })
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        out.push(b'\n');
    }
    Ok(out)
}

/// The sorted file, opened for one list.
struct Sorted<'a> {
    path: &'a Path,
    file: Option<File>,
    len: u64,
}

impl<'a> Sorted<'a> {
    fn open(path: &'a Path) -> Result<Self, StoreError> {
        match File::open(path) {
            Ok(file) => {
                let len = file.metadata().map_err(|e| StoreError::io(path, e))?.len();
                Ok(Sorted { path, file: Some(file), len })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Sorted { path, file: None, len: 0 }),
            Err(e) => Err(StoreError::io(path, e)),
        }
    }

    fn read_at(&mut self, start: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        let path = self.path;
        let Some(file) = self.file.as_mut() else { return Ok(Vec::new()) };
        file.seek(SeekFrom::Start(start)).map_err(|e| StoreError::io(path, e))?;
        let mut buf = Vec::new();
        file.take(len).read_to_end(&mut buf).map_err(|e| StoreError::io(path, e))?;
        Ok(buf)
    }

    /// The first line starting at or after byte `pos`: its start, end (after the newline) and
    /// content; `None` past the last line.
    fn line_from<F: DeserializeOwned>(&mut self, pos: u64) -> Result<Option<(u64, u64, Line<F>)>, StoreError> {
        let mut start = pos;
        if pos > 0 {
            // Skip the rest of the line that `pos - 1` is in.
            start = pos - 1;
            loop {
                let buf = self.read_at(start, CHUNK)?;
                match buf.iter().position(|&b| b == b'\n') {
                    Some(i) => break start += i as u64 + 1,
                    None if buf.is_empty() => return Ok(None),
                    None => start += buf.len() as u64,
                }
            }
        }
        let mut line = Vec::new();
        loop {
            let buf = self.read_at(start + line.len() as u64, CHUNK)?;
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    line.extend_from_slice(&buf[..i]);
                    let end = start + line.len() as u64 + 1;
                    return Ok(Some((start, end, fsio::parse_line(self.path, &line)?)));
                }
                // A line without its newline is never in a file written whole.
                None if buf.is_empty() => return Ok(None),
                None => line.extend_from_slice(&buf),
            }
        }
    }

    /// The start of the first line whose key is `key` or later (the file's length when none
    /// is): a binary search over byte offsets, `log(size)` short reads.
    fn first_at_or_after(&mut self, key: &Key) -> Result<u64, StoreError> {
        // Lines starting before `lo` are before `key`; lines starting at or after `hi` are not.
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.line_from::<serde::de::IgnoredAny>(mid)? {
                Some((start, end, line)) if start < hi && line.key() < *key => lo = end,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }

    /// The complete lines of the chunk ending at `end` (a line start), oldest first, and
    /// where the first of them starts.
    fn lines_before<F: DeserializeOwned>(&mut self, end: u64) -> Result<(u64, Vec<Line<F>>), StoreError> {
        let from = end.saturating_sub(CHUNK);
        let start = if from == 0 {
            0
        } else {
            // Lines start after the first newline at or after `from - 1`; when that is the one
            // ending the chunk, a line longer than the chunk ends here: read back to its start.
            let buf = self.read_at(from - 1, end - from + 1)?;
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) if from + (i as u64) < end => from + i as u64,
                _ => self.line_start_before(from)?,
            }
        };
        let buf = self.read_at(start, end - start)?;
        Ok((start, fsio::parse_lines(self.path, &buf)?))
    }

    /// The start of the line that byte `pos` is in.
    fn line_start_before(&mut self, pos: u64) -> Result<u64, StoreError> {
        let mut end = pos;
        while end > 0 {
            let start = end.saturating_sub(CHUNK);
            let buf = self.read_at(start, end - start)?;
            if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
                return Ok(start + i as u64 + 1);
            }
            end = start;
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_a_crash_left_as_nul_bytes_are_dropped_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(INDEX_DIR)).unwrap();
        let mut order = KeyOrder::<u8>::open(&dir.path().join(INDEX_DIR), "things", || Ok(BTreeMap::new())).unwrap();
        order.add((1, "a".into()), 1).unwrap().sync().unwrap();
        drop(order);
        // A later line flushed, the one before it not: NULs where it was.
        let log = dir.path().join(INDEX_DIR).join("things.log");
        let mut bytes = std::fs::read(&log).unwrap();
        bytes.extend([0u8; 20]);
        bytes.extend(b"{\"t\":3,\"id\":\"c\",\"add\":1}\n{\"t\":4,\"id\":\"d\",\"add\":1}\n");
        std::fs::write(&log, bytes).unwrap();
        let order = KeyOrder::<u8>::open(&dir.path().join(INDEX_DIR), "things", || Ok(BTreeMap::new())).unwrap();
        let keys = order.before(None, |_| true, 10).unwrap();
        assert_eq!(keys, vec![(4, "d".to_owned()), (1, "a".to_owned())]);
        assert_eq!(order.log_lines, 2, "the NUL-damaged line is dropped, the next kept");
    }

    #[test]
    fn keys_added_after_a_compaction_reach_the_new_journal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(INDEX_DIR)).unwrap();
        let mut order = KeyOrder::<u8>::open(&dir.path().join(INDEX_DIR), "things", || Ok(BTreeMap::new())).unwrap();
        order.add((1, "a".into()), 1).unwrap().sync().unwrap();
        order.compact().unwrap();
        // The journal kept open for appends and fsyncs was replaced by the compaction.
        order.add((2, "b".into()), 2).unwrap().sync().unwrap();
        drop(order);
        let log = std::fs::read_to_string(dir.path().join(INDEX_DIR).join("things.log")).unwrap();
        assert_eq!(log, "{\"t\":2,\"id\":\"b\",\"add\":2}\n");
        let reopened = KeyOrder::<u8>::open(&dir.path().join(INDEX_DIR), "things", || Ok(BTreeMap::new())).unwrap();
        assert_eq!(reopened.before(None, |_| true, 10).unwrap(), vec![(2, "b".to_owned()), (1, "a".to_owned())]);
    }

    #[test]
    fn a_compaction_larger_than_its_write_buffer_keeps_every_key_in_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(INDEX_DIR)).unwrap();
        let mut order = KeyOrder::<u32>::open(&dir.path().join(INDEX_DIR), "things", || Ok(BTreeMap::new())).unwrap();
        // Odd times, compacted; then even ones merged between them, and every tenth removed:
        // the sorted files are several times the write buffer. Lines are not synced (6,600
        // fsyncs take seconds, and durability is not what this checks).
        let add = |order: &mut KeyOrder<u32>, t: i64| drop(order.add((t, format!("thing-{t:05}")), t as u32).unwrap());
        for t in (1..6000).step_by(2) {
            add(&mut order, t);
        }
        order.compact().unwrap();
        for t in (0..6000).step_by(2) {
            add(&mut order, t);
        }
        for t in (0..6000).step_by(10) {
            drop(order.remove((t, format!("thing-{t:05}"))).unwrap());
        }
        order.compact().unwrap();
        let sorted = std::fs::read(dir.path().join(INDEX_DIR).join("things.sorted")).unwrap();
        assert!(sorted.len() > 2 * fsio::WRITE_BUFFER, "{} bytes", sorted.len());
        let lines: Vec<Line<u32>> = fsio::parse_lines(Path::new("things.sorted"), &sorted).unwrap();
        let expected: Vec<i64> = (0..6000).filter(|t| t % 10 != 0).collect();
        assert_eq!(lines.iter().map(|l| l.t).collect::<Vec<_>>(), expected);
        assert!(lines.iter().all(|l| l.add == Some(l.t as u32) && l.id == format!("thing-{:05}", l.t)));
        let reopened = KeyOrder::<u32>::open(&dir.path().join(INDEX_DIR), "things", || Ok(BTreeMap::new())).unwrap();
        assert_eq!(
            reopened.before(None, |_| true, 2).unwrap(),
            vec![(5999, "thing-05999".to_owned()), (5998, "thing-05998".to_owned())]
        );
    }
}
