//! The runs that are not finished (running or paused), kept on disk in `.index/runs.open` so
//! that opening the store reads only those runs, for crash reconciliation and for the lease
//! queries that take over a crashed owner's runs, however many finished runs are stored.
//!
//! The file is an append-only, fsynced journal of `{"id":…,"open":true|false}` lines: a run is
//! added before its files are written and removed after its finished header is written, so a
//! crash can leave an id whose run is missing or finished (dropped when the store next opens)
//! but never an unfinished run without its id. When the journal holds many more lines than
//! open runs it is rewritten atomically with one line per open run, so it stays as short as
//! the number of runs in flight.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::fsio;
use super::order::INDEX_DIR;
use crate::error::StoreError;

/// Journal lines beyond twice the open runs after which the journal is rewritten.
const SLACK: usize = 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Line {
    id: String,
    open: bool,
}

/// The ids of the runs not finished, and the journal they are kept in.
#[derive(Debug)]
pub(super) struct OpenRuns {
    path: PathBuf,
    ids: BTreeSet<String>,
    lines: usize,
}

impl OpenRuns {
    /// Read the journal under `data_dir` (cutting a line torn by a crash). A store that
    /// predates the journal gets it built once by `build` (the ids of every unfinished run).
    pub(super) fn open(
        data_dir: &Path,
        build: impl FnOnce() -> Result<BTreeSet<String>, StoreError>,
    ) -> Result<Self, StoreError> {
        let path = data_dir.join(INDEX_DIR).join("runs.open");
        if !path.exists() {
            let mut built = OpenRuns { path, ids: build()?, lines: 0 };
            built.rewrite()?;
            return Ok(built);
        }
        fsio::repair_tail(&path)?;
        let lines = fsio::parse_lines::<Line>(&path, &fsio::read_bounded(&path)?.unwrap_or_default())?;
        let mut ids = BTreeSet::new();
        let count = lines.len();
        for line in lines {
            if line.open {
                ids.insert(line.id);
            } else {
                ids.remove(&line.id);
            }
        }
        Ok(OpenRuns { path, ids, lines: count })
    }

    /// The ids of the open runs.
    pub(super) fn ids(&self) -> impl Iterator<Item = &String> {
        self.ids.iter()
    }

    /// Whether run `id` is open.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// Durably note run `id` as open (before its files are written).
    pub(super) fn add(&mut self, id: &str) -> Result<(), StoreError> {
        self.append(Line { id: id.to_owned(), open: true })
    }

    /// Durably note run `id` as finished (after its finished header is written).
    pub(super) fn remove(&mut self, id: &str) -> Result<(), StoreError> {
        if !self.ids.contains(id) {
            return Ok(());
        }
        self.append(Line { id: id.to_owned(), open: false })
    }

    /// Forget ids found missing or finished at open, in one atomic rewrite.
    pub(super) fn drop_all(&mut self, gone: &[String]) -> Result<(), StoreError> {
        if gone.is_empty() {
            return Ok(());
        }
        for id in gone {
            self.ids.remove(id);
        }
        self.rewrite()
    }

    fn append(&mut self, line: Line) -> Result<(), StoreError> {
        fsio::append_lines(&self.path, std::slice::from_ref(&line))?;
        self.lines += 1;
        if line.open {
            self.ids.insert(line.id);
        } else {
            self.ids.remove(&line.id);
        }
        if self.lines > 2 * self.ids.len() + SLACK { self.rewrite() } else { Ok(()) }
    }

    /// Replace the journal with one line per open run (atomic: a crash leaves the old or new).
    fn rewrite(&mut self) -> Result<(), StoreError> {
        let mut out = Vec::new();
        for id in &self.ids {
            serde_json::to_writer(&mut out, &Line { id: id.clone(), open: true })
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            out.push(b'\n');
        }
        fsio::write_atomic(&self.path, &out)?;
        self.lines = self.ids.len();
        Ok(())
    }
}
