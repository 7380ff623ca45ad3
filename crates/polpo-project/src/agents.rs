//! Create, update and delete one agent on disk, with optimistic concurrency.
//!
//! The server edits agents while a user may be editing the same files by hand. Every read
//! returns a [`Revision`] (a hash of `agent.json` and `instructions.md`); an update or delete
//! must present the revision it started from, and fails with `conflict` if the files changed
//! in between, instead of silently overwriting the hand edit.
//!
//! Writes are steps of an [`Edit`], so check-then-write is atomic among the writers of one
//! process (the editor serialises its edits) and undone when the project stops loading; against
//! other processes the revision check narrows the window to the instant between the check and
//! the rename.

use crate::edit::{Edit, read_optional};
use crate::error::ProjectError;
use crate::fsx;
use crate::paths::{self, AGENT_JSON, AGENTS_DIR, INSTRUCTIONS_MD};
use polpo_core::config::{AGENT_FILE, Agent, AgentConfig, Location, check_id, fold_id, parse_checked};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A content hash of an agent's files; changes whenever either file changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Revision(String);

impl Revision {
    /// Parse a revision a client sent back (e.g. in `If-Match`).
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn of(agent_json: &[u8], instructions: &[u8]) -> Self {
        let mut hash = Sha256::new();
        hash.update((agent_json.len() as u64).to_be_bytes());
        hash.update(agent_json);
        hash.update(instructions);
        Self(hex::encode(hash.finalize()))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An agent as read, with the revision to present when changing it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSnapshot {
    /// The agent.
    pub agent: Agent,
    /// Its revision at read time.
    pub revision: Revision,
}

fn agent_dir(root: &Path, id: &str) -> Result<PathBuf, ProjectError> {
    check_id(id).map_err(|reason| ProjectError::InvalidId { id: id.to_string(), reason })?;
    let dot = paths::polpo_dir(root);
    if dot.join(paths::LEGACY_AGENTS_JSON).exists() {
        return Err(ProjectError::LegacyLayout);
    }
    Ok(dot.join(AGENTS_DIR).join(id))
}

/// The raw bytes of an agent's two files.
struct AgentFiles {
    config: Vec<u8>,
    instructions: Vec<u8>,
}

impl AgentFiles {
    fn revision(&self) -> Revision {
        Revision::of(&self.config, &self.instructions)
    }
}

/// The two files' bytes, or `None` when the agent does not exist.
fn current_files(dir: &Path) -> Result<Option<AgentFiles>, ProjectError> {
    let Some(config) = read_optional(&dir.join(AGENT_JSON))? else {
        return Ok(None);
    };
    let instructions = read_optional(&dir.join(INSTRUCTIONS_MD))?.unwrap_or_default();
    Ok(Some(AgentFiles { config, instructions }))
}

/// Check the caller's revision against the files; `None` expects no agent at all.
fn expect_revision(root: &Path, id: &str, dir: &Path, expected: Option<&Revision>) -> Result<(), ProjectError> {
    match (current_files(dir)?, expected) {
        (None, None) => {
            // The same id without agent.json is a create that crashed half-way: redo it.
            let clash = existing_ids(root)?.into_iter().find(|other| other != id && fold_id(other) == fold_id(id));
            clash.map_or(Ok(()), |other| Err(ProjectError::AgentExists(other)))
        }
        (Some(_), None) => Err(ProjectError::AgentExists(id.to_string())),
        (None, Some(_)) => Err(ProjectError::AgentNotFound(id.to_string())),
        (Some(files), Some(rev)) if files.revision() == *rev => Ok(()),
        (Some(_), Some(_)) => Err(ProjectError::Conflict(format!("agent `{id}`"))),
    }
}

fn existing_ids(root: &Path) -> Result<Vec<String>, ProjectError> {
    let dir = paths::polpo_dir(root).join(AGENTS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ProjectError::io("list", dir)(e)),
    };
    Ok(entries.flatten().filter_map(|e| e.file_name().into_string().ok()).filter(|n| !n.starts_with('.')).collect())
}

/// Read one agent of a directory-layout project.
pub fn read_agent(root: &Path, id: &str) -> Result<AgentSnapshot, ProjectError> {
    let dir = agent_dir(root, id)?;
    let files = current_files(&dir)?.ok_or_else(|| ProjectError::AgentNotFound(id.to_string()))?;
    let at = Location::file(paths::display(&[AGENTS_DIR, id, AGENT_JSON]));
    let value = crate::read::json_from(&files.config, &at.file).map_err(ProjectError::Invalid)?;
    let config = parse_checked(&value, &AGENT_FILE, &at).map_err(ProjectError::Invalid)?;
    let revision = files.revision();
    let shown = paths::display(&[AGENTS_DIR, id, INSTRUCTIONS_MD]);
    let instructions = crate::read::utf8(files.instructions, &shown).map_err(ProjectError::Invalid)?;
    Ok(AgentSnapshot { agent: Agent { id: id.to_string(), config, instructions, source: at }, revision })
}

/// Create (`expected = None`) or update (`expected = Some(revision read earlier)`) an agent,
/// as a step of `edit`. Returns the new revision.
pub fn write_agent(
    edit: &mut Edit<'_>,
    id: &str,
    config: &AgentConfig,
    instructions: &str,
    expected: Option<&Revision>,
) -> Result<Revision, ProjectError> {
    let root = edit.root().to_path_buf();
    let dir = agent_dir(&root, id)?;
    expect_revision(&root, id, &dir, expected)?;
    let config_bytes = fsx::to_json_bytes(config).map_err(ProjectError::io("encode", dir.join(AGENT_JSON)))?;
    // Instructions first: a crash in between leaves an agent that fails to load as "missing
    // agent.json" on create, or an updated prompt with the old config on update — never a
    // torn file.
    edit.write(&dir.join(INSTRUCTIONS_MD), instructions.as_bytes())?;
    edit.write(&dir.join(AGENT_JSON), &config_bytes)?;
    Ok(Revision::of(&config_bytes, instructions.as_bytes()))
}

/// Delete an agent if it is still at `expected`, as a step of `edit`: its folder is renamed
/// to a hidden name at once (loaders skip hidden entries) and removed when the edit is served.
pub fn delete_agent(edit: &mut Edit<'_>, id: &str, expected: &Revision) -> Result<(), ProjectError> {
    let root = edit.root().to_path_buf();
    let dir = agent_dir(&root, id)?;
    expect_revision(&root, id, &dir, Some(expected))?;
    edit.remove_dir(&dir)
}
