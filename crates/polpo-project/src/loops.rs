//! Create, replace and delete one loop file (`.polpo/loops/<id>.json`) as a step of an
//! [`Edit`], with the same optimistic concurrency as agents: every read returns a
//! [`Revision`] (a hash of the file's bytes) and a change presenting an older one fails with
//! `conflict` instead of overwriting a hand edit. A `loops/<id>.ts` loop is compiled from its
//! source and is only changed by editing that source: writes to it fail `loop_read_only`.

use crate::agents::Revision;
use crate::edit::{Edit, read_optional};
use crate::error::ProjectError;
use crate::fsx;
use crate::paths::{self, LOOPS_DIR};
use polpo_core::config::check_id;
use polpo_core::loops::LoopConfig;
use std::path::{Path, PathBuf};

/// Which file defines a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopSource {
    /// `loops/<id>.json`, editable over the API.
    Json,
    /// `loops/<id>.ts`, compiled; read-only over the API.
    Ts,
}

impl LoopSource {
    /// `json` or `ts`, as the API shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Ts => "ts",
        }
    }
}

/// A loop file as it is on disk now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopFile {
    /// Which file defines it.
    pub source: LoopSource,
    /// The hash of that file's bytes.
    pub revision: Revision,
}

/// `.polpo/loops/<id>.json` and `.polpo/loops/<id>.ts`, for a valid id.
fn loop_paths(root: &Path, id: &str) -> Result<(PathBuf, PathBuf), ProjectError> {
    check_id(id).map_err(|reason| ProjectError::InvalidId { id: id.to_string(), reason })?;
    let dir = paths::polpo_dir(root).join(LOOPS_DIR);
    Ok((dir.join(format!("{id}.json")), dir.join(format!("{id}.ts"))))
}

/// Loop `id`'s file and revision, or `None` when neither `<id>.json` nor `<id>.ts` exists.
pub fn read_loop_file(root: &Path, id: &str) -> Result<Option<LoopFile>, ProjectError> {
    let (json, ts) = loop_paths(root, id)?;
    if let Some(bytes) = read_optional(&ts)? {
        return Ok(Some(LoopFile { source: LoopSource::Ts, revision: Revision::of(&bytes, b"") }));
    }
    Ok(read_optional(&json)?.map(|bytes| LoopFile { source: LoopSource::Json, revision: Revision::of(&bytes, b"") }))
}

/// Check the caller's revision against the file; `None` expects no loop at all.
fn expect_revision(root: &Path, id: &str, expected: Option<&Revision>) -> Result<(), ProjectError> {
    match (read_loop_file(root, id)?, expected) {
        (Some(file), _) if file.source == LoopSource::Ts => Err(ProjectError::LoopReadOnly(id.to_string())),
        (None, None) => Ok(()),
        (Some(_), None) => Err(ProjectError::LoopExists(id.to_string())),
        (None, Some(_)) => Err(ProjectError::LoopNotFound(id.to_string())),
        (Some(file), Some(rev)) if file.revision == *rev => Ok(()),
        (Some(_), Some(_)) => Err(ProjectError::Conflict(format!("loop `{id}`"))),
    }
}

/// Write loop `id`'s JSON file as a step of `edit`: created when `expected` is `None`,
/// replaced when it is the file's current revision. Returns the new revision.
pub fn write_loop(
    edit: &mut Edit<'_>,
    id: &str,
    config: &LoopConfig,
    expected: Option<&Revision>,
) -> Result<Revision, ProjectError> {
    let (path, _) = loop_paths(edit.root(), id)?;
    expect_revision(edit.root(), id, expected)?;
    let bytes = fsx::to_json_bytes(config).map_err(ProjectError::io("encode", &path))?;
    edit.write(&path, &bytes)?;
    Ok(Revision::of(&bytes, b""))
}

/// Remove loop `id`'s JSON file as a step of `edit`, when it is still at `expected`.
pub fn delete_loop(edit: &mut Edit<'_>, id: &str, expected: &Revision) -> Result<(), ProjectError> {
    let (path, _) = loop_paths(edit.root(), id)?;
    expect_revision(edit.root(), id, Some(expected))?;
    edit.remove(&path)
}
