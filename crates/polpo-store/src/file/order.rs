//! Listing orders in the file backend (sessions, runs), under `.polpo/.index/`, so that opening
//! the store reads no session or run and a list reads only its page. Each order `<name>` is:
//!
//! - `<name>.sorted`: (creation time, id) keys in ascending order, one JSON line each with
//!   the fields a list filters on (fixed at creation). Written whole and atomically (at
//!   compaction); a list finds its cursor by binary search over byte offsets and reads lines
//!   backwards from there.
//! - `<name>.log`: an append-only, fsynced journal of keys added and removed since, read
//!   at open (compaction keeps it short) and merged with the sorted file by every list.
//!
//! A key is appended before the entry's files are written, and a removal after its header
//! is deleted, so a crash can leave a key without an entry but never an entry without its
//! key: listing skips a key whose entry is missing, still being created, or was created at
//! another time. Compaction merges the journal into a new sorted file, then empties the
//! journal; a crash between the two replays the journal over keys that already have it,
//! which changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Bound;
use std::path::{Path, PathBuf};

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
}

impl<F: Serialize + DeserializeOwned + Clone> KeyOrder<F> {
    /// Open order `name` under `data_dir`, building it once with `build` (every key there is)
    /// when the store predates it (the only time open reads every entry), and read the journal.
    pub(super) fn open(
        data_dir: &Path,
        name: &str,
        build: impl FnOnce() -> Result<BTreeMap<Key, F>, StoreError>,
    ) -> Result<Self, StoreError> {
        // The directory is made when the store opens (see `Inner::open`).
        let dir = data_dir.join(INDEX_DIR);
        fsio::remove_stale_temps(&dir)?;
        let (sorted, log) = (dir.join(format!("{name}.sorted")), dir.join(format!("{name}.log")));
        if !sorted.exists() {
            fsio::write_atomic(&sorted, &render(build()?)?)?;
            fsio::write_atomic(&log, b"")?;
        }
        fsio::repair_tail(&log)?;
        let lines = fsio::parse_lines::<Line<F>>(&log, &fsio::read_bounded(&log)?.unwrap_or_default())?;
        let mut order =
            KeyOrder { sorted, log, added: BTreeMap::new(), removed: BTreeSet::new(), log_lines: lines.len() };
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

    fn append(&mut self, line: Line<F>) -> Result<(), StoreError> {
        fsio::append_lines(&self.log, std::slice::from_ref(&line))?;
        self.log_lines += 1;
        self.apply(line);
        if self.log_lines >= COMPACT_AT { self.compact() } else { Ok(()) }
    }

    /// Durably add an entry's key, before its files are written (until they are, lists skip
    /// it: the entry is still being created).
    pub(super) fn add(&mut self, (t, id): Key, fields: F) -> Result<(), StoreError> {
        self.append(Line { t, id, add: Some(fields) })
    }

    /// Durably remove a deleted entry's key (after its header is gone).
    pub(super) fn remove(&mut self, (t, id): Key) -> Result<(), StoreError> {
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

    /// Merge the journal into a new sorted file, then empty the journal. Reads and writes the
    /// whole index: done once every [`COMPACT_AT`] journal lines, and at a clean close.
    pub(super) fn compact(&mut self) -> Result<(), StoreError> {
        if self.log_lines == 0 {
            return Ok(());
        }
        let bytes = fsio::read_bounded(&self.sorted)?.unwrap_or_default();
        let mut keys: BTreeMap<Key, F> = BTreeMap::new();
        for line in fsio::parse_lines::<Line<F>>(&self.sorted, &bytes)? {
            let key = line.key();
            if let Some(fields) = line.add.filter(|_| !self.removed.contains(&key)) {
                keys.insert(key, fields);
            }
        }
        keys.extend(std::mem::take(&mut self.added));
        fsio::write_atomic(&self.sorted, &render(keys)?)?;
        fsio::write_atomic(&self.log, b"")?;
        self.removed.clear();
        self.log_lines = 0;
        Ok(())
    }

    /// At a clean close: compact once the journal holds a few lines, so the next open reads
    /// little of it without rewriting the whole index at every close.
    pub(super) fn close(&mut self) -> Result<(), StoreError> {
        if self.log_lines >= COMPACT_AT / 32 { self.compact() } else { Ok(()) }
    }
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
