//! An append-only JSONL journal (messages of a session, events of a run) with the byte offset
//! of every line kept in memory, so reading "entries after N" seeks straight to entry N+1
//! instead of re-reading the file. Entry `i` (0-based) is the entry with sequence `i + 1`.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::fsio;
use crate::error::StoreError;

/// Line offsets of one journal file. Only the holder of the store lock appends.
#[derive(Debug, Default, Clone)]
pub(crate) struct Journal {
    starts: Vec<u64>,
    end: u64,
}

/// What [`Journal::write`] did: each line's length, or the error and the offsets rebuilt from
/// the file (when it could be read back).
pub(crate) type Written = Result<Vec<u64>, (StoreError, Option<Journal>)>;

/// Where entries `from..from+n` lie in the file, taken under the index lock and read after it
/// is released: appends only add bytes beyond `end`, so the range stays valid.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    start: u64,
    end: u64,
}

impl Journal {
    /// Open a journal after a possible crash: cut a torn tail, index every line, and return
    /// the last entry (for reconciling headers).
    pub(crate) fn open<T: DeserializeOwned>(path: &Path) -> Result<(Journal, Option<T>), StoreError> {
        fsio::repair_tail(path)?;
        let bytes = fsio::read_bounded(path)?.unwrap_or_default();
        let mut starts = Vec::new();
        let mut line_start = 0usize;
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' {
                if i > line_start {
                    starts.push(line_start as u64);
                }
                line_start = i + 1;
            }
        }
        let last = match starts.last() {
            Some(&s) => Some(fsio::parse_line(path, bytes[s as usize..].trim_ascii_end())?),
            None => None,
        };
        Ok((Journal { starts, end: bytes.len() as u64 }, last))
    }

    /// Number of entries.
    pub(crate) fn count(&self) -> u64 {
        self.starts.len() as u64
    }

    /// Append entries durably. On failure the offsets are rebuilt from the file, so a partly
    /// written line never shifts later reads.
    pub(crate) fn append<T: Serialize>(&mut self, path: &Path, items: &[T]) -> Result<(), StoreError> {
        let written = Journal::write(path, items);
        self.record(written)
    }

    /// A new journal at `path` (in a fresh directory) holding `items`, written and fsynced like
    /// [`Journal::append`]; the append creates the file, so it is opened once, not created empty
    /// and opened again. With no items the file is created empty.
    pub(crate) fn create<T: Serialize>(path: &Path, items: &[T]) -> Result<Journal, StoreError> {
        let mut journal = Journal::default();
        if items.is_empty() {
            fsio::create_empty(path)?;
        } else {
            journal.append(path, items)?;
        }
        Ok(journal)
    }

    /// The file half of [`Journal::append`], done without the index lock (the caller holds the
    /// journal's own write lock): the lines' lengths, or the error and the offsets rebuilt from
    /// the file.
    pub(crate) fn write<T: Serialize>(path: &Path, items: &[T]) -> Written {
        fsio::append_lines(path, items).map_err(|e| (e, Journal::open::<serde_json::Value>(path).ok().map(|(j, _)| j)))
    }

    /// The in-memory half of [`Journal::append`]: take in what [`Journal::write`] did.
    pub(crate) fn record(&mut self, written: Written) -> Result<(), StoreError> {
        match written {
            Ok(lengths) => {
                for len in lengths {
                    self.starts.push(self.end);
                    self.end += len;
                }
                Ok(())
            }
            Err((e, rebuilt)) => {
                if let Some(rebuilt) = rebuilt {
                    *self = rebuilt;
                }
                Err(e)
            }
        }
    }

    /// The byte range of up to `limit` entries after the first `after`.
    pub(crate) fn window(&self, after: u64, limit: usize) -> Option<Window> {
        let from = usize::try_from(after).ok().filter(|f| *f < self.starts.len())?;
        let to = from.saturating_add(limit).min(self.starts.len());
        let end = self.starts.get(to).copied().unwrap_or(self.end);
        Some(Window { start: self.starts[from], end })
    }
}

impl Window {
    /// Read and parse the entries in the window.
    pub(crate) fn read<T: DeserializeOwned>(self, path: &Path) -> Result<Vec<T>, StoreError> {
        fsio::parse_lines(path, &fsio::read_range(path, self.start, self.end)?)
    }
}
