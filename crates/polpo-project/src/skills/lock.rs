//! `.polpo/skills.lock.json`: where each installed skill came from (source, folder inside it,
//! revision: a git commit or a content hash) and the hash of the files installed, so `update`
//! knows when nothing changed and `polpo validate` notices a bundle edited or lost by hand.

use super::error::SkillError;
use crate::fsx;
use crate::paths::polpo_dir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The lock file's name inside `.polpo/`.
pub const LOCK_FILE: &str = "skills.lock.json";
/// The lock format this runtime writes.
pub const LOCK_VERSION: u32 = 1;

/// The whole lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillsLock {
    /// Format version ([`LOCK_VERSION`]).
    pub version: u32,
    /// One entry per installed skill, by name.
    #[serde(default)]
    pub skills: BTreeMap<String, LockEntry>,
}

impl Default for SkillsLock {
    fn default() -> Self {
        Self { version: LOCK_VERSION, skills: BTreeMap::new() }
    }
}

/// Provenance of one installed skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LockEntry {
    /// Where it came from: a git URL, or the absolute path of a local folder or repository.
    pub source: String,
    /// The bundle's folder inside the source (`None`: the source root is the bundle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The git commit installed, or the content hash of a plain folder.
    pub revision: String,
    /// Hash of the installed files ([`super::SkillBundle::hash`]).
    pub hash: String,
}

/// Where the lock file of the project at `root` lives.
pub fn lock_path(root: &Path) -> PathBuf {
    polpo_dir(root).join(LOCK_FILE)
}

/// The project's lock; an empty one when the file does not exist.
pub fn read_lock(root: &Path) -> Result<SkillsLock, SkillError> {
    let path = lock_path(root);
    let bytes = match fsx::read_bounded(&path, fsx::MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SkillsLock::default()),
        Err(e) => return Err(SkillError::Lock(format!("cannot read {}: {e}", path.display()))),
    };
    let lock: SkillsLock = serde_json::from_slice(&bytes)
        .map_err(|e| SkillError::Lock(format!("{} is not a valid skills lock: {e}", path.display())))?;
    if lock.version != LOCK_VERSION {
        return Err(SkillError::Lock(format!(
            "{} has version {}, expected {LOCK_VERSION}",
            path.display(),
            lock.version
        )));
    }
    Ok(lock)
}
