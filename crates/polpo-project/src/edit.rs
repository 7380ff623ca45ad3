//! One edit of `.polpo/` as a transaction: write the files, load and validate the whole
//! project as it then is on disk, hand it to the caller to serve (`swap`), and put back every
//! touched file as it was when any step fails.
//!
//! Every surface that changes project files (the REST routes for agents and teams, and the
//! coming ones for loops, skills and schedules) goes through [`ProjectEditor::edit`], so a
//! change is either served whole or not on disk at all. Edits of one project are serialised by
//! the editor's own lock: whoever serves the project owns one editor, and two edits never
//! interleave their write, reload and undo.

use crate::error::ProjectError;
use crate::fsx::{self, MAX_FILE_BYTES};
use crate::load::load_project;
use polpo_core::config::Project;
use polpo_core::problem::Problem;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The one writer of a project's files in this process.
#[derive(Debug)]
pub struct ProjectEditor {
    root: PathBuf,
    serial: Mutex<()>,
}

impl ProjectEditor {
    /// The editor of the project whose root (the folder containing `.polpo/`) is `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), serial: Mutex::new(()) }
    }

    /// The project root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Apply `change` to the files, load the whole project from disk and give it to `swap`
    /// (which starts serving it, or refuses it with problems). When `change`, the load or
    /// `swap` fails, every file `change` touched gets its previous bytes back and the error is
    /// returned: [`ProjectError::Invalid`] with the problems for a project that no longer
    /// loads or that `swap` refused. `change` may fail with its caller's own errors (`E`).
    /// Blocking (fsync); edits of this editor run one at a time.
    pub fn edit<T, E: From<ProjectError>>(
        &self,
        change: impl FnOnce(&mut Edit<'_>) -> Result<T, E>,
        swap: impl FnOnce(Project) -> Result<(), Vec<Problem>>,
    ) -> Result<T, E> {
        let _serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
        let mut edit = Edit { root: &self.root, undo: Vec::new() };
        let result = change(&mut edit).and_then(|value| {
            let project = load_project(&self.root).map_err(ProjectError::Invalid)?;
            swap(project).map_err(ProjectError::Invalid)?;
            Ok(value)
        });
        match &result {
            Ok(_) => edit.commit(),
            Err(_) => edit.roll_back(),
        }
        result
    }
}

/// The file changes of one transaction, each recorded with how to undo it.
#[derive(Debug)]
pub struct Edit<'a> {
    root: &'a Path,
    undo: Vec<Undo>,
}

/// How to undo one change.
#[derive(Debug)]
enum Undo {
    /// Put these bytes back (the file existed).
    Restore(PathBuf, Vec<u8>),
    /// Remove the file (it did not exist).
    Remove(PathBuf),
    /// Remove the folder (this edit created it).
    RemoveDir(PathBuf),
    /// Rename the removed folder (`.0`, hidden) back to where it was (`.1`).
    Unbury(PathBuf, PathBuf),
}

impl Undo {
    /// The file or folder this puts back.
    fn path(&self) -> &Path {
        match self {
            Self::Restore(path, _) | Self::Remove(path) | Self::RemoveDir(path) | Self::Unbury(_, path) => path,
        }
    }
}

impl Edit<'_> {
    /// The project root.
    pub fn root(&self) -> &Path {
        self.root
    }

    /// Replace (or create) file `path` with `bytes` atomically, creating its folders.
    pub fn write(&mut self, path: &Path, bytes: &[u8]) -> Result<(), ProjectError> {
        if let Some(dir) = path.parent() {
            self.create_dirs(dir)?;
        }
        let before = read_optional(path)?;
        fsx::write_atomic(path, bytes).map_err(ProjectError::io("write", path))?;
        self.undo.push(match before {
            Some(bytes) => Undo::Restore(path.to_path_buf(), bytes),
            None => Undo::Remove(path.to_path_buf()),
        });
        Ok(())
    }

    /// Remove file `path`, which must exist.
    pub fn remove(&mut self, path: &Path) -> Result<(), ProjectError> {
        let before = fsx::read_bounded(path, MAX_FILE_BYTES).map_err(ProjectError::io("read", path))?;
        std::fs::remove_file(path).map_err(ProjectError::io("remove", path))?;
        sync_parent(path)?;
        self.undo.push(Undo::Restore(path.to_path_buf(), before));
        Ok(())
    }

    /// Remove folder `dir` and everything in it: at once renamed to a hidden name (which
    /// loaders skip), deleted for good when the edit is served, renamed back when it is not.
    pub fn remove_dir(&mut self, dir: &Path) -> Result<(), ProjectError> {
        static BURIALS: AtomicU64 = AtomicU64::new(0);
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let n = BURIALS.fetch_add(1, Ordering::Relaxed);
        let grave = dir.with_file_name(format!(".{name}.deleted-{}-{n}", std::process::id()));
        std::fs::rename(dir, &grave).map_err(ProjectError::io("rename", dir))?;
        sync_parent(dir)?;
        self.undo.push(Undo::Unbury(grave, dir.to_path_buf()));
        Ok(())
    }

    /// Create the missing folders of `dir`, outermost first.
    fn create_dirs(&mut self, dir: &Path) -> Result<(), ProjectError> {
        let mut missing: Vec<&Path> =
            dir.ancestors().take_while(|d| !d.as_os_str().is_empty() && !d.exists()).collect();
        missing.reverse();
        for d in missing {
            std::fs::create_dir(d).map_err(ProjectError::io("create", d))?;
            sync_parent(d)?;
            self.undo.push(Undo::RemoveDir(d.to_path_buf()));
        }
        Ok(())
    }

    /// The edit is served: removed folders go for good.
    fn commit(self) {
        for undo in self.undo {
            if let Undo::Unbury(grave, _) = undo
                && let Err(e) = std::fs::remove_dir_all(&grave)
            {
                tracing::warn!(path = %grave.display(), error = %e, "could not remove a deleted folder");
            }
        }
    }

    /// The edit is not served: every change is undone, last first.
    fn roll_back(self) {
        for undo in self.undo.into_iter().rev() {
            let result = match &undo {
                Undo::Restore(path, bytes) => fsx::write_atomic(path, bytes),
                Undo::Remove(path) => std::fs::remove_file(path).and_then(|()| sync_dir_of(path)),
                Undo::RemoveDir(dir) => std::fs::remove_dir(dir).and_then(|()| sync_dir_of(dir)),
                Undo::Unbury(grave, dir) => std::fs::rename(grave, dir).and_then(|()| sync_dir_of(dir)),
            };
            if let Err(e) = result {
                tracing::warn!(path = %undo.path().display(), error = %e, "could not undo a project edit");
            }
        }
    }
}

/// The bytes of `path`, or `None` when there is no such file.
pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, ProjectError> {
    match fsx::read_bounded(path, MAX_FILE_BYTES) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ProjectError::io("read", path)(e)),
    }
}

fn sync_dir_of(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => fsx::sync_dir(dir),
        _ => fsx::sync_dir(Path::new(".")),
    }
}

fn sync_parent(path: &Path) -> Result<(), ProjectError> {
    sync_dir_of(path).map_err(ProjectError::io("sync", path))
}
